"""GPU check of the rollout stage: entropy-guided trees with a ~0.5B Qwen3 in bf16 on CUDA.

    python benchmarks/gpu_check_rollout.py                          # CUDA, bf16, ~0.53B params
    python benchmarks/gpu_check_rollout.py --device cpu --small     # CPU smoke test, seconds

Nothing is downloaded: the model is a *randomly initialised* Qwen3ForCausalLM shaped like
Qwen3-0.6B (hidden 1024, 24 layers, 16 query / 8 key-value heads of 128, FFN 3072, Qwen3's
vocabulary size 151,936, tied embeddings), the tokenizer is trained on the profile's TinyWorld
(ids above its vocabulary get a -30 logit bias, so they are never sampled but the softmax still
spans Qwen3's full vocabulary), and agent tags get a positive bias so the untrained model
opens and closes ``<search>``/``<answer>`` and grows multi-turn trees. The retriever is the
profile's BM25 index when ``bm25s`` imports, else a word-overlap ranking over the same corpus
(printed).

Prints: the device (GPU model), parameters, the workload, wall time, generated tokens per
second, prefill tokens per second, trajectories per second, peak GPU memory, and the largest
difference between the log-probs recorded at sampling time and a plain full forward pass over a
few leaf rows (bf16: expect ~1e-2; float32: ~1e-5).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections import Counter

import torch

from at2po_lib.config.profile import load_profile
from at2po_lib.rollout.agent import STOP_SEQUENCES
from at2po_lib.rollout.backends import HFBackend
from at2po_lib.rollout.export import recompute_gap, training_rows, tree_summary
from at2po_lib.rollout.sampling import SamplingSpec
from at2po_lib.rollout.agent import Sampler, SearchEnv
from at2po_lib.rollout.trees import rollout
from qwen3_shapes import QWEN3_VOCAB, SHAPES

TAG_BIAS = {"<search>": 4.5, "</search>": 4.0, "<answer>": 3.0, "</answer>": 3.0}


class WordOverlapRetriever:
    """Fallback when bm25s is missing: rank passages by shared lower-cased words."""

    def __init__(self, corpus: dict[str, str]) -> None:
        self.docs = list(corpus.items())
        self.words = [Counter(re.findall(r"\w+", text.lower())) for _, text in self.docs]

    def search(self, queries, topk: int = 3):
        out = []
        for query in queries:
            q = set(re.findall(r"\w+", query.lower()))
            scores = [sum(w[t] > 0 for t in q) for w in self.words]
            best = sorted(range(len(scores)), key=lambda i: -scores[i])[:topk]
            out.append(
                [
                    {
                        "document": {"id": self.docs[i][0], "contents": self.docs[i][1]},
                        "score": float(scores[i]),
                    }
                    for i in best
                ]
            )
        return out


def build_world(profile: str):
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.protocol.prompts import get_template, template_texts
    from at2po_lib.tinyworld.build import ensure_world
    from at2po_lib.tinyworld.build import read_corpus, read_rows

    cfg = load_profile(profile)
    world = ensure_world(cfg)
    corpus = read_corpus(world)
    try:
        from at2po_lib.retrieval.indexes import build_retriever

        retriever, kind = build_retriever(cfg), "BM25 (bm25s)"
    except ImportError:
        retriever, kind = WordOverlapRetriever(corpus), "word overlap (bm25s not installed)"
    rows = read_rows(world, "tiny_hotpotqa", "train")
    template = get_template(cfg.policy.template)
    texts = list(corpus.values()) + [r["question"] for r in rows] + template_texts(template)
    tokenizer = train_tokenizer(texts, vocab_size=cfg.policy.vocab_size)
    return cfg, tokenizer, template, retriever, kind, rows


def build_model(tokenizer, small: bool, device: str, dtype: torch.dtype):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if small:
        shape = dict(SHAPES["dry-run"], vocab_size=len(tokenizer))
    else:  # Qwen3-0.6B's shape with 24 instead of 28 layers: ~0.53B parameters
        shape = dict(SHAPES["0.6b"], num_hidden_layers=24, vocab_size=QWEN3_VOCAB)
    config = Qwen3Config(
        **shape,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
        head = model.lm_head
        biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        biased.weight = head.weight
        with torch.no_grad():
            biased.bias.zero_()
            biased.bias[len(tokenizer) :] = -30.0  # ids the tokenizer cannot decode
            for text, value in TAG_BIAS.items():
                biased.bias[tokenizer.convert_tokens_to_ids(text)] = value
        model.lm_head = biased
    return model.to(dtype).eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="a 2-layer model (CPU smoke test)")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available; use --device cpu --small for the smoke test")
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    if args.device == "cpu":
        torch.set_num_threads(1)  # tiny matmuls: one thread is fastest on shared cores

    cfg, tokenizer, template, retriever, kind, rows = build_world(args.profile)
    model = build_model(tokenizer, args.small, args.device, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    rollout_cfg = cfg.rollout
    leaves = rollout_cfg.leaves_per_prompt("entropy")
    print(f"device: {device_name} ({args.device}), dtype {dtype}, torch {torch.__version__}")
    print(f"model: random Qwen3, {n_params / 1e6:.1f}M parameters, vocab {model.config.vocab_size}")
    print(
        f"workload: profile {args.profile}, {args.prompts} prompts x {leaves} leaves "
        f"(M={rollout_cfg.tree_m}, L={rollout_cfg.tree_l}, K={rollout_cfg.tree_k}), entropy expansion, "
        f"temperature {rollout_cfg.temperature}, retriever {kind}"
    )

    questions = [r["question"] for r in rows[: args.prompts]]
    golden = [list(r["golden_answers"]) for r in rows[: args.prompts]]
    backend = HFBackend(
        model,
        tokenizer,
        SamplingSpec(rollout_cfg.temperature),
        STOP_SEQUENCES,
        seed=0,
        max_batch_size=rollout_cfg.max_batch_rows,
    )
    env = SearchEnv(tokenizer, template, retriever, rollout_cfg)
    rollout(Sampler(env, backend), questions[:2], golden[:2])  # warm-up
    for repeat in range(args.repeats):
        backend.stats.reset()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        trees = rollout(Sampler(env, backend, repeat), questions, golden)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        s, st = tree_summary(trees), backend.stats
        n_leaves = int(s["leaves_per_tree"] * s["trees"])
        peak = (
            f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
            if args.device.startswith("cuda")
            else ""
        )
        print(
            f"run {repeat}: {seconds:.2f} s, {n_leaves} leaves ({n_leaves / seconds:.1f} traj/s), "
            f"{st.generated_tokens} generated tokens ({st.generated_tokens / seconds:.0f} tok/s), "
            f"{st.prefill_tokens} prefill tokens ({st.prefill_tokens / seconds:.0f} tok/s), "
            f"{s['nodes_per_tree']:.1f} nodes/tree, {st.forward_calls} forward calls{peak}"
        )
    gap = recompute_gap(model, training_rows(trees), rollout_cfg.temperature, args.device)
    print(f"max |recorded - recomputed| log-prob over 4 rows: {gap:.2e}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    summary = {
        "check": "hf-rollout",
        "device": device_name,
        "params_m": round(n_params / 1e6, 1),
        "traj_per_s": round(n_leaves / seconds, 2),
        "rollout_tokens_per_s": round(st.generated_tokens / seconds, 1),
        "logp_gap_max": gap,
    }
    if args.device.startswith("cuda"):
        summary["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(summary))  # last line: read by benchmarks/gpu_check_all.py


if __name__ == "__main__":
    main()
