"""The HF rollout on the tiny profile against its floor, the path before issue #62 beside the new one.

    python benchmarks/bench_rollout_floor.py                  # ~2-4 min on one busy core
    python benchmarks/bench_rollout_floor.py --repeats 3 --questions 100

Three workloads on the shipped warm start (``results/tiny/warmstart``), one thread:

- ``at2po``: one AT2PO step's rollout, ``--prompts`` training prompts, entropy trees
  (M, L, K of ``configs/tiny.yaml``: 4, 1, 4);
- ``grpo``: one GRPO step's rollout, the same prompts, ``rollout.chains`` (6) chains each;
- ``sampled``: the final evaluation's sampled metric on ``--questions`` test questions
  (``eval.sampled_k`` samples each, ``eval.batch_size`` rows a batch, a seed per batch: the
  loop of ``at2po_lib.evaluation.greedy.sampled_em``).

Each runs on the ``old`` backend (one padded prefill batch, every prompt copy prefilled, the
model's own forward: ``lean=False, packed_prefill=False, fused_prefill=False``) and the ``new`` one (the defaults),
alternating, ``--repeats`` times; the best CPU time of each is kept (CPU time: the machine is
shared; wall time is printed beside it). Tokens/s is sampled tokens per CPU second. The floor is
the FLOPs of the real tokens (``at2po_lib.rollout.flops.rollout_flops``: tokens run, causal
query-key pairs, one logits row per sampled token; counted on the new path, which runs a
repeated prompt once) at this machine's one-thread fp32
``torch.matmul`` rate, measured in the same run (``matmul_rate``, a 2048x128 @ 128x512 product).
Both paths must give the same tokens (checked; the run stops otherwise). The LAST line holds
the new path's ratio to the floor for each workload.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from at2po_lib.config.profile import load_profile  # noqa: E402
from at2po_lib.evaluation.greedy import load_eval_rows  # noqa: E402
from at2po_lib.policy.model import load_policy  # noqa: E402
from at2po_lib.protocol.prompts import get_template  # noqa: E402
from at2po_lib.retrieval.indexes import build_retriever  # noqa: E402
from at2po_lib.rollout.agent import Sampler, SearchEnv, turn_stops  # noqa: E402
from at2po_lib.rollout.backends import make_backend  # noqa: E402
from at2po_lib.rollout.flops import matmul_rate, rollout_flops  # noqa: E402
from at2po_lib.rollout.trees import rollout, rollout_chains  # noqa: E402
from at2po_lib.rollout.turns import BackendStats  # noqa: E402
from at2po_lib.tinyworld.build import ensure_world, read_rows  # noqa: E402

PATHS = {
    "old": dict(lean=False, packed_prefill=False, fused_prefill=False),
    "new": dict(lean=True, packed_prefill=True, fused_prefill=True),
}
"""The backend options of each path (``HFBackend``'s keyword arguments)."""
WARM_START = ROOT / "results" / "tiny" / "warmstart"


@dataclass
class Setup:
    cfg: object
    model: object
    tokenizer: object
    template: object
    retriever: object
    train_rows: list
    test_rows: list


@dataclass
class Measured:
    cpu: float
    wall: float
    stats: BackendStats
    tokens: list


def load_setup(args) -> Setup:
    cfg = load_profile("tiny")
    model, tokenizer = load_policy(WARM_START)
    world = ensure_world(cfg)
    per_set = -(-args.prompts // len(cfg.train.train_datasets))
    train_rows = [
        row
        for name in cfg.train.train_datasets
        for row in read_rows(world, name, "train")[:per_set]
    ][: args.prompts]
    return Setup(
        cfg,
        model.eval(),
        tokenizer,
        get_template(cfg.policy.template),
        build_retriever(cfg),
        train_rows,
        load_eval_rows(cfg, "tiny_hotpotqa", args.questions),
    )


def backend_for(setup: Setup, path: str, seed: int, greedy: bool = False):
    return make_backend(
        setup.model,
        setup.tokenizer,
        setup.cfg.rollout,
        turn_stops(setup.template),
        seed=seed,
        greedy=greedy,
        **PATHS[path],
    )


def environment(setup: Setup) -> SearchEnv:
    """The search environment of ``setup`` (its profile's rollout limits)."""
    return SearchEnv(setup.tokenizer, setup.template, setup.retriever, setup.cfg.rollout)


def tree_step(setup: Setup, path: str, expansion: str) -> tuple[BackendStats, list]:
    """One training step's rollout (``entropy``: AT2PO; ``chain``: GRPO's chains)."""
    backend = backend_for(setup, path, seed=0)
    chains = setup.cfg.rollout.chains if expansion == "chain" else None
    trees = rollout(
        Sampler(environment(setup), backend, 0),
        [r["question"] for r in setup.train_rows],
        [list(r["golden_answers"]) for r in setup.train_rows],
        expansion=expansion,
        num_leaves=chains,
    )
    return backend.stats, [n.token_ids for t in trees for n in t.nodes]


def sampled_metric(setup: Setup, path: str) -> tuple[BackendStats, list]:
    """The sampled metric's rollouts (``sampled_em``'s batches and seeds)."""
    k, batch = setup.cfg.eval.sampled_k, setup.cfg.eval.batch_size
    questions = [row["question"] for row in setup.test_rows for _ in range(k)]
    total, tokens = BackendStats(), []
    for start in range(0, len(questions), batch):
        backend = backend_for(setup, path, seed=start)
        sampler = Sampler(environment(setup), backend, start)
        trajectories = rollout_chains(sampler, questions[start : start + batch])
        tokens += [t.completion_ids for t in trajectories]
        for name in total.__dataclass_fields__:
            setattr(total, name, getattr(total, name) + getattr(backend.stats, name))
    return total, tokens


def measure(run: Callable[[], tuple[BackendStats, list]]) -> Measured:
    cpu, wall = time.process_time(), time.perf_counter()
    stats, tokens = run()
    return Measured(time.process_time() - cpu, time.perf_counter() - wall, stats, tokens)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    setup = load_setup(args)
    workloads = {
        "at2po": lambda path: tree_step(setup, path, "entropy"),
        "grpo": lambda path: tree_step(setup, path, "chain"),
        "sampled": lambda path: sampled_metric(setup, path),
    }
    rollout = setup.cfg.rollout
    print(
        f"tiny profile, warm start {WARM_START.relative_to(ROOT)}: at2po {args.prompts} prompts "
        f"(M={rollout.tree_m}, L={rollout.tree_l}, K={rollout.tree_k}); grpo {args.prompts} x "
        f"{rollout.chains} chains; sampled {args.questions} questions x {setup.cfg.eval.sampled_k}"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, torch threads 1")
    for run in workloads.values():  # warm-up: first calls pay one-off costs
        run("new")
    best: dict[tuple[str, str], Measured] = {}
    rates = []
    for _ in range(args.repeats):
        rates.append(matmul_rate())
        for name, run in workloads.items():
            for path in PATHS:
                got = measure(lambda: run(path))
                if (name, path) not in best or got.cpu < best[(name, path)].cpu:
                    best[(name, path)] = got
    rate = max(rates)
    print(f"fp32 matmul rate (one thread, best of {len(rates)}): {rate / 1e9:.1f} GFLOP/s")
    print(
        f"\n{'workload':9s} {'path':4s} {'cpu s':>7s} {'wall s':>7s} {'tok/s':>7s} "
        f"{'prefill':>8s} {'decode':>7s} {'calls':>6s} {'GFLOP':>6s} {'floor s':>8s} {'x floor':>8s}"
    )
    ratios = {}
    for name in workloads:
        old_tokens = best[(name, "old")].tokens
        if best[(name, "new")].tokens != old_tokens:
            raise SystemExit(f"{name}: the new path sampled other tokens than the old one")
        # the floor counts each real token once: the new path's count (the old one runs the
        # sampled metric's k copies of a prompt k times)
        flops = rollout_flops(setup.model.config, best[(name, "new")].stats)
        floor = flops / rate
        for path in PATHS:
            got = best[(name, path)]
            ratios[(name, path)] = got.cpu / floor
            print(
                f"{name:9s} {path:4s} {got.cpu:7.2f} {got.wall:7.2f} "
                f"{got.stats.generated_tokens / got.cpu:7.0f} {got.stats.prefill_tokens:8d} "
                f"{got.stats.decode_tokens:7d} {got.stats.forward_calls:6d} {flops / 1e9:6.1f} "
                f"{floor:8.3f} {got.cpu / floor:8.2f}"
            )
        print(f"{'':9s} old/new CPU time {best[(name, 'old')].cpu / best[(name, 'new')].cpu:.2f}x")
    print("same tokens on both paths: yes (all workloads)")
    print(
        "new path / floor: "
        + ", ".join(f"{name} {ratios[(name, 'new')]:.2f}x" for name in workloads)
    )


if __name__ == "__main__":
    main()
