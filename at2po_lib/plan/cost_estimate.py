"""What one training step of a profile will cost, before the first GPU hour (``at2po plan``).

Every number is an estimate from the profile and the model's architecture; none is measured.
Notation: ``P`` parameters of the policy, ``N`` GPUs (one process each), ``h`` hidden size,
``n_L`` layers, ``V`` vocabulary, ``b`` rows per micro-batch (``train.micro_batch_rows``),
``s = max_prompt_tokens + max_response_tokens`` tokens per row.

Memory per GPU (bytes; GiB = 2^30 bytes in the table), one function per term below (each
with its formula), for the fullest GPU (GPU 0: the retrieval server's encoder runs there):

- the CUDA context of the process, and NCCL's buffers with more than one GPU
  (:func:`cuda_context_bytes`);
- weights, gradients, optimizer states under the ZeRO stage (:func:`training_memory`), with
  LoRA the frozen bf16 base and fp32 adapters (:func:`lora_parameters`); DeepSpeed's fp32
  gradient partition at the step (:func:`fp32_gradient_partition_bytes`), ZeRO-3's gathered
  parameters (:func:`zero3_gathered_bytes`), the bf16 working copy of fp32 weights under
  autocast without DeepSpeed (:func:`autocast_copy_bytes`);
- activations with checkpointing: the checkpointed layer inputs ``2·n_L·b·s·h`` and one
  layer recomputed in backward (:func:`layer_activation_bytes`: ``(21 + 8·I/h)·b·s·h`` for
  Qwen's SwiGLU MLP, ~50·b·s·h), and without a fused LM head the fp32 log-softmax
  ``4·b·s·V``; with TRL's fused LM head its fp32 weight gradient (:func:`lm_head_grad_bytes`);
- vLLM (colocate): ``u·G`` of the GPU's ``G`` bytes (``train.vllm_gpu_memory_utilization``),
  held throughout training; inside it the weights ``2P`` and the KV cache
  ``u·G − 2P − 2 GiB`` (2 GiB: vLLM's own activations and CUDA graphs, a rough allowance);
  a token's KV costs ``2·n_L·n_kv·d_head·2`` bytes;
- the reference model of a method whose KL coefficient ``beta`` is not 0 (GRPO and Tree-GRPO:
  1e-3; :func:`reference_model_bytes`): TRL loads a second copy of the policy in the trainer's
  weight dtype, partitioned under ZeRO-3 only (none with LoRA: the adapters are switched off);
- the retrieval server on the GPUs (Search-R1's layout; ``retriever_on_gpu``): the faiss Flat
  index sharded over the GPUs in fp16 (:func:`faiss_shard_bytes`, as ``to_gpus`` stores it),
  faiss-gpu's scratch memory on each of them (:func:`faiss_scratch_bytes`), the encoder on
  GPU 0 only, inference only (:func:`encoder_bytes`); with the index on the CPU
  (``--no-gpu-index``) the server keeps its encoder on the CPU as well.

These are the *update* phase's rows (the optimizer step and the forward/backward passes).
The *rollout* phase holds other things at its peak (:func:`rollout_memory`): the same context,
weights and optimizer states (gradients too under DeepSpeed, whose gradient buffers persist;
without it the trainer frees them after each step), with the Hugging Face backend the weights
as the rollout runs them (:func:`rollout_weights_bytes`: a bf16 copy of fp32 master weights;
ZeRO-3's whole model gathered) and its KV caches as allocated (:func:`hf_kv_rows`), with vLLM
the engine's share. The plan reports both phases and the larger is the total.

The verdict leaves a margin (:func:`margin_bytes`: 5% of the card, at least 3 GiB) for what
no formula here holds (allocator fragmentation, kernels' workspaces): a total above
``G − margin`` but within ``G`` is *tight*, not *fits*.

HF rollout KV caches (``p`` prompts per GPU, ``k`` bytes a token in the decode dtype, ``s_p =
max_prompt_tokens``, ``s = s_p + max_response_tokens``; a round starts ``r_0`` chains a prompt,
then each of ``L`` rounds ``r_1``; ``B`` = rows decoded at once, at most
``rollout.max_batch_rows``): the prompts' caches ``p·s_p·k``; the caches kept from earlier
rounds for their branches ``p·(r_0 + (L−1)·r_1)·s·k`` at the last round; the working buffer
``B·(s + 1)·k``; and the copy-out (:func:`copy_out_bytes`). The peak round is the larger of
round 0 and round L.

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

from ..config.profile import ProfileConfig
from ..method.presets import get_method
from ..rollout.decoding import HALF_DTYPES, decode_dtype, decode_grouping

GIB = 2**30
VLLM_OVERHEAD_BYTES = 2 * GIB
CUDA_CONTEXT_BYTES = 1 * GIB
"""The CUDA context of a training process (driver state, cuBLAS/cuDNN workspaces; vLLM's
engine shares the process's context), a round allowance: ~0.5-1 GiB is typical."""
NCCL_BUFFER_BYTES = 1 * GIB
"""NCCL's communicator buffers with more than one GPU (channels x peers x NCCL_BUFFSIZE),
an allowance of the same kind."""
ZERO3_MAX_LIVE_PARAMETERS = 10**9
"""DeepSpeed's ``stage3_max_live_parameters`` default (accelerate's configs do not set it)."""
ADAM_STATE_BYTES = 12  # fp32 master copy (4) + two fp32 moments (8), per parameter
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The modules ``run._peft_config`` adapts (every linear layer of a Qwen decoder layer)."""
DEFAULT_LORA_RANK = 16
"""Rank of the LoRA column of ``at2po plan --cards`` when the profile trains all weights."""
WIKI18_PASSAGES = 21_015_324
ZERO_STAGES = ("none", "0", "1", "2", "3")
VERDICTS = ("fits", "tight", "does not fit")


FAISS_GPU_SCRATCH_BYTES = 1.5 * GIB
"""faiss-gpu's ``StandardGpuResources`` temporary memory per GPU that holds an index shard
(its default: 1.5 GiB on a card of more than 4 GiB), allocated once when the shard is made."""
DEFAULT_PLAN_METHOD = "at2po"
"""The method ``at2po plan`` counts when ``--method`` is not given."""


VLLM_KV_WARNING_SHARE = 0.25
"""Warn when vLLM's KV cache holds less than this share of the tokens the GPU's trajectories
need at full length: the engine then runs the batch in several waves (throughput, not memory)."""
SAMPLING_FP32_COPIES = 3
"""fp32 (rows, V) tensors the sampler holds at once: log-probabilities, probabilities and
``p·log p`` (at2po_lib.rollout.sampling)."""


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

    def lora_parameters(self, rank: int) -> int:
        """Adapter parameters of LoRA rank ``r`` on every linear layer (:data:`LORA_TARGETS`):
        per layer ``r·(in + out)`` summed over q ``(h, a·d)``, k and v ``(h, k·d)``, o
        ``(a·d, h)``, gate and up ``(h, I)``, down ``(I, h)``."""
        h, inter = self.hidden_size, self.intermediate_size
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        per_layer = (h + q) * 2 + (h + kv) * 2 + (h + inter) * 3
        return rank * per_layer * self.num_layers

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """``2 (k, v) · n_L · n_kv · d_head · dtype_bytes``."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


# The published config.json values of the paper's backbones (so a plan needs no download).
KNOWN_ARCHITECTURES: dict[str, Architecture] = {
    "Qwen/Qwen3-1.7B": Architecture(2048, 28, 16, 8, 128, 6144, 151936, True, qk_norm=True),
    "Qwen/Qwen3-4B": Architecture(2560, 36, 32, 8, 128, 9728, 151936, True, qk_norm=True),
    "Qwen/Qwen3-8B": Architecture(4096, 36, 32, 8, 128, 12288, 151936, False, qk_norm=True),
    "Qwen/Qwen2.5-7B": Architecture(3584, 28, 28, 4, 128, 18944, 152064, False, qkv_bias=True),
    "Qwen/Qwen2.5-7B-Instruct": Architecture(
        3584, 28, 28, 4, 128, 18944, 152064, False, qkv_bias=True
    ),
}


@dataclass(frozen=True)
class Encoder:
    parameters: int
    hidden_size: int
    dim: int  # embedding dimension stored in the index
    intermediate_size: int


KNOWN_ENCODERS: dict[str, Encoder] = {
    "intfloat/e5-base-v2": Encoder(109_482_240, 768, 768, 3072),
    "minilm-offline": Encoder(22_713_216, 384, 384, 1536),
}


@dataclass(frozen=True)
class Hardware:
    gpus: int
    gpu_memory_gib: float = 96.0  # the paper's H20
    zero_stage: str = "3"
    offload_optimizer: bool = False
    fused_lm_head: bool = True
    retriever_on_gpu: bool = True  # the retrieval server's faiss shards and encoder on the GPUs
    cpu_gflops: float = 1000.0  # sustained sgemm of a many-core server
    gpu_tflops: float = 40.0  # sustained fp32 sgemm of one datacenter GPU
    mean_searches: float = 3.7
    passages: int = WIKI18_PASSAGES


def architecture_of(profile_cfg: ProfileConfig) -> Architecture:
    """The policy's architecture: a known backbone, a local ``config.json``, or the tiny
    Qwen3 the profile builds (``policy.model`` unset)."""
    pol = profile_cfg.policy
    if pol.model is None:
        return Architecture(
            pol.hidden_size,
            pol.num_hidden_layers,
            pol.num_attention_heads,
            pol.num_key_value_heads,
            pol.attention_head_dim(),
            pol.intermediate_size,
            pol.vocab_size,
            True,
            qk_norm=True,
        )
    if pol.model in KNOWN_ARCHITECTURES:
        return KNOWN_ARCHITECTURES[pol.model]
    config = Path(pol.model) / "config.json"
    if not config.is_file():
        raise PlanError(
            f"policy.model={pol.model!r}: not a known backbone "
            f"({', '.join(KNOWN_ARCHITECTURES)}) and no {config}"
        )
    c = json.loads(config.read_text())
    heads = c["num_attention_heads"]
    return Architecture(
        c["hidden_size"],
        c["num_hidden_layers"],
        heads,
        c.get("num_key_value_heads", heads),
        c.get("head_dim") or c["hidden_size"] // heads,
        c["intermediate_size"],
        c["vocab_size"],
        bool(c.get("tie_word_embeddings", False)),
        qkv_bias="qwen2" in c.get("model_type", ""),
        qk_norm="qwen3" in c.get("model_type", ""),
    )


def encoder_of(profile_cfg: ProfileConfig) -> Encoder | None:
    """The dense encoder, None for BM25; an unknown one is an error naming it."""
    rcfg = profile_cfg.retrieval
    if rcfg.method != "dense":
        return None
    if rcfg.encoder not in KNOWN_ENCODERS:
        raise PlanError(
            f"retrieval.encoder={rcfg.encoder!r}: unknown to the plan "
            f"(known: {', '.join(KNOWN_ENCODERS)})"
        )
    return KNOWN_ENCODERS[rcfg.encoder]


def cuda_context_bytes(gpus: int) -> float:
    """``C_ctx + (C_nccl if N > 1)``: :data:`CUDA_CONTEXT_BYTES` per process, plus
    :data:`NCCL_BUFFER_BYTES` when there are other GPUs to talk to."""
    return float(CUDA_CONTEXT_BYTES + (NCCL_BUFFER_BYTES if gpus > 1 else 0))


def training_memory(params: int, hw: Hardware, lora_params: int = 0) -> dict[str, float]:
    """Weights, gradients and optimizer states per GPU in bytes.

    Full fine-tuning under ZeRO stage z (bf16 weights and gradients, fp32 Adam): weights
    ``2P`` (``/N`` at z = 3), gradients ``2P`` (``/N`` at z >= 2), optimizer states ``12P``
    (``/N`` at z >= 1; 0 with offload). Without DeepSpeed (``none``): fp32 weights ``4P``,
    fp32 gradients ``4P``, moments ``8P`` on every GPU.

    LoRA (``lora_params`` = A > 0): the frozen base in bf16 ``2P`` (``/N`` at z = 3), and for
    the fp32 adapters ``4A`` weights, ``4A`` gradients, ``8A`` moments (sharded as above)."""
    if hw.zero_stage not in ZERO_STAGES:
        raise PlanError(f"zero stage {hw.zero_stage!r}: expected one of {', '.join(ZERO_STAGES)}")
    n = hw.gpus
    stage = -1 if hw.zero_stage == "none" else int(hw.zero_stage)
    if lora_params:
        shard = n if stage >= 1 else 1
        optimizer = 0.0 if hw.offload_optimizer else 8.0 * lora_params / shard
        return {
            "weights": 2.0 * params / (n if stage >= 3 else 1) + 4.0 * lora_params,
            "gradients": 4.0 * lora_params / (n if stage >= 2 else 1),
            "optimizer states": optimizer,
        }
    if stage < 0:
        return {
            "weights": 4.0 * params,
            "gradients": 4.0 * params,
            "optimizer states": 8.0 * params,
        }
    optimizer = (
        0.0 if hw.offload_optimizer else ADAM_STATE_BYTES * params / (n if stage >= 1 else 1)
    )
    return {
        "weights": 2.0 * params / (n if stage >= 3 else 1),
        "gradients": 2.0 * params / (n if stage >= 2 else 1),
        "optimizer states": optimizer,
    }


def fp32_gradient_partition_bytes(trained_params: int, hw: Hardware) -> float:
    """``4P/N`` at ZeRO 1-3 without optimizer offload: at the optimizer step DeepSpeed turns its
    bf16 gradient partition into the fp32 gradient of its fp32 master partition (0 without
    DeepSpeed, where the gradients are fp32 already, and with offload, where it lives on the
    CPU). ``P``: the trained parameters (the adapters with LoRA)."""
    if hw.zero_stage in ("none", "0") or hw.offload_optimizer:
        return 0.0
    return 4.0 * trained_params / hw.gpus


def zero3_gathered_bytes(params: int, hw: Hardware) -> float:
    """``2·min(P, L)`` at ZeRO-3: the parameters gathered for the layers being computed, at
    most ``L`` = :data:`ZERO3_MAX_LIVE_PARAMETERS` (DeepSpeed's ``stage3_max_live_parameters``)
    at once, in bf16. 0 at other stages (every GPU holds the whole model already)."""
    return 2.0 * min(params, ZERO3_MAX_LIVE_PARAMETERS) if hw.zero_stage == "3" else 0.0


def autocast_copy_bytes(params: int, hw: Hardware, lora: bool, autocast: bool = True) -> float:
    """``2P`` without DeepSpeed and without LoRA under bf16 autocast (``train.bf16``): the
    weights are fp32 master weights (``run.master_weights_dtype``) and autocast casts each to
    bf16 for its matmul; the copies are cached for the forward pass and saved for backward.
    0 otherwise (DeepSpeed keeps bf16 weights; LoRA's base is bf16 already; no autocast, no
    copy)."""
    return 2.0 * params if hw.zero_stage == "none" and not lora and autocast else 0.0


def layer_activation_bytes(arch: Architecture, rows: int, seq: int) -> float:
    """``(21 + 8·I/h)·b·s·h``: the activations one decoder layer saves for backward (bf16),
    Korthikanti et al. 2022's ``34·b·s·h`` with flash attention (no ``s²`` term) and Qwen's
    layer instead of GPT's: attention ``11·b·s·h``; two RMSNorms that keep their input in
    fp32 (``2 × 4·b·s·h``, where a LayerNorm keeps ``2·b·s·h``); the MLP's input ``2·b·s·h``
    and its SwiGLU gate, up, SiLU and product outputs ``4 × 2·b·s·I``. Qwen3-8B
    (I = 3h): 45·b·s·h; Qwen3-4B (I = 3.8h): 51.4·b·s·h."""
    ratio = arch.intermediate_size / arch.hidden_size
    return (21.0 + 8.0 * ratio) * rows * seq * arch.hidden_size


def activation_memory(arch: Architecture, rows: int, seq: int, fused_lm_head: bool) -> float:
    """``2·n_L·b·s·h`` (checkpointed layer inputs, bf16) + one layer recomputed
    (:func:`layer_activation_bytes`) + ``4·b·s·V`` (the fp32 log-softmax; 0 with a fused LM
    head, which scores in chunks)."""
    bsh = rows * seq * arch.hidden_size
    logits = 0 if fused_lm_head else 4 * rows * seq * arch.vocab_size
    return 2.0 * arch.num_layers * bsh + layer_activation_bytes(arch, rows, seq) + logits


def lm_head_grad_bytes(arch: Architecture, hw: Hardware, lora: bool) -> float:
    """``4·V·h``: TRL's fused LM head accumulates the gradient of the head's weight in fp32
    (151,936 × 4,096 × 4 B = 2.32 GiB for Qwen3-8B), beside the bf16 gradients DeepSpeed keeps.
    0 without the fused head, without DeepSpeed (the gradients are fp32 already: counted
    there) and with LoRA (the head is frozen)."""
    if not hw.fused_lm_head or lora or hw.zero_stage == "none":
        return 0.0
    return 4.0 * arch.vocab_size * arch.hidden_size


def faiss_shard_bytes(passages: int, dim: int, hw: Hardware) -> float:
    """``n·d·2 / N``: the Flat index sharded over the N GPUs in fp16 (``dense.to_gpus``:
    ``useFloat16``); 0 with the retriever on the CPU. Wiki-18 with e5 (d = 768): 32.3 GB."""
    return passages * dim * 2.0 / hw.gpus if hw.retriever_on_gpu else 0.0


def faiss_scratch_bytes(hw: Hardware) -> float:
    """:data:`FAISS_GPU_SCRATCH_BYTES` on every GPU that holds a shard; 0 on the CPU."""
    return FAISS_GPU_SCRATCH_BYTES if hw.retriever_on_gpu else 0.0


def method_beta(profile_cfg: ProfileConfig, method: str) -> float:
    """The KL coefficient ``beta`` a run of ``method`` trains with: the method preset's, else
    the profile's ``train.beta`` (the order :func:`~.resolve.resolve_run` applies)."""
    return float(get_method(method).overrides.get("beta", profile_cfg.train.beta))


def reference_model_bytes(params: int, hw: Hardware, beta: float, weight_bytes: int) -> float:
    """``e·P`` (``/N`` under ZeRO-3) when ``beta != 0``, else 0: TRL's reference model, a copy
    of the policy loaded with the trainer's ``model_init_kwargs`` (``e`` bytes a weight: 4 for
    fp32 master weights without DeepSpeed, else the policy dtype's 2). TRL prepares it with
    DeepSpeed at ZeRO-3 only (stage 0 otherwise: whole on every GPU). Qwen3-1.7B in fp32:
    4 × 1.72e9 B = 6.41 GiB. With LoRA the caller passes ``beta = 0``: no copy is loaded."""
    if beta == 0:
        return 0.0
    return weight_bytes * float(params) / (hw.gpus if hw.zero_stage == "3" else 1)


def trainer_weight_bytes(profile_cfg: ProfileConfig, hw: Hardware) -> int:
    """Bytes a weight in the trainer's dtype (``run.master_weights_dtype``'s rule): fp32
    without DeepSpeed for a half-precision policy, else the policy dtype."""
    half = profile_cfg.policy.dtype in HALF_DTYPES
    if half and hw.zero_stage == "none" and profile_cfg.policy.lora_r <= 0:
        return 4
    return 2 if half else 4


def reference_rows(profile_cfg: ProfileConfig, hw: Hardware, method: str) -> dict[str, float]:
    """The reference model's row (both phases hold it: it is loaded once, for the whole run)."""
    params = architecture_of(profile_cfg).parameters()
    beta = 0.0 if profile_cfg.policy.lora_r > 0 else method_beta(profile_cfg, method)
    size = reference_model_bytes(params, hw, beta, trainer_weight_bytes(profile_cfg, hw))
    return {f"reference model (beta {beta:g})": size} if size else {}


def encoder_bytes(enc: Encoder, batch: int, length: int, fp16: bool) -> float:
    """``e·P_enc + e·B·s_enc·(2h + I)`` on GPU 0, where the server encodes queries (inference
    only: no activations are kept for a backward pass): the weights, and at the widest point
    of a layer the residual stream, its copy and the MLP's intermediate output for one batch
    of ``B = retrieval.batch_size`` queries padded to ``s_enc = retrieval.max_length`` tokens
    (``e`` = 2 bytes in fp16, else 4)."""
    e = 2.0 if fp16 else 4.0
    return e * enc.parameters + e * batch * length * (2 * enc.hidden_size + enc.intermediate_size)


def margin_bytes(gpu_bytes: float) -> float:
    """``max(0.05·G, 3 GiB)``: what the verdict keeps free of a ``G``-byte card."""
    return max(0.05 * gpu_bytes, 3.0 * GIB)


def verdict(total: float, gpu_bytes: float) -> str:
    """``fits`` up to ``G − margin``, ``tight`` up to ``G``, else ``does not fit``."""
    if total <= gpu_bytes - margin_bytes(gpu_bytes):
        return "fits"
    return "tight" if total <= gpu_bytes else "does not fit"


def master_weights_are_fp32(hw: Hardware, lora: bool) -> bool:
    """Without DeepSpeed and LoRA the trainer keeps fp32 master weights (``run.master_weights_dtype``)."""
    return hw.zero_stage == "none" and not lora


def rollout_dtype_bytes(profile_cfg: ProfileConfig, hw: Hardware, lora: bool) -> int:
    """``e``: bytes a value of the HF rollout's weights and KV cache on a GPU take:
    ``rollout.decode_dtype`` resolved for a CUDA device (:func:`at2po_lib.rollout.decoding.decode_dtype`)
    against the weights' dtype (fp32 master weights, or ``policy.dtype``)."""
    weights = "float32" if master_weights_are_fp32(hw, lora) else profile_cfg.policy.dtype
    run = decode_dtype(profile_cfg.rollout.decode_dtype, weights, "cuda")
    return 2 if run in HALF_DTYPES else 4


def rollout_weights_bytes(
    params: int, hw: Hardware, lora: bool, dtype_bytes: int, autocast: bool
) -> float:
    """Weights the HF rollout adds to those the trainer holds. With fp32 master weights: ``e·P``
    for a copy in a half-precision decode dtype (``e`` = 2: a bf16 rollout,
    :func:`at2po_lib.rollout.backends.decode_weights`), or, decoding the fp32 weights under
    bf16 autocast (``train.bf16``), ``2P`` for the casts autocast keeps during each forward.
    At ZeRO-3 ``2P·(1 − 1/N)``: the rest of the model gathered for generation (TRL's
    ``unwrap_model_for_generation``). Else 0."""
    if hw.zero_stage == "3":
        return 2.0 * params * (1.0 - 1.0 / hw.gpus)
    if not master_weights_are_fp32(hw, lora):
        return 0.0
    if dtype_bytes < 4:
        return float(dtype_bytes) * params
    return 2.0 * params if autocast else 0.0


def rollout_rows(rollout_cfg) -> tuple[int, int, int]:
    """``(r_0, r_1, L)``: chains a prompt starts in round 0, in each later round, and the
    rounds after the first, for ``rollout.expansion``: ``chain`` (``chains``, 0, 0); ``aepo``
    (``aepo_budget``, 0, 0: every branch may be open at once); trees ``M`` (``random``: its
    ``tree_grpo_trees``) then ``(M + L·K − r_0) / L``."""
    ro = rollout_cfg
    if ro.expansion == "chain":
        return ro.chains, 0, 0
    if ro.expansion == "aepo":
        return ro.aepo_budget, 0, 0
    first = ro.tree_grpo_trees if ro.expansion == "random" else ro.tree_m
    later = (ro.leaves_per_prompt(ro.expansion) - first) // ro.tree_l if ro.tree_l else 0
    return first, later, ro.tree_l


def prompt_cache_bytes(prompts: int, prompt_tokens: int, token_bytes: int) -> float:
    """``p·s_p·k``: each prompt's cache, prefilled once and shared by all its chains."""
    return float(prompts * prompt_tokens * token_bytes)


def kept_cache_bytes(
    prompts: int, first: int, later: int, rounds: int, seq: int, token_bytes: int
) -> float:
    """``p·(r_0 + (L−1)·r_1)·s·k``: at the last round, the caches of every chain of the earlier
    rounds, kept for the branches that start from them (0 without later rounds)."""
    if rounds < 1:
        return 0.0
    return float(prompts * (first + (rounds - 1) * later) * seq * token_bytes)


def working_kv_bytes(rows: int, seq: int, token_bytes: int) -> float:
    """``B·(s + 1)·k``: the working buffer of ``B`` rows decoded together (one column of slack
    for the padding a row writes while idle)."""
    return float(rows * (seq + 1) * token_bytes)


def copy_out_bytes(rows: int, seq: int, token_bytes: int, layers: int, grouping: str) -> float:
    """The rows' own caches alive beside the working buffer: ``round`` grouping ``B·s·k`` (a
    closed row's copy, taken while the buffer still holds it); ``turn`` grouping
    ``2·B·s·k + B·s·k/n_L`` (each chain's cache from its previous turn, still referenced until
    the call returns, and its new copy, taken one layer at a time: one layer's gather
    besides)."""
    own = rows * seq * token_bytes
    if grouping == "round":
        return float(own)
    return 2.0 * own + own / layers


def sampling_bytes(rows: int, vocab: int, dtype_bytes: int) -> float:
    """``B·V·(e + 4·3)``: the last position's logits in the decode dtype and the sampler's
    fp32 copies (:data:`SAMPLING_FP32_COPIES`)."""
    return float(rows * vocab * (dtype_bytes + 4 * SAMPLING_FP32_COPIES))


def hf_kv_rows(
    profile_cfg: ProfileConfig, hw: Hardware, arch: Architecture, dtype_bytes: int
) -> dict[str, float]:
    """The HF rollout's KV and sampling rows at its peak round (module docstring): round 0
    (``r_0`` rows, nothing kept) or round L (``r_1`` rows, the earlier rounds kept), whichever
    is larger."""
    ro = profile_cfg.rollout
    prompts = math.ceil(profile_cfg.train.prompts_per_step / hw.gpus)
    k = arch.kv_bytes_per_token(dtype_bytes)
    seq = ro.max_prompt_tokens + ro.max_response_tokens
    grouping = decode_grouping(ro.decode_grouping, "cuda")
    first, later, rounds = rollout_rows(ro)
    candidates = [(first, 0.0)]
    if rounds:
        candidates.append((later, kept_cache_bytes(prompts, first, later, rounds, seq, k)))
    best: dict[str, float] = {}
    for per_prompt, kept in candidates:
        rows = min(prompts * per_prompt, ro.max_batch_rows)
        terms = {
            "rollout: prompt caches": prompt_cache_bytes(prompts, ro.max_prompt_tokens, k),
            "rollout: earlier rounds' caches": kept,
            "rollout: working KV buffer": working_kv_bytes(rows, seq, k),
            f"rollout: copy-out ({grouping} grouping)": copy_out_bytes(
                rows, seq, k, arch.num_layers, grouping
            ),
            "rollout: sampling logits": sampling_bytes(rows, arch.vocab_size, dtype_bytes),
        }
        if sum(terms.values()) > sum(best.values()):
            best = terms
    return best


def rollout_memory(
    profile_cfg: ProfileConfig, hw: Hardware, method: str = DEFAULT_PLAN_METHOD
) -> dict[str, float]:
    """The rollout phase's rows of GPU 0 (bytes): the context, the trainer's weights and
    optimizer states (gradients too under DeepSpeed), then with vLLM its share, else the HF
    rollout's weights (:func:`rollout_weights_bytes`) and KV rows (:func:`hf_kv_rows`); the
    retriever's rows as in the update phase."""
    arch = architecture_of(profile_cfg)
    params = arch.parameters()
    lora_r = profile_cfg.policy.lora_r
    lora = arch.lora_parameters(lora_r) if lora_r > 0 else 0
    trained = training_memory(params, hw, lora)
    if hw.zero_stage == "none":
        trained["gradients"] = 0.0  # freed after every optimizer step (zero_grad to None)
    memory: dict[str, float] = {"CUDA context (+ NCCL)": cuda_context_bytes(hw.gpus), **trained}
    if profile_cfg.train.use_vllm:
        memory.update(vllm_memory(profile_cfg, hw, params)[0])
    else:
        e = rollout_dtype_bytes(profile_cfg, hw, bool(lora))
        memory["rollout: weights as run (copy / gathered)"] = rollout_weights_bytes(
            params, hw, bool(lora), e, profile_cfg.train.bf16
        )
        memory.update(hf_kv_rows(profile_cfg, hw, arch, e))
    memory.update(reference_rows(profile_cfg, hw, method))
    memory.update(retriever_memory(profile_cfg, hw))
    return memory


def vllm_memory(
    profile_cfg: ProfileConfig, hw: Hardware, params: int
) -> tuple[dict[str, float], int]:
    """vLLM's share ``u·G`` (module docstring): its bf16 weights ``2P``, KV cache ``u·G − 2P −
    2 GiB`` and overhead; and the tokens that KV cache holds."""
    tr, arch = profile_cfg.train, architecture_of(profile_cfg)
    share = tr.vllm_gpu_memory_utilization * hw.gpu_memory_gib * GIB
    kv_cache = share - 2.0 * params - VLLM_OVERHEAD_BYTES
    if kv_cache <= 0:
        raise PlanError(
            f"train.vllm_gpu_memory_utilization={tr.vllm_gpu_memory_utilization}: "
            f"{share / GIB:.1f} GiB cannot hold the weights "
            f"({2 * params / GIB:.1f} GiB) and vLLM's overhead"
        )
    rows = {
        "vLLM weights (bf16)": 2.0 * params,
        "vLLM KV cache": kv_cache,
        "vLLM overhead": float(VLLM_OVERHEAD_BYTES),
    }
    return rows, int(kv_cache // arch.kv_bytes_per_token())


def retriever_memory(profile_cfg: ProfileConfig, hw: Hardware) -> dict[str, float]:
    """The retrieval server's rows on GPU 0 (dense retrieval only)."""
    enc, rc = encoder_of(profile_cfg), profile_cfg.retrieval
    if enc is None:
        return {}
    return {
        "faiss shard (Flat, fp16)": faiss_shard_bytes(hw.passages, enc.dim, hw),
        "faiss-gpu scratch": faiss_scratch_bytes(hw),
        "encoder (GPU 0 only, inference)": (
            encoder_bytes(enc, rc.batch_size, rc.max_length, rc.fp16)
            if hw.retriever_on_gpu
            else 0.0
        ),
    }


def memory_per_gpu(
    profile_cfg: ProfileConfig, hw: Hardware, method: str = DEFAULT_PLAN_METHOD
) -> tuple[dict[str, float], int]:
    """The update phase's memory rows of GPU 0 (what, bytes) and the vLLM KV cache's tokens."""
    arch = architecture_of(profile_cfg)
    tr = profile_cfg.train
    ro = profile_cfg.rollout
    params = arch.parameters()
    lora = arch.lora_parameters(profile_cfg.policy.lora_r) if profile_cfg.policy.lora_r > 0 else 0
    seq = ro.max_prompt_tokens + ro.max_response_tokens
    memory: dict[str, float] = {"CUDA context (+ NCCL)": cuda_context_bytes(hw.gpus)}
    memory.update(training_memory(params, hw, lora))
    memory["fp32 gradient partition (step)"] = fp32_gradient_partition_bytes(lora or params, hw)
    memory["ZeRO-3 gathered parameters"] = zero3_gathered_bytes(params, hw)
    memory["bf16 autocast copy of the weights"] = autocast_copy_bytes(
        params, hw, bool(lora), tr.bf16
    )
    memory["activations (checkpointed)"] = activation_memory(
        arch, tr.micro_batch_rows or 1, seq, hw.fused_lm_head
    )
    memory["fused LM head fp32 weight gradient"] = lm_head_grad_bytes(arch, hw, bool(lora))
    kv_tokens = 0
    if tr.use_vllm:
        rows, kv_tokens = vllm_memory(profile_cfg, hw, params)
        memory.update(rows)
    memory.update(reference_rows(profile_cfg, hw, method))
    memory.update(retriever_memory(profile_cfg, hw))
    kept = set(training_memory(params, hw, lora))  # always shown, 0 included (offload)
    return {k: v for k, v in memory.items() if v or k in kept}, kv_tokens


def plan(
    profile_cfg: ProfileConfig, hw: Hardware, method: str = DEFAULT_PLAN_METHOD
) -> dict[str, Any]:
    """The plan of one step of ``method``: ``memory`` (rows of (what, bytes) on GPU 0, the
    fullest), ``verdict``, ``step`` and ``retrieval``."""
    if hw.gpus < 1:
        raise PlanError(f"--gpus {hw.gpus}: at least 1")
    if hw.gpu_memory_gib <= 0:
        raise PlanError(f"--gpu-memory-gib {hw.gpu_memory_gib:g}: must be positive")
    arch, enc = architecture_of(profile_cfg), encoder_of(profile_cfg)
    ro, tr, rc = profile_cfg.rollout, profile_cfg.train, profile_cfg.retrieval
    seq = ro.max_prompt_tokens + ro.max_response_tokens
    gpu_bytes = hw.gpu_memory_gib * GIB
    update, kv_tokens = memory_per_gpu(profile_cfg, hw, method)
    kept = set(training_memory(1, hw))
    rollout = {k: v for k, v in rollout_memory(profile_cfg, hw, method).items() if v or k in kept}
    phases = {"rollout": rollout, "update": update}
    peak = max(phases, key=lambda name: sum(phases[name].values()))
    memory = phases[peak]
    total = sum(memory.values())
    needed_tokens = math.ceil(prompts_trajectories(profile_cfg) / hw.gpus) * seq
    warnings = []
    if tr.use_vllm and kv_tokens < VLLM_KV_WARNING_SHARE * needed_tokens:
        warnings.append(
            f"vLLM's KV cache holds {kv_tokens:,} tokens, {kv_tokens / needed_tokens:.1%} of the "
            f"{needed_tokens:,} this GPU's trajectories need at full length: the engine runs the "
            f"batch in ~{math.ceil(needed_tokens / max(kv_tokens, 1)):,} waves (slow, not out of "
            "memory); raise train.vllm_gpu_memory_utilization or lower rollout lengths"
        )
    flop_per_query = 2.0 * hw.passages * enc.dim if enc is not None else 0.0

    leaves = ro.leaves_per_prompt("entropy")  # M + L*K
    prompts = tr.prompts_per_step
    burst = prompts * leaves
    resampled = leaves - ro.tree_m  # L*K chains, each re-sampled from halfway down on average
    expected_queries = prompts * (ro.tree_m * hw.mean_searches + resampled * hw.mean_searches / 2)
    needed_qps = burst / rc.timeout_s
    cpu_qps = hw.cpu_gflops * 1e9 / flop_per_query if flop_per_query else math.inf
    gpu_qps = hw.gpus * hw.gpu_tflops * 1e12 / flop_per_query if flop_per_query else math.inf
    decision = verdict(total, gpu_bytes)
    return {
        "method": method,
        "parameters": arch.parameters(),
        "memory": memory,
        "phases": phases,
        "phase_totals": {name: sum(rows.values()) for name, rows in phases.items()},
        "peak_phase": peak,
        "warnings": warnings,
        "total_bytes": total,
        "gpu_bytes": gpu_bytes,
        "margin_bytes": margin_bytes(gpu_bytes),
        "verdict": decision,
        "fits": decision == "fits",
        "step": {
            "leaves per prompt": leaves,
            "trajectories": burst,
            "generated tokens (upper bound)": burst * ro.max_response_tokens,
            "KV tokens per GPU (vLLM)": kv_tokens,
            "KV tokens the GPU's trajectories need at full length": needed_tokens,
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


def prompts_trajectories(profile_cfg: ProfileConfig) -> int:
    """Trajectories of one step: ``prompts_per_step · (M + L·K)``."""
    return profile_cfg.train.prompts_per_step * profile_cfg.rollout.leaves_per_prompt("entropy")


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def format_plan(result: dict[str, Any], profile: str) -> str:
    """The plan as a Markdown table (memory in GiB on GPU 0 in each phase, the larger one's
    total, the verdict, warnings, then the step's counts)."""
    hw = result["hardware"]
    phases = result["phases"]
    lines = [
        f"plan: profile {profile}, method {result['method']}, {hw['gpus']} GPU(s) of "
        f"{hw['gpu_memory_gib']:g} GiB, "
        f"ZeRO {hw['zero_stage']}{' + optimizer offload' if hw['offload_optimizer'] else ''}"
        f"{'' if hw['retriever_on_gpu'] else ', retriever on CPU'}; "
        f"policy {result['parameters'] / 1e9:.3f} B parameters",
        "",
        "| memory on GPU 0 (the fullest) | rollout GiB | update GiB |",
        "| --- | ---: | ---: |",
    ]
    names = list(dict.fromkeys([*phases["update"], *phases["rollout"]]))

    def cell(phase: str, what: str) -> str:
        return f"{phases[phase][what] / GIB:,.2f}" if what in phases[phase] else ""

    lines += [f"| {what} | {cell('rollout', what)} | {cell('update', what)} |" for what in names]
    totals = result["phase_totals"]
    lines.append(
        f"| **phase total** | {totals['rollout'] / GIB:,.2f} | {totals['update'] / GIB:,.2f} |"
    )
    free = (result["gpu_bytes"] - result["total_bytes"]) / GIB
    lines += [
        f"| **total** (the {result['peak_phase']} phase, of {result['gpu_bytes'] / GIB:g}) | "
        f"**{result['total_bytes'] / GIB:,.2f}** | |",
        f"| verdict (margin {result['margin_bytes'] / GIB:.1f} GiB) | {result['verdict']} "
        f"({free:,.1f} GiB free) | |",
    ]
    lines += [f"\nwarning: {w}" for w in result["warnings"]]
    lines += ["", "| per step | value |", "| --- | ---: |"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in {**result["step"], **result["retrieval"]}.items()]
    return "\n".join(lines)


def card_table(
    profile_cfg: ProfileConfig,
    hw: Hardware,
    cards_gib: list[float],
    lora_rank: int = DEFAULT_LORA_RANK,
    method: str = DEFAULT_PLAN_METHOD,
) -> list[dict[str, Any]]:
    """One row per card size: the verdict and total of the profile as it is, and with LoRA
    (the profile's rank, else ``lora_rank``) when it trains all weights."""
    rank = profile_cfg.policy.lora_r or lora_rank
    lora_cfg = dataclasses.replace(
        profile_cfg, policy=dataclasses.replace(profile_cfg.policy, lora_r=rank)
    )
    rows = []
    for gib in cards_gib:
        card = dataclasses.replace(hw, gpu_memory_gib=gib)
        row: dict[str, Any] = {"card (GiB)": gib}
        for label, cfg in (("as configured", profile_cfg), (f"LoRA r={rank}", lora_cfg)):
            try:
                result = plan(cfg, card, method)
                row[label] = f"{result['verdict']} ({result['total_bytes'] / GIB:,.1f} GiB)"
            except PlanError as exc:
                row[label] = f"does not fit ({exc})"
        rows.append(row)
    return rows


def format_cards(
    rows: list[dict[str, Any]], profile: str, hw: Hardware, method: str = DEFAULT_PLAN_METHOD
) -> str:
    """:func:`card_table` as Markdown."""
    header = list(rows[0])
    lines = [
        f"plan: profile {profile}, method {method}, on {hw.gpus} GPU(s), ZeRO {hw.zero_stage}"
        f"{'' if hw.retriever_on_gpu else ', retriever on CPU'}",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    lines += [
        "| "
        + " | ".join(f"{row[k]:g}" if isinstance(row[k], float) else str(row[k]) for k in header)
        + " |"
        for row in rows
    ]
    return "\n".join(lines)
