"""``at2po dissect``: what each part of AT2PO does on a profile.

    at2po dissect runs --profile tiny                        # credit spread + clip levels from the runs
    at2po dissect expansion --profile tiny --shape toy --prompts 600 --resamples 8
    at2po dissect expansion --profile tiny --shape paper --policy PATH --name trained
    at2po dissect oracle-summary --profile tiny              # summaries again from the records

``runs`` reads the runs' saved trees and metrics (seconds) and writes
``results/<profile>/dissection/credit_spread.csv`` (the fitted rule mean |w − 1/n| ≈ c·range/n
per estimate and stage) and ``clip_levels.csv`` (per run). ``expansion`` grows chains with a
policy (default: the warm start), re-samples every candidate turn ``--resamples`` times and
writes per-candidate rows to ``expansion_oracle_<name>_<shape>.csv`` (resumable: each chunk is
kept whole as it finishes, and a rerun with the same arguments continues; other arguments are
refused, naming the record's: :mod:`at2po_lib.util.resumable`), then its summary
``..._summary.csv``. ``oracle-summary`` writes every summary again from the per-candidate records
already there (no policy, no re-sampling): after a change of the summaries' code. Every CSV has
its ``.meta.json``.
"""

from __future__ import annotations

import argparse

from ..util.paths import recorded_path, results_dir
from ..util.provenance import read_meta, run_metadata, write_csv_tables
from .options import (
    CommandParser,
    MAX_PROMPTS,
    add_profile_options,
    add_warm_start_sample_options,
    bounded_int,
    comma_list,
    invocation,
    load_profile_args,
    quiet_openmp,
    record_name,
    run_guarded,
)

PROG = "at2po dissect"
MAX_RESAMPLES = 4096
"""Re-samples per candidate: each is a rollout to a leaf, all of a chunk batched at once."""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="What each part of AT2PO does: "
        "credit weights and clip levels from the runs' records, "
        "and the expansion oracle (per-candidate flip rates).",
    )
    parser.add_argument("what", choices=("runs", "expansion", "oracle-summary"))
    add_profile_options(parser, example="rollout.temperature=1.0")
    add_warm_start_sample_options(parser, "prompt draw and sampling seed")
    parser.add_argument(
        "--shape",
        choices=("toy", "paper"),
        default="toy",
        help="first-round tree shape: toy M=4, K=4; paper M=10, K=6",
    )
    parser.add_argument(
        "--resamples",
        type=bounded_int(2, MAX_RESAMPLES),
        default=8,
        help="re-samples per candidate",
    )
    parser.add_argument(
        "--chunk",
        type=bounded_int(1, MAX_PROMPTS),
        default=None,
        help="prompts per rollout batch "
        "(default 10; part of the record's key: a rerun resumes only with the "
        "same --chunk)",
    )
    parser.add_argument(
        "--name",
        default="warmstart",
        type=record_name,
        help="the policy's name in the output file (default warmstart)",
    )
    parser.add_argument(
        "--methods",
        default="at2po,at2po_exact,grpo,grpo_tree_budget",
        help="run folders read by `runs` (comma-separated)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args, argv))


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    cfg = load_profile_args(args)
    out = results_dir(cfg.name, "dissection")
    out.mkdir(parents=True, exist_ok=True)
    command = invocation(PROG, argv)
    if args.what == "runs":
        # lazy: the stage pulls pandas, torch; `at2po dissect --help` stays instant
        from ..analysis.dissection import clip_levels, credit_from_runs
        from ..record.reading import finished_run_folders

        # the runs `at2po report` reads, checked as it checks them (seed<N> folders only)
        roots = finished_run_folders(cfg.name, comma_list(args.methods, "--methods"))
        _, fits = credit_from_runs(roots)
        clips = clip_levels(roots)
        meta = run_metadata(
            cfg.name, None, command=command, runs=[f"{p.parent.name}/{p.name}" for p in roots]
        )
        paths = write_csv_tables(out, {"credit_spread.csv": fits, "clip_levels.csv": clips}, meta)
        print(fits.round(4).to_string(index=False))
        print(clips.round(4).to_string(index=False))
    elif args.what == "oracle-summary":
        # lazy: the stage pulls pandas, scipy, torch; `at2po dissect --help` stays instant
        from ..analysis.expansion_oracle import summarise_records

        paths = {}
        for raw, summary in summarise_records(out).items():
            # the measurement's provenance, and who summarised it again
            meta = {
                **read_meta(raw),
                "summary_command": command,
                "summary_git_revision": run_metadata(cfg.name)["git_revision"],
            }
            paths |= write_csv_tables(
                out, {raw.name.replace(".csv", "_summary.csv"): summary}, meta
            )
    else:
        # lazy: the stage pulls pandas, scipy, torch; `at2po dissect --help` stays instant
        from ..analysis.expansion_oracle import DEFAULT_CHUNK, SHAPES, oracle_summary, run_oracle
        from ..analysis.study_trees import policy_folder, study_rows

        chunk = DEFAULT_CHUNK if args.chunk is None else args.chunk
        chains, k = SHAPES[args.shape]
        datasets = comma_list(args.datasets, "--datasets") or list(cfg.train.train_datasets)
        rows = study_rows(cfg.name, datasets, args.prompts, args.seed)
        policy = policy_folder(cfg.name, args.policy)
        raw = out / f"expansion_oracle_{args.name}_{args.shape}.csv"
        meta = run_metadata(
            cfg.name,
            args.seed,
            config=cfg.rollout,
            command=command,
            policy=recorded_path(policy),
            datasets=datasets,
            prompts=args.prompts,
            shape={"chains": chains, "k": k},
            resamples=args.resamples,
        )
        frame = run_oracle(
            cfg,
            rows,
            policy,
            raw,
            chains=chains,
            resamples=args.resamples,
            seed=args.seed,
            chunk=chunk,
            meta=meta,
        )
        summary = oracle_summary(frame, k, seed=args.seed)
        # the summary's meta is its rows' (run_oracle refused a record of other arguments)
        key = read_meta(raw).get("record_key")
        meta = {**meta, **({"record_key": key} if key else {})}
        paths = write_csv_tables(out, {raw.name.replace(".csv", "_summary.csv"): summary}, meta)
        print(summary.round(3).to_string(index=False))
    for path in paths.values():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
