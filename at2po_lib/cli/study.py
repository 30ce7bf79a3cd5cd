"""``at2po study``: train (or reuse) the runs of one of the paper's tables for several seeds,
then write every table and figure from the records (:mod:`at2po_lib.study.tables`).

    at2po study --profile tiny --table 1 --seeds 0,1,2,3,4
    at2po study --profile tiny --table 1 --seeds 0,1 --methods grpo,at2po   # a slice of it
    at2po study --profile tiny --table 3 --seeds 0,1,2 --no-report
    at2po study --profile tiny --table 3 --seeds 0,1,2 --plan     # what is done, what is left

Resumable: finished runs are reused, interrupted ones continue from their last checkpoint.

In blocks (:mod:`at2po_lib.study.blocks`): one seed of every method of a block set per block,
on one machine, at one revision, with the same torch threads; a block is finished or re-run
whole, and its runs go to ``results/blocks/<profile>/<set>/`` apart from the committed record:

    at2po study --profile tiny --block-set headline --blocks 0-11      # AT2PO, GRPO, GRPO at budget
    at2po study --profile tiny --block-set ablation --blocks 0-7       # Table 2-3 cells + AT2PO
    at2po study --profile tiny --block-set headline --blocks 0-23 --plan   # and the time left
    at2po study --profile tiny --block-set ablation --blocks 0-4 --keep-finished-runs --hours 3
    at2po study --profile tiny --block-set ablation --blocks 0-4 --share-blocks   # twice: a block's
                                                                 # runs side by side
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import TYPE_CHECKING, Sequence

from .options import (
    CommandParser,
    UsageError,
    add_profile_options,
    bounded_float,
    check_engine,
    comma_list,
    int_list,
    load_profile_args,
    parse_set,
    quiet_openmp,
    run_guarded,
)
from ..study.block_records import MAX_BLOCKS
from ..util.provenance import code_mismatch

if TYPE_CHECKING:
    from ..study.blocks import TimeLeft

PROG = "at2po study"


def build_parser(prog: str = PROG, table: str | None = None) -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=prog,
        description="Train (or reuse) every (method, "
        "seed) of one of the paper's tables, then write the tables "
        "and figures of the profile from its records.",
    )
    add_profile_options(parser, example="train.max_steps=96 (applies to every run)")
    if table is None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--table", choices=["1", "2", "3"])
        which.add_argument(
            "--block-set",
            metavar="SET",
            help="train in blocks: one seed of each of the set's methods per "
            "block (headline: AT2PO, GRPO, GRPO at AT2PO's budget; "
            "ablation: Table 2-3 cells with AT2PO)",
        )
    parser.add_argument(
        "--blocks", default=None, help="with --block-set: block numbers, e.g. 0-11 or 0,1,2"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="with --block-set: torch threads of every run (default 1)",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="with --block-set: start a block on uncommitted code (recorded)",
    )
    parser.add_argument(
        "--allow-revisions",
        action="store_true",
        help="with --block-set: add blocks at another revision than the set's finished ones",
    )
    parser.add_argument(
        "--keep-finished-runs",
        action="store_true",
        help="with --block-set: an interrupted block keeps the runs it finished when its "
        "revision, machine build, threads, overrides, Python and packages are the same "
        "(else it re-runs whole); for blocks longer than a process may live",
    )
    parser.add_argument(
        "--share-blocks",
        action="store_true",
        help="with --block-set: processes train the runs of one block side by side (each "
        "takes the block's next run nobody trains) instead of a block each, so a block "
        "finishes sooner; implies --keep-finished-runs",
    )
    parser.add_argument(
        "--hours",
        type=bounded_float(0, 24 * 365, open_low=True),
        default=None,
        help="with --block-set: the machine's time left; start no block (with "
        "--keep-finished-runs: no run) that the set's median wall times say ends later, "
        "and stop (the same command resumes); the estimate can miss: leave slack",
    )
    parser.add_argument("--seeds", default="0", help="comma-separated or ranges, e.g. 0,1,2 or 0-4")
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated names or patterns, e.g. "
        "'credit_*_diff_global' (default: the table's runs)",
    )
    parser.add_argument("--force", action="store_true", help="re-run finished runs")
    parser.add_argument(
        "--no-report",
        action="store_true",
        help="train only (e.g. while another worker still trains)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="list each run's state (finished, resumes, new; a block: finished, running, "
        "interrupted, new, then the runs left and about how long one process needs for "
        "them) and exit: nothing is trained or written",
    )
    parser.set_defaults(table=table, block_set=None)
    return parser


def main(argv: list[str] | None = None, prog: str = PROG, table: str | None = None) -> int:
    args = build_parser(prog, table).parse_args(argv)
    quiet_openmp()
    return run_guarded(prog, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if not args.plan:
        if (mismatch := code_mismatch()) is not None:
            raise UsageError(mismatch)  # its records would name other code than the code that ran
        check_engine(load_profile_args(args))  # before any warm start or run folder
    if args.block_set is not None:
        return _run_blocks(args)
    block_options = (args.blocks, args.threads, args.keep_finished_runs, args.share_blocks)
    if any(o not in (None, False) for o in block_options) or args.hours:
        raise UsageError(
            "--blocks, --threads, --keep-finished-runs, --share-blocks and --hours go with "
            "--block-set"
        )
    seeds = int_list(args.seeds, "--seeds")  # bounded before anything is imported or read
    # lazy: the stage pulls pandas, torch, transformers; `at2po study --help` stays instant
    from ..study.tables import run_study, study_methods

    overrides = parse_set(args.overrides) or None
    try:  # names and patterns checked (and patterns expanded) before any training
        methods = study_methods(args.table, comma_list(args.methods, "--methods"))
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if args.plan:
        return _print_plan(args.profile, args.table, seeds, methods, overrides, args.force)
    run_study(args.profile, args.table, seeds, methods, args.force, overrides)
    if not args.no_report:
        _write_report(args.profile)
    return 0


def _write_report(profile: str) -> None:
    # lazy: the stage pulls pandas, torch, transformers; `at2po study --help` stays instant
    from ..reporting.report import write_report

    report = write_report(profile)
    for name, paths in report.paths.items():
        print(f"wrote {name}: {', '.join(str(p) for p in paths.values())}")


def _run_blocks(args: argparse.Namespace) -> int:
    """``--block-set``: train the blocks not finished yet (or list them with ``--plan``)."""
    if args.blocks is None:
        raise UsageError("--block-set needs --blocks, e.g. --blocks 0-11")
    if args.methods is not None or args.force or args.seeds != "0":
        raise UsageError(
            "a block trains every method of its set with the block's seed: "
            "--methods, --seeds and --force go with --table"
        )
    blocks = int_list(args.blocks, "--blocks", high=MAX_BLOCKS - 1)  # before any import
    # lazy: the stage pulls pandas, torch, transformers; `at2po study --help` stays instant
    from ..study.blocks import (
        DEFAULT_THREADS,
        block_plan,
        get_block_set,
        measured_wall_times,
        run_blocks,
        set_root,
        time_left,
    )

    overrides = parse_set(args.overrides)
    if args.plan:
        plan = block_plan(
            args.profile,
            args.block_set,
            blocks,
            overrides,
            threads=DEFAULT_THREADS if args.threads is None else args.threads,
            keep_finished_runs=args.keep_finished_runs or args.share_blocks,
        )
        for p in plan:
            print(f"block {p.block:<3} seed {p.seed:<4} {p.state:<12} {p.detail}".rstrip())
        counts = Counter(p.state for p in plan)
        print(
            f"block set {args.block_set}: {len(plan)} blocks: "
            + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        )
        print(_verdicts_line(get_block_set(args.block_set).methods))
        print(
            _time_left_line(
                time_left(
                    plan, measured_wall_times(set_root(args.profile, args.block_set, overrides))
                )
            )
        )
        return 0
    threads = DEFAULT_THREADS if args.threads is None else args.threads
    if threads < 1:
        raise UsageError(f"--threads {threads}: at least 1")
    results = run_blocks(
        args.profile,
        args.block_set,
        blocks,
        threads=threads,
        overrides=overrides,
        allow_dirty=args.allow_dirty,
        allow_revisions=args.allow_revisions,
        keep_finished_runs=args.keep_finished_runs,
        deadline=None if args.hours is None else time.time() + 3600 * args.hours,
        share_blocks=args.share_blocks,
    )
    for r in results:
        print(f"[study] {args.block_set} block {r.block}: {r.status} ({r.folder})")
    if not args.no_report:
        _write_report(args.profile)
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _verdicts_line(methods: Sequence[str]) -> str:
    """How many finished blocks a reading other than "cannot tell" needs at all: a sign-flip
    test over n blocks gives no p below 2/2^n, and Table 3's cells are one family under Holm
    (:func:`at2po_lib.evaluation.stats.fewest_pairs_for_direction`)."""
    # lazy, like the stage's imports: stats pulls numpy, pandas and scipy, labels the records
    from ..evaluation.stats import fewest_pairs_for_direction
    from ..reporting.labels import TABLE3_CELLS

    line = (
        "verdicts: a pair of methods can read a direction from "
        f"{fewest_pairs_for_direction()} finished blocks on"
    )
    cells = len(set(methods) & set(TABLE3_CELLS))  # the cells the report's Holm family holds
    if cells:
        line += (
            f"; a Table 3 cell, one of {cells} under Holm's correction, from "
            f"{fewest_pairs_for_direction(cells)}"
        )
    return line


def _time_left_line(left: TimeLeft) -> str:
    """The plan's last line: the runs left and, once a run of the set has finished, about how
    long one process needs for them (:func:`at2po_lib.study.blocks.time_left`)."""
    if not left.runs:
        return "left: nothing"
    head = f"left: {_count(left.runs, 'run')} in {_count(left.blocks, 'block')}"
    if left.seconds is None:
        return f"{head}; no run of this set has finished yet to time them by"
    line = (
        f"{head}: about {left.seconds / 3600:.1f} h of one process (each method's median wall "
        f"time over the set's {left.measured} finished runs, timed under the load they ran with)"
    )
    if left.untimed:
        line += (
            f"; {_count(len(left.untimed), 'method')} without a finished run yet, counted at "
            "the median of all"
        )
    return line


def _print_plan(
    profile: str,
    table: str,
    seeds: list[int],
    methods: list[str],
    overrides: dict | None,
    force: bool,
) -> int:
    # lazy: the stage pulls pandas, torch, transformers; `at2po study --help` stays instant
    from ..study.tables import study_plan

    plan = study_plan(profile, table, seeds, methods, overrides)
    width = max(len(p.method) for p in plan) if plan else 0
    for p in plan:
        state = "retrains (--force)" if force else p.state
        print(f"{p.method:<{width}}  seed {p.seed:<3} {state:<13} {p.detail}".rstrip())
    counts = Counter("retrains" if force else p.state for p in plan)
    print(
        f"table {table}: {len(plan)} runs: "
        + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    )
    return 0
