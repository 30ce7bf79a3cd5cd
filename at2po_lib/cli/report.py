"""``at2po report``: every table and figure of a profile from its stored records, no training
(:func:`at2po_lib.reporting.report.write_report`): Tables 1–3 with 95% intervals beside
the published numbers, Figures 3 and 4, each as CSV/Markdown/LaTeX or PNG/PDF with a
``.meta.json`` naming the runs, seeds and git revision.

    at2po report --profile tiny                 # about a minute on 2 cores
    at2po report --profile tiny --readme        # also refresh the generated tables in docs/
    AT2PO_RESULTS=results/tiny/pilot/lr5e-4_mb4 at2po report --profile tiny   # another record set
"""

from __future__ import annotations

import argparse
import sys

from .options import CommandParser, add_profile_options, load_profile_args, run_guarded

PROG = "at2po report"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Write the tables and figures of a profile's finished runs (no training).",
    )
    add_profile_options(parser, example="eval.max_questions=50")
    parser.add_argument(
        "--readme",
        action="store_true",
        help="refresh the blocks of the README and docs/ generated from these tables",
    )
    parser.add_argument("--no-figures", action="store_true", help="tables only")
    parser.add_argument(
        "--pair-across-revisions",
        action="store_true",
        help="pair the study's blocks even when they ran at different "
        "revisions (refused by default, naming the blocks)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    # lazy: the stage pulls pandas, torch, transformers; `at2po report --help` stays instant
    from ..reporting.report import write_report

    cfg = load_profile_args(args)
    report = write_report(
        cfg.name,
        readme=args.readme,
        figures=not args.no_figures,
        allow_revisions=args.pair_across_revisions,
    )
    for note in report.notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    for name, paths in report.paths.items():
        print(f"wrote {name}: {', '.join(str(p) for p in paths.values())}")
    summary = report.tables.get("table1_summary")
    if summary is not None:
        print(summary.to_string())
    return 0
