"""``at2po credit-accuracy``: how well each credit mode's turn advantages separate useful from
useless turns on real trees (:mod:`at2po_lib.analysis.credit_accuracy`, docs/method.md §6, §8).

    at2po credit-accuracy --profile tiny --prompts 300 --seed 0
    at2po credit-accuracy --profile tiny --prompts 50 --resamples 500 --trees-dir /tmp/trees
    at2po credit-accuracy --profile tiny --prompts 300 --seed 0 --name trained_authors \
        --policy PATH --set rollout.entropy_estimate=sampled_nll --set rollout.tree_alpha=0.05

Writes ``results/<profile>/credit_accuracy.csv`` (AUC per credit mode with bootstrap CIs) and
``credit_weights.csv`` (how far the entropy weights are from uniform), each with its
``.meta.json``. With ``--name NAME`` (another policy or estimator, the dissection's records)
it writes ``results/<profile>/dissection/credit_accuracy_NAME.csv`` and
``credit_weights_NAME.csv`` instead, leaving the default records alone.
"""

from __future__ import annotations

import argparse

from .options import (
    CommandParser,
    add_profile_options,
    add_warm_start_sample_options,
    bounded_int,
    comma_list,
    invocation,
    load_profile_args,
    parse_set,
    quiet_openmp,
    record_name,
    run_guarded,
)

PROG = "at2po credit-accuracy"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Grow AT2PO's and Tree-GRPO's trees "
        "with the warm start, label each turn useful or not from "
        "TinyWorld's plan, and score every credit mode by AUC.",
    )
    add_profile_options(parser, example="rollout.tree_alpha=0.05")
    add_warm_start_sample_options(parser, "prompt draw, sampling and bootstrap seed")
    parser.add_argument(
        "--resamples", type=bounded_int(1, 100_000), default=4000, help="bootstrap resamples"
    )
    parser.add_argument(
        "--trees-dir",
        default=None,
        help="scratch folder: reuse entropy.npz / random.npz grown with the same "
        "settings, else save them there (never commit them)",
    )
    parser.add_argument(
        "--name",
        default=None,
        type=record_name,
        help="write results/<profile>/dissection/credit_accuracy_NAME.csv (and "
        "credit_weights_NAME.csv) instead of the default records, e.g. "
        "for a trained --policy or another entropy estimate",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args, argv))


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    # lazy: the stage pulls pandas, torch, transformers; `at2po credit-accuracy --help` stays instant
    from ..analysis.credit_accuracy import run_credit_accuracy

    load_profile_args(args)  # checks the profile and the --set values before any rollout
    command = invocation(PROG, argv)
    result = run_credit_accuracy(
        args.profile,
        args.prompts,
        args.seed,
        comma_list(args.datasets, "--datasets"),
        args.policy,
        parse_set(args.overrides),
        args.resamples,
        trees_dir=args.trees_dir,
        command=command,
        name=args.name,
    )
    table = result["accuracy"]
    shown = table[table["turns"] != "answer"]
    print(shown.drop(columns=["n_trees", "n_prompts"]).round(3).to_string(index=False))
    print(result["weights"].round(4).to_string(index=False))
    for path in result["paths"].values():
        print(f"wrote {path}")
    return 0
