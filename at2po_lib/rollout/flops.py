r"""The FLOPs of a rollout's real tokens, and this machine's matmul rate: the rollout's floor.

For a Qwen3-shaped decoder (``L`` layers, hidden ``h``, ``H`` query and ``H_kv`` key/value heads
of size ``d``, FFN width ``f``, vocabulary ``V``) a token run through the model costs

.. math::
    2 L \big(h H d + 2 h H_{kv} d + H d h + 3 h f\big)

in its matmuls, each causal query-key pair ``4 L H d`` (scores and the weighted sum), and each
sampled token's logits row ``2 h V``. Padding, masked columns, rows idling in a batch and the
logits of a prefill that samples nothing are left out: those are what a rollout wastes, so
:func:`rollout_flops` of a backend's :class:`~.turns.BackendStats` (tokens run, query-key pairs,
sampled tokens) over :func:`matmul_rate` is the time the rollout would take at this machine's
matmul rate: its floor. Norms, rotary embeddings, softmax and sampling are not counted (they are
memory-bound and small beside the matmuls at these shapes).

``benchmarks/bench_rollout_floor.py`` prints each rollout's ratio to its floor; a training
benchmark can count a step's rollout the same way: ``rollout_flops(model.config, backend.stats)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .turns import BackendStats

RATE_SHAPE = (2048, 128, 512)
"""``(rows, inner, outer)`` of the matmul :func:`matmul_rate` times: a prefill chunk's tokens
through the toy policy's FFN (hidden 128, FFN 512)."""
RATE_SECONDS = 0.5
"""CPU seconds :func:`matmul_rate` spends timing (after one warm-up product)."""


@dataclass(frozen=True)
class TokenCosts:
    """FLOPs of one token's matmuls, one query-key pair, one logits row."""

    per_token: float
    per_pair: float
    per_logit_row: float


def token_costs(config) -> TokenCosts:
    """:class:`TokenCosts` of a ``transformers`` decoder config (module docstring)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden, layers = text.hidden_size, text.num_hidden_layers
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    per_layer = hidden * heads * head_dim * 2 + 2 * hidden * kv_heads * head_dim
    per_layer += 3 * hidden * text.intermediate_size
    return TokenCosts(
        per_token=2.0 * layers * per_layer,
        per_pair=4.0 * layers * heads * head_dim,
        per_logit_row=2.0 * hidden * text.vocab_size,
    )


def causal_pairs(first: int, count: int) -> int:
    """Query-key pairs of ``count`` tokens at positions ``first, first + 1, ...``: each reads
    every key up to its own, ``sum(t + 1)``."""
    return count * first + count * (count + 1) // 2


def rollout_flops(config, stats: BackendStats) -> float:
    """FLOPs of the real tokens a backend ran since ``stats`` were reset (module docstring)."""
    costs = token_costs(config)
    tokens = stats.prefill_tokens + stats.decode_tokens
    return (
        tokens * costs.per_token
        + stats.attention_pairs * costs.per_pair
        + stats.generated_tokens * costs.per_logit_row
    )


def matmul_rate(shape: tuple[int, int, int] = RATE_SHAPE, seconds: float = RATE_SECONDS) -> float:
    """FLOP per CPU second of an fp32 ``torch.matmul`` of ``shape`` on the current thread count.

    CPU time, not wall time: on a shared machine the wall clock counts other processes' turns,
    and the rollouts it is compared with are timed in CPU time too."""
    rows, inner, outer = shape
    left, right = torch.randn(rows, inner), torch.randn(inner, outer)
    torch.matmul(left, right)  # warm-up: allocation, kernel choice
    runs, start = 0, time.process_time()
    while (spent := time.process_time() - start) < seconds:
        torch.matmul(left, right)
        runs += 1
    return 2.0 * rows * inner * outer * runs / spent
