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

A run of earlier code whose settings no current configuration reproduces is listed and left as
it is (exit 1).
"""

from __future__ import annotations

import argparse
import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from at2po_lib.config.profile import (
    ADDED_PROFILE_FIELDS,
    REMOVED_PROFILE_FIELDS,
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
    for config in records_in(results, "config.yaml"):
        try:
            done = migrate_config(config, results, write)
        except ValueError as err:
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
