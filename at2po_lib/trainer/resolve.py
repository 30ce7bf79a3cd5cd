r"""From a profile and a method preset to TRL's arguments: batch geometry and the resolved
configuration of a run.

One *step* is a rollout batch of ``train.prompts_per_step`` prompts × leaves per prompt, split
into ``prompts_per_step / mini_batch_prompts`` optimizer updates (docs/method.md §9: 64 prompts,
mini-batch 8 → 8 updates per step). TRL counts optimizer updates, so ``max_steps``,
``logging_steps`` and ``save_steps`` are the profile's step counts times the updates per step.

:func:`resolve_run` builds a run's :class:`RunSpec` once: the rollout configuration the
sampler runs (the profile's ``rollout`` section with the preset's ``expansion``) and the
:class:`AT2POConfig` fields. The rollout's knobs (M, L, K, alpha, chains, AEPO's) live only in
the rollout configuration; the trainer's only copy of them is TRL's ``num_generations``, set
here once. Order of precedence for :class:`AT2POConfig` fields: the profile (``train``
section, and the rollout's ``temperature``/``top_p`` that TRL needs to recompute log-probs),
then the method preset (:mod:`at2po_lib.method.presets`), then explicit overrides of fields
the profile does not set (``--set trainer.<field>=...``; :data:`PROFILE_FIELDS` lists the
refused ones), then the batch geometry.

Leaves per prompt (``num_generations``) come from one place,
:meth:`at2po_lib.config.RolloutConfig.leaves_per_prompt` of :func:`method_rollout`: M + L·K for
the trees, ``rollout.chains`` for chains, ``rollout.aepo_budget`` for AEPO (its only
source; ``rollout.aepo_initial`` chains start it, capped at the budget).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import torch

from ..config import ProfileConfig, RolloutConfig
from ..config_checks import trainer_problems
from ..method.outcome import OUTCOME_ADVANTAGES
from ..method.presets import TREE_LEAVES, Method, get_method
from ..util.errors import ProfileError
from .at2po_config import TRL_LOSS_TYPES, AT2POConfig


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


# ----------------------------------------------------------------------- the run spec
PROFILE_FIELDS: dict[str, str] = {
    "learning_rate": "train.learning_rate", "lr_scheduler_type": "train.lr_scheduler_type",
    "weight_decay": "train.weight_decay", "max_grad_norm": "train.max_grad_norm",
    "bf16": "train.bf16", "activation_checkpointing": "train.activation_checkpointing",
    "use_vllm": "train.use_vllm", "vllm_mode": "train.vllm_mode",
    "vllm_gpu_memory_utilization": "train.vllm_gpu_memory_utilization",
    "loss_chunk_rows": "train.loss_chunk_rows", "save_total_limit": "train.save_total_limit",
    "update_num_threads": "train.update_num_threads",
    "report_to": "train.report_to", "max_steps": "train.max_steps",
    "logging_steps": "train.prompts_per_step / train.mini_batch_prompts",
    "save_steps": "train.save_every", "save_strategy": "train.save_every",
    "temperature": "rollout.temperature", "top_p": "rollout.top_p",
    "max_completion_length": "rollout.max_response_tokens",
    "vllm_max_model_length": "rollout.max_prompt_tokens + rollout.max_response_tokens",
    "num_generations": "rollout.chains, rollout.tree_m/tree_l/tree_k or rollout.aepo_budget",
    "per_device_train_batch_size": "train.mini_batch_prompts and train.micro_batch_rows",
    "gradient_accumulation_steps": "train.micro_batch_rows",
    "steps_per_generation": "train.prompts_per_step / train.mini_batch_prompts",
    "seed": "--seed", "output_dir": "the run folder",
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

    def record(self) -> dict[str, Any]:
        """Everything that determines the run's result (hashed to recognise a finished run);
        where it ran (``use_cpu``) is provenance (``meta.json``), not configuration."""
        fields = {k: v for k, v in self.trainer.items() if k != "use_cpu"}
        return {"profile": self.profile.to_dict(), "method": self.method, "seed": self.seed,
                "preset": dict(self.preset), "trainer_overrides": dict(self.trainer_overrides),
                "trainer": fields}

    def earlier_records(self) -> list[dict[str, Any]]:
        """:meth:`record` as earlier code wrote it for the same configuration: without the
        profile fields added since (:data:`ADDED_PROFILE_FIELDS`, at their neutral values),
        with and without the renovation's names (:meth:`legacy_record`)."""
        out = []
        for record in (self.record(), self.legacy_record(), *self.recorded_as_record()):
            out += [record] + [r for r in _without_added_fields(record) if r != record]
        return out

    def recorded_as_record(self) -> list[dict[str, Any]]:
        """For a variant with ``recorded_as`` (``at2po_exact``): :meth:`record` as the preset it
        was recorded under wrote it when the profile itself held the variant's rollout
        settings, which is the same run. Empty when the profile holds other values (then the
        old record was another configuration)."""
        preset = get_method(self.method)
        if preset.recorded_as is None:
            return []
        profile = self.profile.to_dict()
        if any(profile["rollout"][k] != v for k, v in preset.rollout.items()):
            return []
        record = copy.deepcopy(self.record())
        record["method"] = preset.recorded_as
        record["preset"].pop("rollout", None)
        return [record]

    def legacy_record(self) -> dict[str, Any]:
        """:meth:`record` as the code before issue #25's renovation wrote it, so that a run it
        recorded with the same configuration is recognised (the renovation renamed, it did not
        change behaviour: the smoke and tiny records of both reproduce value for value). Then
        the trainer fields mirrored the rollout's knobs (``tree_m``/``tree_l``/``tree_k``, for
        chains the chain count and 0, 0; ``tree_alpha``, ``tree_aepo_beam``, ``tree_expansion``,
        AEPO's ``tree_aepo_initial``), presets named their rollout ``tree_expansion``, the
        aggregation was TRL's ``loss_type``, DAPO's refill ``tree_dynamic_sampling``, and the
        chain count was ``train.chain_leaves``."""
        record = copy.deepcopy(self.record())
        record["profile"]["train"]["chain_leaves"] = record["profile"]["rollout"].pop("chains")
        for fields in (record["preset"], record["trainer_overrides"], record["trainer"]):
            _legacy_names(fields)
        if self.geometry is None:
            return record
        rollout, chain = self.rollout, self.rollout.expansion == "chain"
        record["preset"]["tree_expansion"] = rollout.expansion
        record["trainer"].update(
            tree_m=rollout.chains if chain else rollout.tree_m, tree_l=0 if chain else rollout.tree_l,
            tree_k=0 if chain else rollout.tree_k, tree_alpha=rollout.tree_alpha,
            tree_aepo_beam=rollout.aepo_beam, tree_expansion=rollout.expansion)
        if rollout.expansion == "aepo":
            record["trainer"]["tree_aepo_initial"] = rollout.aepo_initial
        return record

    def training_args(self, output_dir: Path):
        """The run's :class:`AT2POConfig` (TRL's arguments) writing to ``output_dir``."""
        if self.geometry is None:
            raise ValueError(f"method {self.method!r} trains nothing: no trainer arguments")
        return AT2POConfig(output_dir=str(output_dir), **self.trainer)


ADDED_PROFILE_FIELDS: dict[tuple[str, str], Any] = {("rollout", "turn_entropy"): "mean",
                                                     ("rollout", "decode_dtype"): "auto",
                                                     ("rollout", "decode_grouping"): "auto",
                                                     ("rollout", "decode_capture"): "auto"}
"""Profile fields added after runs were recorded, with the value that reproduces what those
runs did: a run recorded without the field is the same run as one with it at that value."""


def _without_added_fields(record: dict[str, Any]) -> list[dict[str, Any]]:
    """``record`` without each combination of the added fields that hold their neutral value
    (a run may predate some of them and not others)."""
    neutral = [(section, name) for (section, name), value in ADDED_PROFILE_FIELDS.items()
               if record["profile"].get(section, {}).get(name, value) == value]
    out = []
    for size in range(1, len(neutral) + 1):
        for dropped in itertools.combinations(neutral, size):
            trimmed = copy.deepcopy(record)
            for section, name in dropped:
                trimmed["profile"].get(section, {}).pop(name, None)
            out.append(trimmed)
    return out


def _legacy_names(fields: dict[str, Any]) -> None:
    """Rename, in place, the fields the renovation renamed back to their old names."""
    if "loss_aggregation" in fields:
        fields["loss_type"] = TRL_LOSS_TYPES[fields.pop("loss_aggregation")]
    if "dynamic_sampling" in fields:
        fields["tree_dynamic_sampling"] = fields.pop("dynamic_sampling")


def method_rollout(profile_cfg: ProfileConfig, expansion: str,
                   fixed: Mapping[str, Any] | None = None) -> RolloutConfig:
    """The profile's ``rollout`` section shaped for one expansion (docs/method.md §5, §8):
    ``chain`` runs ``rollout.chains`` chains; ``aepo`` starts ``min(aepo_initial,
    aepo_budget)`` chains and grows them to ``aepo_budget`` leaves; ``random``/``entropy`` grow
    the M, L, K tree. ``fixed``: the settings the method fixes (``Method.rollout``), applied
    over the profile's; ``chains: "M+L*K"`` is the profile's tree leaf count."""
    fixed = dict(fixed or {})
    if fixed.get("chains") == TREE_LEAVES:
        fixed["chains"] = profile_cfg.rollout.leaves_per_prompt("entropy")
    rollout = dataclasses.replace(profile_cfg.rollout, **fixed, expansion=expansion)
    if expansion == "aepo":
        return dataclasses.replace(rollout, aepo_initial=min(rollout.aepo_initial,
                                                             rollout.aepo_budget))
    rollout.leaves_per_prompt()  # an unknown expansion is an error here, naming it
    return rollout


def leaves_per_prompt(profile_cfg: ProfileConfig, expansion: str,
                      fixed: Mapping[str, Any] | None = None) -> int:
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
            "the presets of Table 2 step 3 and Table 3 (e.g. credit_entropy_softmax_node_value, "
            "AT2PO's own cell) take the expansion settings from the profile")


DERIVED_FIELDS: dict[str, str] = {"loss_type": "trainer.loss_aggregation"}
"""``AT2POConfig`` fields derived from another field (TRL's ``loss_type`` from verl's aggregation
name, ``at2po_lib.trainer.at2po_config.TRL_LOSS_TYPES``): an override names the field to set."""


def rollout_knob(key: str) -> str | None:
    """The profile key of a rollout knob named as a trainer field (``tree_m`` →
    ``rollout.tree_m``; the old ``tree_expansion``/``tree_aepo_*`` names too), else None: the
    rollout is configured only in the profile's ``rollout`` section."""
    names = {f.name for f in dataclasses.fields(RolloutConfig)}
    old = {"tree_expansion": "expansion", "tree_aepo_initial": "aepo_initial",
           "tree_aepo_beam": "aepo_beam"}
    name = old.get(key, key)
    return f"rollout.{name}" if name in names else None


def check_trainer_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuse overrides of fields the run derives from the profile (:data:`PROFILE_FIELDS`),
    of rollout knobs (:func:`rollout_knob`), and values out of range
    (:func:`at2po_lib.config_checks.trainer_problems`), before any work."""
    found = trainer_problems(dict(overrides))
    if found:
        raise ProfileError("; ".join(found))
    for key in overrides:
        if key in DERIVED_FIELDS:
            raise ProfileError(f"trainer.{key} follows from {DERIVED_FIELDS[key]}: set that "
                               f"instead (e.g. --set {DERIVED_FIELDS[key]}=token-mean)")
        if rollout_knob(key) and key not in PROFILE_FIELDS:
            raise ProfileError(f"trainer.{key} is a rollout knob: set {rollout_knob(key)} "
                               f"instead (e.g. --set {rollout_knob(key)}=...)")
        if key in PROFILE_FIELDS:
            raise ProfileError(f"trainer.{key} comes from {_source_hint(PROFILE_FIELDS[key])}")


def _source_hint(source: str) -> str:
    """Where a derived ``AT2POConfig`` field is set instead, as a user would set it."""
    if source == "--seed":
        return "the run's seed: pass --seed N instead"
    if source == "the run folder":
        return ("the run folder, results/runs/<profile>/<method>/seed<S>/: choose it with "
                "--profile, --method and --seed (AT2PO_RESULTS moves results/)")
    return f"the profile: set {source} instead (e.g. --set {source.split(' ')[0]}=...)"


def resolve_run(profile_cfg: ProfileConfig, method: str, seed: int,
                trainer_overrides: Mapping[str, Any] | None = None,
                world_size: int | None = None) -> RunSpec:
    """The :class:`RunSpec` of one run: profile, then the method preset, then
    ``trainer_overrides`` (``AT2POConfig`` fields the profile does not set), then the derived
    rollout shape and batch geometry."""
    preset = get_method(method)
    overrides = dict(trainer_overrides or {})
    check_trainer_overrides(overrides)
    recorded_preset = preset_record(preset)
    if not preset.trains:
        return RunSpec(profile_cfg, method, seed, recorded_preset, overrides,
                       profile_cfg.rollout, None)
    method_fields = {**preset.overrides, **overrides}
    rollout = method_rollout(profile_cfg, preset.expansion, preset.rollout)
    leaves = rollout.leaves_per_prompt()
    train = profile_cfg.train
    world_size = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    geo = batch_geometry(train.prompts_per_step, train.mini_batch_prompts, leaves, world_size,
                         train.micro_batch_rows)
    fields: dict[str, Any] = dict(
        seed=seed, learning_rate=train.learning_rate, lr_scheduler_type=train.lr_scheduler_type,
        weight_decay=train.weight_decay, max_grad_norm=train.max_grad_norm, beta=train.beta,
        bf16=train.bf16, activation_checkpointing=train.activation_checkpointing,
        use_vllm=train.use_vllm, vllm_mode=train.vllm_mode,
        vllm_gpu_memory_utilization=train.vllm_gpu_memory_utilization,
        temperature=rollout.temperature, top_p=rollout.top_p,
        max_completion_length=rollout.max_response_tokens,
        loss_chunk_rows=train.loss_chunk_rows, update_num_threads=train.update_num_threads,
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


def trainer_fields(profile_cfg: ProfileConfig, method: str, seed: int,
                   overrides: Mapping[str, Any] | None = None,
                   world_size: int | None = None) -> dict[str, Any]:
    """``AT2POConfig`` keyword arguments of a run (no output paths): ``resolve_run(...).trainer``."""
    return resolve_run(profile_cfg, method, seed, overrides, world_size).trainer


def _no_accelerator() -> bool:
    return not torch.cuda.is_available()


def method_table(profile_cfg: ProfileConfig, methods: Sequence[str],
                 columns: Sequence[str] = ("expansion", "credit_advantage", "credit_value",
                                           "loss_level", "epsilon", "epsilon_high", "beta",
                                           "loss_aggregation", "leaves_per_prompt",
                                           "updates_per_step", "temperature", "learning_rate")):
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


def build_training_args(profile_cfg: ProfileConfig, method: str, seed: int, output_dir: Path,
                        overrides: Mapping[str, Any] | None = None):
    """The :class:`AT2POConfig` of a run (``resolve_run(...).training_args(output_dir)``)."""
    return resolve_run(profile_cfg, method, seed, overrides).training_args(output_dir)


def resolved_config(profile_cfg: ProfileConfig, method: str, seed: int,
                    trainer_overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything that determines a run's result (``resolve_run(...).record()``)."""
    return resolve_run(profile_cfg, method, seed, trainer_overrides).record()
