"""``at2po world``: generate TinyWorld (:mod:`at2po_lib.tinyworld`).

at2po world --profile tiny
at2po world --profile smoke --out /tmp/world --set world.seed=3
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..tinyworld.build import build_world, ensure_world, load_world, world_stats
from .options import CommandParser, add_profile_options, load_profile_args, run_guarded

PROG = "at2po world"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Generate TinyWorld: a toy "
        "encyclopedia and seven QA datasets in the real formats.",
    )
    add_profile_options(parser, example="world.seed=3")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default: artifacts/<profile>/world)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    cfg = load_profile_args(args)
    if args.out is None:
        files = ensure_world(cfg, force=args.force)
    else:
        files = build_world(cfg.world, args.out, force=args.force)
    state = f"built in {files.seconds:.2f} s" if files.rebuilt else "up to date (skipped)"
    print(f"TinyWorld ({cfg.name}, seed {cfg.world.seed}) at {files.root}: {state}")
    stats = load_world(files)["stats"]
    print(
        f"{stats['passages']} passages, words per passage {stats['passage_words']}, "
        f"vocabulary {stats['vocabulary']} words"
    )
    print(world_stats(files).to_string(index=False))
    return 0
