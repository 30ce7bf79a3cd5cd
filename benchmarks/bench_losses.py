"""Speed of the turn-level loss against the token-level one, and of batched credit assignment.

    python benchmarks/bench_losses.py                 # paper-sized batch, about 20 s
    python benchmarks/bench_losses.py --threads 2 --clock wall   # wall time on 2 threads

1. Policy loss, forward + backward, on ``rows`` x ``tokens`` (default 176 x 2,048: 8 prompts x
   22 leaves, one PPO mini-batch of the paper) with ``turns`` model turns per row separated by
   observation tokens. The log-probs come from a realistic leaf: logits (rows, tokens, vocab)
   → log_softmax → gather of the sampled ids, so the timing includes the part every level
   shares (a real model adds far more shared work: the ratio here is an upper bound). The
   loss-only ratio (log-probs as the leaf tensor) is printed too.
2. Credit assignment for ``trees`` AT2PO-shaped random trees with 22 leaves each: node values
   and advantages of the whole forest, then per-token advantages of every leaf row.

Timings are the best (minimum) of ``repeats`` interleaved runs in one process: on a machine
shared with other jobs the minimum is the least disturbed estimate (as ``timeit`` advises).
Both wall time and process CPU time are printed; the ratios use ``--clock`` (default ``cpu``:
CPU time counts the work done and barely moves when other jobs compete for the cores, while
wall time on a busy 2-core machine varied 10x between runs). The last line is the turn/token
time ratio of (1) with the logits leaf.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from at2po_lib.credit import (
    Forest,
    batch_token_advantages,
    forest_node_advantages,
    forest_node_values,
    random_tree,
    synthetic_turn_rows,
)
from at2po_lib.losses import policy_loss


def multi_turn_mask(rows: int, tokens: int, turns: int, generator: torch.Generator) -> torch.Tensor:
    """(rows, tokens) mask: ``turns`` model runs per row, observations between, then padding."""
    mask = torch.zeros(rows, tokens, dtype=torch.long)
    budget = int(tokens * 0.9)  # leave some padding
    for r in range(rows):
        weights = torch.rand(2 * turns, generator=generator) + 0.5
        lengths = (weights / weights.sum() * budget).long()
        pos = 0
        for k in range(turns):
            mask[r, pos: pos + int(lengths[2 * k])] = 1
            pos += int(lengths[2 * k]) + int(lengths[2 * k + 1])
    return mask


def time_loss(level: str, logits_leaf: bool, data: dict, vocab: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one forward + backward."""
    start, start_cpu = time.perf_counter(), time.process_time()
    if logits_leaf:
        logits = data["logits"].detach().requires_grad_(True)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, data["ids"][..., None]).squeeze(-1)
    else:
        logits = logp = data["logp"].detach().requires_grad_(True)
    loss, _ = policy_loss(logp, data["old_logp"], data["advantages"], data["mask"], level=level)
    loss.backward()
    assert logits.grad is not None
    return time.perf_counter() - start, time.process_time() - start_cpu


def bench_loss(args: argparse.Namespace) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    b, t, v = args.rows, args.tokens, args.vocab
    logits = torch.randn(b, t, v, generator=g)
    ids = torch.randint(0, v, (b, t), generator=g)
    with torch.no_grad():
        logp = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    data = {
        "logits": logits, "ids": ids, "logp": logp,
        "old_logp": logp + 3e-3 * torch.randn(b, t, generator=g),
        "advantages": torch.randn(b, generator=g),
        "mask": multi_turn_mask(b, t, args.turns, g),
    }
    ratios = {}
    for logits_leaf in (False, True):
        times: dict[str, list[tuple[float, float]]] = {"token": [], "turn": []}
        for level in times:  # warm-up
            time_loss(level, logits_leaf, data, v)
        for _ in range(args.repeats):
            for level in times:
                times[level].append(time_loss(level, logits_leaf, data, v))
        wall = {k: min(w for w, _ in x) for k, x in times.items()}
        cpu = {k: min(c for _, c in x) for k, x in times.items()}
        leaf = f"logits (vocab {v}) -> log_softmax -> gather" if logits_leaf else "log-probs only"
        print(f"policy loss fwd+bwd, {b} rows x {t} tokens, {args.turns} turns/row, "
              f"leaf = {leaf}:\n"
              f"  wall: token {wall['token'] * 1e3:.1f} ms, turn {wall['turn'] * 1e3:.1f} ms, "
              f"ratio {wall['turn'] / wall['token']:.2f}\n"
              f"  cpu:  token {cpu['token'] * 1e3:.1f} ms, turn {cpu['turn'] * 1e3:.1f} ms, "
              f"ratio {cpu['turn'] / cpu['token']:.2f}")
        clock = cpu if args.clock == "cpu" else wall
        ratios[logits_leaf] = clock["turn"] / clock["token"]
    return ratios[False], ratios[True]


def bench_credit(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    trees = [random_tree(rng, num_chains=10, num_expansions=12, max_turns=6)
             for _ in range(args.trees)]
    start = time.perf_counter()
    forest = Forest.from_trees(trees)
    build_ms = (time.perf_counter() - start) * 1e3
    layouts = [synthetic_turn_rows(t.parent, model_tokens=rng.integers(20, 80, t.num_nodes),
                                   obs_tokens=30) for t in trees]
    width = max(int(lay["turn_node"].shape[1]) for lay in layouts)
    turn_node = torch.cat([torch.nn.functional.pad(lay["turn_node"],
                                                   (0, width - lay["turn_node"].shape[1]), value=-1)
                           for lay in layouts])
    row_tree = torch.cat([torch.full((len(lay["leaf"]),), i) for i, lay in enumerate(layouts)])

    def run_nodes() -> None:
        forest_node_advantages(forest, forest_node_values(forest, "entropy_softmax"), "node_value")

    def run_tokens() -> None:
        batch_token_advantages(forest, turn_node, row_tree)

    results = {}
    for name, fn in (("node values + advantages", run_nodes), ("per-token advantages", run_tokens)):
        fn()
        times = []
        for _ in range(args.repeats * 4):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        results[name] = min(times) * 1e3
    print(f"credit assignment, {args.trees} trees x 22 leaves ({forest.num_nodes} nodes; "
          f"{len(row_tree)} rows x {width} tokens): forest build {build_ms:.1f} ms, "
          + ", ".join(f"{k} {v:.1f} ms" for k, v in results.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=176)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--trees", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads; 1 (default) keeps the ratio free of "
                             "thread-scheduling noise on a shared machine")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="clock of the printed ratios: process CPU time (robust on a shared "
                             "machine) or wall time")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    bench_credit(args)
    loss_only, with_logits = bench_loss(args)
    print(f"turn/token time ratio (loss only, {args.clock} clock): {loss_only:.2f}")
    print(f"turn/token time ratio: {with_logits:.2f}")


if __name__ == "__main__":
    main()
