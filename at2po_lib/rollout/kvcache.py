"""Key/value caches for turn-level rollouts: per-sequence prefixes and a batched working cache.

Why this module exists: a tree rollout re-samples a turn from a context the policy has already
read (its parent's). Recomputing that shared prefix for every branch is what makes naive tree
rollouts slow; instead each finished turn leaves behind a :class:`KVPrefix` (the keys and values
of one sequence, compacted, no padding), and a branch starts from a *slice* of its ancestor's
prefix. Slicing costs nothing: K/V at a position depend only on the tokens up to it (causal
attention), so the first ``n`` positions of any descendant's cache are the cache of its first
``n`` tokens.

:class:`BatchCache` is the working cache of one batched turn: every row's prefix is copied
right-aligned into a preallocated buffer (left padding, attention mask 0), the new tokens are
written in place (no ``torch.cat`` per step, which copies the whole cache every token), and
:meth:`BatchCache.extract` compacts each row back into a :class:`KVPrefix` by dropping the
padding and the holes left where a row was idle.

Shapes: buffers are (B, H_kv, capacity, d) per layer; a prefix is (H_kv, T, d) per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


@dataclass(frozen=True)
class KVPrefix:
    """Keys/values of the first ``length`` tokens of one sequence.

    ``keys[l]``/``values[l]`` have shape (H_kv, T, d) with ``T >= length`` (a view into a
    larger tensor is fine: only the first ``length`` positions are ever read).
    """

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    length: int

    def truncate(self, length: int) -> KVPrefix:
        """The prefix of the first ``length`` tokens (a view, no copy)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a KV prefix of {self.length} tokens to {length}")
        return KVPrefix(self.keys, self.values, length)

    @property
    def num_bytes(self) -> int:
        per_token = sum(k[:, :1].numel() * k.element_size() for k in self.keys) * 2
        return per_token * self.length


class _BufferLayer(DynamicLayer):
    """A ``DynamicLayer`` that writes new keys/values into a preallocated buffer.

    ``self.keys``/``self.values`` are views of the filled part, so every ``transformers`` code
    path that reads a ``DynamicLayer`` keeps working.
    """

    def __init__(self, key_buffer: torch.Tensor, value_buffer: torch.Tensor, filled: int) -> None:
        super().__init__()
        self.key_buffer, self.value_buffer, self.filled = key_buffer, value_buffer, filled
        self.device, self.dtype = key_buffer.device, key_buffer.dtype
        self.is_initialized = True
        self._refresh()

    def _refresh(self) -> None:
        self.keys = self.key_buffer[:, :, : self.filled]
        self.values = self.value_buffer[:, :, : self.filled]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("a buffer layer is created initialised")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        new = key_states.shape[-2]
        end = self.filled + new
        if end > self.key_buffer.shape[2]:
            raise RuntimeError(f"KV buffer overflow: {end} > capacity {self.key_buffer.shape[2]}")
        self.key_buffer[:, :, self.filled:end] = key_states
        self.value_buffer[:, :, self.filled:end] = value_states
        self.filled = end
        self._refresh()
        return self.keys, self.values

    def select_rows(self, rows: torch.Tensor) -> None:
        self.key_buffer = self.key_buffer.index_select(0, rows)
        self.value_buffer = self.value_buffer.index_select(0, rows)
        self._refresh()


class BatchCache:
    """The cache of one batched turn (B rows), with a key-validity mask.

    ``valid`` (B, capacity) bool marks positions that hold a real token of that row; the model
    is always called with an additive 4-D mask built from it (:meth:`attention_bias`).
    """

    def __init__(self, prefixes: Sequence[KVPrefix | None], num_layers: int, num_kv_heads: int,
                 head_dim: int, capacity_after: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        lengths = [0 if p is None else p.length for p in prefixes]
        self.width = max(lengths, default=0)  # columns used by cached prefixes
        batch = len(prefixes)
        capacity = self.width + capacity_after
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        layers = []
        for layer in range(num_layers):
            kbuf = torch.zeros(batch, num_kv_heads, capacity, head_dim, dtype=dtype, device=device)
            vbuf = torch.zeros_like(kbuf)
            for row, (prefix, n) in enumerate(zip(prefixes, lengths)):
                if n:  # right-align the prefix so every row's newest token is in the last column
                    kbuf[row, :, self.width - n:self.width] = prefix.keys[layer][:, :n]
                    vbuf[row, :, self.width - n:self.width] = prefix.values[layer][:, :n]
            layers.append(_BufferLayer(kbuf, vbuf, self.width))
        for row, n in enumerate(lengths):
            self.valid[row, self.width - n:self.width] = True
        self.cache = DynamicCache()
        self.cache.layers = layers
        self.filled = self.width

    @property
    def layers(self) -> list[_BufferLayer]:
        return self.cache.layers  # type: ignore[return-value]

    def attention_bias(self, new_valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask (B, 1, q, filled + q) for q new columns with validity ``new_valid`` (B, q).

        Key j is visible to query i iff it is valid and not in the future (column order is time
        order: causal by column). Fully masked rows (padding queries) get a uniform softmax
        instead of NaN, because the additive mask is finite.
        """
        q = new_valid.shape[1]
        end = self.filled + q
        self.valid[:, self.filled:end] = new_valid
        keys_valid = self.valid[:, :end]  # (B, K)
        cols = torch.arange(end, device=new_valid.device)
        query_cols = self.filled + torch.arange(q, device=new_valid.device)
        causal = cols[None, :] <= query_cols[:, None]  # (q, K)
        visible = keys_valid[:, None, :] & causal[None]  # (B, q, K)
        bias = torch.zeros(visible.shape, dtype=dtype, device=new_valid.device)
        bias.masked_fill_(~visible, torch.finfo(dtype).min)
        return bias[:, None]

    def advance(self, q: int) -> None:
        """Record that the model wrote ``q`` new columns (after a forward call)."""
        self.filled += q

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (drop finished ones so they stop costing compute)."""
        for layer in self.layers:
            layer.select_rows(rows)
        self.valid = self.valid.index_select(0, rows)

    def extract(self, rows: torch.Tensor | None = None) -> list[KVPrefix]:
        """Compact ``rows`` (default: all) into :class:`KVPrefix` objects of their valid
        positions: one gather per layer for all rows, then one exact-length copy per row."""
        valid = self.valid[:, : self.filled]
        if rows is not None:
            valid = valid.index_select(0, rows)
        counts = valid.sum(dim=1)
        width = int(counts.max()) if counts.numel() else 0
        # Stable sort puts each row's valid columns first, in time order.
        order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices[:, :width]
        keys, values = [], []
        for layer in self.layers:
            lk, lv = layer.keys, layer.values
            if rows is not None:
                lk, lv = lk.index_select(0, rows), lv.index_select(0, rows)
            index = order[:, None, :, None].expand(-1, lk.shape[1], -1, lk.shape[3])
            keys.append(torch.gather(lk, 2, index))
            values.append(torch.gather(lv, 2, index))
        # Each prefix gets its own exact-length copy: a view would keep the whole padded batch
        # tensor alive for as long as any one chain of the batch may still be branched from.
        return [
            KVPrefix(tuple(k[row, :, :n].clone() for k in keys),
                     tuple(v[row, :, :n].clone() for v in values), int(n))
            for row, n in enumerate(counts.tolist())
        ]
