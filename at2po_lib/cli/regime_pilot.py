"""``at2po regime-pilot``: the gates of a toy regime, from its GRPO runs and fresh rollouts
(:mod:`at2po_lib.lab.regime_pilot`).

    at2po train --profile tiny --method react
    at2po train --profile tiny --method grpo --seed 0     # and --seed 1, ...
    at2po regime-pilot --profile tiny --seeds 0,1 --prompts 200

Writes ``results/<profile>/pilot/regime.json`` and ``reward_curve.png`` (each with its
``.meta.json``) and prints the gates.
"""

from __future__ import annotations

import argparse
import json

from .options import (
    CommandParser,
    add_profile_options,
    add_warm_start_sample_options,
    int_list,
    invocation,
    load_profile_args,
    parse_set,
    quiet_openmp,
    run_guarded,
)

PROG = "at2po regime-pilot"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Measure whether RL learns on a "
        "profile and whether its turns decide the outcome (the gates of docs/regime.md), "
        "from react/grpo runs and fresh rollouts.",
    )
    add_profile_options(parser, example="rollout.temperature=1.0")
    add_warm_start_sample_options(parser, "prompt draw and sampling seed of the flip measurement")
    parser.add_argument("--seeds", required=True, help="GRPO seeds to read, e.g. 0,1")
    parser.add_argument("--out", default=None, help="folder (default results/<profile>/pilot)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args, argv))


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    # lazy: the stage pulls pandas, torch, transformers; `at2po regime-pilot --help` stays instant
    from ..lab.regime_pilot import run_regime_pilot

    load_profile_args(args)
    seeds = int_list(args.seeds, "--seeds")
    result = run_regime_pilot(
        args.profile,
        seeds,
        args.prompts,
        args.seed,
        args.policy,
        parse_set(args.overrides),
        args.out,
        invocation(PROG, argv),
    )
    gain = result["gate1_em_gain"]["multihop"]["gain"]
    print(
        f"1. multi-hop greedy EM gain: {100 * gain['estimate']:+.1f} "
        f"[{100 * gain['low']:+.1f}, {100 * gain['high']:+.1f}] points"
    )
    sig = result["gate2_signal"]
    print(
        f"2. zero-variance groups, first {sig['window']} steps: {sig['zero_std_first']:.2f}; "
        f"reward {sig['reward_first']:.3f} -> {sig['reward_last']:.3f}"
    )
    fail, flips = result["gate3_failures"]["split"], result["gate3_flips"]
    print(
        f"3. warm-start failures at a decision: {fail['decision_failure_share']:.2f}, supporting "
        f"answer in context: {fail['supported_in_context_share']:.2f}"
    )
    shown = {
        k: ({f: x for f, x in v.items() if f != "per_prompt"} if isinstance(v, dict) else v)
        for k, v in flips.items()
        if k not in ("prompts", "seed")
    }
    print("   flips: " + json.dumps(shown, default=float))
    for path in result["paths"]:
        print(f"wrote {path}")
    return 0
