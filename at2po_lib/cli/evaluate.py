"""``at2po evaluate``: greedy EM/F1 of a policy on the test sets (:mod:`at2po_lib.evaluation`).

    at2po evaluate --profile tiny                                  # the warm start
    at2po evaluate --profile tiny --checkpoint results/runs/tiny/at2po/seed0/checkpoints/checkpoint-64 \\
        --label at2po --seed 0 --datasets tiny_hotpotqa,tiny_nq --max-questions 50
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..retrieval.indexes import build_retriever
from ..util.paths import results_dir
from .options import add_profile_options, comma_list, load_profile_args, quiet_openmp, run_guarded

PROG = "at2po evaluate"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Greedy evaluation on the test "
                                     "sets: EM and F1 per dataset, sample-weighted averages.")
    add_profile_options(parser, example="eval.max_questions=50")
    parser.add_argument("--checkpoint", default=None,
                        help="model folder or hub name (default: the profile's warm start, or "
                             "policy.model at paper scale)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="FlashRAG files on disk, DIR/<dataset>/<split>.jsonl (shorthand "
                             "for --set data.local_dir=DIR)")
    parser.add_argument("--label", default=None, help="method/label column (default: folder name)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed column: the evaluated run's training seed (default sft.seed)")
    parser.add_argument("--datasets", default=None, help="comma-separated (default: eval.datasets)")
    parser.add_argument("--max-questions", type=int, default=None,
                        help="questions per dataset (default: eval.max_questions)")
    parser.add_argument("--out", default=None,
                        help="CSV path (default results/<profile>/eval_<label>.csv)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    # lazy: the stage pulls torch, transformers; `at2po evaluate --help` stays instant
    from ..evaluation import (evaluate, load_evaluation_policy, turn_distribution, write_eval,
                              write_outcomes)

    if args.data_dir is not None:
        args.overrides = [*args.overrides, f"data.local_dir={args.data_dir}"]
    cfg = load_profile_args(args)
    datasets = comma_list(args.datasets, "--datasets")
    checkpoint = args.checkpoint or cfg.policy.model
    provenance: dict[str, Any] = {}
    if checkpoint is None:
        # lazy: the stage pulls torch, transformers; `at2po evaluate --help` stays instant
        from ..policy.warmstart_cache import warmstart_summary
        from ..trainer.warmstart import ensure_warmstart

        checkpoint = str(ensure_warmstart(cfg))
        provenance["warmstart"] = warmstart_summary(cfg.name)
    label = args.label or Path(str(checkpoint)).name
    seed = args.seed if args.seed is not None else cfg.sft.seed

    # one policy for every batch and the sampled metric; on vLLM one engine from the checkpoint
    model, tokenizer = load_evaluation_policy(cfg, checkpoint)
    retriever = build_retriever(cfg)
    summary, details = evaluate(cfg, model, tokenizer, retriever, datasets, args.max_questions,
                                label=label, seed=seed, return_details=True)
    out = Path(args.out) if args.out else results_dir(cfg.name) / f"eval_{label}.csv"
    write_eval(summary, out, cfg.name, seed, cfg, checkpoint=str(checkpoint),
               turn_distribution=turn_distribution(details).to_dict("records"), **provenance)
    outcomes = write_outcomes(details, out.with_name(out.stem + "_outcomes.csv"))
    print(summary.to_string(index=False))
    print(f"wrote {out} and {outcomes} (one row per question)")
    return 0
