"""The warm start's cache: where it lives (``artifacts/`` and the shipped copy under
``results/<profile>/warmstart/``), its cache key, its record (``warmstart.json``) and the check
that a folder holds exactly the files its record lists.

Reading a warm start needs only this module; training one is :mod:`at2po_lib.warmstart.sft`
(``ensure_warmstart``, ``at2po warmstart``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.profile import ADDED_PROFILE_FIELDS
from ..protocol.prompts import get_template
from ..util.paths import artifacts_dir, repo_root
from ..policy.checkpoint_files import CheckpointError, check_digests, file_digests

if TYPE_CHECKING:
    from ..config.profile import ProfileConfig


WARMSTART_VERSION = 4
"""Bump when the recipe changes for an unchanged config (invalidates cached warm starts).
4: the authors' trajectory format: one system message, no stop at ``</answer>``,
cleaned observations; the key also holds the template's content (:func:`template_payload`)."""
_ROLLOUT_KEYS = (
    "max_tool_calls",
    "max_turn_tokens",
    "max_response_tokens",
    "max_prompt_tokens",
    "invalid_action",
)
"""Rollout settings that change greedy validation (and so the chosen checkpoint)."""
_RETRIEVAL_KEYS = (
    "method",
    "encoder",
    "pooling",
    "query_prefix",
    "passage_prefix",
    "max_length",
    "index_type",
    "topk",
    "corpus",
)
"""Retrieval settings that change what the demonstrations and validation observe (not how a
server is reached, how big its batches are, or whether an index was downloaded)."""
SHIPPED_RECORD = "warmstart.json"
"""The shipped copy's record (``results/<profile>/warmstart/warmstart.json``)."""


def warmstart_dir(profile: str) -> Path:
    return artifacts_dir(profile) / "policy" / "warmstart"


def warmstart_record_path(profile: str) -> Path:
    return artifacts_dir(profile) / "policy" / "warmstart.json"


def template_payload(template) -> dict[str, Any]:
    """The prompt template's fields (instruction, tags, stops, observation rendering): what
    the demonstrations and greedy validation are written in, so that editing a template file
    invalidates the warm start trained on the old text."""
    return {
        k: list(v) if isinstance(v, tuple) else v for k, v in asdict(get_template(template)).items()
    }


def _policy_payload(policy: Any) -> dict[str, Any]:
    """The policy section of the key, less the fields added since at their neutral value
    (:data:`~at2po_lib.config.profile.ADDED_PROFILE_FIELDS`): the shipped warm start stays the one found."""
    fields = asdict(policy)
    for (section, name), neutral in ADDED_PROFILE_FIELDS.items():
        if section == "policy" and fields.get(name) == neutral:
            del fields[name]
    return fields


def cache_key(profile_cfg: ProfileConfig) -> str:
    """Hash of everything the warm start depends on: world, retrieval, policy, its prompt
    template's content, SFT, rollout limits used by validation, and :data:`WARMSTART_VERSION`."""
    rollout, retrieval = asdict(profile_cfg.rollout), asdict(profile_cfg.retrieval)
    payload = {
        "version": WARMSTART_VERSION,
        "world": asdict(profile_cfg.world),
        "retrieval": {k: retrieval[k] for k in _RETRIEVAL_KEYS},
        "policy": _policy_payload(profile_cfg.policy),
        "template": template_payload(profile_cfg.policy.template),
        "sft": asdict(profile_cfg.sft),
        "rollout": {k: rollout[k] for k in _ROLLOUT_KEYS},
    }
    initial = initial_policy(profile_cfg)
    if initial is not None:  # the starting weights, not just their folder's name
        payload["init_from_sha256"] = initial["model_sha256"]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def shipped_warmstart_dir(profile: str) -> Path:
    """``results/<profile>/warmstart/``: the copy of the warm start that git keeps (tiny: a few
    MB of safetensors, tokenizer and :data:`SHIPPED_RECORD`), so a fresh clone needs no SFT.
    Always in the checkout (not under ``AT2PO_RESULTS``): redirected results still find it."""
    return repo_root() / "results" / profile / "warmstart"


def rebuild_hint(profile: str, shipped: bool) -> str:
    """What to run when a warm start or its record is damaged (said in every refusal)."""
    if shipped:
        return (
            f"restore it with `git checkout -- results/{profile}/warmstart`, or rebuild it "
            f"with `at2po warmstart --profile {profile} --force --ship`"
        )
    return f"rebuild it with `at2po warmstart --profile {profile} --force`"


def _read_record(folder: Path, record: Path, hint: str) -> dict[str, Any] | None:
    """The record of the warm start in ``folder``, or None when nothing is cached there.

    A folder without its record, or a record that is not a JSON object, is a
    :class:`CheckpointError` naming the file and ``hint``: taking it for "no warm start" started
    a retraining (66 minutes at tiny scale) without a word about the damaged file."""
    if not record.exists():
        held = folder.is_dir() and any(p.name != record.name for p in folder.iterdir())
        if held:
            raise CheckpointError(
                f"{record}: missing, so the warm start in {folder} cannot be verified; {hint}"
            )
        return None
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(
            f"{record}: not a readable warm-start record (truncated or "
            f"corrupt? {str(exc)[:120]}); {hint}"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(
            f"{record}: not a warm-start record (a JSON "
            f"{type(data).__name__}, not an object); {hint}"
        )
    return data


def _cached_in(folder: Path, record: Path, key: str, hint: str) -> Path | None:
    """``folder`` if its record has cache key ``key`` and the folder is verified whole
    (:func:`_verified`); None if nothing is cached there or it was built for another key."""
    data = _read_record(folder, record, hint)
    if data is None or data.get("cache_key") != key:
        return None  # built for another configuration: retraining is expected, not damage
    return _verified(folder, record, data, hint)


def cached_warmstart(profile_cfg: ProfileConfig) -> Path | None:
    """The warm start built from this configuration: the local cache (``artifacts/``) if it
    matches, else the shipped copy (``results/<profile>/warmstart/``) if that matches; a changed
    world, retrieval, policy or SFT setting invalidates both. A damaged copy or record is an
    error naming it and the rebuild command (:func:`rebuild_hint`), never a silent retraining."""
    key, name = cache_key(profile_cfg), profile_cfg.name
    local = _cached_in(
        warmstart_dir(name), warmstart_record_path(name), key, rebuild_hint(name, shipped=False)
    )
    if local is not None:
        return local
    shipped = shipped_warmstart_dir(name)
    return _cached_in(shipped, shipped / SHIPPED_RECORD, key, rebuild_hint(name, shipped=True))


def _verified(folder: Path, record: Path, data: dict[str, Any], hint: str) -> Path:
    """``folder`` once it holds exactly the files the record lists (``files``), each with its
    sha256, weights included (:func:`.checkpoint_files.check_digests`). A record listing none is refused
    too: its weights could be anything."""
    recorded = data.get("files") or {}  # absent or empty: refused by check_digests
    if not isinstance(recorded, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in recorded.items()
    ):
        raise CheckpointError(
            f"{record}: its 'files' is not a table of file names and sha256s, "
            f"so {folder} cannot be verified; {hint}"
        )
    if recorded and "model.safetensors" not in recorded:
        raise CheckpointError(
            f"{record}: lists no model.safetensors, so the weights of {folder} "
            f"cannot be verified; {hint}"
        )
    check_digests(folder, recorded, record, remedy=hint)
    return folder


def ship_warmstart(profile_cfg: ProfileConfig) -> Path:
    """Copy the local warm start (which must match ``profile_cfg``) to
    :func:`shipped_warmstart_dir` with its record (selection curve, timings, config, cache key;
    no per-step log), replacing the old copy only once the new one is complete."""
    local, record_path = warmstart_dir(profile_cfg.name), warmstart_record_path(profile_cfg.name)
    if (
        _cached_in(
            local,
            record_path,
            cache_key(profile_cfg),
            rebuild_hint(profile_cfg.name, shipped=False),
        )
        is None
    ):
        raise FileNotFoundError(
            f"{local}: no local warm start for this configuration of "
            f"profile {profile_cfg.name!r} (run `at2po warmstart` first)"
        )
    record = json.loads(record_path.read_text())
    record.pop("log_history", None)
    record["path"] = None  # the shipped copy is found by its place, not by a machine's path
    out = shipped_warmstart_dir(profile_cfg.name)
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(local, staging)
    record["files"] = file_digests(staging, skip=(SHIPPED_RECORD,))
    write_record(staging / SHIPPED_RECORD, record)
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write a warm-start record whole or not at all (a temporary file renamed over it): a
    torn record would be refused at every load until the warm start is rebuilt."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def initial_policy(profile_cfg: ProfileConfig) -> dict | None:
    """Where SFT starts (``sft.init_from``): the folder, the sha256 of its weights and the git
    revision its own record names; None for a new model. A missing folder is an error that
    names it (never a silent fall-back to training from scratch).

    The folder is verified whole, as a warm start is (:func:`_verified`): its ``warmstart.json``
    must list every file the loader reads with its sha256, and an unlisted entry is refused.
    Checking the weights alone let a changed tokenizer or an adapter beside them load."""
    init = profile_cfg.sft.init_from
    if not init:
        return None

    path = Path(init) if Path(init).is_absolute() else repo_root() / init
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"sft.init_from={init!r}: no model.safetensors in {path}")
    record = path / SHIPPED_RECORD
    hint = (
        f"restore it (a folder of the checkout: `git checkout -- {init}`), or point "
        "sft.init_from at a warm start saved with its record (`at2po warmstart --ship`)"
    )
    data = _read_record(path, record, hint)  # not None: the folder holds the weights
    _verified(path, record, data, hint)
    return {
        "path": str(path),
        "setting": init,
        "model_sha256": data["files"]["model.safetensors"],  # verified just above
        "git_revision": data.get("git_revision"),
    }


def read_warmstart_record(profile: str) -> dict:
    """``warmstart.json`` of a profile: the local one, else the shipped copy's (raises if
    there is neither)."""
    folder, path, shipped = warmstart_dir(profile), warmstart_record_path(profile), False
    if not path.is_file():
        folder, shipped = shipped_warmstart_dir(profile), True
        path = folder / SHIPPED_RECORD
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no warm start yet (run `at2po warmstart --profile {profile}`)"
        )
    return _read_record(folder, path, rebuild_hint(profile, shipped))


_SUMMARY_KEYS = (
    "git_revision",
    "chosen_step",
    "chosen_validation_em",
    "in_band",
    "target_band",
    "steps_run",
    "pretrain",
    "sft_seconds",
    "validation_seconds",
    "training_seconds",
    "total_seconds",
    "torch_threads",
    "cpu_count",
    "load_average_start",
    "load_average_end",
    "parameters",
    "vocab_size",
    "worlds",
    "train_examples",
    "validation_questions",
    "selection",
)


def warmstart_summary(profile: str) -> dict[str, Any]:
    """The warm start's provenance for a results file: how it was chosen and how long it took
    (the record's selection table without checkpoint paths, no log history)."""
    record = read_warmstart_record(profile)
    summary = {key: record.get(key) for key in _SUMMARY_KEYS}
    summary["selection"] = [
        {k: v for k, v in row.items() if k != "path"} for row in record.get("selection", [])
    ]
    return summary
