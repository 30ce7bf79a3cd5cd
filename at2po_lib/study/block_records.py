r"""Where the study's blocks live and what state each is in, read without the trainer (the
report reads them; :mod:`at2po_lib.study.blocks` trains them and says what a block is).

    results/blocks/<profile>/<set>/block<BB>/BLOCK.json     a finished block's record
    results/blocks/<profile>/<set>/.block<BB>.staging/     a block being trained, or killed
    results/blocks/<profile>/<set>/unfinished/block<BB>/   the finished runs of a block not yet
                                                           whole, kept in the records
                                                           (scripts/collect_blocks.py)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..util.errors import RecordError
from ..util.paths import results_dir
from ..util.staging import staging_path

BLOCK_RECORD = "BLOCK.json"
"""A block's record, in its folder (the staging folder while it trains)."""
MAX_BLOCKS = 100
"""Blocks per set (0-99): the sets' seed ranges stay apart."""
HEADLINE_SET = "headline"
"""The block set of the headline: AT2PO, GRPO, GRPO at AT2PO's budget
(:data:`at2po_lib.study.blocks.BLOCK_SETS`)."""
ABLATION_SET = "ablation"
"""The block set of Table 2's steps and Table 3's cells with AT2PO."""

HEADLINE_METHODS = ("at2po", "grpo", "grpo_tree_budget")
"""The headline set's methods, in training order."""


def set_methods(set_name: str) -> tuple[str, ...] | None:
    """A block set's methods in training order (None: no such set): what a block of it holds,
    and the only run names its records may give (a name read from a record becomes a path).
    The ablation set is AT2PO with Table 2's steps and Table 3's cells
    (:data:`at2po_lib.method.presets.STUDY_TABLES`), imported only when asked."""
    if set_name == HEADLINE_SET:
        return HEADLINE_METHODS
    if set_name == ABLATION_SET:
        from ..method.presets import STUDY_TABLES  # the presets pull torch; the headline does not

        return ("at2po", *STUDY_TABLES["2"], *STUDY_TABLES["3"])
    return None


BLOCK_SETS = (HEADLINE_SET, ABLATION_SET)
"""Every block set's name."""
SET_SEED_BASE: dict[str, int] = {HEADLINE_SET: 100, ABLATION_SET: 200}
"""Block b of a set trains seed ``base + b``: sets never share a seed."""

_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "block": int,
    "seed": int,
    "block_set": str,
    "status": str,
    "runs": dict,
    "methods": list,
    "git_revision": str,
    "commit": str,
    "clean": bool,
    "build": str,
    "started": str,
    "torch_threads": int,
}
"""The type of each field a block record is read by; another type is refused naming the
field (``"block": "6"`` must not be a block number)."""
_BLOCK_NAME = re.compile(r"(?:\.)?block([0-9]{2})(?:\.staging)?")


def blocks_dir(profile_key: str) -> Path:
    """``results/blocks/<profile>/``: every block set of a profile (not created)."""
    return results_dir() / "blocks" / profile_key


def blocks_root(profile_key: str, block_set: str) -> Path:
    """``results/blocks/<profile>/<set>/`` (not created: looking must leave no folder)."""
    return blocks_dir(profile_key) / block_set


UNFINISHED = "unfinished"
"""``<set>/unfinished/block<BB>/``: a block's finished runs, collected before the block is whole;
the report does not read them (a block counts only whole)."""


def block_dir(root: Path, block: int) -> Path:
    return Path(root) / f"block{block:02d}"


def unfinished_dir(root: Path, block: int) -> Path:
    return Path(root) / UNFINISHED / f"block{block:02d}"


def read_block(folder: Path) -> dict[str, Any] | None:
    """A block's record (None when the folder holds none); a record that is not a JSON object
    with fields of the right types (:data:`_RECORD_TYPES`), torn by a crash or edited, is a
    :class:`RecordError` naming the file."""
    path = Path(folder) / BLOCK_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"{path}: not a readable block record ({err})") from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: holds {type(record).__name__}, not a block record")
    for key, kind in _RECORD_TYPES.items():
        value = record.get(key)
        # bool is an int to Python; a block number or seed of true is not one
        wrong = isinstance(value, bool) and kind is int
        if value is not None and (wrong or not isinstance(value, kind)):
            raise RecordError(f"{path}: {key} is {value!r}, not {getattr(kind, '__name__', kind)}")
    if not all(isinstance(run, dict) for run in (record.get("runs") or {}).values()):
        raise RecordError(f"{path}: every run of runs must be an object")
    return record


def folder_block(folder: Path) -> int | None:
    """The block number a folder's name gives (``block05``, ``.block05.staging``), or None."""
    found = _BLOCK_NAME.fullmatch(Path(folder).name)
    return int(found.group(1)) if found else None


def block_problems(
    folder: Path, record: dict[str, Any], set_name: str, *, whole: bool
) -> list[str]:
    """What keeps ``record`` (read from ``folder``, of the set ``set_name``) from being a block
    of that set: its number, set and seed against the folder and the set, its run names against
    the set's methods, and each run's folder (a real folder with its ``DONE.json``); with
    ``whole``, every method of the set. Empty when nothing does."""
    methods = set_methods(set_name)
    if methods is None:
        return [f"{set_name!r} is not a block set ({', '.join(BLOCK_SETS)})"]
    problems = []
    block = folder_block(folder)
    if record.get("block") != block:
        problems.append(f"it says block {record.get('block')!r}, its folder is {Path(folder).name}")
    if record.get("block_set") != set_name:
        problems.append(f"it says block set {record.get('block_set')!r}, its folder {set_name}")
    if block is not None and record.get("seed") != SET_SEED_BASE[set_name] + block:
        problems.append(
            f"it says seed {record.get('seed')!r}, block {block} of {set_name} trains seed "
            f"{SET_SEED_BASE[set_name] + block}"
        )
    runs = record.get("runs") or {}
    strangers = [m for m in runs if m not in methods]
    if strangers:
        problems.append(f"runs {strangers} are not methods of {set_name}")
    if whole and (missing := [m for m in methods if m not in runs]):
        problems.append(f"no run of {', '.join(missing)} (a block holds every method)")
    for method in runs:
        if method in strangers:
            continue
        run = Path(folder) / method / f"seed{record.get('seed')}"
        linked = run.parent.is_symlink() or run.is_symlink()  # would read outside the block
        if linked or not run.is_dir() or not (run / "DONE.json").is_file():
            problems.append(f"{run.relative_to(folder)} is not a finished run folder")
    return problems


def block_state(folder: Path) -> str:
    """``finished`` (its record is in place), ``interrupted`` (a staging folder a killed block
    left: it re-runs whole) or ``new``."""
    if (read_block(folder) or {}).get("status") == "finished":
        return "finished"
    return "interrupted" if staging_path(folder).exists() else "new"


def finished_blocks(root: Path) -> dict[int, dict[str, Any]]:
    """Block number → record of every finished block under ``root``."""
    found = {}
    for folder in sorted(Path(root).glob("block*")) if Path(root).is_dir() else []:
        record = read_block(folder)
        if folder.is_dir() and record and record.get("status") == "finished":
            found[int(record["block"])] = record
    return found
