"""``at2po expansion-stats``: where entropy-guided expansion branches (:mod:`at2po_lib.analysis.
expansion`, docs/method.md §5).

    at2po expansion-stats --profile tiny --prompts 300 --seed 0
    at2po expansion-stats --profile tiny --alphas 0,0.01,0.05 --trees /tmp/chains.npz

Writes ``results/<profile>/expansion_stats.csv`` (round-1 picks per estimator and alpha) and
``turn_entropy.csv`` (turn entropies), each with its ``.meta.json``.
"""

from __future__ import annotations

import argparse

from .options import (
    CommandParser,
    UsageError,
    add_profile_options,
    add_warm_start_sample_options,
    comma_list,
    invocation,
    load_profile_args,
    parse_set,
    quiet_openmp,
    run_guarded,
)

PROG = "at2po expansion-stats"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Grow M chains per prompt with the "
        "warm start and measure where one entropy-guided expansion "
        "round branches, for several alphas and both entropy "
        "estimators.",
    )
    add_profile_options(parser, example="rollout.temperature=0.7")
    add_warm_start_sample_options(parser, "prompt draw and sampling seed")
    parser.add_argument(
        "--alphas",
        default=None,
        help="comma-separated sibling penalties (default 0,0.001,0.002,0.005,0.01,0.02,0.05,0.15)",
    )
    parser.add_argument(
        "--trees",
        default=None,
        help="scratch .npz: reuse its trees if grown with the same settings, "
        "else save them there (never commit it)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args, argv))


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    # lazy: the stage pulls torch, transformers; `at2po expansion-stats --help` stays instant
    from ..analysis.expansion_stats import DEFAULT_ALPHAS, run_expansion_study

    load_profile_args(args)  # checks the profile and the --set values before any rollout
    try:
        alphas = (
            [float(a) for a in comma_list(args.alphas, "--alphas")]
            if args.alphas
            else list(DEFAULT_ALPHAS)
        )
    except ValueError:
        raise UsageError(
            f"--alphas {args.alphas!r}: expected numbers separated by commas"
        ) from None
    command = invocation(PROG, argv)
    result = run_expansion_study(
        args.profile,
        args.prompts,
        args.seed,
        alphas,
        comma_list(args.datasets, "--datasets"),
        args.policy,
        parse_set(args.overrides),
        args.trees,
        command,
    )
    columns = [
        "estimator",
        "alpha",
        "share_depth1",
        "share_last_search",
        "share_picks_entropy_below_0.01",
        "spearman_entropy",
        "spearman_depth",
        "overlap_with_entropy_topk",
    ]
    print(result["selection"][columns].round(3).to_string(index=False))
    print(result["entropy"].round(4).to_string(index=False))
    for path in result["paths"].values():
        print(f"wrote {path}")
    return 0
