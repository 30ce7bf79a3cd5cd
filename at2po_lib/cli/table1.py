"""``at2po table1``: the toy Table 1 — every method of the paper's Table 1 trained on one
profile for several seeds, then one tidy table (:mod:`at2po_lib.trainer.table1`).

    at2po table1 --profile tiny --seeds 0,1,2
    at2po table1 --profile tiny --seeds 0 --methods react,grpo,at2po
    at2po table1 --profile tiny --seeds 0,1,2 --set train.max_steps=96
"""

from __future__ import annotations

import argparse

from .common import (add_profile_options, check_methods, comma_list, int_list, parse_set,
                     quiet_openmp, run_guarded)

PROG = "at2po table1"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Train (or reuse) every (method, "
                                     "seed) of Table 1 and write results/<profile>/"
                                     "table1_<profile>.csv.")
    add_profile_options(parser, example="train.max_steps=96 (applies to every run)")
    parser.add_argument("--seeds", default="0", help="comma-separated, e.g. 0,1,2")
    parser.add_argument("--methods", default=None, help="comma-separated (default: Table 1's)")
    parser.add_argument("--force", action="store_true", help="re-run finished runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from ..trainer.table1 import run_table1, write_table1

    overrides = parse_set(args.overrides) or None
    seeds = int_list(args.seeds, "--seeds")
    methods = comma_list(args.methods, "--methods")
    check_methods(methods or [])
    table = run_table1(args.profile, methods, seeds, args.force, overrides)
    path = write_table1(table, args.profile, seeds, overrides)
    view = table[table["dataset"].str.endswith("avg")] if len(table) else table
    print(view.to_string(index=False))
    print(f"wrote {path}")
    return 0
