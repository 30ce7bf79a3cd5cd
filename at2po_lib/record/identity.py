r"""What a run is: its effective settings, and how a recorded run is recognised as one.

A run's ``config.yaml`` records (:meth:`at2po_lib.trainer.resolve.RunSpec.record`)::

    method: at2po            # the preset's name
    seed: 0
    profile: tiny            # the profile's name
    settings:                # the effective settings: everything that determines the result
      world: ...             # the profile's sections as resolved (--set applied) ...
      rollout: ...           # ... the rollout as the sampler runs it (preset applied), only
                             # the settings this run reads (:func:`rollout_settings`)
      trainer: ...           # the AT2POConfig fields
    sources:                 # apart, not hashed: where the settings not the profile's came from
      profile: tiny
      preset: {rollout.expansion: entropy, trainer.loss_level: turn, ...}
      set: {train.max_steps: 2, ...}

A finished run is this configuration when its ``DONE.json`` holds this record's hash, or when
the record beside it has the same :func:`run_identity` (profile name, seed, effective settings):
a run is recognised by what it ran, not by the method's name or where a setting came from.
Records of earlier formats are rewritten into this one by ``scripts/migrate_records.py``. No
torch or trl here: the reports import it.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any, Mapping

import yaml

from ..config.profile import ProfileConfig, RolloutConfig, load_profile
from ..method.outcome import OUTCOME_ADVANTAGES
from ..method.presets import TREE_LEAVES
from ..util.errors import ProfileError
from .run_folder import RunDir, is_finished


def method_rollout(
    profile_cfg: ProfileConfig, expansion: str, fixed: Mapping[str, Any] | None = None
) -> RolloutConfig:
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
        return dataclasses.replace(
            rollout, aepo_initial=min(rollout.aepo_initial, rollout.aepo_budget)
        )
    rollout.leaves_per_prompt()  # an unknown expansion is an error here, naming it
    return rollout


PROFILE_LABELS = ("name", "description")
"""Profile fields that label it and determine nothing: not among a run's settings (the name is
recorded beside them)."""

ROLLOUT_READS: dict[str, tuple[str, ...]] = {
    "chain": ("chains",),
    "random": ("tree_m", "tree_l", "tree_k", "tree_grpo_trees"),
    "random_siblings": ("tree_m", "tree_l", "tree_k"),
    "entropy": ("tree_m", "tree_l", "tree_k", "tree_alpha", "entropy_estimate", "turn_entropy"),
    "aepo": (
        "aepo_budget",
        "aepo_initial",
        "aepo_beam",
        "aepo_entropy_weight",
        "aepo_branch_threshold",
        "aepo_branch_penalty",
        "aepo_entropy_tokens",
    ),
}
"""The ``rollout`` settings each expansion reads beyond the ones every rollout reads (sampling,
turn and token limits, the backend's). A test grows trees with every other setting changed and
finds them unchanged (tests/record/test_run_identity.py)."""
NODE_VALUE_READS = ("entropy_estimate", "turn_entropy")
"""What a run whose credit computes node values reads besides its expansion's: the turn
entropies that weight the children (``entropy_softmax``, ``entropy_linear``)."""


def rollout_settings(
    rollout: RolloutConfig, credit_advantage: str | None = None, trains: bool = True
) -> dict[str, Any]:
    """The rollout settings a run reads, with their values: those every rollout reads, its
    expansion's (:data:`ROLLOUT_READS`), and the turn-entropy settings when its credit computes
    node values (``credit_advantage`` not an outcome advantage). A run that trains nothing
    (``react``: evaluation only) reads no expansion."""
    values = dataclasses.asdict(rollout)
    specific = {k for keys in ROLLOUT_READS.values() for k in keys}
    read = [k for k in values if k not in specific]
    if not trains:
        return {k: values[k] for k in read if k != "expansion"}
    read += ROLLOUT_READS[rollout.expansion]
    if credit_advantage is not None and credit_advantage not in OUTCOME_ADVANTAGES:
        read += NODE_VALUE_READS
    return {k: values[k] for k in values if k in read}


def profile_set_values(profile_cfg: ProfileConfig) -> dict[str, Any]:
    """The ``section.key`` values of ``profile_cfg`` that differ from its profile file's
    (``--set`` values, or a notebook's ``overrides``); empty when the file cannot be read
    (a profile given as a path)."""
    try:
        base = load_profile(profile_cfg.name).to_dict()
    except ProfileError:
        return {}
    here = profile_cfg.to_dict()
    return {
        f"{section}.{key}": value
        for section, values in here.items()
        if isinstance(values, dict)
        for key, value in values.items()
        if base.get(section, {}).get(key) != value
    }


# ---------------------------------------------------------------- recorded runs
def run_identity(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """What decides whether two recorded runs are one configuration: the profile's name, the
    seed and the effective settings (:meth:`RunSpec.settings`) of a ``config.yaml`` record. Not
    the method's name (two presets that resolve to the same settings are the same run) nor
    where a setting came from.

    None when the record has no effective settings (not a record of today's format): such a
    run is another configuration."""
    try:
        settings = copy.deepcopy(dict(record["settings"]))
        return {"profile": record["profile"], "seed": record["seed"], "settings": settings}
    except (KeyError, TypeError, ValueError):
        return None


def recorded_identity(config_path: Path) -> dict[str, Any] | None:
    """:func:`run_identity` of a run folder's ``config.yaml`` (None when absent or unreadable)."""
    try:
        record = yaml.safe_load(config_path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(record, dict):
        return None
    record.pop("config_hash", None)
    return run_identity(record)


def same_finished_run(run: RunDir, digest: str, identity: Mapping[str, Any]) -> bool:
    """Did ``run`` (a :class:`~at2po_lib.record.run_folder.RunDir`) finish with this
    configuration: its ``DONE.json`` holds ``digest``, or the ``config.yaml`` beside it has
    this :func:`run_identity` (the same settings under another method's name)."""
    if is_finished(run, digest):
        return True
    return is_finished(run) and recorded_identity(run.config) == identity


def same_configuration(config_path: Path, digest: str, identity: Mapping[str, Any]) -> bool:
    """Is the ``config.yaml`` at ``config_path`` (an unfinished run's, before resuming it) this
    configuration: its recorded hash is ``digest`` or its :func:`run_identity` is ``identity``.
    True when there is no readable hash to compare (nothing says otherwise)."""
    try:
        recorded = (yaml.safe_load(config_path.read_text()) or {}).get("config_hash")
    except (OSError, yaml.YAMLError, AttributeError):
        return True
    if not recorded or recorded == digest:
        return True
    return recorded_identity(config_path) == identity
