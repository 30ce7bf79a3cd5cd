r"""From a profile and a method preset to TRL's arguments: batch geometry and the resolved
configuration of a run.

One *step* is a rollout batch of ``train.prompts_per_step`` prompts × leaves per prompt, split
into ``prompts_per_step / mini_batch_prompts`` optimizer updates (docs/method.md §9: 64 prompts,
mini-batch 8 → 8 updates per step). TRL counts optimizer updates, so ``max_steps``,
``logging_steps`` and ``save_steps`` are the profile's step counts times the updates per step.

:func:`resolve_run` builds a run's :class:`RunSpec` once: the rollout configuration the
sampler runs (the profile's ``rollout`` section with the preset's ``expansion`` and the
settings it fixes) and the :class:`AT2POConfig` fields; what a run records of them, and how a
recorded run is recognised, is :mod:`at2po_lib.record.identity`. The rollout's knobs (M, L, K, alpha, chains,
AEPO's) live only in the rollout configuration; the trainer's only copy of them is TRL's
``num_generations``, set here once. Order of precedence for :class:`AT2POConfig` fields: the
profile (``train`` section, and the rollout's ``temperature``/``top_p`` that TRL needs to recompute log-probs),
then the method preset (:mod:`at2po_lib.method.presets`), then explicit overrides of fields
the profile does not set (``--set trainer.<field>=...``; :data:`PROFILE_FIELDS` lists the
refused ones), then the batch geometry.

Leaves per prompt (``num_generations``) come from one place,
:meth:`at2po_lib.config.profile.RolloutConfig.leaves_per_prompt` of :func:`method_rollout`: M + L·K for
the trees, ``rollout.chains`` for chains, ``rollout.aepo_budget`` for AEPO (its only
source; ``rollout.aepo_initial`` chains start it, capped at the budget).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import torch

from ..config.profile import ProfileConfig, RolloutConfig
from ..config.checks import trainer_problems
from ..method.outcome import OUTCOME_ADVANTAGES
from ..method.presets import Method, get_method
from ..util.errors import ProfileError
from .at2po_config import AT2POConfig
from ..record.identity import (
    PROFILE_LABELS,
    method_rollout,
    profile_set_values,
    rollout_settings,
    run_identity,
)


@dataclass(frozen=True)
class BatchGeometry:
    """How one rollout step maps onto TRL's batch arguments (per process)."""

    leaves_per_prompt: int
    updates_per_step: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int


def batch_geometry(
    prompts_per_step: int,
    mini_batch_prompts: int,
    leaves: int,
    world_size: int = 1,
    micro_batch_rows: int = 0,
) -> BatchGeometry:
    """Per-process TRL batch sizes for P prompts per step, mini-batches of p prompts, G leaves.

    Rows per update per process = p·G / W; a micro-batch of ``micro_batch_rows`` (0: the whole
    update) gives gradient accumulation GA = p·G / (W · micro); ``steps_per_generation`` =
    (P / p) · GA. Every process must hold whole prompt groups (P divisible by W).
    Example (docs/method.md §9 on 8 GPUs): P=64, p=8, G=22, W=8, micro=2 → 22 rows per update per
    GPU, GA 11, 8 updates per step, steps_per_generation 88.
    """
    if prompts_per_step % mini_batch_prompts:
        raise ValueError(
            f"train.prompts_per_step={prompts_per_step} is not a multiple of "
            f"train.mini_batch_prompts={mini_batch_prompts}"
        )
    if prompts_per_step % world_size:
        raise ValueError(
            f"train.prompts_per_step={prompts_per_step} does not split into whole "
            f"prompt groups over {world_size} processes"
        )
    rows_per_update = mini_batch_prompts * leaves
    if rows_per_update % world_size:
        raise ValueError(
            f"an update of {mini_batch_prompts} prompts x {leaves} leaves = "
            f"{rows_per_update} rows does not split over {world_size} processes"
        )
    per_process = rows_per_update // world_size
    micro = micro_batch_rows or per_process
    if per_process % micro:
        raise ValueError(
            f"train.micro_batch_rows={micro_batch_rows} does not divide the "
            f"{per_process} rows of an update on one process"
        )
    accumulation = per_process // micro
    updates = prompts_per_step // mini_batch_prompts
    return BatchGeometry(leaves, updates, micro, accumulation, updates * accumulation)


# ----------------------------------------------------------------------- the run spec
PROFILE_FIELDS: dict[str, str] = {
    "learning_rate": "train.learning_rate",
    "lr_scheduler_type": "train.lr_scheduler_type",
    "weight_decay": "train.weight_decay",
    "max_grad_norm": "train.max_grad_norm",
    "bf16": "train.bf16",
    "activation_checkpointing": "train.activation_checkpointing",
    "use_vllm": "train.use_vllm",
    "vllm_mode": "train.vllm_mode",
    "vllm_gpu_memory_utilization": "train.vllm_gpu_memory_utilization",
    "loss_chunk_rows": "train.loss_chunk_rows",
    "save_total_limit": "train.save_total_limit",
    "update_num_threads": "train.update_num_threads",
    "report_to": "train.report_to",
    "max_steps": "train.max_steps",
    "logging_steps": "train.prompts_per_step / train.mini_batch_prompts",
    "save_steps": "train.save_every",
    "save_strategy": "train.save_every",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "max_completion_length": "rollout.max_response_tokens",
    "vllm_max_model_length": "rollout.max_prompt_tokens + rollout.max_response_tokens",
    "num_generations": "rollout.chains, rollout.tree_m/tree_l/tree_k or rollout.aepo_budget",
    "per_device_train_batch_size": "train.mini_batch_prompts and train.micro_batch_rows",
    "gradient_accumulation_steps": "train.micro_batch_rows",
    "steps_per_generation": "train.prompts_per_step / train.mini_batch_prompts",
    "seed": "--seed",
    "output_dir": "the run folder",
}
"""``AT2POConfig`` fields a run derives from the profile (or its seed and folder). Each has one
source, named here: an override of such a field (``--set trainer.<field>``) is refused with the
profile key to set instead. Every other ``AT2POConfig`` field may be overridden after the
method preset (``--set trainer.beta=0``)."""


@dataclass(frozen=True)
class RunSpec:
    """One training run, resolved once from the profile, the method preset and the overrides.

    ``rollout`` is what the sampler runs (:class:`at2po_lib.trainer.search_agent.SearchAgent`
    gets it as is); ``trainer`` holds the ``AT2POConfig`` keyword arguments, whose only number
    from the rollout's shape is ``num_generations == rollout.leaves_per_prompt()``.
    ``react`` (no training) has ``geometry`` None and an empty ``trainer``.
    """

    profile: ProfileConfig
    method: str
    seed: int
    preset: Mapping[str, Any]
    trainer_overrides: Mapping[str, Any]
    rollout: RolloutConfig
    geometry: BatchGeometry | None
    trainer: dict[str, Any] = field(default_factory=dict)

    @property
    def leaves_per_prompt(self) -> int:
        return self.rollout.leaves_per_prompt()

    def settings(self) -> dict[str, Any]:
        """The effective configuration: everything that determines the run's result. The
        profile's sections as resolved (``--set`` values applied), its ``rollout`` section
        replaced by what the sampler runs (:func:`rollout_settings`: the preset's expansion and
        fixed settings applied, only the settings this run reads), and the ``AT2POConfig``
        fields under ``trainer`` (where it ran, ``use_cpu``, is provenance: ``meta.json``)."""
        out = self.profile.to_dict()
        for key in PROFILE_LABELS:
            out.pop(key, None)
        out["rollout"] = rollout_settings(
            self.rollout, self.trainer.get("credit_advantage"), trains=self.geometry is not None
        )
        out["trainer"] = {k: v for k, v in self.trainer.items() if k != "use_cpu"}
        return out

    def sources(self) -> dict[str, Any]:
        """Where the effective settings came from, apart from them: ``profile`` (its name; every
        setting not listed here is the profile's, configs/<name>.yaml over
        ``at2po_lib/config/profile.py``'s defaults), ``preset`` (the settings the method preset sets,
        as ``section.key``) and ``set`` (``--set`` values: those that differ from the profile
        file, and ``trainer.<field>`` overrides)."""
        preset = get_method(self.method)
        fixed: dict[str, Any] = {}
        if self.geometry is not None:
            fixed["rollout.expansion"] = preset.expansion
            fixed.update({f"rollout.{k}": v for k, v in preset.rollout.items()})
            fixed.update({f"trainer.{k}": v for k, v in preset.overrides.items()})
        return {
            "profile": self.profile.name,
            "preset": fixed,
            "set": {
                **profile_set_values(self.profile),
                **{f"trainer.{k}": v for k, v in self.trainer_overrides.items()},
            },
        }

    def record(self) -> dict[str, Any]:
        """What ``config.yaml`` holds: the method, seed and profile name, the effective
        :meth:`settings` (hashed with them to recognise a finished run) and, apart and not
        hashed, their :meth:`sources`."""
        return {
            "method": self.method,
            "seed": self.seed,
            "profile": self.profile.name,
            "settings": self.settings(),
            "sources": self.sources(),
        }

    def identity(self) -> dict[str, Any]:
        """What decides whether a recorded run is this run (:func:`run_identity`)."""
        identity = run_identity(self.record())
        assert identity is not None
        return identity

    def training_args(self, output_dir: Path):
        """The run's :class:`AT2POConfig` (TRL's arguments) writing to ``output_dir``."""
        if self.geometry is None:
            raise ValueError(f"method {self.method!r} trains nothing: no trainer arguments")
        return AT2POConfig(output_dir=str(output_dir), **self.trainer)


def leaves_per_prompt(
    profile_cfg: ProfileConfig, expansion: str, fixed: Mapping[str, Any] | None = None
) -> int:
    """Leaves per prompt of ``expansion`` on a profile (:meth:`RolloutConfig.leaves_per_prompt`
    of :func:`method_rollout`)."""
    return method_rollout(profile_cfg, expansion, fixed).leaves_per_prompt()


def check_fixed_rollout(method: str, profile_overrides: Mapping[str, Any] | None) -> None:
    """Refuse a ``--set rollout.<key>`` that ``method`` fixes (``Method.rollout``): the run would
    silently ignore it. Names the method, the fixed value and a preset that takes the key from
    the profile."""
    preset = get_method(method)
    asked = dict((profile_overrides or {}).get("rollout") or {})
    clash = sorted(set(asked) & set(preset.rollout))
    if clash:
        fixed = ", ".join(f"rollout.{k}={preset.rollout[k]!r}" for k in clash)
        raise ProfileError(
            f"method {method!r} fixes {fixed}: `--set rollout.{clash[0]}=...` would be ignored; "
            "at2po and the presets of Table 2 step 3 and Table 3 take the expansion settings "
            "from the profile"
        )


DERIVED_FIELDS: dict[str, str] = {"loss_type": "trainer.loss_aggregation"}
"""``AT2POConfig`` fields derived from another field (TRL's ``loss_type`` from verl's aggregation
name, ``at2po_lib.trainer.at2po_config.TRL_LOSS_TYPES``): an override names the field to set."""


def rollout_knob(key: str) -> str | None:
    """The profile key of a rollout knob named as a trainer field (``tree_m`` →
    ``rollout.tree_m``; the old ``tree_expansion``/``tree_aepo_*`` names too), else None: the
    rollout is configured only in the profile's ``rollout`` section."""
    names = {f.name for f in dataclasses.fields(RolloutConfig)}
    old = {
        "tree_expansion": "expansion",
        "tree_aepo_initial": "aepo_initial",
        "tree_aepo_beam": "aepo_beam",
    }
    name = old.get(key, key)
    return f"rollout.{name}" if name in names else None


def check_trainer_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuse overrides of fields the run derives from the profile (:data:`PROFILE_FIELDS`),
    of rollout knobs (:func:`rollout_knob`), and values out of range
    (:func:`at2po_lib.config.checks.trainer_problems`), before any work."""
    found = trainer_problems(dict(overrides))
    if found:
        raise ProfileError("; ".join(found))
    for key in overrides:
        if key in DERIVED_FIELDS:
            raise ProfileError(
                f"trainer.{key} follows from {DERIVED_FIELDS[key]}: set that "
                f"instead (e.g. --set {DERIVED_FIELDS[key]}=token-mean)"
            )
        if rollout_knob(key) and key not in PROFILE_FIELDS:
            raise ProfileError(
                f"trainer.{key} is a rollout knob: set {rollout_knob(key)} "
                f"instead (e.g. --set {rollout_knob(key)}=...)"
            )
        if key in PROFILE_FIELDS:
            raise ProfileError(f"trainer.{key} comes from {_source_hint(PROFILE_FIELDS[key])}")


def _source_hint(source: str) -> str:
    """Where a derived ``AT2POConfig`` field is set instead, as a user would set it."""
    if source == "--seed":
        return "the run's seed: pass --seed N instead"
    if source == "the run folder":
        return (
            "the run folder, results/runs/<profile>/<method>/seed<S>/: choose it with "
            "--profile, --method and --seed (AT2PO_RESULTS moves results/)"
        )
    return f"the profile: set {source} instead (e.g. --set {source.split(' ')[0]}=...)"


def resolve_run(
    profile_cfg: ProfileConfig,
    method: str,
    seed: int,
    trainer_overrides: Mapping[str, Any] | None = None,
    world_size: int | None = None,
) -> RunSpec:
    """The :class:`RunSpec` of one run: profile, then the method preset, then
    ``trainer_overrides`` (``AT2POConfig`` fields the profile does not set), then the derived
    rollout shape and batch geometry."""
    preset = get_method(method)
    overrides = dict(trainer_overrides or {})
    check_trainer_overrides(overrides)
    recorded_preset = preset_record(preset)
    if not preset.trains:
        return RunSpec(
            profile_cfg, method, seed, recorded_preset, overrides, profile_cfg.rollout, None
        )
    method_fields = {**preset.overrides, **overrides}
    rollout = method_rollout(profile_cfg, preset.expansion, preset.rollout)
    leaves = rollout.leaves_per_prompt()
    train = profile_cfg.train
    world_size = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    geo = batch_geometry(
        train.prompts_per_step, train.mini_batch_prompts, leaves, world_size, train.micro_batch_rows
    )
    fields: dict[str, Any] = dict(
        seed=seed,
        learning_rate=train.learning_rate,
        lr_scheduler_type=train.lr_scheduler_type,
        weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm,
        beta=train.beta,
        bf16=train.bf16,
        activation_checkpointing=train.activation_checkpointing,
        use_vllm=train.use_vllm,
        vllm_mode=train.vllm_mode,
        vllm_gpu_memory_utilization=train.vllm_gpu_memory_utilization,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        max_completion_length=rollout.max_response_tokens,
        loss_chunk_rows=train.loss_chunk_rows,
        update_num_threads=train.update_num_threads,
    )
    if train.use_vllm:
        fields["vllm_max_model_length"] = rollout.max_prompt_tokens + rollout.max_response_tokens
    fields.update(method_fields)
    fields.update(
        num_generations=leaves,
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
    return RunSpec(profile_cfg, method, seed, recorded_preset, overrides, rollout, geo, fields)


def preset_record(preset: Method) -> dict[str, Any]:
    """What a run records of its preset: the trainer fields, and the rollout settings it fixes
    under ``rollout`` (absent when it fixes none, as runs recorded before presets could)."""
    record = dict(preset.overrides)
    if preset.rollout:
        record["rollout"] = dict(preset.rollout)
    return record


def trainer_fields(
    profile_cfg: ProfileConfig,
    method: str,
    seed: int,
    overrides: Mapping[str, Any] | None = None,
    world_size: int | None = None,
) -> dict[str, Any]:
    """``AT2POConfig`` keyword arguments of a run (no output paths): ``resolve_run(...).trainer``."""
    return resolve_run(profile_cfg, method, seed, overrides, world_size).trainer


def _no_accelerator() -> bool:
    return not torch.cuda.is_available()


def method_table(
    profile_cfg: ProfileConfig,
    methods: Sequence[str],
    columns: Sequence[str] = (
        "expansion",
        "credit_advantage",
        "credit_value",
        "loss_level",
        "epsilon",
        "epsilon_high",
        "beta",
        "loss_aggregation",
        "leaves_per_prompt",
        "updates_per_step",
        "temperature",
        "learning_rate",
    ),
):
    """What each method resolves to on a profile (one row per method; notebook 04)."""
    rows = {}
    for method in methods:
        spec = resolve_run(profile_cfg, method, 0, world_size=1)
        if spec.geometry is None:
            rows[method] = {c: "" for c in columns}
            continue
        fields = dict(spec.trainer)
        fields["expansion"] = spec.rollout.expansion
        fields["leaves_per_prompt"] = spec.leaves_per_prompt
        fields["updates_per_step"] = spec.geometry.updates_per_step
        if fields.get("credit_advantage", "node_value") in OUTCOME_ADVANTAGES:
            fields["credit_value"] = ""  # outcome advantages: no node values
        fields.setdefault("credit_value", "entropy_softmax")
        rows[method] = {c: fields.get(c, "") for c in columns}
    return pd.DataFrame(rows).T


def build_training_args(
    profile_cfg: ProfileConfig,
    method: str,
    seed: int,
    output_dir: Path,
    overrides: Mapping[str, Any] | None = None,
):
    """The :class:`AT2POConfig` of a run (``resolve_run(...).training_args(output_dir)``)."""
    return resolve_run(profile_cfg, method, seed, overrides).training_args(output_dir)
