"""Speed of the turn-level loss against a per-row loop in the authors' style and against the
token-level loss, and of batched credit assignment.

    python benchmarks/bench_losses.py                 # paper-sized batch, about 30 s
    python benchmarks/bench_losses.py --threads 2 --clock wall   # wall time on 2 threads
    python benchmarks/bench_losses.py --loss-threads  # the loss on 1 and on 2 threads, only

1. Policy loss, forward + backward, on ``rows`` x ``tokens`` (default 176 x 2,048: 8 prompts x
   22 leaves, one PPO mini-batch of the paper) with ``turns`` model turns per row separated by
   observation tokens. The log-probs come from a realistic leaf: logits (rows, tokens, vocab)
   → log_softmax → gather of the sampled ids, so the timing includes the part every level
   shares (a real model adds far more shared work: the ratio here is an upper bound). The
   loss-only ratio (log-probs as the leaf tensor) is printed too.
2. Credit assignment for ``trees`` AT2PO-shaped random trees with 22 leaves each: node values
   and advantages of the whole forest, then per-token advantages of every leaf row.
3. The turn-level loss as the trainer runs it (``policy_loss`` forward + backward, log-probs as
   the leaf, then ``loss_diagnostics``) against :func:`authors_turn_loss`, the same loss written
   as the authors' code is organised: a Python loop over rows, and inside it over turns, for the
   turn ratios and the ``turn_kl_entropy`` diagnostic (written here from docs/method.md §7; the
   rest vectorised as verl does). Both on the same inputs, interleaved; their loss, gradient and
   diagnostics are checked equal before timing.
4. ``--loss-threads`` (instead of 1-3): (3)'s loss on one and on two torch threads, alternating,
   at the paper's batch and at a tiny update's (16 rows x 768 tokens, 4 turns a row): best and
   median wall time of each, and the load average. On a busy machine two threads collapse (each
   small operation waits for the other core); the trainer runs the loss on one
   (``at2po_lib.trainer.trainer.LOSS_THREADS``).

Timings are the best (minimum) of ``repeats`` interleaved runs in one process: on a machine
shared with other jobs the minimum is the least disturbed estimate (as ``timeit`` advises).
Both wall time and process CPU time are printed; the ratios use ``--clock`` (default ``cpu``:
CPU time counts the work done and barely moves when other jobs compete for the cores, while
wall time on a busy 2-core machine varied 10x between runs). The last line is the turn/token
speed-up of (3): the authors'-style loop's time over the trainer's loss's.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
import torch

from at2po_lib.method.credit import (
    batch_token_advantages,
    forest_node_advantages,
    forest_node_values,
)
from at2po_lib.method.examples import random_tree, synthetic_turn_rows
from at2po_lib.method.loss import (
    ATPO_LOSS,
    EPS_HIGH,
    EPS_LOW,
    LossBatch,
    LossOptions,
    loss_diagnostics,
    policy_loss,
)
from at2po_lib.method.tree import Forest


def trainer_loss(logp, old_logp, advantages, mask, options: LossOptions = ATPO_LOSS):
    """The loss and the logged statistics as the trainer computes them: ``policy_loss`` and,
    beside it, ``loss_diagnostics`` of the same inputs."""
    batch = LossBatch(logp, old_logp, advantages, mask)
    return policy_loss(batch, options), loss_diagnostics(batch, options)


def multi_turn_mask(rows: int, tokens: int, turns: int, generator: torch.Generator) -> torch.Tensor:
    """(rows, tokens) mask: ``turns`` model runs per row, observations between, then padding."""
    mask = torch.zeros(rows, tokens, dtype=torch.long)
    budget = int(tokens * 0.9)  # leave some padding
    for r in range(rows):
        weights = torch.rand(2 * turns, generator=generator) + 0.5
        lengths = (weights / weights.sum() * budget).long()
        pos = 0
        for k in range(turns):
            mask[r, pos : pos + int(lengths[2 * k])] = 1
            pos += int(lengths[2 * k]) + int(lengths[2 * k + 1])
    return mask


def authors_turn_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
) -> tuple[torch.Tensor, dict[str, float]]:
    """ATPO's turn-level loss (geometric turn ratio, seq-mean-token-mean) with per-row, per-turn
    Python loops, as the authors' code computes turn ratios and ``turn_kl_entropy``: the
    reference the vectorised :func:`at2po_lib.method.loss.policy_loss` is timed
    against.
    ``logp``/``old_logp``/``mask`` (B, T), ``advantages`` (B,)."""
    m = mask.to(logp.dtype)  # (B, T)
    log_ratio = (logp - old_logp) * m  # (B, T)
    log_s = torch.zeros_like(logp)  # (B, T) per-token turn log-ratio
    kl_entropy, single_turn_rows = [], 0
    with torch.no_grad():
        for b in range(logp.shape[0]):
            positions = torch.nonzero(mask[b]).flatten()
            cuts = (torch.nonzero(positions[1:] - positions[:-1] > 1).flatten() + 1).tolist()
            turn_sums = []
            for turn in torch.tensor_split(positions, cuts) if positions.numel() else []:
                total = log_ratio[b, turn].sum()
                log_s[b, turn] = total / turn.numel()
                turn_sums.append(total)
            if len(turn_sums) <= 1:
                single_turn_rows += 1
                kl_entropy.append(0.0)
                continue
            sums = torch.stack(turn_sums)
            if sums.sum() == 0:
                kl_entropy.append(0.0)
                continue
            p = torch.softmax(sums / sums.sum(), dim=0)
            kl_entropy.append(float(-(p * torch.log(p + 1e-10)).sum() / math.log(len(turn_sums))))
    ratio = torch.exp((logp - logp.detach() + log_s).clamp(max=10.0))  # (B, T)
    adv = advantages[:, None]  # (B, 1)
    unclipped, clipped = -adv * ratio, -adv * ratio.clamp(1 - eps_low, 1 + eps_high)
    per_token = torch.maximum(unclipped, clipped)  # (B, T)
    tokens = m.sum(1)  # (B,)
    has_tokens = tokens > 0
    per_row = (per_token * m).sum(1) / tokens.clamp(min=1)
    loss = (per_row * has_tokens).sum() / has_tokens.sum().clamp(min=1)
    with torch.no_grad():
        binds = ((clipped > unclipped) & mask.bool()).to(m.dtype)
        metrics = {
            "clip_frac": float((binds.sum() / m.sum()).item()),
            "turn_kl_entropy": sum(kl_entropy) / len(kl_entropy),
            "single_turn_rows": single_turn_rows,
        }
    return loss, metrics


def compare_with_authors_loop(args: argparse.Namespace, data: dict) -> float:
    """Time (3); returns the speed-up of :func:`trainer_loss` over :func:`authors_turn_loss`."""
    # a policy that moved: turn ratios != 1, some tokens clipped
    g = torch.Generator().manual_seed(1)
    old = data["logp"] + 2e-3 * torch.randn(data["logp"].shape, generator=g)

    def run(fn):
        def once():
            logp = data["logp"].detach().requires_grad_(True)
            start, start_cpu = time.perf_counter(), time.process_time()
            loss, metrics = fn(logp)
            loss.backward()
            return (
                time.perf_counter() - start,
                time.process_time() - start_cpu,
                loss.item(),
                logp.grad,
                metrics,
            )

        return once

    ours = run(lambda x: trainer_loss(x, old, data["advantages"], data["mask"]))
    authors = run(lambda x: authors_turn_loss(x, old, data["advantages"], data["mask"]))
    a, b = ours(), authors()
    grad_diff = float((a[3] - b[3]).abs().max())
    metric_diff = max(abs(a[4][k] - b[4][k]) for k in b[4])
    print(
        f"turn-level loss vs the authors'-style loop: |loss diff| {abs(a[2] - b[2]):.1e}, "
        f"max |grad diff| {grad_diff:.1e}, max |diagnostic diff| {metric_diff:.1e}"
    )
    assert abs(a[2] - b[2]) < 1e-5 and grad_diff < 1e-6 and metric_diff < 1e-4
    times: dict[str, list[tuple[float, float]]] = {"ours": [], "authors": []}
    for _ in range(args.repeats):
        for name, fn in (("ours", ours), ("authors", authors)):
            wall, cpu, *_ = fn()
            times[name].append((wall, cpu))
    wall = {k: min(w for w, _ in x) for k, x in times.items()}
    cpu = {k: min(c for _, c in x) for k, x in times.items()}
    print(
        f"  wall: policy_loss + loss_diagnostics {wall['ours'] * 1e3:.1f} ms, authors' loop "
        f"{wall['authors'] * 1e3:.1f} ms, speed-up {wall['authors'] / wall['ours']:.2f}\n"
        f"  cpu:  policy_loss + loss_diagnostics {cpu['ours'] * 1e3:.1f} ms, authors' loop "
        f"{cpu['authors'] * 1e3:.1f} ms, speed-up {cpu['authors'] / cpu['ours']:.2f}"
    )
    clock = cpu if args.clock == "cpu" else wall
    return clock["authors"] / clock["ours"]


def time_loss(level: str, logits_leaf: bool, data: dict, vocab: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one forward + backward."""
    options = LossOptions(level=level)
    start, start_cpu = time.perf_counter(), time.process_time()
    if logits_leaf:
        logits = data["logits"].detach().requires_grad_(True)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, data["ids"][..., None]).squeeze(-1)
    else:
        logits = logp = data["logp"].detach().requires_grad_(True)
    loss, _ = trainer_loss(logp, data["old_logp"], data["advantages"], data["mask"], options)
    loss.backward()
    assert logits.grad is not None
    return time.perf_counter() - start, time.process_time() - start_cpu


def bench_data(args: argparse.Namespace) -> dict:
    g = torch.Generator().manual_seed(0)
    b, t, v = args.rows, args.tokens, args.vocab
    logits = torch.randn(b, t, v, generator=g)
    ids = torch.randint(0, v, (b, t), generator=g)
    with torch.no_grad():
        logp = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    data = {
        "logits": logits,
        "ids": ids,
        "logp": logp,
        "old_logp": logp + 3e-3 * torch.randn(b, t, generator=g),
        "advantages": torch.randn(b, generator=g),
        "mask": multi_turn_mask(b, t, args.turns, g),
    }
    return data


def bench_loss(args: argparse.Namespace, data: dict) -> tuple[float, float]:
    b, t, v = args.rows, args.tokens, args.vocab
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
        print(
            f"policy loss fwd+bwd, {b} rows x {t} tokens, {args.turns} turns/row, "
            f"leaf = {leaf}:\n"
            f"  wall: token {wall['token'] * 1e3:.1f} ms, turn {wall['turn'] * 1e3:.1f} ms, "
            f"ratio {wall['turn'] / wall['token']:.2f}\n"
            f"  cpu:  token {cpu['token'] * 1e3:.1f} ms, turn {cpu['turn'] * 1e3:.1f} ms, "
            f"ratio {cpu['turn'] / cpu['token']:.2f}"
        )
        clock = cpu if args.clock == "cpu" else wall
        ratios[logits_leaf] = clock["turn"] / clock["token"]
    return ratios[False], ratios[True]


def bench_credit(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    trees = [
        random_tree(rng, num_chains=10, num_expansions=12, max_turns=6) for _ in range(args.trees)
    ]
    start = time.perf_counter()
    forest = Forest.from_trees(trees)
    build_ms = (time.perf_counter() - start) * 1e3
    layouts = [
        synthetic_turn_rows(t.parent, model_tokens=rng.integers(20, 80, t.num_nodes), obs_tokens=30)
        for t in trees
    ]
    width = max(int(lay["turn_node"].shape[1]) for lay in layouts)
    turn_node = torch.cat(
        [
            torch.nn.functional.pad(
                lay["turn_node"], (0, width - lay["turn_node"].shape[1]), value=-1
            )
            for lay in layouts
        ]
    )
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
    print(
        f"credit assignment, {args.trees} trees x 22 leaves ({forest.num_nodes} nodes; "
        f"{len(row_tree)} rows x {width} tokens): forest build {build_ms:.1f} ms, "
        + ", ".join(f"{k} {v:.1f} ms" for k, v in results.items())
    )


def bench_loss_threads(args: argparse.Namespace) -> None:
    """(4): the trainer's loss on one and on two threads, alternating, at two batch sizes; and
    on two threads through the trainer's ``loss_and_diagnostics`` (what an update on torch's
    default threads runs: the loss's forward and backward, and its diagnostics, on
    ``LOSS_THREADS``)."""
    from at2po_lib.trainer.trainer import LOSS_THREADS, loss_and_diagnostics  # trl: (4) only

    variants = {"1 thread": 1, "2 threads": 2, f"2 threads, loss on {LOSS_THREADS}": 2}
    for rows, tokens, turns in ((args.rows, args.tokens, args.turns), (16, 768, 4)):
        g = torch.Generator().manual_seed(0)
        mask = multi_turn_mask(rows, tokens, turns, g)
        logp = -torch.rand(rows, tokens, generator=g) * 3
        old = logp + 3e-3 * torch.randn(rows, tokens, generator=g)
        adv = torch.randn(rows, generator=g)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for i in range(len(variants) * (args.repeats + 1)):
            name = list(variants)[i % len(variants)]
            torch.set_num_threads(variants[name])
            x = logp.clone().requires_grad_(True)
            start = time.perf_counter()
            if name.endswith(f"loss on {LOSS_THREADS}"):
                loss, _ = loss_and_diagnostics(LossBatch(x, old, adv, mask))
            else:
                loss, _ = trainer_loss(x, old, adv, mask)
            loss.backward()
            if i >= len(variants):  # the first of each: warm-up
                times[name].append(time.perf_counter() - start)
        load = os.getloadavg()[0]
        print(
            f"loss fwd+bwd + diagnostics, {rows} x {tokens} ({int(mask.sum())} model tokens): "
            + "; ".join(
                f"{k}: best {min(v) * 1e3:.1f} ms, median {sorted(v)[len(v) // 2] * 1e3:.1f} ms"
                for k, v in times.items()
            )
            + f"; load average {load:.1f} on {os.cpu_count()} CPUs"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=176)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--trees", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads; 1 (default) keeps the ratio free of "
        "thread-scheduling noise on a shared machine",
    )
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="clock of the printed ratios: process CPU time (robust on a shared "
        "machine) or wall time",
    )
    parser.add_argument(
        "--loss-threads",
        action="store_true",
        help="only (4): the loss on 1 and on 2 threads, at two batch sizes",
    )
    args = parser.parse_args()
    if args.loss_threads:
        bench_loss_threads(args)
        return
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    bench_credit(args)
    data = bench_data(args)
    loss_only, with_logits = bench_loss(args, data)
    print(f"turn/token time ratio (loss only, {args.clock} clock): {loss_only:.2f}")
    print(f"turn/token time ratio (logits leaf, {args.clock} clock): {with_logits:.2f}")
    speedup = compare_with_authors_loop(args, data)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    print(
        f"turn-level loss speed-up over the authors'-style per-row loop "
        f"({args.clock} clock): {speedup:.2f}"
    )


if __name__ == "__main__":
    main()
