"""One tiny step of AT2PO and of GRPO, each part against this CPU's floor, the old path beside
the new, in one run.

    python benchmarks/bench_tiny_step.py                    # both methods, 2 repeats, ~3 min
    python benchmarks/bench_tiny_step.py --methods grpo --repeats 3
    python benchmarks/bench_tiny_step.py --full-run at2po   # + a 96-step run with its final
                                                            #   evaluation, CPU minutes (~10 min)

A step is one rollout batch of the tiny profile from the committed warm start (16 prompts;
AT2PO 8 leaves each, GRPO 6 chains and its reference model at beta = 1e-3; 8 updates). Parts,
timed in CPU seconds of this process inside the trainer (one torch thread, as the profile
trains; ``OMP_NUM_THREADS=1``):

- ``rollout``: the agent's sampling (prefill, decode, sampling, search calls);
- ``reference``: the scoring around it, GRPO's reference pass (no gradient);
- ``update``: the 8 updates' forward and backward (``training_step`` less the scoring);
- ``step``: the trainer's first to last step, the optimizer included.

Floors: each part's FLOPs (:mod:`at2po_lib.rollout.flops`'s costs of a token, a query-key pair
and a logits row; a backward costs twice its forward) at this machine's fp32 matmul rate,
measured in the same run (CPU seconds). ``update``: three forwards (forward + backward) of every leaf's tokens, as a per-leaf
forward computes them (the issue's definition; sharing a prefix can beat it); ``reference``:
one forward of the same over the whole batch; ``rollout``: one forward of every distinct tree
token (a KV-cached sampler computes each node once) with its attention to its whole context,
and the LM head at every sampled token. Ratios above 1 are time over floor.

Variants, alternating old/new/new/old so load hits both alike, same seed and rollout:
``old`` is the path before issue #62: one padded forward of the rows per update
(``loss_shared_prefix=False``, the profile's ``loss_chunk_rows=0``) and the rollout's decoding
before it (one padded prefill batch, each prompt copy prefilled, the model's own forward:
``HFBackend(lean=False, packed_prefill=False, fused_prefill=False)``); ``new`` the defaults. The loss, gradient
norm and entropy of both are printed (the same maths: they agree to fp32 rounding).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from at2po_lib.policy.shared_prefix import pack_rows  # noqa: E402
from at2po_lib.rollout.flops import TokenCosts, matmul_rate, token_costs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OLD = {"loss_shared_prefix": False}  # and the profile's train.loss_chunk_rows: 0
NEW: dict = {}


def causal_pairs(lengths) -> float:
    """(query, key) pairs of causal attention over rows of these lengths: L(L+1)/2 each."""
    return float(sum(n * (n + 1) / 2 for n in lengths))


def forward_flops(costs: TokenCosts, tokens: float, pairs: float, headed: float) -> float:
    """Forward FLOPs of ``tokens`` positions attending ``pairs`` keys in all, ``headed`` of
    them through the LM head (:mod:`at2po_lib.rollout.flops`)."""
    return tokens * costs.per_token + pairs * costs.per_pair + headed * costs.per_logit_row


def tree_token_counts(batch) -> tuple[int, float, int]:
    """Tokens a sampler that computes every tree node once must compute for a rollout batch:
    each tree's prompt once, each node's turn and the observation after it once (a token is
    keyed by its tree, the last turn node on its row and its column), with the keys each
    attends (its position + 1); and the distinct sampled tokens (each through the LM head)."""
    seen: set[tuple[int, int, int]] = set()
    prompts: dict[int, int] = {}
    pairs, sampled = 0.0, 0
    for r in range(len(batch)):
        tree = batch.row_tree[r]
        prompt = len(batch.prompt_ids[r])
        prompts[tree] = prompt
        owner = -1
        for j, node in enumerate(batch.turn_node[r]):
            owner = node if node >= 0 else owner
            if (tree, owner, j) in seen:
                continue
            seen.add((tree, owner, j))
            pairs += prompt + j + 1
            sampled += int(node >= 0 and batch.sampled_mask[r][j] > 0)
    pairs += causal_pairs(prompts.values())
    return len(seen) + sum(prompts.values()), pairs, sampled


def row_paths(prompt_ids, prompt_mask, completion_ids, positions) -> tuple[list[list[int]], int]:
    """Each row's tokens up to its last position in ``positions`` (B, T), and how many tokens
    ``positions`` marks."""
    paths = []
    t = positions.shape[1]
    for r in range(positions.shape[0]):
        marked = positions[r].nonzero().flatten()
        end = int(marked.max()) + 1 if marked.numel() else 0
        prompt = prompt_ids[r][prompt_mask[r].bool()].tolist()
        paths.append(prompt + completion_ids[r, : min(end, t)].tolist())
    return paths, int(positions.sum())


class PartClock:
    """CPU seconds of a trainer's parts, and the token counts of their floors (module doc)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, float] = defaultdict(float)
        self._wrap(trainer.agent, "sample", "rollout")
        self._wrap(trainer, "_generate_and_score_completions", "scoring", self._count_batch)
        self._wrap(trainer, "training_step", "training_step")
        self._wrap(trainer, "_compute_loss", None, self._count_update, before=True)

    def _wrap(self, owner, name, part, count=None, before=False):
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            if before and count:
                count(args[-1])
            start = time.process_time()
            out = inner(*args, **kwargs)
            if part:
                self.seconds[part] += time.process_time() - start
            if count and not before:
                count(out)
            return out

        setattr(owner, name, timed)

    def _count_batch(self, out) -> None:
        mask = out["completion_mask"] * out["tool_mask"]
        tokens, pairs, sampled = tree_token_counts(self.trainer.last_rollout)
        self.counts["rollout_tokens"] += tokens
        self.counts["rollout_pairs"] += pairs
        self.counts["rollout_headed"] += sampled
        # reference pass: every leaf's tokens up to its last sampled one, per leaf
        leaf_paths, scored = row_paths(
            out["prompt_ids"], out["prompt_mask"], out["completion_ids"], mask
        )
        self.counts["batch_tokens"] += sum(len(p) for p in leaf_paths)
        self.counts["batch_pairs"] += causal_pairs(len(p) for p in leaf_paths)
        self.counts["batch_headed"] += scored

    def _count_update(self, inputs) -> None:
        mask = inputs["completion_mask"] * inputs["tool_mask"]
        paths, scored = row_paths(
            inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"], mask
        )
        self.counts["update_tokens"] += sum(len(p) for p in paths)
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        self.counts["update_distinct"] += pack_rows(ids, attention, mask).distinct_tokens
        self.counts["update_pairs"] += causal_pairs(len(p) for p in paths)
        self.counts["update_headed"] += scored


@contextlib.contextmanager
def decoding_before_issue_62(active: bool) -> Iterator[None]:
    """While ``active``, every HF rollout backend decodes as before issue #62: one padded
    prefill batch, each prompt copy prefilled, the model's own forward."""
    from at2po_lib.rollout import backends

    original = backends.HFBackend.__init__

    def old_init(self, *args, **kwargs):
        kwargs.update(lean=False, packed_prefill=False, fused_prefill=False)
        original(self, *args, **kwargs)

    if active:
        backends.HFBackend.__init__ = old_init
    try:
        yield
    finally:
        backends.HFBackend.__init__ = original


def run_step(cfg, method: str, trainer_overrides: dict, name: str) -> dict:
    from transformers import TrainerCallback

    from at2po_lib.record import run_folder
    from at2po_lib.study.run import build_trainer

    run = run_folder.run_dir(cfg.name, name, 0)
    run_folder.clear_run(run)
    trainer = build_trainer(cfg, method, 0, run, trainer_overrides or None)
    clock = PartClock(trainer)
    marks: dict[str, float] = {}

    class _Whole(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            marks["start"] = time.process_time()

        def on_train_end(self, args, state, control, **kwargs):
            marks["end"] = time.process_time()

    trainer.add_callback(_Whole())
    trainer.train()
    row = run_folder.read_jsonl(run.metrics)[0]
    seconds = dict(clock.seconds)
    parts = {
        "rollout": seconds["rollout"],
        "reference": seconds["scoring"] - seconds["rollout"],
        "update": seconds["training_step"] - seconds["scoring"],
        "step": marks["end"] - marks["start"],
    }
    shape = token_costs(trainer.model.config)
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    del trainer
    torch.set_num_threads(1)
    return {
        "parts": parts,
        "counts": dict(clock.counts),
        "row": row,
        "shape": shape,
        "params": params,
    }


def floors(counts: dict, costs: TokenCosts, beta: float, rate: float) -> dict[str, float]:
    """Each part's floor in seconds at ``rate`` FLOP per CPU second (module docstring)."""
    leaf = forward_flops(
        costs, counts["update_tokens"], counts["update_pairs"], counts["update_headed"]
    )
    out = {
        "update": 3.0 * leaf / rate,
        "rollout": forward_flops(
            costs, counts["rollout_tokens"], counts["rollout_pairs"], counts["rollout_headed"]
        )
        / rate,
        "reference": (
            forward_flops(
                costs, counts["batch_tokens"], counts["batch_pairs"], counts["batch_headed"]
            )
            / rate
            if beta
            else 0.0
        ),
    }
    out["step"] = sum(out.values())
    return out


def full_run(cfg_loader, method: str) -> None:
    """A whole tiny run (the profile's steps, validation and final evaluation) in CPU minutes."""
    from at2po_lib.study.run import train

    cfg = cfg_loader({"train": {"progress_bar": False, "report_to": []}})
    start, wall = time.process_time(), time.perf_counter()
    train(cfg, method, 0)
    print(
        f"full run: {method}, {cfg.train.max_steps} steps with validation and the final "
        f"evaluation: {(time.process_time() - start) / 60:.1f} CPU-minutes, "
        f"{(time.perf_counter() - wall) / 60:.1f} minutes wall (goal <= 6 CPU-minutes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["at2po", "grpo"])
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant")
    parser.add_argument("--full-run", default=None, metavar="METHOD")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: at least 1")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    scratch = Path(tempfile.mkdtemp(prefix="bench_tiny_step_"))
    os.environ["AT2PO_ARTIFACTS"] = str(scratch / "artifacts")
    os.environ["AT2PO_RESULTS"] = str(scratch / "results")
    os.environ["AT2PO_FIGURES"] = str(scratch / "figures")
    from bench_train_step import ONE_STEP_TRAIN, find_policy, prepare_artifacts

    from at2po_lib.config.profile import load_profile
    from at2po_lib.trainer.resolve import trainer_fields

    torch.set_num_threads(1)
    policy = find_policy("tiny", None)
    if policy is None:
        raise SystemExit("no tiny warm start: results/tiny/warmstart is missing")
    prepare_artifacts("tiny", scratch)
    cfg = load_profile("tiny", {"train": dict(ONE_STEP_TRAIN), "policy": {"model": policy}})
    print(f"tiny, policy {os.path.relpath(policy, ROOT)}; torch {torch.__version__}, 1 thread")
    run_step(cfg, args.methods[0], NEW, "warmup")  # caches, lazy imports
    for method in args.methods:
        results: dict[str, list[dict]] = {"old": [], "new": []}
        rates: list[float] = []
        for i in range(args.repeats):
            for variant in ("old", "new") if i % 2 == 0 else ("new", "old"):
                rates.append(matmul_rate())
                overrides = OLD if variant == "old" else NEW
                with decoding_before_issue_62(variant == "old"):
                    results[variant].append(run_step(cfg, method, overrides, f"bench_{variant}"))
        rate = statistics.median(rates)
        beta = trainer_fields(cfg, method, 0)["beta"]
        first = results["new"][0]
        floor = floors(first["counts"], first["shape"], beta, rate)
        counts = first["counts"]
        print(
            f"\n{method}: matmul {rate / 1e9:.1f} GFLOP/s (fp32, 1 thread, median of "
            f"{len(rates)}); update {counts['update_tokens']:.0f} leaf tokens "
            f"({counts['update_distinct']:.0f} in the packed layout), rollout "
            f"{counts['rollout_tokens']:.0f} distinct tree tokens, "
            f"{counts['rollout_headed']:.0f} sampled"
        )
        print(
            f"  {'part':<10} {'floor s':>8} {'old s':>8} {'new s':>8} {'old/floor':>10} {'new/floor':>10} {'old/new':>8}"
        )
        for part in ("update", "reference", "rollout", "step"):
            old = min(r["parts"][part] for r in results["old"])
            new = min(r["parts"][part] for r in results["new"])
            if part == "reference" and not beta:
                continue
            f = floor[part]
            print(
                f"  {part:<10} {f:8.2f} {old:8.2f} {new:8.2f} {old / f:10.2f} {new / f:10.2f} "
                f"{old / max(new, 1e-9):8.2f}"
            )
        a, b = results["old"][0], results["new"][0]
        diff = max(float((a["params"][n] - b["params"][n]).abs().max()) for n in a["params"])
        print(
            f"  equality old vs new: loss {a['row']['loss']:.6f} / {b['row']['loss']:.6f}, grad "
            f"norm {a['row']['grad_norm']:.6f} / {b['row']['grad_norm']:.6f}, max |parameter "
            f"diff| {diff:.2e}"
        )
    if args.full_run:
        full_run(
            lambda extra: load_profile("tiny", {**extra, "policy": {"model": policy}}),
            args.full_run,
        )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
