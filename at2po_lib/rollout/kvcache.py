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

:class:`RowCache` is the working cache of a decode call that lasts a whole expansion round
(``rollout.decode_grouping = round``, :mod:`.session`): rows are left-aligned (row ``r``'s token at
position ``t`` sits in column ``t``, no holes), every forward writes each row at its own columns,
so a row can take an observation's tokens at any step while the others decode, and a row's
prefix is a plain slice of its first ``length`` columns.

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
        self.key_buffer[:, :, self.filled : end] = key_states
        self.value_buffer[:, :, self.filled : end] = value_states
        self.filled = end
        self._refresh()
        return self.keys, self.values

    def select_rows(self, rows: torch.Tensor) -> None:
        self.key_buffer = _select_filled(self.key_buffer, rows, self.filled)
        self.value_buffer = _select_filled(self.value_buffer, rows, self.filled)
        self._refresh()

    def release(self) -> None:
        """Drop the buffers (after the final copy-out): the memory goes back at once."""
        self.key_buffer = self.value_buffer = self.keys = self.values = None


def _padded_buffer(
    shape: tuple[int, int, int, int],
    lengths: Sequence[int],
    width: int,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """A (B, H_kv, capacity, d) buffer whose padding columns (row ``r``'s first
    ``width - lengths[r]``) are zero and the rest uninitialised. Why: the columns a short row
    leaves empty before its right-aligned prefix are read by the attention (and masked), so they
    must be finite; the prefix columns are copied in and every later column is written by a
    forward before any forward reads it. Zeroing each row's whole turn budget (768 columns on
    the tiny profile) was ~15% of a rollout's CPU time."""
    buffer = torch.empty(shape, dtype=dtype, device=device)
    for row, length in enumerate(lengths):
        if length < width:
            buffer[row, :, : width - length].zero_()
    return buffer


def _select_filled(buffer: torch.Tensor, rows: torch.Tensor, filled: int) -> torch.Tensor:
    """``buffer.index_select(0, rows)`` where only the first ``filled`` columns are copied (the
    others hold nothing yet: :func:`_padded_buffer`)."""
    out = buffer.new_empty((rows.shape[0],) + tuple(buffer.shape[1:]))
    torch.index_select(buffer[:, :, :filled], 0, rows, out=out[:, :, :filled])
    return out


class BatchCache:
    """The cache of one batched turn (B rows), with a key-validity mask.

    ``valid`` (B, capacity) bool marks positions that hold a real token of that row; the model
    is always called with an additive 4-D mask built from it (:meth:`attention_bias`).
    """

    def __init__(
        self,
        prefixes: Sequence[KVPrefix | None],
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        capacity_after: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        lengths = [0 if p is None else p.length for p in prefixes]
        self.width = max(lengths, default=0)  # columns used by cached prefixes
        batch = len(prefixes)
        capacity = self.width + capacity_after
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        layers = []
        for layer in range(num_layers):
            shape = (batch, num_kv_heads, capacity, head_dim)
            kbuf = _padded_buffer(shape, lengths, self.width, dtype, device)
            vbuf = _padded_buffer(shape, lengths, self.width, dtype, device)
            for row, (prefix, n) in enumerate(zip(prefixes, lengths)):
                # right-align the prefix so every row's newest token is in the last column (a
                # prefix without tensors only reserves its columns: :meth:`reserved`)
                if n and prefix.keys:
                    kbuf[row, :, self.width - n : self.width] = prefix.keys[layer][:, :n]
                    vbuf[row, :, self.width - n : self.width] = prefix.values[layer][:, :n]
            layers.append(_BufferLayer(kbuf, vbuf, self.width))
        for row, n in enumerate(lengths):
            self.valid[row, self.width - n : self.width] = True
        self.cache = DynamicCache()
        self.cache.layers = layers
        self.filled = self.width

    @classmethod
    def reserved(
        cls,
        lengths: Sequence[int],
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        capacity_after: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> BatchCache:
        """A cache whose row ``r`` has ``lengths[r]`` valid columns, right-aligned, not filled
        yet: :meth:`copy_rows_from` fills them from the caches the rows were prefilled in."""
        placeholders = [KVPrefix((), (), n) for n in lengths]
        return cls(placeholders, num_layers, num_kv_heads, head_dim, capacity_after, dtype, device)

    def copy_rows_from(
        self,
        rows: Sequence[int],
        source: BatchCache,
        prefix_lengths: Sequence[int],
        new_lengths: Sequence[int],
    ) -> None:
        """Fill the reserved columns of ``rows`` with row ``i`` of ``source``: its prefix of
        ``prefix_lengths[i]`` columns (right-aligned before ``source.width``) and the
        ``new_lengths[i]`` tokens a forward wrote after it (right-aligned before
        ``source.filled``). Plain slice copies: no gather and no intermediate prefix, where
        :meth:`extract` and a new cache would copy every column twice more."""
        end, source_width, source_end = self.width, source.width, source.filled
        for target, origin in zip(self.layers, source.layers):
            for into, out_of in (
                (target.key_buffer, origin.key_buffer),
                (target.value_buffer, origin.value_buffer),
            ):
                for i, (row, cached, new) in enumerate(zip(rows, prefix_lengths, new_lengths)):
                    into[row, :, end - new - cached : end - new] = out_of[
                        i, :, source_width - cached : source_width
                    ]
                    into[row, :, end - new : end] = out_of[i, :, source_end - new : source_end]

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
        self.valid[:, self.filled : end] = new_valid
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

    def extract(
        self,
        rows: torch.Tensor | None = None,
        counts: Sequence[int] | None = None,
        release: bool = False,
    ) -> list[KVPrefix]:
        """Compact ``rows`` (default: all) into :class:`KVPrefix` objects of their valid
        positions, layer by layer: per layer one gather for all rows, then one exact-length copy
        per row, then the gather is dropped. ``release``: each layer's working buffer is dropped
        once copied (the final copy-out), so the peak is the working buffer plus one layer's
        gather, not the buffer, a gathered copy of it and the per-row copies at once.

        ``counts``: each row's valid positions when the caller knows them; then nothing is read
        back from the device (no host sync)."""
        valid = self.valid[:, : self.filled]
        if rows is not None:
            valid = valid.index_select(0, rows)
        if counts is None:
            counts = valid.sum(dim=1).tolist()
        width = max(counts, default=0)
        # Stable sort puts each row's valid columns first, in time order.
        order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices[:, :width]
        keys: list[list[torch.Tensor]] = [[] for _ in counts]
        values: list[list[torch.Tensor]] = [[] for _ in counts]
        for layer in self.layers:
            for source, out in ((layer.keys, keys), (layer.values, values)):
                picked = source if rows is None else source.index_select(0, rows)
                index = order[:, None, :, None].expand(-1, picked.shape[1], -1, picked.shape[3])
                gathered = torch.gather(picked, 2, index)
                # Each prefix gets its own exact-length copy: a view would keep the whole padded
                # batch tensor alive for as long as any one chain may still be branched from.
                for row, n in enumerate(counts):
                    out[row].append(gathered[row, :, :n].clone())
                del gathered, picked
            if release:
                layer.release()
        return [KVPrefix(tuple(k), tuple(v), int(n)) for k, v, n in zip(keys, values, counts)]


class _RowLayer(DynamicLayer):
    """One layer of a :class:`RowCache` as ``transformers`` sees it: ``update`` writes the new
    keys/values at the columns the cache planned for this forward and returns the columns the
    attention reads."""

    def __init__(self, owner: RowCache, index: int) -> None:
        super().__init__()
        self.owner, self.index = owner, index
        self.device, self.dtype = owner.keys[index].device, owner.keys[index].dtype
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("a row-cache layer is created initialised")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self.owner.write(self.index, key_states, value_states)

    def get_seq_length(self, *args, **kwargs) -> int:
        return self.owner.width


class RowCache:
    """The working cache of a decode session: rows left-aligned, written at per-row columns.

    Row ``r`` holds its sequence in columns ``[0, lengths[r])`` (column = position). A forward
    with ``q`` query columns writes row ``r``'s ``n_r <= q`` new tokens (right-aligned in the
    query block) at columns ``L_r .. L_r + n_r - 1`` and its ``q - n_r`` padding queries just
    after them (never visible, overwritten later): query ``j`` writes column
    ``L_r + (j + n_r) mod q`` and sees the columns ``c <=`` its own. Buffers start at zero, so a
    column that no query wrote is finite and an additive mask hides it exactly.
    """

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        rows: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (rows, num_kv_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.lengths = [0] * rows
        """Host copy of each row's filled columns."""
        self.cache = DynamicCache()
        self.cache.layers = [_RowLayer(self, i) for i in range(num_layers)]
        self.width = 0
        self.version = 0
        """Changes whenever the buffers are reallocated (a captured step must be recorded again)."""
        self._rows: torch.Tensor | None = None
        self._columns: torch.Tensor | None = None

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def load(self, row: int, prefix: KVPrefix | None) -> None:
        """Copy ``prefix`` into row ``row``'s first columns (the row's length becomes its)."""
        n = 0 if prefix is None else prefix.length
        for layer in range(len(self.keys)):
            if n:
                self.keys[layer][row, :, :n] = prefix.keys[layer][:, :n]
                self.values[layer][row, :, :n] = prefix.values[layer][:, :n]
        self.lengths[row] = n

    @staticmethod
    def write_columns(lengths: torch.Tensor, counts: torch.Tensor, q: int) -> torch.Tensor:
        """(b, q) columns (= positions) each query writes: ``L + (j + n) mod q`` (class doc)."""
        j = torch.arange(q, device=lengths.device)
        return lengths[:, None] + (j[None, :] + counts[:, None]) % q

    def plan(
        self, rows: torch.Tensor | None, columns: torch.Tensor, width: int, dtype: torch.dtype
    ) -> torch.Tensor:
        """Set up the next forward: ``rows`` (None: all) write at ``columns`` (b, q) and attend
        over the first ``width`` columns; returns the additive mask (b, 1, q, width)."""
        needed = width
        if needed > self.capacity:
            raise RuntimeError(f"row cache overflow: {needed} > capacity {self.capacity}")
        self._rows, self._columns, self.width = rows, columns, width
        cols = torch.arange(width, device=columns.device)
        visible = cols[None, None, :] <= columns[:, :, None]
        bias = torch.zeros(visible.shape, dtype=dtype, device=columns.device)
        return bias.masked_fill_(~visible, torch.finfo(dtype).min)[:, None]

    def write(
        self, layer: int, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one layer's new keys/values (b, H, q, d) at the planned columns; return the
        keys/values the attention reads (b, H, width, d)."""
        rows = self._rows
        index = (
            torch.arange(key_states.shape[0], device=key_states.device) if rows is None else rows
        )[:, None]
        out = []
        for buffer, states in ((self.keys[layer], key_states), (self.values[layer], value_states)):
            buffer[index, :, self._columns] = states.transpose(1, 2).to(buffer.dtype)
            out.append(
                buffer[:, :, : self.width] if rows is None else buffer[rows, :, : self.width]
            )
        return out[0], out[1]

    def grow(self, capacity: int) -> None:
        """Reallocate every buffer with ``capacity`` columns (the filled ones copied)."""
        if capacity <= self.capacity:
            return
        old = self.capacity
        for buffers in (self.keys, self.values):
            for i, buffer in enumerate(buffers):
                grown = buffer.new_zeros(buffer.shape[:2] + (capacity, buffer.shape[3]))
                grown[:, :, :old] = buffer
                buffers[i] = grown
        self.version += 1

    def select_rows(self, rows: torch.Tensor, kept: Sequence[int]) -> None:
        """Keep only ``rows`` (a device index; ``kept``: the same on the host)."""
        for buffers in (self.keys, self.values):
            for i, buffer in enumerate(buffers):
                buffers[i] = buffer.index_select(0, rows)
        self.lengths = [self.lengths[r] for r in kept]
        self.version += 1

    def extract_row(self, row: int) -> KVPrefix:
        """Row ``row``'s cache as an exact-length :class:`KVPrefix` (its own copy)."""
        n = self.lengths[row]
        return KVPrefix(
            tuple(k[row, :, :n].clone() for k in self.keys),
            tuple(v[row, :, :n].clone() for v in self.values),
            n,
        )

    def release(self) -> None:
        self.keys, self.values = [], []
