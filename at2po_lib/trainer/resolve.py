r"""From a profile and a method preset to TRL's arguments: batch geometry and the resolved
configuration of a run.

One *step* is a rollout batch of ``train.prompts_per_step`` prompts × leaves per prompt, split
into ``prompts_per_step / mini_batch_prompts`` optimizer updates (docs/method.md §9: 64 prompts,
mini-batch 8 → 8 updates per step). TRL counts optimizer updates, so ``max_steps``,
``logging_steps`` and ``save_steps`` are the profile's step counts times the updates per step.

Order of precedence for :class:`AT2POConfig` fields: the profile (``train`` and ``rollout``
sections), then the method preset (:mod:`.methods`), then explicit overrides, then the derived
batch geometry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..config import ProfileConfig
from .methods import get_method


@dataclass(frozen=True)
class BatchGeometry:
    """How one rollout step maps onto TRL's batch arguments (per process)."""

    leaves_per_prompt: int
    updates_per_step: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int


def batch_geometry(prompts_per_step: int, mini_batch_prompts: int, leaves: int,
                   world_size: int = 1, micro_batch_rows: int = 0) -> BatchGeometry:
    """Per-process TRL batch sizes for P prompts per step, mini-batches of p prompts, G leaves.

    Rows per update per process = p·G / W; a micro-batch of ``micro_batch_rows`` (0: the whole
    update) gives gradient accumulation GA = p·G / (W · micro); ``steps_per_generation`` =
    (P / p) · GA. Every process must hold whole prompt groups (P divisible by W).
    Example (docs/method.md §9 on 8 GPUs): P=64, p=8, G=22, W=8, micro=2 → 22 rows per update per
    GPU, GA 11, 8 updates per step, steps_per_generation 88.
    """
    if prompts_per_step % mini_batch_prompts:
        raise ValueError(f"train.prompts_per_step={prompts_per_step} is not a multiple of "
                         f"train.mini_batch_prompts={mini_batch_prompts}")
    if prompts_per_step % world_size:
        raise ValueError(f"train.prompts_per_step={prompts_per_step} does not split into whole "
                         f"prompt groups over {world_size} processes")
    rows_per_update = mini_batch_prompts * leaves
    if rows_per_update % world_size:
        raise ValueError(f"an update of {mini_batch_prompts} prompts x {leaves} leaves = "
                         f"{rows_per_update} rows does not split over {world_size} processes")
    per_process = rows_per_update // world_size
    micro = micro_batch_rows or per_process
    if per_process % micro:
        raise ValueError(f"train.micro_batch_rows={micro_batch_rows} does not divide the "
                         f"{per_process} rows of an update on one process")
    accumulation = per_process // micro
    updates = prompts_per_step // mini_batch_prompts
    return BatchGeometry(leaves, updates, micro, accumulation, updates * accumulation)


def leaves_per_prompt(profile_cfg: ProfileConfig, expansion: str) -> int:
    """M + L·K for tree expansions, ``train.chain_leaves`` for chains and AEPO (docs/method.md §8)."""
    r = profile_cfg.rollout
    if expansion in ("random", "entropy"):
        return r.tree_m + r.tree_l * r.tree_k
    return profile_cfg.train.chain_leaves


def trainer_fields(profile_cfg: ProfileConfig, method: str, seed: int,
                   overrides: Mapping[str, Any] | None = None,
                   world_size: int | None = None) -> dict[str, Any]:
    """``AT2POConfig`` keyword arguments (no output paths): profile, then preset, then
    ``overrides`` (``AT2POConfig`` field names), then the derived batch geometry."""
    train, rollout = profile_cfg.train, profile_cfg.rollout
    fields: dict[str, Any] = dict(
        seed=seed, learning_rate=train.learning_rate, lr_scheduler_type=train.lr_scheduler_type,
        weight_decay=train.weight_decay, max_grad_norm=train.max_grad_norm, beta=train.beta,
        bf16=train.bf16, activation_checkpointing=train.activation_checkpointing,
        use_vllm=train.use_vllm, vllm_mode=train.vllm_mode,
        vllm_gpu_memory_utilization=train.vllm_gpu_memory_utilization,
        temperature=rollout.temperature, top_p=rollout.top_p,
        max_completion_length=rollout.max_response_tokens,
        tree_m=rollout.tree_m, tree_l=rollout.tree_l, tree_k=rollout.tree_k,
        tree_alpha=rollout.tree_alpha, tree_aepo_beam=rollout.aepo_beam,
        loss_chunk_rows=train.loss_chunk_rows,
    )
    if train.use_vllm:
        fields["vllm_max_model_length"] = rollout.max_prompt_tokens + rollout.max_response_tokens
    fields.update(get_method(method).overrides)
    fields.update(overrides or {})
    expansion = fields.get("tree_expansion", "entropy")
    leaves = leaves_per_prompt(profile_cfg, expansion)
    if expansion == "chain":
        fields.update(tree_m=leaves, tree_l=0, tree_k=0, num_generations=leaves)
    elif expansion == "aepo":
        # AEPO's initial chains scale with its budget (paper: 8 of 16).
        initial = max(1, round(rollout.aepo_initial * leaves / rollout.aepo_budget))
        fields.update(num_generations=leaves, tree_aepo_initial=min(initial, leaves))
    world_size = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    geo = batch_geometry(train.prompts_per_step, train.mini_batch_prompts, leaves, world_size,
                         train.micro_batch_rows)
    fields.update(
        per_device_train_batch_size=geo.per_device_train_batch_size,
        gradient_accumulation_steps=geo.gradient_accumulation_steps,
        steps_per_generation=geo.steps_per_generation,
        max_steps=train.max_steps * geo.updates_per_step,
        logging_steps=geo.updates_per_step,
        save_strategy="steps" if train.save_every > 0 else "no",
        save_steps=max(train.save_every, 1) * geo.updates_per_step,
        save_total_limit=train.save_total_limit,
        report_to=list(train.report_to),
        disable_tqdm=True,
        use_cpu=_no_accelerator(),
    )
    return fields


def _no_accelerator() -> bool:
    import torch

    return not torch.cuda.is_available()


def method_table(profile_cfg: ProfileConfig, methods: Sequence[str],
                 columns: Sequence[str] = ("tree_expansion", "credit_advantage", "credit_value",
                                           "loss_level", "epsilon", "epsilon_high", "beta",
                                           "loss_type", "leaves_per_prompt", "updates_per_step",
                                           "temperature", "learning_rate")):
    """What each method resolves to on a profile (one row per method; notebook 04)."""
    import pandas as pd

    rows = {}
    for method in methods:
        if not get_method(method).trains:
            rows[method] = {c: "" for c in columns}
            continue
        fields = trainer_fields(profile_cfg, method, 0, world_size=1)
        fields["leaves_per_prompt"] = leaves_per_prompt(profile_cfg, fields["tree_expansion"])
        fields["updates_per_step"] = fields["logging_steps"]
        if fields.get("credit_advantage", "node_value") in ("vanilla", "tree_grpo"):
            fields["credit_value"] = ""  # outcome advantages: no node values
        fields.setdefault("credit_value", "entropy_softmax")
        rows[method] = {c: fields.get(c, "") for c in columns}
    return pd.DataFrame(rows).T


def build_training_args(profile_cfg: ProfileConfig, method: str, seed: int, output_dir: Path,
                        overrides: Mapping[str, Any] | None = None):
    from .config import AT2POConfig

    return AT2POConfig(output_dir=str(output_dir),
                       **trainer_fields(profile_cfg, method, seed, overrides))


def resolved_config(profile_cfg: ProfileConfig, method: str, seed: int,
                    trainer_overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything that determines a run's result (hashed to recognise a finished run)."""
    preset = get_method(method)
    fields = (trainer_fields(profile_cfg, method, seed, trainer_overrides)
              if preset.trains else {})
    fields.pop("use_cpu", None)  # where it ran is provenance (meta.json), not configuration
    return {"profile": profile_cfg.to_dict(), "method": method, "seed": seed,
            "preset": dict(preset.overrides), "trainer_overrides": dict(trainer_overrides or {}),
            "trainer": fields}
