"""``at2po warmstart``: the tiny policy's SFT warm start (:mod:`at2po_lib.warmstart.sft`).

at2po warmstart --profile tiny            # cached: trains only when missing or stale
at2po warmstart --profile smoke --force
at2po warmstart --profile tiny --force --ship   # rebuild and replace the committed copy
"""

from __future__ import annotations

import argparse

from .options import (
    CommandParser,
    add_profile_options,
    load_profile_args,
    quiet_openmp,
    run_guarded,
)

PROG = "at2po warmstart"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Train the tiny policy's SFT warm "
        "start (scripted demonstrations, checkpoint chosen on "
        "validation EM).",
    )
    add_profile_options(parser, example="sft.max_steps=300")
    parser.add_argument("--force", action="store_true", help="retrain even if cached")
    parser.add_argument(
        "--ship",
        action="store_true",
        help="copy the warm start to results/<profile>/warmstart/, the copy git "
        "keeps (a fresh clone then skips SFT)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    # lazy: the stage pulls torch, transformers; `at2po warmstart --help` stays instant
    from ..warmstart.cache import read_warmstart_record, ship_warmstart
    from ..warmstart.sft import ensure_warmstart

    cfg = load_profile_args(args)
    path = ensure_warmstart(cfg, force=args.force)
    if args.ship:
        path = ship_warmstart(cfg)
    record = read_warmstart_record(cfg.name)
    print(f"warm start: {path}")
    print(
        f"chosen step {record['chosen_step']} (validation multi-hop EM "
        f"{record['chosen_validation_em']:.3f}, in band: {record['in_band']}); "
        f"SFT {record['sft_seconds']:.0f} s + validation {record['validation_seconds']:.0f} s; "
        f"{record['parameters']:,} parameters, vocabulary {record['vocab_size']}"
    )
    return 0
