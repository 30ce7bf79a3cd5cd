"""The CPU's floor for a tiny step's parts: this machine's matmul rate, measured in the run,
and the FLOPs a causal LM must spend on a batch of rows.

A transformer's work per token is its linear layers (2 FLOP per weight per token forward),
attention (2 · 2 · heads · head_dim FLOP per attended key: scores and the weighted sum) and,
where a token is scored or sampled, the LM head (2 · hidden · vocab). A backward pass costs
twice its forward. The floor of a part is its FLOPs at the measured fp32 matmul rate of one
thread: what the part would take if every FLOP ran at the speed of one large matmul. Nothing
here is fitted to the code it measures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


def matmul_rate(rows: int = 4096, hidden: int = 128, ffn: int = 512, seconds: float = 0.5) -> float:
    """FLOP/s of an fp32 ``(rows, hidden) @ (hidden, ffn)`` product on this process's torch
    threads, best of repeated calls over about ``seconds`` (the shape of a tiny model's MLP)."""
    a, b = torch.randn(rows, hidden), torch.randn(hidden, ffn)
    for _ in range(3):
        a @ b
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.process_time()
        for _ in range(10):
            a @ b
        best = min(best, (time.process_time() - start) / 10)
    return 2.0 * rows * hidden * ffn / max(best, 1e-9)


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP count reads of a causal LM's config."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def of(cls, config) -> ModelShape:
        heads = config.num_attention_heads
        return cls(
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            ffn=config.intermediate_size,
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", heads) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            vocab=config.vocab_size,
        )

    @property
    def linear_per_token(self) -> float:
        """Forward FLOPs of one token through the linear layers of every block."""
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        mlp = 3 * self.hidden * self.ffn
        return 2.0 * self.layers * (q_o + k_v + mlp)

    @property
    def attention_per_pair(self) -> float:
        """Forward FLOPs of one (query, key) pair in every block."""
        return 2.0 * 2.0 * self.layers * self.heads * self.head_dim

    @property
    def head_per_token(self) -> float:
        return 2.0 * self.hidden * self.vocab

    def forward_flops(self, tokens: float, pairs: float, headed: float) -> float:
        """Forward FLOPs of ``tokens`` positions attending ``pairs`` keys in all, ``headed`` of
        them through the LM head."""
        return (
            tokens * self.linear_per_token
            + pairs * self.attention_per_pair
            + headed * self.head_per_token
        )


def causal_pairs(lengths) -> float:
    """(query, key) pairs of causal attention over rows of these lengths: L(L+1)/2 each."""
    return float(sum(n * (n + 1) / 2 for n in lengths))
