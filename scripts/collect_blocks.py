"""Copy the finished study blocks of one checkout into another, without their checkpoints.

    python scripts/collect_blocks.py SOURCE [DEST]

Blocks are trained from one clean revision in a worktree of their own (docs/toy_study.md), and
the checkout that keeps the records is another. This copies every finished
``results/blocks/<profile>/<set>/block<BB>/`` of SOURCE (a checkout or a results folder) into
DEST (default: this checkout's ``results/``), leaving out what git does not keep
(``checkpoints/``, ``tensorboard/``, dot-entries). A block is finished when its ``BLOCK.json``
says so; blocks still training (``.block<BB>.staging/``) are not looked at.

- A block DEST already holds with the same ``BLOCK.json`` is skipped.
- A block DEST holds with another ``BLOCK.json`` is refused, naming both: two trainings of one
  block are two records, and neither replaces the other silently.
- Each block is copied into a hidden folder beside its place and renamed there when complete,
  so an interrupted copy leaves no half block.

Prints one line per block and exits 0, or 1 when a block was refused. Then run
``at2po report --profile <profile> --readme`` in DEST's checkout and commit.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from at2po_lib.trainer.block_records import BLOCK_RECORD, block_state

LEFT_OUT = ("checkpoints", "tensorboard")
"""Folders git ignores under a run (.gitignore): the trained weights and TensorBoard's logs."""


def results_folder(path: Path) -> Path:
    """``path/results`` for a checkout, ``path`` itself for a results folder."""
    path = Path(path)
    return path / "results" if (path / "results").is_dir() else path


def finished_blocks(results: Path) -> list[Path]:
    """Every ``blocks/<profile>/<set>/block<BB>/`` whose record says ``finished``
    (:func:`at2po_lib.trainer.block_records.block_state`)."""
    found = []
    for record in sorted((results / "blocks").glob(f"*/*/block[0-9][0-9]/{BLOCK_RECORD}")):
        try:
            state = block_state(record.parent)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"{record}: not a readable block record ({exc})") from None
        if state == "finished":
            found.append(record.parent)
    return found


def _ignore(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n in LEFT_OUT or n.startswith(".")}


def collect(source: Path, dest: Path) -> tuple[list[str], list[str]]:
    """Copy ``source``'s finished blocks into ``dest`` (both results folders); returns the
    lines to print and the refusals."""
    lines, refused = [], []
    for block in finished_blocks(source):
        relative = block.relative_to(source)
        target = dest / relative
        record = (block / BLOCK_RECORD).read_bytes()
        if target.exists():
            held = target / BLOCK_RECORD
            if held.is_file() and held.read_bytes() == record:
                lines.append(f"{relative}: already there")
                continue
            refused.append(
                f"{relative}: {target} holds another record of this block than {block}; "
                "compare the two BLOCK.json and remove the one that should go"
            )
            continue
        partial = target.with_name(f".{target.name}.collecting")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(block, partial, ignore=_ignore)
        partial.rename(target)
        lines.append(f"{relative}: copied")
    return lines, refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="checkout (or results folder) that trained them")
    parser.add_argument(
        "dest",
        type=Path,
        nargs="?",
        default=Path(__file__).resolve().parent.parent,
        help="checkout (or results folder) that keeps the records (default: this checkout)",
    )
    args = parser.parse_args(argv)
    source, dest = results_folder(args.source), results_folder(args.dest)
    if not (source / "blocks").is_dir():
        parser.error(f"{args.source}: no results/blocks/ there")
    if source.resolve() == dest.resolve():
        parser.error("SOURCE and DEST are the same folder")
    lines, refused = collect(source, dest)
    for line in lines:
        print(line)
    for line in refused:
        print(f"REFUSED {line}", file=sys.stderr)
    if not lines and not refused:
        print(f"{source}: no finished blocks")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
