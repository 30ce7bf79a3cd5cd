"""``at2po rehearsal``: write the ``rehearsal`` profile's stand-in files (:mod:`at2po_lib.plan.rehearsal`).

at2po rehearsal --out artifacts/rehearsal      # policy/, corpus.jsonl, flashrag/ (seconds)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..plan.rehearsal import prepare
from .options import CommandParser, add_profile_options, bounded_int, load_profile_args, run_guarded

PROG = "at2po rehearsal"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Write the rehearsal's random tiny "
        "Qwen3 + tokenizer, wiki-18 passages and FlashRAG folder.",
    )
    add_profile_options(parser, default="rehearsal", example="policy.hidden_size=64")
    parser.add_argument("--out", type=Path, default=Path("artifacts") / "rehearsal")
    parser.add_argument(
        "--passages",
        type=bounded_int(1, 1_000_000),
        default=200,
        help="corpus passages (default 200)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    files = prepare(args.out, load_profile_args(args), passages=args.passages)
    print(f"rehearsal files in {files.root}; the profile reads them from there, or pass:")
    print("\n".join(f"  --set {text}" for text in files.overrides()))
    return 0
