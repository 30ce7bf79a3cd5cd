"""Rewrite the records of a results folder into today's format, without the writing machines'
paths.

    python scripts/migrate_records.py [RESULTS]            rewrite (default: this checkout's results/)
    python scripts/migrate_records.py --check [RESULTS]    list what would change; exit 1 if any

What changes, and only that (every other byte of every file is kept):

- **A run's ``config.yaml``** written in an earlier format (the whole ``profile`` as loaded, the
  ``preset`` and ``trainer`` fields; before that also ``train.chain_leaves``, ``tree_*`` trainer
  mirrors, TRL's ``loss_type`` and ``tree_dynamic_sampling``) becomes today's: ``method``,
  ``seed``, ``profile``, the effective ``settings`` and, apart, their ``sources``
  (:meth:`at2po_lib.trainer.resolve.RunSpec.record`), exactly as today's code records the run of
  the same effective settings. The run is found among today's configurations: the folder's
  method (then the recorded one) on the profile file, then on the profile as the record held
  it (its differences from the file become ``sources.set``); one whose settings are not those
  the record ran is never chosen. The new ``config_hash`` replaces the old one in the run's
  ``config.yaml``, ``DONE.json`` and ``meta.json``. Runs under ``blocks/`` keep their
  ``config.yaml`` as written (already today's format): their ``BLOCK.json`` records each run's
  hash, and a block record is never rewritten here.
- **``DONE.json``'s ``final_eval``** (read back by no code) becomes the path of the
  ``final_eval.csv`` beside it as records hold paths (``results/<path in the results folder>``,
  :func:`at2po_lib.util.paths.recorded_path`); a run written in a staging folder named the
  staging folder, gone since.
- **Every other absolute path** in a text file (a meta's ``policy``, ``checkpoint``, ``command``
  and ``source_command``; ``warmstart.json``'s ``path``, ``init_from.path`` and selection
  ``path``; ``regime.json``'s ``policy``) becomes ``results/...`` or ``artifacts/...`` from the
  writing machine's results or artifacts folder on, else ``<outside>/<its name>``: the code
  reads none of them back (a warm start is found by its place, a policy by the command's
  option).

- **A removed field** (:data:`REMOVED_PROFILE_FIELDS`) that a record of today's format still
  holds at the value that does what the code does now (the study blocks' runs hold
  ``rollout.turn_length_ends_branch: false``) leaves its ``settings``; the new hash replaces
  the old one in ``config.yaml``, ``DONE.json``, ``meta.json`` and the ``BLOCK.json`` of its
  block. The warm start's ``warmstart.json`` drops it from its recorded configuration and
  records the cache key its configuration has without it
  (:func:`at2po_lib.policy.warmstart_cache.cache_key`), so the shipped weights stay the warm
  start of their profile.

A run of earlier code whose settings no current configuration reproduces, or that holds a
removed field at another value, is listed and left as it is (exit 1).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from at2po_lib.config.profile import (
    ADDED_PROFILE_FIELDS,
    ProfileConfig,
    apply_overrides,
    load_profile,
)
from at2po_lib.method.presets import get_method
from at2po_lib.record import run_folder
from at2po_lib.record.identity import (
    PROFILE_LABELS,
    method_rollout,
    rollout_settings,
    run_identity,
)
from at2po_lib.trainer.resolve import RunSpec, resolve_run
from at2po_lib.util.errors import ProfileError
from at2po_lib.warmstart.cache import cache_key, write_record
from at2po_lib.util.paths import (
    ABSOLUTE_PATH,
    ARTIFACTS_IN_RECORDS,
    OUTSIDE,
    RESULTS_IN_RECORDS,
    repo_root,
)

TEXT_SUFFIXES = (".json", ".yaml", ".md", ".csv", ".txt", ".jsonl")
"""Files whose text may hold a machine's path (the others are binary: trees, figures)."""
BLOCK_RECORD = "BLOCK.json"
"""A study block's record: it holds the hash of each of its runs, so their configs stay."""
FINAL_EVAL = re.compile(r'("final_eval": )"([^"]*)"')

LEGACY_LOSS_TYPES = {"dapo": "token-mean", "grpo": "seq-mean-token-mean"}
"""TRL's ``loss_type`` as records before the ``loss_aggregation`` field held it."""
LEGACY_TRAINER_MIRRORS = (
    "tree_m",
    "tree_l",
    "tree_k",
    "tree_alpha",
    "tree_aepo_beam",
    "tree_expansion",
    "tree_aepo_initial",
)
"""Rollout settings the oldest records mirrored as trainer fields (the rollout holds them)."""


# ------------------------------------------------------------- paths of the writing machine
def machine_path_as_recorded(path: str) -> str:
    """An absolute path another machine wrote, as today's records hold it: from its results
    or artifacts folder on, else ``<outside>/<its name>``."""
    parts = path.split("/")
    for name in (RESULTS_IN_RECORDS, ARTIFACTS_IN_RECORDS):
        if name in parts[:-1]:
            return "/".join(parts[parts.index(name) :])
    return f"{OUTSIDE}/{parts[-1] or parts[-2]}"


def migrated_text(path: Path, results: Path, text: str) -> str:
    """``text`` of the file at ``path`` with its machine paths as records hold them."""
    if path.name == "DONE.json":
        beside = path.with_name("final_eval.csv").relative_to(results)
        text = FINAL_EVAL.sub(
            lambda match: f'{match.group(1)}"{RESULTS_IN_RECORDS}/{beside.as_posix()}"', text
        )
    return ABSOLUTE_PATH.sub(lambda match: machine_path_as_recorded(match.group(0)), text)


# ------------------------------------------------------------- run records of earlier formats
REMOVED_PROFILE_FIELDS: dict[tuple[str, str], Any] = {
    ("rollout", "turn_length_ends_branch"): False,
}
"""Profile fields removed after runs were recorded and the warm start was shipped, with the value
at which they did what the code does now: a record holding one at that value is the run without
it; at another value, another configuration (docs/method.md §11, item 19, says what each did)."""


def _drop_removed_fields(sections: dict[str, Any]) -> bool:
    """Drop each removed field holding its neutral value; False when one holds another."""
    for (section, name), neutral in REMOVED_PROFILE_FIELDS.items():
        fields = sections.get(section)
        if isinstance(fields, dict) and name in fields and fields.pop(name) != neutral:
            return False
    return True


def legacy_parts(record: dict[str, Any]) -> tuple[dict, dict, dict, str | None] | None:
    """(profile sections, preset fields, trainer fields, the preset's expansion or None) of a
    record in an earlier format, renamed to today's fields; None when it ran something the
    code no longer does (a removed field at another value)."""
    record = copy.deepcopy(record)
    profile = record["profile"]
    preset = dict(record.get("preset") or {})
    trainer = dict(record.get("trainer") or {})
    overrides = dict(record.get("trainer_overrides") or {})
    expansion = None
    if "chain_leaves" in profile.get("train", {}):  # the oldest format
        profile["rollout"]["chains"] = profile["train"].pop("chain_leaves")
        for fields in (preset, trainer, overrides):
            if "loss_type" in fields:
                fields["loss_aggregation"] = LEGACY_LOSS_TYPES[fields.pop("loss_type")]
            if "tree_dynamic_sampling" in fields:
                fields["dynamic_sampling"] = fields.pop("tree_dynamic_sampling")
        expansion = preset.pop("tree_expansion", None)
        for key in LEGACY_TRAINER_MIRRORS:
            trainer.pop(key, None)
    for (section, name), neutral in ADDED_PROFILE_FIELDS.items():
        profile.setdefault(section, {}).setdefault(name, neutral)
    if not _drop_removed_fields(profile):
        return None
    preset["trainer_overrides"] = overrides
    return profile, preset, trainer, expansion


def legacy_identity(record: dict[str, Any]) -> dict[str, Any] | None:
    """What a record in an earlier format ran (:func:`run_identity`'s shape): the profile's
    name, the seed and the effective settings; None when not readable as a current run."""
    parts = legacy_parts(record)
    if parts is None:
        return None
    profile, preset, trainer, expansion = parts
    cfg, template = ProfileConfig(), ProfileConfig().to_dict()
    if set(profile) - set(PROFILE_LABELS) != set(template) - set(PROFILE_LABELS):
        return None
    if any(set(v) != set(template[k]) for k, v in profile.items() if k not in PROFILE_LABELS):
        return None  # a key added or removed since
    apply_overrides(cfg, {k: v for k, v in profile.items() if k not in PROFILE_LABELS})
    method = get_method(record["method"])
    rollout = cfg.rollout
    if method.trains:
        rollout = method_rollout(cfg, expansion or method.expansion, preset.get("rollout"))
    settings = cfg.to_dict()
    for key in PROFILE_LABELS:
        settings.pop(key, None)
    settings["rollout"] = rollout_settings(rollout, trainer.get("credit_advantage"), method.trains)
    settings["trainer"] = {k: v for k, v in trainer.items() if k != "use_cpu"}
    return {"profile": profile.get("name"), "seed": record["seed"], "settings": settings}


def today_spec(record: dict[str, Any], folder_method: str) -> RunSpec | None:
    """Today's configuration of the run an earlier-format record ran (module docstring), or
    None when none reproduces its settings."""
    wanted, parts = legacy_identity(record), legacy_parts(record)
    if wanted is None or parts is None:
        return None
    profile, preset, _, _ = parts
    name, seed = profile.get("name"), record["seed"]
    as_recorded = {k: v for k, v in profile.items() if k not in PROFILE_LABELS}
    for method in dict.fromkeys((folder_method, record["method"])):
        for sections in (None, as_recorded):
            try:
                spec = resolve_run(
                    load_profile(name, sections),
                    method,
                    seed,
                    trainer_overrides=preset["trainer_overrides"],
                    world_size=1,
                )
            except (KeyError, ValueError, ProfileError):
                continue
            if run_identity(spec.record()) == wanted:
                return spec
    return None


# ------------------------------------------------------------------------------ a folder
def _replace_hash(path: Path, old: str, new: str) -> None:
    """``old`` config hash → ``new`` in a JSON record, every other byte kept."""
    if path.is_file():
        path.write_text(path.read_text().replace(f'"{old}"', f'"{new}"'))


def _in_block(folder: Path, results: Path) -> bool:
    return any((parent / BLOCK_RECORD).is_file() for parent in folder.parents) or any(
        part == "blocks" for part in folder.relative_to(results).parts
    )


def migrate_config(config: Path, results: Path, write: bool) -> str | None:
    """Rewrite one run's ``config.yaml`` into today's format (with the hash beside it); what
    was done, None when nothing was to do. Raises ValueError for a run no current
    configuration reproduces."""
    record = yaml.safe_load(config.read_text())
    if not isinstance(record, dict) or "method" not in record or "settings" in record:
        return None
    if _in_block(config.parent, results):
        return None
    old_hash = record.pop("config_hash", None)
    spec = today_spec(record, config.parent.parent.name)
    if spec is None:
        raise ValueError(f"{config}: no current configuration runs what this record ran")
    new_record = spec.record()
    new_hash = run_folder.config_hash(new_record)
    if write:
        run = run_folder.RunDir(config.parent)
        run_folder.write_config(run, {**new_record, "config_hash": new_hash})
        for name in ("DONE.json", "meta.json"):
            _replace_hash(config.parent / name, old_hash, new_hash)
    return f"{config}: {old_hash} -> {new_hash} ({spec.method})"


def _holds_removed_field(settings: Any) -> bool:
    return isinstance(settings, dict) and any(
        isinstance(settings.get(section), dict) and name in settings[section]
        for section, name in REMOVED_PROFILE_FIELDS
    )


def migrate_removed_fields(config: Path, write: bool) -> str | None:
    """Drop from a today's-format ``config.yaml`` the removed fields it holds at their neutral
    value, with the new hash in the run's records and its block's (module docstring); what was
    done, None when nothing was to do. Raises ValueError for a field at another value."""
    record = yaml.safe_load(config.read_text())
    if not isinstance(record, dict) or not _holds_removed_field(record.get("settings")):
        return None
    settings = copy.deepcopy(record["settings"])
    if not _drop_removed_fields(settings):
        raise ValueError(f"{config}: a removed field holds a value the code no longer runs")
    old_hash = record.pop("config_hash", None)
    new_record = {**record, "settings": settings}
    new_hash = run_folder.config_hash(new_record)
    if write:
        run_folder.write_config(
            run_folder.RunDir(config.parent), {**new_record, "config_hash": new_hash}
        )
        block = next(
            (p / BLOCK_RECORD for p in config.parents if (p / BLOCK_RECORD).is_file()), None
        )
        for path in (config.parent / "DONE.json", config.parent / "meta.json", block):
            if path is not None and old_hash:
                _replace_hash(path, old_hash, new_hash)
    return f"{config}: removed field dropped, {old_hash} -> {new_hash}"


def _recorded_profile(name: Any, config: dict[str, Any]) -> ProfileConfig | None:
    """The profile ``name`` (``configs/`` or ``configs/pilots/``) with the recorded sections of
    ``config`` set on it, or None when it cannot be loaded or does not hold every recorded
    value as recorded (fields added since keep their defaults)."""
    if not isinstance(name, str):
        return None
    sections = {k: v for k, v in config.items() if k not in PROFILE_LABELS}
    for source in (name, repo_root() / "configs" / "pilots" / f"{name}.yaml"):
        try:
            profile = load_profile(str(source), sections)
        except ProfileError:
            continue
        here = profile.to_dict()
        if all(
            here.get(section, {}).get(key) == value
            for section, values in sections.items()
            for key, value in values.items()
        ):
            return profile
    return None


def migrate_warmstart(record_path: Path, write: bool) -> str | None:
    """A ``warmstart.json`` whose recorded configuration holds a removed field at its neutral
    value: the field dropped, and the cache key of that configuration recorded (module
    docstring). Raises ValueError for a field at another value."""
    data = json.loads(record_path.read_text())
    config = data.get("config") if isinstance(data, dict) else None
    if not _holds_removed_field(config):
        return None
    trimmed = copy.deepcopy(config)
    if not _drop_removed_fields(trimmed):
        raise ValueError(f"{record_path}: a removed field holds a value the code no longer runs")
    profile = _recorded_profile(data.get("profile"), trimmed)
    if profile is None:
        raise ValueError(f"{record_path}: no profile reproduces the configuration it records")
    old_key, new_key = data.get("cache_key"), cache_key(profile)
    if write:
        write_record(record_path, {**data, "cache_key": new_key, "config": trimmed})
    return f"{record_path}: removed field dropped, cache key {old_key} -> {new_key}"


def _without_removed(value: Any) -> Any:
    """``value`` with every removed field at its neutral value left out of any mapping that
    holds it (a recorded rollout configuration, wherever the record nests it)."""
    if isinstance(value, list):
        return [_without_removed(v) for v in value]
    if not isinstance(value, dict):
        return value
    neutral = {name: v for (_, name), v in REMOVED_PROFILE_FIELDS.items()}
    return {
        k: _without_removed(v)
        for k, v in value.items()
        if not (k in neutral and v == neutral[k] and type(v) is type(neutral[k]))
    }


def migrate_removed_lines(path: Path, write: bool) -> str | None:
    """A JSON record (a result's ``.meta.json``) whose recorded configuration holds a removed
    field at its neutral value: that line deleted, every other byte kept. Checked: the text
    read back is the record less those fields, else the file is left alone (ValueError)."""
    text = path.read_text()
    names = [name for _, name in REMOVED_PROFILE_FIELDS]
    if not any(f'"{name}"' in text for name in names):
        return None
    new = text
    for (_, name), neutral in REMOVED_PROFILE_FIELDS.items():
        line = re.compile(rf'^[ \t]*"{re.escape(name)}": {re.escape(json.dumps(neutral))},\n', re.M)
        new = line.sub("", new)
    try:
        same = json.loads(new) == _without_removed(json.loads(text))
    except json.JSONDecodeError:
        same = False
    if not same or any(f'"{name}"' in new for name in names):
        raise ValueError(f"{path}: a removed field this script cannot take out line by line")
    if write:
        path.write_text(new)
    return f"{path}: removed field dropped"


def records_in(results: Path, pattern: str) -> list[Path]:
    """The files under ``results`` matching ``pattern`` that git would commit: what git ignores
    there (notebooks' executed runs, a study's scratch) is no record. Outside a checkout, all."""
    found = sorted(path for path in results.rglob(pattern) if path.is_file())
    if not found:
        return found
    listing = subprocess.run(
        ["git", "-C", str(results), "check-ignore", "--stdin", "-z"],
        input="\0".join(str(path) for path in found),
        capture_output=True,
        text=True,
    )
    if listing.returncode not in (0, 1):  # 1: nothing ignored; 128: not a checkout
        return found
    ignored = set(filter(None, listing.stdout.split("\0")))
    return [path for path in found if str(path) not in ignored]


def migrate(results: Path, write: bool) -> tuple[list[str], list[str]]:
    """(what changed or would change, runs left as they are) for every record in ``results``
    (:func:`records_in`)."""
    changed, refused = [], []
    steps = (
        ("config.yaml", lambda path: migrate_config(path, results, write)),
        ("config.yaml", lambda path: migrate_removed_fields(path, write)),
        ("warmstart.json", lambda path: migrate_warmstart(path, write)),
        ("*.meta.json", lambda path: migrate_removed_lines(path, write)),
    )
    for pattern, step in steps:
        for path in records_in(results, pattern):
            try:
                done = step(path)
            except ValueError as err:  # a record this script cannot migrate: left as it is
                refused.append(str(err))
                continue
            if done:
                changed.append(done)
    for path in records_in(results, "*"):
        if path.suffix not in TEXT_SUFFIXES:
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        new = migrated_text(path, results, text)
        if new != text:
            changed.append(f"{path}: machine paths made relative")
            if write:
                path.write_text(new, encoding="utf-8", errors="surrogateescape")
    return changed, refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=repo_root() / "results")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any")
    args = parser.parse_args(argv)
    results = args.results.resolve()
    changed, refused = migrate(results, write=not args.check)
    for line in changed:
        print(line)
    for line in refused:
        print(f"LEFT AS IT IS: {line}", file=sys.stderr)
    print(f"{len(changed)} change(s), {len(refused)} run(s) left as they are")
    return 1 if refused or (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
