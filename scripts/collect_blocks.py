"""Carry study blocks between the worktree that trains them and the checkout that keeps the
records, without their checkpoints.

    python scripts/collect_blocks.py WORKTREE [RECORDS]     collect: worktree -> records
    python scripts/collect_blocks.py --restore WORKTREE     restore: records -> a fresh worktree

Blocks are trained from one clean revision in a worktree of their own (docs/toy_study.md), and
the checkout that keeps the records is another. A machine may not outlive the process that
trains on it, so what a worktree has finished goes into the records as soon as it has finished,
and a worktree made again on another day starts from the records.

**Collect** copies from SOURCE (a checkout or a results folder) into DEST (default: this
checkout's ``results/``), leaving out what git does not keep (``checkpoints/``,
``tensorboard/``, dot-entries):

- every finished ``blocks/<profile>/<set>/block<BB>/`` (its ``BLOCK.json`` says so);
- the finished runs of every block still training or killed part-way (``.block<BB>.staging/``
  whose record lists finished runs), as ``blocks/<profile>/<set>/unfinished/block<BB>/``: the
  staging record and the run folders it lists, never a run still training. The report does not
  read them (a block counts only whole); they are what ``--restore`` gives back.

**Restore** copies this checkout's finished blocks into WORKTREE, and each ``unfinished/block<BB>/``
into WORKTREE's ``.block<BB>.staging/`` where the worktree has neither the block nor a staging
folder of it. ``at2po study --keep-finished-runs`` then keeps those runs when the machine build,
revision, threads, overrides, Python and packages are the ones they were trained with, and
otherwise says which differs and re-runs the block whole (``at2po_lib/study/blocks.py``).

Nothing is replaced silently:

- a block DEST already holds with the same record is skipped;
- an unfinished record of the same start (same ``started`` and machine build: a restart that
  keeps the runs keeps both) is replaced by one with more finished runs; one of another start,
  or with runs the new one lacks, is refused, naming both;
- a finished block replaces the unfinished record whose runs it kept; an unfinished record of
  another start stays, named;
- a finished block DEST holds with another record is refused, naming both: two trainings of one
  block are two records, and neither replaces the other silently.

Nothing is brought in from outside, and no block half: a block is copied only when its record
agrees with its folder and its set (block number, set, seed, and run names that are the set's
methods: a record cannot name a path) and, when finished, holds every method of the set; of a
block only its record and the run folders it names are copied, regular files and folders only (a
link is refused, never followed). A block that fails is refused, naming what is wrong or
missing. Each copy is built in a hidden folder beside its place and renamed there when complete;
a copy that fails is removed, so an interrupted or refused copy leaves nothing behind. Prints one line per block and exits 0, or 1 when a block
was refused. After collecting, run ``at2po report --profile <profile> --readme`` in DEST's
checkout and commit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from at2po_lib.study.block_records import (
    BLOCK_RECORD,
    UNFINISHED,
    block_problems,
    block_state,
    read_block,
)
from at2po_lib.util.errors import RecordError
from at2po_lib.util.locks import lock_holder
from at2po_lib.util.staging import staging_path
from at2po_lib.util.storage import describe

LEFT_OUT = ("checkpoints", "tensorboard")
"""Folders git ignores under a run (.gitignore): the trained weights and TensorBoard's logs."""


def results_folder(path: Path) -> Path:
    """``path/results`` for a checkout, ``path`` itself for a results folder."""
    path = Path(path)
    return path / "results" if (path / "results").is_dir() else path


def _record(folder: Path) -> dict[str, Any] | None:
    try:
        return read_block(folder)
    except RecordError as exc:  # names the file
        raise SystemExit(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{folder / BLOCK_RECORD}: not a readable block record ({exc})") from None


def finished_blocks(results: Path) -> list[Path]:
    """Every ``blocks/<profile>/<set>/block<BB>/`` whose record says ``finished``
    (:func:`at2po_lib.study.block_records.block_state`)."""
    found = []
    for record in sorted((results / "blocks").glob(f"*/*/block[0-9][0-9]/{BLOCK_RECORD}")):
        _record(record.parent)
        if block_state(record.parent) == "finished":
            found.append(record.parent)
    return found


def staged_blocks(results: Path) -> list[Path]:
    """Every ``.block<BB>.staging/`` whose record lists at least one finished run and is not
    itself finished (a finished staging record is a swap cut short: the study completes it)."""
    found = []
    for staging in sorted((results / "blocks").glob("*/*/.block[0-9][0-9].staging")):
        record = _record(staging) or {}
        if record.get("runs") and record.get("status") != "finished":
            found.append(staging)
    return found


def unfinished_records(results: Path) -> list[Path]:
    """Every ``blocks/<profile>/<set>/unfinished/block<BB>/`` of a records checkout."""
    pattern = f"*/*/{UNFINISHED}/block[0-9][0-9]/{BLOCK_RECORD}"
    return [record.parent for record in sorted((results / "blocks").glob(pattern))]


class Refused(Exception):
    """A block (or a place in DEST) that is not copied; the message says why, in one line."""


def _left_out(name: str) -> bool:
    return name in LEFT_OUT or name.startswith(".")


def _copy_tree(source: Path, target: Path) -> None:
    """``source`` into the new folder ``target``: regular files and folders only, without what
    git does not keep. A link is refused, never followed: it could bring in any file of the
    machine."""
    target.mkdir(parents=True)
    for entry in sorted(source.iterdir()):
        if _left_out(entry.name):
            continue
        if entry.is_symlink():
            raise Refused(f"{entry} is a link; only regular files are copied, links never")
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        elif entry.is_file():
            shutil.copyfile(entry, target / entry.name, follow_symlinks=False)
        else:
            raise Refused(f"{entry} is not a regular file")


def _check_place(dest: Path, target: Path) -> None:
    """Every folder from ``dest`` down to ``target``'s parent is a real folder or not there
    yet, and ``target`` is no link: checked before anything is written."""
    for inner in reversed(target.relative_to(dest).parents):
        here = dest / inner
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            raise Refused(f"{here} is not a folder (a file or a link); nothing was copied")
    if target.is_symlink():
        raise Refused(f"{target} is a link; nothing was copied")


def _place(build: Path, target: Path) -> None:
    """Rename the complete copy ``build`` to ``target``, replacing what ``target`` held."""
    if target.exists():
        old = target.with_name(f".{target.name}.replaced")
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
        build.rename(target)
        shutil.rmtree(old)
    else:
        build.rename(target)


def _copy_record(
    folder: Path, record: dict[str, Any], dest: Path, target: Path, text: bytes | None = None
) -> None:
    """``record`` (``text``: its bytes as kept, else written afresh) and the run folders it
    names, from ``folder`` to ``target`` under ``dest``: built beside ``target`` and renamed
    there when complete; removed when anything fails, so nothing is left behind."""
    _check_place(dest, target)
    build = target.with_name(f".{target.name}.collecting")
    shutil.rmtree(build, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        build.mkdir()
        for method in _runs(record):  # names checked against the set's methods (_checked)
            run = Path(method) / f"seed{record['seed']}"
            _copy_tree(folder / run, build / run)
        if text is None:
            text = (json.dumps(record, indent=2, default=str) + "\n").encode()
        (build / BLOCK_RECORD).write_bytes(text)
        _place(build, target)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise


def _checked(folder: Path, set_name: str, *, whole: bool) -> dict[str, Any]:
    """``folder``'s record when it is a block of ``set_name`` (``whole``: with every method of
    the set), else :class:`Refused` naming what is wrong or missing."""
    if folder.is_symlink():
        raise Refused(f"{folder} is a link; only real folders are copied")
    record = _record(folder) or {}
    if problems := block_problems(folder, record, set_name, whole=whole):
        raise Refused(f"{folder / BLOCK_RECORD}: {'; '.join(problems)}; not copied")
    return record


def _runs(record: dict[str, Any] | None) -> dict[str, Any]:
    return dict((record or {}).get("runs") or {})


def _describe(record: dict[str, Any]) -> str:
    runs = ", ".join(_runs(record)) or "no finished run"
    return f"started {record.get('started', '?')} on {record.get('build', '?')} ({runs})"


def _same_start(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """One start of a block (restarts that keep its runs keep its ``started``), on one build."""
    return (a.get("started"), a.get("build")) == (b.get("started"), b.get("build"))


def _supersedes(new: dict[str, Any], held: dict[str, Any]) -> bool:
    """``new`` is the same start of the block as ``held`` with every run ``held`` lists."""
    new_runs = _runs(new)
    return _same_start(new, held) and all(new_runs.get(m) == r for m, r in _runs(held).items())


def copy_finished(source: Path, dest: Path) -> tuple[list[str], list[str]]:
    """Copy ``source``'s finished blocks into ``dest`` (both results folders); returns the lines
    to print and the refusals."""
    lines, refused = [], []
    for block in finished_blocks(source):
        relative = block.relative_to(source)
        target = dest / relative
        try:
            record = _checked(block, block.parent.name, whole=True)
            text = (block / BLOCK_RECORD).read_bytes()
            _check_place(dest, target)
            if target.exists():
                held = target / BLOCK_RECORD
                if held.is_file() and held.read_bytes() == text:
                    lines.append(f"{relative}: already there")
                    continue
                raise Refused(
                    f"{target} holds another record of this block than {block}; "
                    "compare the two BLOCK.json and remove the one that should go"
                )
            _copy_record(block, record, dest, target, text)
        except Refused as why:
            refused.append(f"{relative}: {why}")
            continue
        lines.append(f"{relative}: copied")
        lines.extend(_retire_unfinished(target, record, relative))
    return lines, refused


def _retire_unfinished(finished: Path, record: dict[str, Any], relative: Path) -> list[str]:
    """Remove the unfinished record the finished block completes; name one of another start."""
    unfinished = finished.parent / UNFINISHED / finished.name
    held = _record(unfinished) if unfinished.exists() else None
    if held is None:
        return []
    if not _supersedes(record, held):
        return [
            f"{relative}: {unfinished} holds the runs of another start ({_describe(held)}); "
            "they stay there, not part of the block"
        ]
    shutil.rmtree(unfinished)
    if not any(unfinished.parent.iterdir()):
        unfinished.parent.rmdir()
    return [f"{relative}: its unfinished record is complete now, removed"]


def _runs_count(record: dict) -> str:
    n = len(_runs(record))
    return f"{n} finished run{'s' * (n != 1)}"


def copy_unfinished(source: Path, dest: Path) -> tuple[list[str], list[str]]:
    """Copy the finished runs of ``source``'s unfinished blocks into ``dest``'s
    ``unfinished/block<BB>/`` (both results folders)."""
    lines, refused = [], []
    for staging in staged_blocks(source):
        set_folder = staging.parent.relative_to(source)
        name = staging.name.removeprefix(".").removesuffix(".staging")
        relative, target = set_folder / UNFINISHED / name, dest / set_folder / UNFINISHED / name
        try:
            record = _checked(staging, staging.parent.name, whole=False)
        except Refused as why:
            refused.append(f"{relative}: {why}")
            continue
        if block_state(dest / set_folder / name) == "finished":
            lines.append(f"{set_folder / name}: finished here already; its staging is not copied")
            continue
        held = _record(target) if target.exists() else None
        if held == record:
            lines.append(f"{relative}: already there ({_runs_count(record)})")
            continue
        if held is not None and not _supersedes(record, held):
            refused.append(
                f"{relative}: {target} holds another unfinished record of this block "
                f"({_describe(held)}) than {staging} ({_describe(record)}); it stays: when the "
                f"new start should replace it, git rm -r {target} (git's history keeps it), "
                "commit and collect again"
            )
            continue
        try:  # the record as read: a run finished meanwhile is in the next collection
            _copy_record(staging, record, dest, target)
        except Refused as why:
            refused.append(f"{relative}: {why}")
            continue
        was = f", was {len(_runs(held))}" if held is not None else ""
        lines.append(f"{relative}: {_runs_count(record)} copied{was}")
    return lines, refused


def collect(source: Path, dest: Path) -> tuple[list[str], list[str]]:
    """Collect: ``source``'s finished blocks, then its unfinished blocks' finished runs."""
    lines, refused = copy_finished(source, dest)
    more_lines, more_refused = copy_unfinished(source, dest)
    return lines + more_lines, refused + more_refused


def restore(records: Path, worktree: Path) -> tuple[list[str], list[str]]:
    """Restore: ``records``' finished blocks into ``worktree``, and each unfinished record
    into the worktree's ``.block<BB>.staging/`` where the worktree has neither the block nor a
    staging folder of it and no process trains it (both results folders)."""
    lines, refused = copy_finished(records, worktree)
    for unfinished in unfinished_records(records):
        relative = unfinished.parent.parent.relative_to(records) / unfinished.name
        try:
            record = _checked(unfinished, unfinished.parent.parent.name, whole=False)
        except Refused as why:
            refused.append(f"{relative}: {why}")
            continue
        block = worktree / relative
        staging = staging_path(block)
        if block_state(block) == "finished":
            lines.append(f"{relative}: finished in the worktree; its unfinished record is not")
            continue
        if (holder := lock_holder(block)) is not None:
            refused.append(f"{relative}: process {holder} is training this block in {worktree}")
            continue
        if staging.exists():
            own = _record(staging) or {}
            lines.append(
                f"{relative}: its finished runs are there already"
                if own == record
                else f"{relative}: the worktree's own staging folder ({_describe(own)}) "
                "stays as it is"
            )
            continue
        try:
            _copy_record(
                unfinished, record, worktree, staging, (unfinished / BLOCK_RECORD).read_bytes()
            )
        except Refused as why:
            refused.append(f"{relative}: {why}")
            continue
        lines.append(
            f"{relative}: {len(_runs(record))} finished runs restored ({_describe(record)}); "
            "--keep-finished-runs keeps them on the same build"
        )
    return lines, refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "source", type=Path, help="collect: the worktree (or results folder) that trained them"
    )
    parser.add_argument(
        "dest",
        type=Path,
        nargs="?",
        help="collect: the checkout (or results folder) that keeps the records (default: this checkout)",
    )
    parser.add_argument(
        "--restore",
        action="store_true",
        help="copy this checkout's records into SOURCE, a study worktree (made afresh), instead",
    )
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    if args.restore:
        if args.dest is not None:
            parser.error("--restore takes one folder: the worktree to restore into")
        source, dest = results_folder(here), results_folder(args.source)
        if not dest.is_dir():
            parser.error(f"{args.source}: no such folder")
    else:
        source, dest = results_folder(args.source), results_folder(args.dest or here)
        if not (source / "blocks").is_dir():
            parser.error(f"{args.source}: no results/blocks/ there")
    if (dest.exists() or dest.is_symlink()) and not dest.is_dir():  # a file, a dangling link
        parser.error(f"{dest}: not a folder")
    if source.resolve() == dest.resolve():
        parser.error("SOURCE and DEST are the same folder")
    try:
        lines, refused = (restore if args.restore else collect)(source, dest)
    except OSError as exc:  # a full disk, a folder that cannot be written: one line, no copy left
        print(f"{parser.prog}: error: {describe(exc)}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    for line in refused:
        print(f"REFUSED {line}", file=sys.stderr)
    if not lines and not refused:
        print(f"{source}: no blocks to copy")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
