"""``at2po run-notebooks``: execute the numbered notebooks in order under one profile
(:mod:`at2po_lib.lab.notebook_runner`; ``./run_all.sh`` and ``./run_tests.sh`` call this).

    at2po run-notebooks --profile tiny
    at2po run-notebooks --profile smoke --only 00,01 --force
    at2po run-notebooks --profile tiny --retrain                 # retrain committed runs too
    at2po run-notebooks --profile tiny --set train.max_steps=8   # passed to every notebook
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..lab.notebook_runner import run_notebooks
from ..util.paths import repo_root
from .options import CommandParser, SET_METAVAR, comma_list, parse_set, run_guarded

PROG = "at2po run-notebooks"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Execute the numbered notebooks with papermill; up-to-date stages are skipped.",
    )
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--only", default=None, help="comma-separated prefixes, e.g. 00,01")
    parser.add_argument("--force", action="store_true", help="re-run stages that are up to date")
    parser.add_argument(
        "--retrain",
        action="store_true",
        help="retrain the warm start and the committed runs instead of reusing "
        "them (implies --force)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar=SET_METAVAR,
        dest="overrides",
        help="override a profile value in every notebook, "
        "e.g. train.max_steps=8 (repeatable; checked before anything runs)",
    )
    parser.add_argument("--notebooks-dir", type=Path, default=None)
    parser.add_argument("--out-dir", type=Path, default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    only = comma_list(args.only, "--only")
    os.environ.setdefault("AT2PO_HOME", str(repo_root()))
    try:
        results = run_notebooks(
            args.profile,
            only,
            args.force,
            args.notebooks_dir,
            args.out_dir,
            retrain=args.retrain,
            overrides=parse_set(args.overrides),
        )
    except ValueError as exc:  # an unknown profile, or an --only prefix naming no notebook
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if results and results[-1].status == "failed":
        return 1
    ran = sum(r.status == "ran" for r in results)
    print(f"{ran} notebook(s) ran, {len(results) - ran} up to date")
    return 0
