"""``at2po study``: train (or reuse) the runs of one of the paper's tables for several seeds,
then write every table and figure from the records (:mod:`at2po_lib.trainer.study`).

    at2po study --profile tiny --table 1 --seeds 0,1,2,3,4
    at2po study --profile tiny --table 1 --seeds 0,1 --methods grpo,at2po   # a slice of it
    at2po study --profile tiny --table 3 --seeds 0,1,2 --no-report
    at2po study --profile tiny --table 3 --seeds 0,1,2 --plan     # what is done, what is left

Resumable: finished runs are reused, interrupted ones continue from their last checkpoint.
"""

from __future__ import annotations

import argparse
from collections import Counter

from .options import (CommandParser, UsageError, add_profile_options, comma_list, int_list,
                      parse_set, quiet_openmp, run_guarded)

PROG = "at2po study"


def build_parser(prog: str = PROG, table: str | None = None) -> argparse.ArgumentParser:
    parser = CommandParser(prog=prog, description="Train (or reuse) every (method, "
                                     "seed) of one of the paper's tables, then write the tables "
                                     "and figures of the profile from its records.")
    add_profile_options(parser, example="train.max_steps=96 (applies to every run)")
    if table is None:
        parser.add_argument("--table", required=True, choices=["1", "2", "3"])
    parser.add_argument("--seeds", default="0", help="comma-separated, e.g. 0,1,2")
    parser.add_argument("--methods", default=None,
                        help="comma-separated names or patterns, e.g. "
                             "'credit_*_diff_global' (default: the table's runs)")
    parser.add_argument("--force", action="store_true", help="re-run finished runs")
    parser.add_argument("--no-report", action="store_true",
                        help="train only (e.g. while another worker still trains)")
    parser.add_argument("--plan", action="store_true",
                        help="list each run's state (finished, resumes, new) and exit: nothing "
                             "is trained or written")
    parser.set_defaults(table=table)
    return parser


def main(argv: list[str] | None = None, prog: str = PROG, table: str | None = None) -> int:
    args = build_parser(prog, table).parse_args(argv)
    quiet_openmp()
    return run_guarded(prog, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    # lazy: the stage pulls pandas, torch, transformers; `at2po study --help` stays instant
    from ..trainer.study import run_study, study_methods

    overrides = parse_set(args.overrides) or None
    seeds = int_list(args.seeds, "--seeds")
    try:  # names and patterns checked (and patterns expanded) before any training
        methods = study_methods(args.table, comma_list(args.methods, "--methods"))
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if args.plan:
        return _print_plan(args.profile, args.table, seeds, methods, overrides, args.force)
    run_study(args.profile, args.table, seeds, methods, args.force, overrides)
    if not args.no_report:
        # lazy: the stage pulls pandas, torch, transformers; `at2po study --help` stays instant
        from ..reporting.report import write_report

        report = write_report(args.profile)
        for name, paths in report.paths.items():
            print(f"wrote {name}: {', '.join(str(p) for p in paths.values())}")
    return 0


def _print_plan(profile: str, table: str, seeds: list[int], methods: list[str],
                overrides: dict | None, force: bool) -> int:
    # lazy: the stage pulls pandas, torch, transformers; `at2po study --help` stays instant
    from ..trainer.study import study_plan

    plan = study_plan(profile, table, seeds, methods, overrides)
    width = max(len(p.method) for p in plan) if plan else 0
    for p in plan:
        state = "retrains (--force)" if force else p.state
        print(f"{p.method:<{width}}  seed {p.seed:<3} {state:<13} {p.detail}".rstrip())
    counts = Counter("retrains" if force else p.state for p in plan)
    print(f"table {table}: {len(plan)} runs: "
          + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    return 0
