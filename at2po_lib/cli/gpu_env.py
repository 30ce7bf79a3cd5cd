"""``at2po gpu-env``: the GPU environment's pip input and the summary of pip's report
(:mod:`at2po_lib.plan.gpu_env`; scripts/check_gpu_env.sh calls both).

    at2po gpu-env requirements > reqs.txt     # environment.yml's pip section, -r expanded
    at2po gpu-env requirements --list retriever   # the retrieval server's own environment
    at2po gpu-env summarize report.json       # key versions of `pip install --dry-run --report`
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..plan.gpu_env import LISTS, environment_requirements, gpu_pins, summarize_report
from ..util.paths import repo_root
from .options import CommandParser, UsageError, run_guarded

PROG = "at2po gpu-env"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="The GPU environment's pip input "
        "(requirements) or a summary of pip's --report (summarize).",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    req = sub.add_parser("requirements", help="environment.yml's pip section, -r expanded")
    req.add_argument("--root", type=Path, default=None, help="repository root (default: this one)")
    req.add_argument(
        "--list",
        choices=("training", "retriever"),
        default="training",
        help="training: environment.yml's pip section (default); retriever: "
        "requirements-retriever-gpu.txt, the retrieval server's process",
    )
    summ = sub.add_parser("summarize", help="the key versions of a pip --report")
    summ.add_argument("report", type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.action == "requirements":
        root = args.root or repo_root()
        reqs = (
            environment_requirements(root)
            if args.list == "training"
            else gpu_pins(root, LISTS[args.list])
        )
        print("\n".join(reqs))
        return 0
    if not args.report.is_file():
        raise UsageError(f"{args.report}: no such pip report")
    try:
        rows = summarize_report(json.loads(args.report.read_text()))
    except (json.JSONDecodeError, ValueError) as exc:
        raise UsageError(f"{args.report}: {exc}") from None
    width = max(len(n) for n, _ in rows)
    for name, version in rows:
        print(f"  {name:<{width}}  {version}")
    return 0
