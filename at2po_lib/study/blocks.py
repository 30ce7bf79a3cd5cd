r"""Study blocks: one seed of every compared method, on one machine, at one revision, with the
same torch threads.

Seeds trained at different revisions on different machine builds mix the method with the
revision and the build: in the committed Table 1 record AT2PO ran at one revision on one build
and GRPO at another on two others, and one seed trained again on another build lands elsewhere
(``results/tiny/reproduction/``). A *block* takes that out of the comparison. Block b of a
block set trains seed

    s_b = base + b

of every method of the set, one run after the other in one process: the methods of a block
share the machine, the revision and the torch threads, and the report pairs them within blocks
(:func:`at2po_lib.evaluation.stats.blocked_difference_interval`), so a block's machine or revision effect
cancels in its difference::

    results/blocks/<profile>/<set>/block<BB>/
        BLOCK.json            the block's record: set, block, seed, methods, git revision and
                              whether the checkout was clean, platform and machine build
                              (:func:`at2po_lib.util.provenance.machine_build`), torch threads,
                              the ``--set`` overrides, each run's config hash, status and time
        <method>/seed<S>/     one run folder per method (:mod:`at2po_lib.record.run_folder`),
                              whose ``meta.json`` carries the same block record

The committed runs under ``results/runs/`` stay as they are: the earlier record, named by the
revisions they were trained at.

**Whole or not at all.** A block is built in ``.block<BB>.staging`` beside its place and swapped
in (:mod:`at2po_lib.util.staging`) only when every run of it has finished. A block killed
part-way leaves its staging folder: the next ``at2po study --block-set`` discards it, runs and
all, and trains the block again from its first run, so the runs of an interrupted block never
join those of another process. A finished block is skipped (resumable), and never replaced: a
second finished record of it (a staging folder that says finished beside it) is refused, naming
both, and a finished block missing a run is refused as damaged, never trained over.

**Unless asked to keep them, on the same machine.** With ``keep_finished_runs`` (``at2po study
--keep-finished-runs``) an interrupted block keeps the runs it finished when everything a run's
numbers depend on is what it was (:data:`KEPT_RUN_CONDITIONS`: revision and a clean checkout,
machine build and platform, torch threads, overrides, Python and packages) and each kept run's
``DONE.json`` is the one the block recorded; the other runs are trained, and ``BLOCK.json``
lists each restart and the runs it kept (``resumed``). Training is deterministic for a seed
under those conditions, so the kept runs are the ones a whole re-run would train again; the
option is for blocks longer than a process may live (an ablation block is 11 runs). Any other
difference, named, and the block re-runs whole. While one process trains
a block it holds the block's lock (:mod:`at2po_lib.util.locks`); another process given the same
blocks skips a held block and takes the next, so two ``at2po study`` processes can share one
list of blocks.

**Two processes on one block: ``share_blocks``.** With ``share_blocks`` (``at2po study
--share-blocks``) processes on one machine train the runs of one block side by side instead of
one block each: a process claims the block's next run nobody trains (a lock on
``.block<BB>.staging/.<method>.lock``, dropped by the kernel when its holder dies), trains it,
adds it to the staging record, and takes the next; the process that records the last run swaps
the block in. Every step on the record is taken under the block's lock, held for that step only.
A process joins a block's staging folder only when everything a run's numbers depend on is the
same (:data:`KEPT_RUN_CONDITIONS`, as for kept runs: so it keeps a killed process's finished
runs too), and ``BLOCK.json`` lists each join (``joined``). A block still needs one machine: the
runs of a block are as many runs on one build as before, only finished sooner (an 11-run ablation
block in about half the time with two processes), so it fits a machine held for a few hours.

**Within a time budget.** With ``deadline`` (``at2po study --hours H``) a process starts a block
only when the set's measured wall times (:func:`measured_wall_times`, each method's median) say
its runs end before the deadline, and with ``keep_finished_runs`` a run only when that run does:
on a machine held for a few hours it stops instead of starting work the machine's end would
throw away, and the same command resumes. A block of a set with no finished run yet starts
(nothing to time it by).

**One revision.** A block records the revision it was trained at, that of the imported code's own
checkout (:func:`at2po_lib.util.provenance.git_revision`); a block is not started when the
working tree is another checkout than the imported code, nor on uncommitted code (``allow_dirty`` to do it anyway, recorded), nor at another
revision or with other overrides than the set's finished blocks (``allow_revisions``; the
report then refuses to pair across revisions unless asked, naming the blocks).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from ..config.profile import ProfileConfig, RolloutConfig, load_profile
from ..rollout.backends import torch_threads
from ..util.errors import ProfileError
from ..util.locks import FolderLockedError, folder_lock, lock_holder
from ..util.provenance import (
    TIME_FORMAT,
    code_mismatch,
    machine_build,
    run_metadata,
    startup_hooks,
)
from ..util.staging import REPLACED_MARKER, discard, recover, staging_path, swap_in
from ..record import run_folder
from .block_records import (
    ABLATION_SET,
    BLOCK_RECORD,
    HEADLINE_SET,
    MAX_BLOCKS,
    SET_SEED_BASE,
    block_dir,
    block_problems,
    block_state,
    blocks_root,
    finished_blocks,
    read_block,
    set_methods,
    unfinished_dir,
)
from ..trainer.resolve import check_fixed_rollout
from .run import train

AUTHORS_EXPANSION: Mapping[str, Any] = {
    key: getattr(RolloutConfig(), key) for key in ("entropy_estimate", "tree_alpha")
}
"""The authors' expansion settings: ``at2po_lib/config/profile.py``'s rollout defaults (sampled-token
NLL, alpha 0.05), which every tree preset of a profile shares."""

KEPT_RUN_CONDITIONS = (
    "profile",
    "seed",
    "methods",
    "commit",
    "clean",
    "build",
    "platform",
    "torch_threads",
    "overrides",
    "python",
    "packages",
)
"""What an interrupted block's record must share with the restarted one for its finished runs
to be kept (module docstring): everything a run's numbers depend on."""

TURN_PATIENCE_S = 120.0
"""How long a sharing process waits for the block's lock, which another sharing process holds for
one step (reading and writing the record, or the final swap: seconds); held longer, it belongs to
a process training the block whole, and the block is skipped."""

DEFAULT_THREADS = 1
"""Torch threads of a block's process, unless ``--threads`` says otherwise (docs/toy_study.md,
"Cheaper runs": one run at a time on one thread is the study's way)."""


@dataclass(frozen=True)
class BlockSet:
    """Methods compared in blocks: every block trains one seed of each."""

    name: str
    summary: str
    methods: tuple[str, ...]
    seed_base: int
    """Block b trains seed ``seed_base + b``: sets never share a seed, so a method that is in
    two sets (AT2PO) is two independent runs there, not one run twice."""
    authors_profile: bool = False
    """The set's tree presets take their expansion settings from the profile: its ``rollout``
    section must hold the authors' (:data:`AUTHORS_EXPANSION`)."""


BLOCK_SETS: dict[str, BlockSet] = {
    s.name: s
    for s in (
        BlockSet(
            HEADLINE_SET,
            "the headline: AT2PO (the authors' configuration), GRPO, GRPO at "
            "AT2PO's budget (M + L·K chains)",
            set_methods(HEADLINE_SET),
            SET_SEED_BASE[HEADLINE_SET],
        ),
        BlockSet(
            ABLATION_SET,
            "Table 2's steps and Table 3's cells on the authors' configuration, with AT2PO",
            set_methods(ABLATION_SET),
            SET_SEED_BASE[ABLATION_SET],
            authors_profile=True,
        ),
    )
}
"""Every block set by name (``at2po study --block-set NAME``)."""


def get_block_set(name: str) -> BlockSet:
    if name not in BLOCK_SETS:
        raise ProfileError(f"unknown block set {name!r}; known: {', '.join(BLOCK_SETS)}")
    return BLOCK_SETS[name]


def block_seed(block_set: BlockSet, block: int) -> int:
    if not 0 <= block < MAX_BLOCKS:
        raise ProfileError(f"block {block}: blocks are numbered 0-{MAX_BLOCKS - 1}")
    return block_set.seed_base + block


# ------------------------------------------------------------------------------- checks
def check_authors_profile(cfg: ProfileConfig, block_set: BlockSet) -> None:
    """Refuse a set whose cells would run on other expansion settings than the authors' AT2PO
    of the same blocks (its Table 2-3 presets take them from the profile)."""
    if not block_set.authors_profile or all(
        getattr(cfg.rollout, key) == value for key, value in AUTHORS_EXPANSION.items()
    ):
        return
    held = ", ".join(f"rollout.{k}={getattr(cfg.rollout, k)!r}" for k in AUTHORS_EXPANSION)
    wanted = ", ".join(f"rollout.{k}={v!r}" for k, v in AUTHORS_EXPANSION.items())
    raise ProfileError(
        f"block set {block_set.name!r} compares Table 2's steps and Table 3's cells with the "
        f"authors' AT2PO, but profile {cfg.name} holds {held}: its cells would run another "
        f"configuration. Set {wanted} in the profile's rollout section first"
    )


def revision_state(revision: str) -> tuple[str, bool]:
    """(commit, clean) of :func:`at2po_lib.util.provenance.git_revision`'s answer."""
    return revision.removesuffix("-dirty"), not revision.endswith("-dirty")


def check_revision(
    root: Path,
    revision: str,
    overrides: Mapping[str, Any],
    *,
    allow_dirty: bool,
    allow_revisions: bool,
) -> None:
    """A new block starts on a clean checkout, at the revision and with the overrides of the
    set's finished blocks (each allowance lifts one rule)."""
    if (mismatch := code_mismatch()) is not None:  # the revision would name other code
        raise ProfileError(mismatch)
    commit, clean = revision_state(revision)
    if not clean and not allow_dirty:
        hooks = ", ".join(str(p) for p in startup_hooks())
        raise ProfileError(
            f"uncommitted code runs (revision {revision}"
            f"{f'; start-up hooks on the path: {hooks}' if hooks else ''}): a block must name "
            "the code it ran; commit first (or --allow-dirty, recorded)"
        )
    if commit == "unknown" and not allow_dirty:
        raise ProfileError("no git revision: a block must name the code it ran (--allow-dirty)")
    others = {
        b: r
        for b, r in finished_blocks(root).items()
        if revision_state(r["git_revision"])[0] != commit
        or r.get("overrides", {}) != dict(overrides)
    }
    if others and not allow_revisions:
        named = "; ".join(
            f"block {b}: {r['git_revision'][:7]}, overrides {r.get('overrides')}"
            for b, r in sorted(others.items())
        )
        raise ProfileError(
            f"{root}: finished blocks ran at another revision or with other overrides ({named}); "
            f"this one would run at {commit[:7]} with overrides {dict(overrides)}. A block set is "
            "one revision: run it from that revision, or pass --allow-revisions (the report "
            "then pairs across revisions only when asked)"
        )


# ------------------------------------------------------------------------------ running
@dataclass(frozen=True)
class BlockResult:
    block: int
    status: str
    """``finished`` (trained now), ``skipped`` (finished before), ``held`` (another process
    is training it), ``shared`` (this process trained its share of a block another process
    swaps in, or swapped in) or ``deferred`` (its runs, or its next run, would end after the deadline)."""
    folder: Path
    record: dict[str, Any] | None = None


def block_record(
    cfg: ProfileConfig, block_set: BlockSet, block: int, threads: int, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """What a block records about itself when it starts (with each run and in BLOCK.json)."""
    meta = run_metadata(cfg.name, seed=block_seed(block_set, block), config=None)
    commit, clean = revision_state(meta["git_revision"])
    return {
        "block": block,
        "block_set": block_set.name,
        "profile": cfg.name,
        "seed": block_seed(block_set, block),
        "methods": list(block_set.methods),
        "git_revision": meta["git_revision"],
        "commit": commit,
        "clean": clean,
        "platform": meta["platform"],
        "build": machine_build(meta["platform"]),
        "torch_threads": threads,
        "overrides": dict(overrides),
        "command": meta["command"],
        "python": meta["python"],
        "packages": meta["packages"],
        "started": meta["created"],
        "status": "running",
    }


def run_blocks(
    profile: str,
    set_name: str,
    blocks: Sequence[int],
    *,
    threads: int = DEFAULT_THREADS,
    overrides: Mapping[str, Any] | None = None,
    allow_dirty: bool = False,
    allow_revisions: bool = False,
    keep_finished_runs: bool = False,
    deadline: float | None = None,
    share_blocks: bool = False,
) -> list[BlockResult]:
    """Train every block of ``blocks`` that is not finished (module docstring), in order;
    ``keep_finished_runs``: an interrupted block keeps the runs it finished under the same
    conditions (:func:`kept_runs`); ``deadline`` (a :func:`time.time`): start no block, or
    with ``keep_finished_runs`` no run, that the set's wall times say ends after it;
    ``share_blocks``: train a block's runs side by side with other processes
    (:func:`_share_block`; implies ``keep_finished_runs``)."""
    block_set = get_block_set(set_name)
    overrides = with_threads(overrides or {}, threads)
    cfg = load_profile(profile, overrides or None)
    check_authors_profile(cfg, block_set)
    for method in block_set.methods:  # a --set the preset would ignore fails before training
        check_fixed_rollout(method, overrides)
    study = _Study(
        cfg,
        block_set,
        overrides,
        allow_dirty=allow_dirty,
        allow_revisions=allow_revisions,
        keep_finished_runs=keep_finished_runs or share_blocks,
        deadline=deadline,
    )
    root = blocks_root(run_folder.run_profile_key(cfg), set_name)
    results = []
    for block in blocks:
        block_seed(block_set, block)  # a block out of range fails before any training
    with torch_threads(threads):  # the caller's setting comes back afterwards
        for block in blocks:
            folder = block_dir(root, block)
            try:
                if share_blocks:
                    results.append(_share_block(study, block, folder))
                    continue
                with folder_lock(folder, "study block"):
                    results.append(_run_block(study, block, folder))
            except FolderLockedError as exc:
                study.say(block, f"skipped ({exc})", error=True)
                results.append(BlockResult(block, "held", folder))
    return results


@dataclass(frozen=True)
class _Study:
    """What every block of one ``run_blocks`` call shares: the profile, the set, the overrides
    (threads included) and the caller's permissions."""

    cfg: ProfileConfig
    block_set: BlockSet
    overrides: Mapping[str, Any]
    allow_dirty: bool
    allow_revisions: bool
    keep_finished_runs: bool
    deadline: float | None

    def record(self, block: int) -> dict[str, Any]:
        """The record ``block`` starts with now (:func:`block_record`, at the torch threads the
        process runs with)."""
        return block_record(
            self.cfg, self.block_set, block, torch.get_num_threads(), self.overrides
        )

    def check_revision(self, root: Path, revision: str) -> None:
        check_revision(
            root,
            revision,
            self.overrides,
            allow_dirty=self.allow_dirty,
            allow_revisions=self.allow_revisions,
        )

    def late(self, root: Path, methods: Sequence[str]) -> str | None:
        """Why ``methods`` would end after the deadline (:func:`_after_deadline`), or None."""
        return _after_deadline(root, methods, self.deadline)

    def say(self, block: int, message: str, *, error: bool = False) -> None:
        print(
            f"[study] {self.block_set.name} block {block}: {message}",
            file=sys.stderr if error else sys.stdout,
            flush=True,
        )


def with_threads(overrides: Mapping[str, Any], threads: int) -> dict[str, Any]:
    """``overrides`` with the rollout's and the update's torch threads set to ``threads``
    (``rollout.num_threads``, ``train.update_num_threads``) where they do not set them: every
    stage of a block's runs uses the block's threads, and blocks of another thread count are
    another configuration (refused beside the set's finished blocks)."""
    out = {section: dict(values) for section, values in overrides.items()}
    out.setdefault("rollout", {}).setdefault("num_threads", threads)
    out.setdefault("train", {}).setdefault("update_num_threads", threads)
    return out


def _run_block(study: _Study, block: int, folder: Path) -> BlockResult:
    """Train ``block`` whole under its lock, or with ``keep_finished_runs`` keep the runs an
    interrupted process finished under the same conditions (module docstring)."""
    block_set = study.block_set
    _recover_swap(folder)
    if block_state(folder) == "finished":
        _refuse_damaged(folder, block_set.name)
        return BlockResult(block, "skipped", folder, read_block(folder))
    staging = staging_path(folder)
    if busy := _claimed(staging, block_set.methods):  # never discard what others train
        study.say(
            block,
            f"skipped: process {', '.join(busy)} trains its runs with --share-blocks "
            "(give it to join them)",
            error=True,
        )
        return BlockResult(block, "held", folder)
    record = study.record(block)
    left = (read_block(staging) or {}) if staging.exists() else {}
    runs: dict[str, Any] = {}
    why = ""
    if staging.exists() and study.keep_finished_runs:
        runs, why = kept_runs(left, record, staging)
    study.check_revision(folder.parent, record["git_revision"])
    # a block re-run whole must fit before the deadline; one that keeps its runs, its next run
    first = [m for m in block_set.methods if m not in runs][
        : 1 if study.keep_finished_runs else None
    ]
    if (late := study.late(folder.parent, first)) is not None:
        return _deferred(study, block, folder, late)
    if staging.exists():
        finished = ", ".join(left.get("runs", {})) or "none"
        if runs:
            study.say(
                block,
                f"interrupted (started {left.get('started', '?')}); keeps its finished runs "
                f"({finished}): same revision, build, threads, overrides and packages",
            )
            record = {
                **record,
                "started": left["started"],
                "resumed": [*left.get("resumed", []), {"at": record["started"], "kept": [*runs]}],
            }
        else:
            study.say(
                block,
                f"interrupted (started {left.get('started', '?')}, runs finished: {finished}); "
                f"its runs are discarded and the block re-runs whole{f' ({why})' if why else ''}",
            )
            discard(staging)
    staging.mkdir(parents=True, exist_ok=bool(runs))
    _write_record(staging, {**record, "runs": runs} if runs else record)
    for method in block_set.methods:
        if method in runs:
            continue
        late = study.late(folder.parent, [method]) if study.keep_finished_runs else None
        if late is not None:  # its finished runs stay for the next process to keep
            return _deferred(study, block, folder, late, before=method)
        runs[method] = _train_run(study, record, method, staging)
        _write_record(staging, {**record, "runs": runs})
    return _swap_in_block(block_set, folder, record, runs)


def _share_block(study: _Study, block: int, folder: Path) -> BlockResult:
    """Train the runs of ``block`` nobody else trains, one at a time, beside other processes
    (module docstring, "Two processes on one block"); the process that records the last run
    swaps the block in."""
    block_set = study.block_set
    staging = staging_path(folder)
    joined = False
    while True:
        with ExitStack() as turn:
            _take_turn(folder, turn)
            _recover_swap(folder)
            if block_state(folder) == "finished":  # another process swapped it in
                _refuse_damaged(folder, block_set.name)
                status = "shared" if joined else "skipped"
                return BlockResult(block, status, folder, read_block(folder))
            record = study.record(block)
            if not joined:
                record = _join_staging(study, block, folder, record)
                if record is None:
                    return BlockResult(block, "held", folder)
                joined = True
            record = read_block(staging) or record
            runs = dict(record.get("runs") or {})
            if len(runs) == len(block_set.methods):
                return _swap_in_block(block_set, folder, record, runs)
            method, claim = _claim(staging, [m for m in block_set.methods if m not in runs])
            if method is None:
                study.say(
                    block,
                    "its other runs are being trained by another process; the last to finish "
                    "swaps the block in",
                )
                return BlockResult(block, "shared", folder)
            if (late := study.late(folder.parent, [method])) is not None:
                claim.close()
                return _deferred(study, block, folder, late, before=method)
        with claim:
            run = _train_run(study, record, method, staging)
            with ExitStack() as turn:
                _take_turn(folder, turn)
                now = read_block(staging) or record
                _write_record(staging, {**now, "runs": {**(now.get("runs") or {}), method: run}})


def _recover_swap(folder: Path) -> None:
    """Finish a swap a crash cut short: a staging folder whose record says finished. A block
    already finished in place is never replaced: a finished staging record beside it is a
    second record of the block (copied or planted), refused naming both."""
    staging = staging_path(folder)
    if (
        _says_finished(folder)
        and _says_finished(staging)
        and not (staging / REPLACED_MARKER).exists()  # the old folder of a swap done: discarded
    ):
        raise ProfileError(
            f"two finished records of block {read_block(folder).get('block', '?')}: "
            f"{folder / BLOCK_RECORD} and {staging / BLOCK_RECORD}; a finished block is never "
            "replaced: compare the two and remove the one that should go"
        )
    recover(folder, _says_finished)


def damage(folder: Path, set_name: str) -> str:
    """What is wrong with the finished block in ``folder`` (a run missing, a record of another
    block or seed, :func:`block_problems`), named; empty when nothing is."""
    return "; ".join(block_problems(folder, read_block(folder) or {}, set_name, whole=True))


def _refuse_damaged(folder: Path, set_name: str) -> None:
    """A finished block that is not whole is never skipped as done, nor trained over."""
    if problems := damage(folder, set_name):
        raise ProfileError(
            f"{folder / BLOCK_RECORD}: a finished block that is not whole ({problems}); "
            "restore it from git (git checkout -- <folder>) or move it away to train it again"
        )


def _says_finished(folder: Path) -> bool:
    return (read_block(folder) or {}).get("status") == "finished"


def _train_run(
    study: _Study, record: Mapping[str, Any], method: str, staging: Path
) -> dict[str, Any]:
    """Train ``method``'s run of the block ``record`` names into ``staging``; what the block
    records of it."""
    result = train(
        study.cfg,
        method,
        record["seed"],
        force=True,
        runs_root=staging,
        provenance=_run_provenance(record),
    )
    done = json.loads(result.run.done.read_text())
    study.say(
        record["block"],
        f"{method} seed {record['seed']}: {result.status} in {result.wall_time:.0f} s",
    )
    return {
        "config_hash": done["config_hash"],
        "status": result.status,
        "wall_time": result.wall_time,
    }


def _take_turn(folder: Path, turn: ExitStack) -> None:
    """Enter the block's lock into ``turn``, waiting up to :data:`TURN_PATIENCE_S` for a sharing
    process's step; raises :class:`FolderLockedError` when it is held longer."""
    give_up = time.monotonic() + TURN_PATIENCE_S
    while True:
        try:
            turn.enter_context(folder_lock(folder, "study block"))
            return
        except FolderLockedError:
            if time.monotonic() >= give_up:
                raise
            time.sleep(0.5)


def _join_staging(
    study: _Study, block: int, folder: Path, record: dict[str, Any]
) -> dict[str, Any] | None:
    """Join the block's staging folder (made here when there is none) and return its record;
    a staging folder of other conditions is discarded when no process trains in it, and the
    block is left alone (None) when one does."""
    staging = staging_path(folder)
    left = read_block(staging) if staging.exists() else None
    if left is not None:
        differ = conditions_differ(left, record)
        kept, why = kept_runs(left, record, staging) if not differ else ({}, differ)
        if not differ and (kept or not left.get("runs")):
            joined = [*left.get("joined", []), {"at": record["started"], "pid": os.getpid()}]
            _write_record(staging, {**left, "joined": joined})
            study.say(
                block,
                f"joins it (started {left.get('started', '?')}; finished: "
                f"{', '.join(kept) or 'none'})",
            )
            return read_block(staging)
        if busy := _claimed(staging, study.block_set.methods):
            study.say(
                block,
                f"skipped: process {busy[0]} trains it under other conditions ({why})",
                error=True,
            )
            return None
        study.say(
            block,
            f"interrupted (started {left.get('started', '?')}); its runs are discarded and the "
            f"block re-runs whole ({why})",
        )
        discard(staging)
    study.check_revision(folder.parent, record["git_revision"])
    staging.mkdir(parents=True)
    first = {**record, "shared": True, "joined": [{"at": record["started"], "pid": os.getpid()}]}
    _write_record(staging, first)
    return first


def _claim(staging: Path, methods: Sequence[str]) -> tuple[str | None, ExitStack]:
    """The first of ``methods`` no live process has claimed, with its claim held in the
    returned stack (closing it releases the claim)."""
    for method in methods:
        claim = ExitStack()
        try:
            claim.enter_context(folder_lock(staging / method, "study block run"))
        except FolderLockedError:
            continue
        return method, claim
    return None, ExitStack()


def _claimed(staging: Path, methods: Sequence[str]) -> list[str]:
    """The PIDs of the live processes training runs of the block (their claims)."""
    return [pid for m in methods if (pid := lock_holder(staging / m)) is not None]


def _run_provenance(record: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("block_set", "block", "commit", "clean", "build", "torch_threads")
    return {"block": {k: record[k] for k in keys}}


def _swap_in_block(
    block_set: BlockSet, folder: Path, record: Mapping[str, Any], runs: Mapping[str, Any]
) -> BlockResult:
    """Write the finished record (runs in the set's order) and swap the block into place."""
    record = {
        **record,
        "runs": {m: runs[m] for m in block_set.methods},
        "status": "finished",
        "finished": time.strftime(TIME_FORMAT),
    }
    staging = staging_path(folder)
    _write_record(staging, record)
    swap_in(staging, folder)
    return BlockResult(record["block"], "finished", folder, record)


def _after_deadline(root: Path, methods: Sequence[str], deadline: float | None) -> str | None:
    """Why ``methods``, trained one after the other from now, would end after ``deadline``
    (each at its median wall time in the set under ``root``, :func:`time_left`), or None when
    they fit, there is no deadline or no run of the set has finished to time them by."""
    if deadline is None or not methods:
        return None
    needed = time_left(
        [PlannedBlock(0, 0, "new", runs_left=tuple(methods))], measured_wall_times(root)
    )
    have = deadline - time.time()
    if needed.seconds is None or needed.seconds <= have:
        return None
    runs = f"{len(methods)} runs" if len(methods) > 1 else f"its {methods[0]} run"
    return (
        f"{runs} take about {math.ceil(needed.seconds / 60)} min (the set's median wall times), "
        f"{math.floor(max(have, 0) / 60)} min are left before the deadline"
    )


def _deferred(
    study: _Study, block: int, folder: Path, why: str, before: str | None = None
) -> BlockResult:
    where = f"stopped before {before}: " if before else "not started: "
    study.say(block, f"{where}{why}; the same command resumes it")
    return BlockResult(block, "deferred", folder)


def kept_runs(
    left: Mapping[str, Any], record: Mapping[str, Any], staging: Path
) -> tuple[dict[str, Any], str]:
    """The finished runs of an interrupted block (``left``, its staging record) that the block
    restarted as ``record`` keeps, or ``({}, why)`` when it keeps none: a condition of
    :data:`KEPT_RUN_CONDITIONS` differs, or a run folder is not the finished run the record
    names (its ``DONE.json`` missing or of another config hash)."""
    if differ := conditions_differ(left, record):
        return {}, "not kept: " + differ
    kept = {}
    for method, run in left.get("runs", {}).items():
        done = run_folder.RunDir(staging / method / f"seed{record['seed']}").done
        found = json.loads(done.read_text()).get("config_hash") if done.is_file() else None
        if found != run.get("config_hash"):
            return {}, (
                f"not kept: {done} holds config hash {found}, the block recorded "
                f"{run.get('config_hash')}"
            )
        kept[method] = run
    return kept, "" if kept else "no run had finished"


def conditions_differ(then: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """The :data:`KEPT_RUN_CONDITIONS` two block records differ in, named (empty: none)."""
    differ = [k for k in KEPT_RUN_CONDITIONS if then.get(k) != now.get(k)]
    return ", ".join(_difference(k, then, now) for k in differ)


def _difference(key: str, then: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """``build fc-v669 then, fc-v1272 now`` (a dict-valued condition by the entries that differ)."""
    old, new = then.get(key), now.get(key)
    if isinstance(old, dict) and isinstance(new, dict):
        changed = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
        return f"{key} ({', '.join(f'{k} {old.get(k)} then, {new.get(k)} now' for k in changed)})"
    return f"{key} {old} then, {new} now"


def _write_record(folder: Path, record: Mapping[str, Any]) -> None:
    tmp = folder / f".{BLOCK_RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    tmp.replace(folder / BLOCK_RECORD)


# --------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class PlannedBlock:
    """What ``at2po study --block-set ... --plan`` says of one block: its number and seed,
    ``state`` (``finished``, ``running``: a live process holds it, ``interrupted``: it re-runs
    whole or keeps its finished runs, or ``new``) and a detail."""

    block: int
    seed: int
    state: str
    detail: str = ""
    runs_left: tuple[str, ...] = ()  # the methods a run of the command would still train


def block_plan(
    profile: str,
    set_name: str,
    blocks: Sequence[int],
    overrides: Mapping[str, Any] | None = None,
    *,
    threads: int = DEFAULT_THREADS,
    keep_finished_runs: bool = False,
) -> list[PlannedBlock]:
    """Each block's state, read without training or writing anything; an interrupted block's
    detail says whether :func:`run_blocks` with the same arguments would keep its finished
    runs."""
    block_set = get_block_set(set_name)
    root = set_root(profile, set_name, overrides)
    plan = []
    for block in blocks:
        folder = block_dir(root, block)
        state = block_state(folder)
        detail = ""
        left = (read_block(staging_path(folder)) or {}) if state == "interrupted" else {}
        kept: Sequence[str] = ()
        if state == "finished" and (problems := damage(folder, set_name)):
            state, detail = "damaged", problems
        elif state == "finished":
            r = read_block(folder)
            detail = (
                f"{r['git_revision'][:7]}{'' if r.get('clean', True) else ' (dirty)'}, "
                f"build {r['build']}, {r['torch_threads']} thread(s)"
            )
        elif state == "interrupted" and (
            holders := [h for h in [lock_holder(folder)] if h]
            or _claimed(staging_path(folder), block_set.methods)
        ):
            state = "running"
            kept = tuple(left.get("runs", {}))
            detail = (
                f"PID {', '.join(holders)}; {len(kept)} of {len(block_set.methods)} runs "
                "finished so far"
            )
        elif state == "interrupted":
            detail = f"{len(left.get('runs', {}))} of {len(block_set.methods)} runs finished; "
            why = ""
            if keep_finished_runs:
                threaded = with_threads(overrides or {}, threads)
                now = block_record(
                    load_profile(profile, threaded), block_set, block, threads, threaded
                )
                kept, why = kept_runs(left, now, staging_path(folder))
            detail += (
                f"keeps {', '.join(kept)}"
                if kept
                else "re-runs whole" + (f" ({why})" if why else "")
            )
        elif (held := read_block(unfinished_dir(root, block))) is not None:
            detail = (
                f"the records hold {len(held.get('runs') or {})} finished runs of it (started "
                f"{held.get('started', '?')} on {held.get('build', '?')}): "
                "scripts/collect_blocks.py --restore gives them to a worktree"
            )
        runs_left = (
            () if state == "finished" else tuple(m for m in block_set.methods if m not in kept)
        )
        plan.append(PlannedBlock(block, block_seed(block_set, block), state, detail, runs_left))
    return plan


@dataclass(frozen=True)
class TimeLeft:
    """What the blocks of a plan still have to train, and about how long one process takes."""

    runs: int
    blocks: int
    seconds: float | None  # None: no run of the set has finished yet to time the others by
    measured: int  # finished runs of the set the estimate rests on
    untimed: tuple[str, ...]  # methods with no finished run yet, counted at the median of all


def set_root(profile: str, set_name: str, overrides: Mapping[str, Any] | None = None) -> Path:
    """``results/blocks/<profile key>/<set>/`` of ``profile`` with ``overrides`` (not created)."""
    cfg = load_profile(profile, dict(overrides or {}) or None)
    return blocks_root(run_folder.run_profile_key(cfg), set_name)


def measured_wall_times(root: Path) -> dict[str, list[float]]:
    """Method → wall times (s) of every run that finished in the set under ``root``: in its
    finished blocks and in the staging records of interrupted or running ones (their load as
    it was)."""
    staged = sorted(root.glob(".block*.staging")) if root.is_dir() else []
    records = [*finished_blocks(root).values(), *(read_block(folder) or {} for folder in staged)]
    times: dict[str, list[float]] = {}
    for record in records:
        for method, run in record.get("runs", {}).items():
            if run.get("wall_time") is not None:
                times.setdefault(method, []).append(float(run["wall_time"]))
    return times


def time_left(plan: Sequence[PlannedBlock], wall_times: Mapping[str, Sequence[float]]) -> TimeLeft:
    """Σ over the runs left of their method's median wall time; a method not timed yet takes the
    median over every timed run. A run in progress counts whole, so this errs long."""
    left = [m for p in plan for m in p.runs_left]
    every = [t for ts in wall_times.values() for t in ts]
    untimed = tuple(sorted({m for m in left if not wall_times.get(m)}))
    seconds = None
    if every:
        fallback = statistics.median(every)
        seconds = sum(
            statistics.median(wall_times[m]) if wall_times.get(m) else fallback for m in left
        )
    return TimeLeft(len(left), sum(bool(p.runs_left) for p in plan), seconds, len(every), untimed)
