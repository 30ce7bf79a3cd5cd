"""``at2po evaluate``: greedy EM/F1 of a policy on the test sets (:mod:`at2po_lib.evaluation.greedy`).

    at2po evaluate --profile tiny                                  # the warm start
    at2po evaluate --profile tiny --checkpoint results/runs/tiny/at2po/seed0/checkpoints/checkpoint-64 \\
        --label at2po --seed 0 --datasets tiny_hotpotqa,tiny_nq --max-questions 50
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ..protocol.preflight import check_datasets
from ..retrieval.indexes import build_retriever
from ..util.paths import recorded_paths_in, results_dir
from .options import (
    CommandParser,
    SEED,
    UsageError,
    add_profile_options,
    bounded_int,
    check_engine,
    comma_list,
    load_profile_args,
    quiet_openmp,
    run_guarded,
)

PROG = "at2po evaluate"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Greedy evaluation on the test "
        "sets: EM and F1 per dataset, sample-weighted averages.",
    )
    add_profile_options(parser, example="eval.max_questions=50")
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="model folder or hub name (default: the profile's warm start, or "
        "policy.model at paper scale)",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="FlashRAG files on disk, DIR/<dataset>/<split>.jsonl (shorthand "
        "for --set data.local_dir=DIR)",
    )
    parser.add_argument("--label", default=None, help="method/label column (default: folder name)")
    parser.add_argument(
        "--seed",
        type=SEED,
        default=None,
        help="seed column: the evaluated run's training seed (default sft.seed)",
    )
    parser.add_argument("--datasets", default=None, help="comma-separated (default: eval.datasets)")
    parser.add_argument(
        "--max-questions",
        type=bounded_int(1, 1_000_000),
        default=None,
        help="questions per dataset (default: eval.max_questions)",
    )
    parser.add_argument(
        "--out", default=None, help="CSV path (default results/<profile>/eval_<label>.csv)"
    )
    return parser


HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
"""``owner/name`` on the Hugging Face hub."""


def model_folder(text: str) -> str:
    """``--checkpoint``: a folder holding a model (its ``config.json``) or a hub name; an empty
    value, a folder without a model (an empty one, ``../../etc``, a run folder) or anything
    else is a :class:`UsageError` naming it (unchecked, ``''`` would evaluate the warm start and
    the rest end in ``ValueError: Unrecognized model``)."""
    if not text.strip():
        raise UsageError(
            "--checkpoint '': empty; give a model folder or a hub name (without "
            "--checkpoint: the profile's warm start)"
        )
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir() and (path / "config.json").is_file():
            return text
        run = (
            " (a run folder: its weights are in checkpoints/checkpoint-<step>)"
            if (path / "DONE.json").is_file() or (path / "checkpoints").is_dir()
            else ""
        )
        raise UsageError(f"--checkpoint {text!r}: {path} holds no model (no config.json){run}")
    if HUB_NAME.fullmatch(text) and ".." not in text:
        return text
    raise UsageError(f"--checkpoint {text!r}: no such folder, and not a hub name (owner/name)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    # lazy: the stage pulls torch, transformers; `at2po evaluate --help` stays instant
    from ..evaluation.greedy import (
        evaluate,
        load_evaluation_policy,
        turn_distribution,
        write_eval,
    )
    from ..record.outcomes import write_outcomes

    if args.data_dir is not None:
        args.overrides = [*args.overrides, f"data.local_dir={args.data_dir}"]
    datasets = comma_list(args.datasets, "--datasets")
    if datasets:  # checked as the profile's own datasets are (TinyWorld's names, plain names)
        args.overrides = [*args.overrides, f"eval.datasets=[{','.join(datasets)}]"]
    cfg = load_profile_args(args)
    check_engine(cfg)  # before a warm start is trained or an engine started
    check_datasets(cfg, training=False, evaluated=datasets)  # found before the policy loads
    checkpoint = model_folder(args.checkpoint) if args.checkpoint is not None else cfg.policy.model
    provenance: dict[str, Any] = {}
    if checkpoint is None:
        # lazy: the stage pulls torch, transformers; `at2po evaluate --help` stays instant
        from ..warmstart.cache import warmstart_summary
        from ..warmstart.sft import ensure_warmstart

        checkpoint = str(ensure_warmstart(cfg))
        provenance["warmstart"] = warmstart_summary(cfg.name)
    label = args.label or Path(str(checkpoint)).name
    seed = args.seed if args.seed is not None else cfg.sft.seed

    # one policy for every batch and the sampled metric; on vLLM one engine from the checkpoint
    model, tokenizer = load_evaluation_policy(cfg, checkpoint)
    retriever = build_retriever(cfg)
    summary, details = evaluate(
        cfg,
        model,
        tokenizer,
        retriever,
        datasets,
        args.max_questions,
        label=label,
        seed=seed,
        return_details=True,
    )
    out = Path(args.out) if args.out else results_dir(cfg.name) / f"eval_{label}.csv"
    write_eval(
        summary,
        out,
        cfg.name,
        seed,
        cfg,
        checkpoint=recorded_paths_in(str(checkpoint)),
        turn_distribution=turn_distribution(details).to_dict("records"),
        **provenance,
    )
    outcomes = write_outcomes(details, out.with_name(out.stem + "_outcomes.csv"))
    print(summary.to_string(index=False))
    print(f"wrote {out} and {outcomes} (one row per question)")
    return 0
