r"""A lean forward for the rollout: a Qwen3 causal LM's own operators, called without the
``transformers`` module machinery around them.

Why: the toy policy (4 layers, hidden 128) computes a decode step of ~30 rows in ~1 ms of matmuls,
and ``model(...)`` adds Python around them: module ``__call__`` hooks, keyword plumbing, output
capturing, mask and cache dispatch (torch.profiler put the call's own self time at
~3.7 ms; timed without the profiler, this function saves 0.5-1 ms of a ~7 ms decode call). This function runs the same ATen operators in the same
order on the same tensors (embedding, RMSNorm as Qwen3 writes it, q/k/v projections, per-head
q/k norms, rotary embedding, the cache's ``update``, :func:`~.backends.grouped_attention`, the
output projection, the SwiGLU MLP, the final norm, the LM head on the last position), so its
logits and the keys/values it writes are **bit-identical** to ``model(input_ids,
attention_mask=bias, position_ids, cache, logits_to_keep=1)`` with the grouped attention
(tested with ``torch.equal``): no sampled token, log-probability or draw changes. The
attention is the caller's: the backend passes :func:`~.backends.fused_prefill_attention` by
default (prefill queries through PyTorch's fused kernel, fp32 rounding; decode steps unchanged).

:func:`lean_forward_for` returns None for anything it does not replicate exactly (another
architecture, a PEFT wrapper, sliding windows, a non-default rotary scaling, another
activation); the backend then calls the model as before. It has no dropout: the backend decodes
in eval mode only.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

LeanForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, object], torch.Tensor]
"""``forward(ids (B, q), bias (B, 1, q, K), positions (B, q), cache) -> logits (B, V)`` of each
row's last position; ``cache`` is a ``transformers`` cache whose ``layers[i].update`` writes
layer ``i``'s new keys/values and returns the keys/values attention reads."""


def rms_norm(norm: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """``Qwen3RMSNorm.forward``, operator for operator."""
    input_dtype = hidden.dtype
    hidden = hidden.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + norm.variance_epsilon)
    return norm.weight * hidden.to(input_dtype)


def linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``nn.Linear.forward`` (its bias too: a stand-in policy biases its LM head)."""
    return F.linear(x, module.weight, module.bias)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_cos_sin(
    rotary: torch.nn.Module, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Qwen3RotaryEmbedding.forward`` (default rotary type), unsqueezed for the heads."""
    freqs = positions[..., None].float() * rotary.inv_freq.to(
        device=positions.device, dtype=torch.float
    )
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * rotary.attention_scaling
    sin = emb.sin() * rotary.attention_scaling
    return cos.to(dtype=dtype).unsqueeze(1), sin.to(dtype=dtype).unsqueeze(1)


def _supported(model) -> bool:
    """Whether :func:`lean_forward_for` replicates ``model`` exactly (module docstring)."""
    config = getattr(model, "config", None)
    if type(model).__name__ != "Qwen3ForCausalLM" or config is None:
        return False
    rope = getattr(config, "rope_parameters", None) or {}
    return (
        getattr(config, "hidden_act", None) == "silu"
        and rope.get("rope_type", "default") == "default"
        and all(t == "full_attention" for t in getattr(config, "layer_types", []))
    )


def lean_forward_for(model, attention: Callable) -> LeanForward | None:
    """The lean forward of ``model`` with ``attention`` (the backend's grouped attention:
    ``attention(module, q, k, v, bias, scaling) -> (out, _)``), or None where it would not be
    bit-identical to the model's own forward (module docstring). Parameters are read at every
    call, so a decode-dtype copy of the weights (``decode_weights``) is what runs."""
    if not _supported(model):
        return None
    body, head = model.model, model.lm_head
    layers = list(body.layers[: model.config.num_hidden_layers])

    def forward(
        ids: torch.Tensor, bias: torch.Tensor, positions: torch.Tensor, cache
    ) -> torch.Tensor:
        hidden = F.embedding(ids, body.embed_tokens.weight, body.embed_tokens.padding_idx)
        cos, sin = rotary_cos_sin(body.rotary_emb, positions, hidden.dtype)
        for index, layer in enumerate(layers):
            hidden = _layer(layer, hidden, cos, sin, bias, cache.layers[index], attention)
        hidden = rms_norm(body.norm, hidden)
        return linear(head, hidden[:, -1:, :])[:, -1]

    return forward


def _layer(layer, hidden, cos, sin, bias, cache_layer, attention) -> torch.Tensor:
    """``Qwen3DecoderLayer.forward`` with ``Qwen3Attention.forward`` inlined."""
    attn = layer.self_attn
    residual = hidden
    hidden = rms_norm(layer.input_layernorm, hidden)
    input_shape = hidden.shape[:-1]
    hidden_shape = (*input_shape, -1, attn.head_dim)
    query = rms_norm(attn.q_norm, linear(attn.q_proj, hidden).view(hidden_shape))
    key = rms_norm(attn.k_norm, linear(attn.k_proj, hidden).view(hidden_shape))
    value = linear(attn.v_proj, hidden).view(hidden_shape).transpose(1, 2)
    query, key = query.transpose(1, 2), key.transpose(1, 2)
    query = (query * cos) + (rotate_half(query) * sin)
    key = (key * cos) + (rotate_half(key) * sin)
    key, value = cache_layer.update(key, value)
    out, _ = attention(attn, query, key, value, bias, attn.scaling)
    out = linear(attn.o_proj, out.reshape(*input_shape, -1).contiguous())
    hidden = residual + out
    residual = hidden
    hidden = rms_norm(layer.post_attention_layernorm, hidden)
    mlp = layer.mlp
    hidden = linear(
        mlp.down_proj, F.silu(linear(mlp.gate_proj, hidden)) * linear(mlp.up_proj, hidden)
    )
    return residual + hidden
