r"""GPU check of the trainer: a few AT2PO steps on CUDA in bf16 with a random Qwen3-0.6B.

What it exercises: the whole ``at2po train`` path (TinyWorld + BM25, the agent with the HF
rollout backend and its KV cache, entropy-guided trees, turn-wise credit, the ATPO loss,
TRL's optimiser, checkpoint) on a *randomly initialised* Qwen3 of Qwen3-0.6B's shape (28
layers, hidden 1024, 16 heads of 128, 8 KV heads, FFN 3072, vocabulary 151,936: 0.60B
parameters), with the tiny byte-level tokenizer padded to that vocabulary, so nothing is
downloaded. A random model answers nothing right, so
the run uses a reward with variance across leaves (the parity of the response length) to keep
the gradient non-zero; the numbers measure cost, not learning.

Prints: GPU model, parameters, per-step wall time (rollout / update split), peak GPU memory,
tokens generated per second, and whether every step's loss was finite.

    python benchmarks/gpu_check_train.py                      # CUDA, bf16, 0.60B, 3 steps
    python benchmarks/gpu_check_train.py --device cpu --small # CPU smoke test (seconds)

Budget on one H200 (estimate): model build ~10 s, world + index ~10 s, ~20-40 s per step
(8 prompts x 8 leaves, turns of <= 48 tokens, responses of <= 384 tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_h200 import build_qwen3  # noqa: E402
from qwen3_shapes import QWEN3_VOCAB, SHAPES  # noqa: E402

QWEN3_06B_SHAPE = SHAPES["0.6b"]  # Qwen3-0.6B's config.json: head_dim 128, vocabulary 151,936
SMALL_SHAPE = dict(SHAPES["dry-run"])  # the dry run's toy width


def parity_reward(response: str, golden) -> float:
    return float(len(response) % 2)


def build_random_policy(profile_cfg, shape: dict, dtype: str, out: Path) -> Path:
    """A random Qwen3 of ``shape`` (Qwen3's vocabulary for the real shapes, the tokenizer's
    own for SMALL_SHAPE) saved to ``out`` (gpu_check_h200.build_qwen3)."""
    from at2po_lib.policy.model import count_parameters

    vocab = QWEN3_VOCAB if shape is not SMALL_SHAPE else profile_cfg.policy.vocab_size
    model, folder = build_qwen3(profile_cfg, shape, vocab, dtype, out)
    print(f"policy: {count_parameters(model) / 1e6:.1f}M parameters, {dtype}")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="a 2-layer model (CPU smoke test)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--method", default="at2po")
    parser.add_argument("--profile", default="tiny", help="world, rollout limits and tree shape")
    args = parser.parse_args(argv)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "error: --device cuda but CUDA is not available (use --device cpu --small)",
            file=sys.stderr,
        )
        return 2
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.record import run_folder
    from at2po_lib.study.run import train

    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "none (CPU)"
    print(f"device: {args.device}; GPU: {gpu}; torch {torch.__version__}")
    bf16 = args.device == "cuda"
    dtype = "bfloat16" if bf16 else "float32"
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AT2PO_RESULTS"] = str(Path(tmp) / "results")
        base = load_profile(args.profile)
        start = time.perf_counter()
        policy = build_random_policy(
            base, SMALL_SHAPE if args.small else QWEN3_06B_SHAPE, dtype, Path(tmp) / "policy"
        )
        build_s = time.perf_counter() - start
        overrides = {
            "policy": {"model": str(policy), "dtype": dtype},
            "train": {
                "max_steps": args.steps,
                "prompts_per_step": 4 if args.small else 8,
                "mini_batch_prompts": 2 if args.small else 4,
                "bf16": bf16,
                "eval_every": 0,
                "final_eval": False,
                "save_every": args.steps,
                "report_to": [],
                "progress_bar": False,
            },
        }
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        result = train(
            args.profile,
            args.method,
            0,
            force=True,
            profile_overrides=overrides,
            reward_fn=parity_reward,
        )
        total_s = time.perf_counter() - start
        rows = run_folder.read_jsonl(result.run.metrics)
    print(
        f"model + tokenizer build: {build_s:.1f} s; train() total: {total_s:.1f} s "
        f"({args.steps} steps, incl. trainer set-up and checkpoint)"
    )
    print("step  wall_s  rollout_s  update_s  reward  entropy  loss  model_tokens/traj")
    previous = 0.0
    for row in rows:
        wall = row["wall_time"] - previous
        previous = row["wall_time"]
        update = wall - row.get("rollout/seconds", 0.0)
        print(
            f"{row['step']:>4}  {wall:6.2f}  {row.get('rollout/seconds', float('nan')):9.2f}  "
            f"{update:8.2f}  {row['reward']:6.3f}  {row['entropy']:7.3f}  {row['loss']:+.4f}  "
            f"{row.get('completions/mean_length', float('nan')):6.1f}"
        )
    finite = all(row.get("loss") is not None for row in rows) and len(rows) == args.steps
    # The first step's wall time includes the trainer's set-up; later steps are steady state.
    steady = (
        (rows[-1]["wall_time"] - rows[0]["wall_time"]) / (len(rows) - 1) if len(rows) > 1 else None
    )
    summary = {
        "device": args.device,
        "gpu": gpu,
        "steps": len(rows),
        "all_losses_finite": finite,
        "mean_step_s_after_first": steady,
    }
    if args.device == "cuda":
        summary["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(summary))
    return 0 if finite else 1


if __name__ == "__main__":
    sys.exit(main())
