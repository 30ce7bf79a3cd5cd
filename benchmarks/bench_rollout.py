"""Tree rollouts against chains at equal leaf count, and what KV-cache reuse saves.

    python benchmarks/bench_rollout.py                      # tiny profile, 8 prompts, ~1-2 min
    python benchmarks/bench_rollout.py --profile smoke --prompts 4
    python benchmarks/bench_rollout.py --policy artifacts/tiny/policy/warmstart_checkpoints/step-00100

One run, one policy, the same prompts, the same number of leaves per prompt (M + L*K):

1. **Generated tokens per leaf**: AT2PO's entropy-guided tree against independent chains.
   A re-sampled turn shares everything before it with its sibling, so a tree generates fewer
   tokens per training row than chains do (docs/method.md §5).
2. **Prefill tokens** (context tokens run through the model) of the entropy tree under three
   cache policies of the HF backend: ``tree`` (the default: the prompt is read once per tree,
   a chain keeps its cache between turns, a branch starts from its ancestor's cache),
   ``chain`` (a chain keeps its own cache, but every chain re-reads the prompt and, for a
   branch, the ancestor's context) and ``none`` (every turn re-reads its whole context).
   Tokens are counted, not timed, so the ratios do not depend on the machine's load.
3. Wall time, process CPU time and trajectories per second (wall) of each run. Wall time
   depends on the machine's load (printed); CPU time much less so.

The policy is the profile's warm start when it is cached (``at2po warmstart``), else a random
tag-biased tiny Qwen3 (:func:`at2po_lib.rollout.stand_ins.tag_biased_policy`), which makes shorter,
shallower trees: say which one you measured. The LAST line holds the tree/chain ratio of
generated tokens per leaf.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from at2po_lib.config.profile import load_profile
from at2po_lib.rollout.agent import STOP_SEQUENCES
from at2po_lib.rollout.backends import make_backend
from at2po_lib.rollout.export import tree_summary
from at2po_lib.rollout.agent import Sampler, SearchEnv
from at2po_lib.rollout.trees import rollout


def load_policy_and_world(profile: str, policy: str):
    """(model, tokenizer, template, retriever, rows, description)."""
    from at2po_lib.policy.model import load_policy
    from at2po_lib.warmstart.cache import cached_warmstart
    from at2po_lib.protocol.prompts import get_template
    from at2po_lib.retrieval.indexes import build_retriever
    from at2po_lib.rollout.stand_ins import ToySetup
    from at2po_lib.tinyworld.build import ensure_world
    from at2po_lib.tinyworld.build import read_rows

    cfg = load_profile(profile)
    if policy not in ("auto", "warmstart", "toy"):  # a checkpoint folder
        model, tokenizer = load_policy(policy)
        rows = read_rows(ensure_world(cfg), "tiny_hotpotqa", "train")
        return (
            model,
            tokenizer,
            get_template(cfg.policy.template),
            build_retriever(cfg),
            rows,
            f"checkpoint {policy}",
        )
    cached = cached_warmstart(cfg) if policy in ("auto", "warmstart") else None
    if policy == "warmstart" and cached is None:
        raise SystemExit(
            f"no cached warm start for profile {profile!r}: run `at2po warmstart "
            f"--profile {profile}` or pass --policy toy"
        )
    if cached is not None:
        model, tokenizer = load_policy(cached)
        world = ensure_world(cfg)
        rows = read_rows(world, "tiny_hotpotqa", "train")
        return (
            model,
            tokenizer,
            get_template(cfg.policy.template),
            build_retriever(cfg),
            rows,
            f"warm start {cached}",
        )
    toy = ToySetup(profile, vocab_size=cfg.policy.vocab_size, policy_cfg=cfg.policy)
    return (
        toy.model,
        toy.tokenizer,
        toy.template,
        toy.retriever,
        toy.rows,
        "random tag-biased tiny Qwen3 (no warm start cached)",
    )


def run(
    args, model, tokenizer, template, retriever, questions, golden, cfg, expansion: str, cache: str
) -> tuple[dict, float, object, float]:
    backend = make_backend(
        model,
        tokenizer,
        cfg,
        STOP_SEQUENCES,
        seed=args.seed,
        keep_cache=cache != "none",
        num_threads=args.threads,
    )
    leaves = cfg.leaves_per_prompt("entropy")
    start, start_cpu = time.perf_counter(), time.process_time()
    trees = rollout(
        Sampler(SearchEnv(tokenizer, template, retriever, cfg), backend, args.seed),
        questions,
        golden,
        expansion=expansion,
        num_leaves=leaves,
        share_prefixes=cache == "tree",
    )
    seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return tree_summary(trees), seconds, backend.stats, cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads while rolling out (1: fastest for the tiny model "
        "on shared cores; 0: torch's default)",
    )
    parser.add_argument(
        "--policy",
        default="auto",
        help="auto (warm start if cached, else toy), warmstart, toy, or a checkpoint folder",
    )
    args = parser.parse_args(argv)

    model, tokenizer, template, retriever, rows, described = load_policy_and_world(
        args.profile, args.policy
    )
    cfg = load_profile(args.profile).rollout
    questions = [r["question"] for r in rows[: args.prompts]]
    golden = [list(r["golden_answers"]) for r in rows[: args.prompts]]
    leaves = cfg.leaves_per_prompt("entropy")
    print(
        f"profile {args.profile}: {len(questions)} prompts x {leaves} leaves "
        f"(M={cfg.tree_m}, L={cfg.tree_l}, K={cfg.tree_k}), temperature {cfg.temperature}"
    )
    print(
        f"policy: {described}; torch threads {args.threads or torch.get_num_threads()}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )

    # warm-up (first forward pays one-off costs)
    run(
        args, model, tokenizer, template, retriever, questions[:1], golden[:1], cfg, "chain", "tree"
    )
    results = {}
    for name, expansion, cache in (
        ("entropy tree", "entropy", "tree"),
        ("chains", "chain", "tree"),
        ("entropy tree, chain-only cache", "entropy", "chain"),
        ("entropy tree, no cache", "entropy", "none"),
    ):
        results[name] = run(
            args, model, tokenizer, template, retriever, questions, golden, cfg, expansion, cache
        )

    print(
        f"\n{'run':32s} {'gen tok/leaf':>12s} {'prefill tok':>12s} {'decode tok':>11s} "
        f"{'wall s':>7s} {'cpu s':>6s} {'traj/s':>7s} {'reward':>7s}"
    )
    for name, (summary, seconds, stats, cpu) in results.items():
        n_leaves = summary["leaves_per_tree"] * summary["trees"]
        print(
            f"{name:32s} {summary['generated_tokens_per_leaf']:12.1f} {stats.prefill_tokens:12d} "
            f"{stats.decode_tokens:11d} {seconds:7.2f} {cpu:6.2f} {n_leaves / seconds:7.1f} "
            f"{summary['mean_reward']:7.3f}"
        )
    tree = results["entropy tree"][2].prefill_tokens
    print(
        f"\nprefill tokens, entropy tree: tree cache {tree}, chain-only cache "
        f"{results['entropy tree, chain-only cache'][2].prefill_tokens} "
        f"({results['entropy tree, chain-only cache'][2].prefill_tokens / tree:.2f}x), "
        f"no cache {results['entropy tree, no cache'][2].prefill_tokens} "
        f"({results['entropy tree, no cache'][2].prefill_tokens / tree:.2f}x)"
    )
    ratio = (
        results["entropy tree"][0]["generated_tokens_per_leaf"]
        / results["chains"][0]["generated_tokens_per_leaf"]
    )
    print(f"tree/chain generated tokens per leaf: {ratio:.3f}")


if __name__ == "__main__":
    main()
