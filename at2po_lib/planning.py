"""What one training step of a profile will cost, before the first GPU hour (``at2po plan``).

Every number is an estimate from the profile and the model's architecture; none is measured.
Notation: ``P`` parameters of the policy, ``N`` GPUs (one process each), ``h`` hidden size,
``n_L`` layers, ``V`` vocabulary, ``b`` rows per micro-batch (``train.micro_batch_rows``),
``s = max_prompt_tokens + max_response_tokens`` tokens per row.

Memory per GPU (bytes; GiB = 2^30 bytes in the table):

- weights (bf16): ``2P``, divided by ``N`` under ZeRO-3;
- gradients (bf16): ``2P``, divided by ``N`` under ZeRO-2 and 3;
- optimizer states (fp32 master weights + Adam's two moments): ``12P`` (ZeRO paper, K=12),
  divided by ``N`` under ZeRO-1, 2 and 3; 0 on the GPU with optimizer offload. Without
  DeepSpeed (stage ``none``) there is no bf16 copy: fp32 weights ``4P``, fp32 gradients ``4P``
  and moments ``8P`` on every GPU (the trainer keeps fp32 master weights itself);
- activations with checkpointing: the checkpointed layer inputs ``2·n_L·b·s·h``, one layer
  recomputed in backward ``34·b·s·h`` (Korthikanti et al. 2022, flash attention: no ``s²``
  term), and the fp32 log-softmax over the vocabulary ``4·b·s·V`` (0 when the loss scores only
  labelled positions in chunks, TRL's fused LM head);
- vLLM (colocate): ``u·G`` of the GPU's ``G`` bytes (``train.vllm_gpu_memory_utilization``),
  held throughout training; inside it the weights ``2P`` and the KV cache
  ``u·G − 2P − 2 GiB`` (2 GiB: vLLM's own activations and CUDA graphs, a rough allowance);
  a token's KV costs ``2·n_L·n_kv·d_head·2`` bytes;
- faiss shards (a Flat index sharded over the GPUs, Search-R1's server):
  ``n_passages·d_enc·4 / N`` (``·2`` with fp16 storage);
- the encoder (e5 on every GPU the server uses): ``2·P_enc`` plus one batch's activations
  ``34·B·s_enc·h_enc`` (``B`` = ``retrieval.batch_size``, ``s_enc`` = ``retrieval.max_length``).

Per step (``p`` prompts, trees of ``M`` roots and ``L`` rounds of ``K`` expansions: ``M + L·K``
leaves; ``T`` mean searches per trajectory, default 3.7):

- generated tokens, upper bound: ``p·(M + L·K)·max_response_tokens`` (observations count
  against the budget too, so fewer are generated);
- retrieval queries: at most ``p·(M + L·K)·max_tool_calls``; expected ``p·(M·T + L·K·T/2)``
  (an expanded branch shares its parent's turns up to the branching point, on average half);
- one burst: every open branch searches in the same turn, at most ``p·(M + L·K)`` queries;
  the server must answer it inside the client's ``retrieval.timeout_s``:
  needed rate ``= burst / timeout_s`` queries per second;
- a Flat search costs ``2·n_passages·d_enc`` FLOP per query; CPU faiss sustains
  ``cpu_gflops·1e9 / (2·n_passages·d_enc)`` queries per second (batched BLAS), GPU faiss
  ``N·gpu_tflops·1e12 / (2·n_passages·d_enc)``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ProfileConfig

GIB = 2 ** 30
VLLM_OVERHEAD_BYTES = 2 * GIB
ADAM_STATE_BYTES = 12  # fp32 master copy (4) + two fp32 moments (8), per parameter
WIKI18_PASSAGES = 21_015_324
ZERO_STAGES = ("none", "0", "1", "2", "3")


class PlanError(ValueError):
    """A plan input that cannot be used (names the input)."""


@dataclass(frozen=True)
class Architecture:
    """The shape numbers a plan needs (a Qwen-style decoder)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    qk_norm: bool = False

    def parameters(self) -> int:
        """``V·h`` embeddings (again for an untied LM head) + per layer: q and o ``2·h·a·d``,
        k and v ``2·h·k·d``, the gated MLP ``3·h·I``, two norms ``2h`` (+ q/k biases and norms
        where the model has them) + the final norm ``h``."""
        h, d = self.hidden_size, self.head_dim
        q, kv = self.num_heads * d, self.num_kv_heads * d
        layer = 2 * h * q + 2 * h * kv + 3 * h * self.intermediate_size + 2 * h
        layer += (q + 2 * kv) if self.qkv_bias else 0
        layer += 2 * d if self.qk_norm else 0
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_layers * layer + h

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """``2 (k, v) · n_L · n_kv · d_head · dtype_bytes``."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


# The published config.json values of the paper's backbones (so a plan needs no download).
KNOWN_ARCHITECTURES: dict[str, Architecture] = {
    "Qwen/Qwen3-4B": Architecture(2560, 36, 32, 8, 128, 9728, 151936, True, qk_norm=True),
    "Qwen/Qwen3-8B": Architecture(4096, 36, 32, 8, 128, 12288, 151936, False, qk_norm=True),
    "Qwen/Qwen2.5-7B": Architecture(3584, 28, 28, 4, 128, 18944, 152064, False, qkv_bias=True),
    "Qwen/Qwen2.5-7B-Instruct": Architecture(3584, 28, 28, 4, 128, 18944, 152064, False,
                                             qkv_bias=True),
}


@dataclass(frozen=True)
class Encoder:
    parameters: int
    hidden_size: int
    dim: int  # embedding dimension stored in the index


KNOWN_ENCODERS: dict[str, Encoder] = {
    "intfloat/e5-base-v2": Encoder(109_482_240, 768, 768),
    "minilm-offline": Encoder(22_713_216, 384, 384),
}


@dataclass(frozen=True)
class Hardware:
    gpus: int
    gpu_memory_gib: float = 96.0  # the paper's H20
    zero_stage: str = "3"
    offload_optimizer: bool = False
    fused_lm_head: bool = True
    faiss_fp16: bool = False
    cpu_gflops: float = 1000.0    # sustained sgemm of a many-core server
    gpu_tflops: float = 40.0      # sustained fp32 sgemm of one datacenter GPU
    mean_searches: float = 3.7
    passages: int = WIKI18_PASSAGES


def architecture_of(profile_cfg: ProfileConfig) -> Architecture:
    """The policy's architecture: a known backbone, a local ``config.json``, or the tiny
    Qwen3 the profile builds (``policy.model`` unset)."""
    pol = profile_cfg.policy
    if pol.model is None:
        d = pol.hidden_size // pol.num_attention_heads
        return Architecture(pol.hidden_size, pol.num_hidden_layers, pol.num_attention_heads,
                            pol.num_key_value_heads, d, pol.intermediate_size, pol.vocab_size,
                            True, qk_norm=True)
    if pol.model in KNOWN_ARCHITECTURES:
        return KNOWN_ARCHITECTURES[pol.model]
    config = Path(pol.model) / "config.json"
    if not config.is_file():
        raise PlanError(f"policy.model={pol.model!r}: not a known backbone "
                        f"({', '.join(KNOWN_ARCHITECTURES)}) and no {config}")
    c = json.loads(config.read_text())
    heads = c["num_attention_heads"]
    return Architecture(c["hidden_size"], c["num_hidden_layers"], heads,
                        c.get("num_key_value_heads", heads),
                        c.get("head_dim") or c["hidden_size"] // heads, c["intermediate_size"],
                        c["vocab_size"], bool(c.get("tie_word_embeddings", False)),
                        qkv_bias="qwen2" in c.get("model_type", ""),
                        qk_norm="qwen3" in c.get("model_type", ""))


def encoder_of(profile_cfg: ProfileConfig) -> Encoder | None:
    """The dense encoder, None for BM25; an unknown one is an error naming it."""
    rcfg = profile_cfg.retrieval
    if rcfg.method != "dense":
        return None
    if rcfg.encoder not in KNOWN_ENCODERS:
        raise PlanError(f"retrieval.encoder={rcfg.encoder!r}: unknown to the plan "
                        f"(known: {', '.join(KNOWN_ENCODERS)})")
    return KNOWN_ENCODERS[rcfg.encoder]


def training_memory(params: int, hw: Hardware) -> dict[str, float]:
    """Weights, gradients and optimizer states per GPU in bytes (see the module docstring)."""
    if hw.zero_stage not in ZERO_STAGES:
        raise PlanError(f"zero stage {hw.zero_stage!r}: expected one of {', '.join(ZERO_STAGES)}")
    n = hw.gpus
    if hw.zero_stage == "none":
        return {"weights": 4.0 * params, "gradients": 4.0 * params,
                "optimizer states": 8.0 * params}
    stage = int(hw.zero_stage)
    optimizer = 0.0 if hw.offload_optimizer else ADAM_STATE_BYTES * params / (n if stage >= 1 else 1)
    return {"weights": 2.0 * params / (n if stage >= 3 else 1),
            "gradients": 2.0 * params / (n if stage >= 2 else 1),
            "optimizer states": optimizer}


def activation_memory(arch: Architecture, rows: int, seq: int, fused_lm_head: bool) -> float:
    """``2·n_L·b·s·h + 34·b·s·h + 4·b·s·V`` bytes (the last term without a fused LM head)."""
    bsh = rows * seq * arch.hidden_size
    logits = 0 if fused_lm_head else 4 * rows * seq * arch.vocab_size
    return 2.0 * arch.num_layers * bsh + 34.0 * bsh + logits


def plan(profile_cfg: ProfileConfig, hw: Hardware) -> dict[str, Any]:
    """The plan of one step: ``memory`` (rows of (what, bytes per GPU)), ``step`` and ``retrieval``."""
    if hw.gpus < 1:
        raise PlanError(f"--gpus {hw.gpus}: at least 1")
    arch, enc = architecture_of(profile_cfg), encoder_of(profile_cfg)
    ro, tr, rc = profile_cfg.rollout, profile_cfg.train, profile_cfg.retrieval
    params = arch.parameters()
    seq = ro.max_prompt_tokens + ro.max_response_tokens
    gpu_bytes = hw.gpu_memory_gib * GIB

    memory: dict[str, float] = training_memory(params, hw)
    memory["activations (checkpointed)"] = activation_memory(arch, tr.micro_batch_rows, seq,
                                                             hw.fused_lm_head)
    kv_tokens = 0
    if tr.use_vllm:
        share = tr.vllm_gpu_memory_utilization * gpu_bytes
        kv_cache = share - 2.0 * params - VLLM_OVERHEAD_BYTES
        if kv_cache <= 0:
            raise PlanError(f"train.vllm_gpu_memory_utilization={tr.vllm_gpu_memory_utilization}: "
                            f"{share / GIB:.1f} GiB cannot hold the weights "
                            f"({2 * params / GIB:.1f} GiB) and vLLM's overhead")
        memory["vLLM weights (bf16)"] = 2.0 * params
        memory["vLLM KV cache"] = kv_cache
        memory["vLLM overhead"] = float(VLLM_OVERHEAD_BYTES)
        kv_tokens = int(kv_cache // arch.kv_bytes_per_token())
    flop_per_query = 0.0
    if enc is not None:
        memory["faiss shard (Flat)"] = hw.passages * enc.dim * (2 if hw.faiss_fp16 else 4) / hw.gpus
        memory["encoder"] = 2.0 * enc.parameters + 34.0 * rc.batch_size * rc.max_length * enc.hidden_size
        flop_per_query = 2.0 * hw.passages * enc.dim
    total = sum(memory.values())

    leaves = ro.leaves_per_prompt("entropy")  # M + L*K
    prompts = tr.prompts_per_step
    burst = prompts * leaves
    resampled = leaves - ro.tree_m  # L*K chains, each re-sampled from halfway down on average
    expected_queries = prompts * (ro.tree_m * hw.mean_searches + resampled * hw.mean_searches / 2)
    needed_qps = burst / rc.timeout_s
    cpu_qps = hw.cpu_gflops * 1e9 / flop_per_query if flop_per_query else math.inf
    gpu_qps = hw.gpus * hw.gpu_tflops * 1e12 / flop_per_query if flop_per_query else math.inf
    return {
        "parameters": params,
        "memory": memory,
        "total_bytes": total,
        "gpu_bytes": gpu_bytes,
        "fits": total <= gpu_bytes,
        "step": {
            "leaves per prompt": leaves,
            "trajectories": burst,
            "generated tokens (upper bound)": burst * ro.max_response_tokens,
            "KV tokens per GPU (vLLM)": kv_tokens,
            "KV tokens the GPU's trajectories need at full length": math.ceil(burst / hw.gpus) * seq,
        },
        "retrieval": {
            "queries (upper bound)": burst * ro.max_tool_calls,
            "queries (expected)": expected_queries,
            "burst (queries in one turn)": burst,
            "needed rate (q/s)": needed_qps,
            "CPU Flat rate (q/s)": cpu_qps,
            "GPU Flat rate (q/s)": gpu_qps,
            "CPU faiss keeps up": cpu_qps >= needed_qps,
        },
        "hardware": dataclasses.asdict(hw),
    }


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def format_plan(result: dict[str, Any], profile: str) -> str:
    """The plan as a Markdown table (memory in GiB per GPU, then the step's counts)."""
    hw = result["hardware"]
    lines = [f"plan: profile {profile}, {hw['gpus']} GPU(s) of {hw['gpu_memory_gib']:g} GiB, "
             f"ZeRO {hw['zero_stage']}{' + optimizer offload' if hw['offload_optimizer'] else ''}; "
             f"policy {result['parameters'] / 1e9:.3f} B parameters", "",
             "| memory per GPU | GiB |", "| --- | ---: |"]
    lines += [f"| {what} | {size / GIB:,.2f} |" for what, size in result["memory"].items()]
    lines += [f"| **total** (of {result['gpu_bytes'] / GIB:g}) | **{result['total_bytes'] / GIB:,.2f}** |",
              f"| fits | {_fmt(result['fits'])} |", "", "| per step | value |", "| --- | ---: |"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in {**result["step"], **result["retrieval"]}.items()]
    return "\n".join(lines)
