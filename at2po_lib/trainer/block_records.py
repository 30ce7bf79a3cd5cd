r"""Where the study's blocks live and what state each is in, read without the trainer (the
report reads them; :mod:`at2po_lib.trainer.blocks` trains them and says what a block is).

    results/blocks/<profile>/<set>/block<BB>/BLOCK.json     a finished block's record
    results/blocks/<profile>/<set>/.block<BB>.staging/     a block being trained, or killed
    results/blocks/<profile>/<set>/unfinished/block<BB>/   the finished runs of a block not yet
                                                           whole, kept in the records
                                                           (scripts/collect_blocks.py)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..util.paths import results_dir
from ..util.staging import staging_path

BLOCK_RECORD = "BLOCK.json"
"""A block's record, in its folder (the staging folder while it trains)."""
MAX_BLOCKS = 100
"""Blocks per set (0-99): the sets' seed ranges stay apart."""
HEADLINE_SET = "headline"
"""The block set of the headline: AT2PO, GRPO, GRPO at AT2PO's budget
(:data:`at2po_lib.trainer.blocks.BLOCK_SETS`)."""
ABLATION_SET = "ablation"
"""The block set of Table 2's steps and Table 3's cells with AT2PO."""


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
    """A block's record (None when the folder holds none)."""
    path = Path(folder) / BLOCK_RECORD
    return json.loads(path.read_text()) if path.is_file() else None


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
