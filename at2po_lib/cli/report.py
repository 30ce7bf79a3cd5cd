"""``at2po report``: the tables the reporting code makes from finished runs, without training.

Today: the Table 1 collection, ``results/<profile>/table1_<profile>.csv`` (+ ``.meta.json``),
from the ``final_eval.csv`` of every finished (method, seed) run of the profile
(:func:`at2po_lib.trainer.table1.collect_table1`); runs that are missing are named, not
trained (``at2po table1`` trains them).

    at2po report --profile tiny --seeds 0,1,2
    at2po report --profile tiny --seeds 0 --methods react,grpo,at2po
"""

from __future__ import annotations

import argparse
import sys

from .common import (add_profile_options, check_methods, comma_list, int_list, parse_set,
                     run_guarded)

PROG = "at2po report"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Write the result tables of a "
                                     "profile's finished runs (no training).")
    add_profile_options(parser, example="train.max_steps=96 (recorded in the table's meta, as "
                                        "the runs were trained with it)")
    parser.add_argument("--seeds", default=None,
                        help="comma-separated (default: the profile's train.seeds)")
    parser.add_argument("--methods", default=None, help="comma-separated (default: Table 1's)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from ..config import load_profile
    from ..trainer import records
    from ..trainer.table1 import collect_table1, table1_methods, write_table1

    overrides = parse_set(args.overrides) or None
    cfg = load_profile(args.profile, overrides)
    seeds = int_list(args.seeds, "--seeds") if args.seeds else list(cfg.train.seeds)
    methods = comma_list(args.methods, "--methods") or table1_methods(cfg.name)
    check_methods(methods)
    table = collect_table1(cfg.name, methods, seeds)
    missing = [f"{m}/seed{s}" for m in methods for s in seeds
               if not records.run_dir(cfg.name, m, s).done.is_file()]
    if missing:
        print(f"{PROG}: not finished (left out): {', '.join(missing)}", file=sys.stderr)
    if not len(table):
        print(f"{PROG}: no finished run of profile {cfg.name!r} to report", file=sys.stderr)
        return 1
    path = write_table1(table, cfg.name, seeds, overrides)
    view = table[table["dataset"].str.endswith("avg")]
    print(view.to_string(index=False))
    print(f"wrote {path}")
    return 0
