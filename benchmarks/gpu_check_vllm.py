"""GPU check of the vLLM turn backend: tokens/s, prefix-cache hits, log-prob agreement.

    python benchmarks/gpu_check_vllm.py            # CUDA + vLLM (requirements-gpu.txt), ~2 min

Nothing is downloaded: a *randomly initialised* Qwen3 of Qwen3-0.6B's shape with the tiny
profile's tokenizer is saved to a temporary folder and served by
:class:`at2po_lib.rollout.vllm_backend.VLLMBackend` (``enable_prefix_caching``,
``logprobs_mode="processed_logprobs"``). Three measurements:

1. rollout throughput: ``--contexts`` prompts of the tiny world, one turn of up to
   ``--max-tokens`` tokens each (generated tokens per second, wall time);
2. prefix-cache hits: the same contexts again, each with its sampled turn appended, as tree
   branches are (vLLM's ``prefix_cache_hits / prefix_cache_queries`` counters, when this vLLM
   exposes them through ``LLM.get_metrics()``);
3. log-prob agreement: the recorded log-prob of every sampled token of a few turns against the
   trainer's recomputation, ``log_softmax(logits / T)`` of a transformers forward pass in bf16
   (expect differences ~1e-2 in bf16).

The last line is a JSON summary (benchmarks/gpu_check_all.py reads it).
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

from gpu_check_train import QWEN3_06B_SHAPE, build_random_policy  # noqa: E402


def prefix_cache_counters(llm) -> dict[str, float]:
    """vLLM's prefix-cache counters ({} when this vLLM does not expose them)."""
    try:
        metrics = llm.get_metrics()
    except Exception:  # older engines, or metrics disabled
        return {}
    out = {}
    for metric in metrics:
        name = getattr(metric, "name", "")
        if name.endswith(("prefix_cache_hits", "prefix_cache_queries")):
            out[name.rsplit(":", 1)[-1]] = float(getattr(metric, "value", 0.0))
    return out


def recompute_gap(policy_dir: Path, contexts, results, temperature: float, limit: int = 8):
    """(max, mean) |vLLM log-prob - trainer log-prob| over the sampled tokens of ``limit`` turns."""
    import torch
    from transformers import AutoModelForCausalLM

    model = (
        AutoModelForCausalLM.from_pretrained(str(policy_dir), dtype=torch.bfloat16).cuda().eval()
    )
    gaps = []
    for context, result in list(zip(contexts, results))[:limit]:
        ids = torch.tensor([list(context) + result.token_ids], device="cuda")
        with torch.no_grad():
            lp = torch.log_softmax(model(ids).logits[0].float() / temperature, dim=-1)
        start = len(context)
        for t, (tok, recorded) in enumerate(zip(result.token_ids, result.logps)):
            gaps.append(abs(lp[start + t - 1, tok].item() - recorded))
    del model
    torch.cuda.empty_cache()
    return (max(gaps), sum(gaps) / len(gaps)) if gaps else (float("nan"), float("nan"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    parser.add_argument("--profile", default="tiny")
    args = parser.parse_args(argv)

    import torch

    from at2po_lib.config.profile import load_profile
    from at2po_lib.protocol.prompts import build_messages, get_template, prompt_ids
    from at2po_lib.rollout.agent import STOP_SEQUENCES
    from at2po_lib.rollout.sampling import SamplingSpec
    from at2po_lib.rollout.turns import TurnRequest
    from at2po_lib.rollout.vllm_backend import VLLMBackend, build_engine, vllm_available
    from at2po_lib.tinyworld.build import ensure_world
    from at2po_lib.tinyworld.build import read_rows

    if not torch.cuda.is_available() or not vllm_available():
        print("error: needs CUDA and vllm (requirements-gpu.txt)", file=sys.stderr)
        return 2
    cfg = load_profile(args.profile)
    with tempfile.TemporaryDirectory() as tmp:
        policy = build_random_policy(cfg, QWEN3_06B_SHAPE, "bfloat16", Path(tmp) / "policy")
        from at2po_lib.policy.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(policy)
        template = get_template(cfg.policy.template)
        rows = read_rows(ensure_world(cfg), "tiny_hotpotqa", "train")
        contexts = [
            prompt_ids(tokenizer, build_messages(template, rows[i % len(rows)]["question"]))
            for i in range(args.contexts)
        ]
        sampling = SamplingSpec(cfg.rollout.temperature)
        start = time.perf_counter()
        engine = build_engine(
            policy,
            cfg,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=2048,
            dtype="bfloat16",
            disable_log_stats=False,
        )
        backend = VLLMBackend(engine, tokenizer, sampling, STOP_SEQUENCES)
        engine_s = time.perf_counter() - start
        requests = [TurnRequest(list(c), args.max_tokens) for c in contexts]
        start = time.perf_counter()
        results = backend.generate_turns(requests)
        first_s = time.perf_counter() - start
        generated = sum(len(r.token_ids) for r in results)
        before = prefix_cache_counters(backend.llm)
        branches = [
            TurnRequest(list(c) + r.token_ids, args.max_tokens) for c, r in zip(contexts, results)
        ]
        start = time.perf_counter()
        backend.generate_turns(branches)
        branch_s = time.perf_counter() - start
        after = prefix_cache_counters(backend.llm)
        del backend, engine
        torch.cuda.empty_cache()
        gap_max, gap_mean = recompute_gap(policy, contexts, results, cfg.rollout.temperature)
    hits = after.get("prefix_cache_hits", 0.0) - before.get("prefix_cache_hits", 0.0)
    queries = after.get("prefix_cache_queries", 0.0) - before.get("prefix_cache_queries", 0.0)
    summary = {
        "check": "vllm",
        "gpu": torch.cuda.get_device_name(0),
        "engine_start_s": round(engine_s, 1),
        "contexts": args.contexts,
        "generated_tokens": generated,
        "rollout_tokens_per_s": round(generated / first_s, 1),
        "branch_round_s": round(branch_s, 2),
        "prefix_cache_hit_rate": round(hits / queries, 3) if queries else None,
        "logp_gap_max": gap_max,
        "logp_gap_mean": gap_mean,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
