r"""Which rows of a prefill run together: length-sorted chunks instead of one padded batch.

A batched forward pads every row's new tokens to the longest row's and attends over the widest
row's cached prefix. On the tiny profile's AT2PO step that was 14.0k positions for 10.6k real
tokens (and 19.3k for 14.7k in another count), with attention over every row's padded
prefix. Rows are sorted by (new tokens, cached tokens), longest first, and cut into contiguous
chunks that minimise the modelled cost

.. math::
    \sum_{\text{chunks}} \Big( c_0 + n\,q + \frac{n\,q\,(p + q)}{c_k} \Big)

where a chunk of ``n`` rows runs ``q`` = its longest row's new tokens after ``p`` = its longest
cached prefix: ``n q`` token positions through the linear layers, ``n q (p + q)`` query-key pairs
of attention, and ``c_0`` the fixed cost of a forward call, all in token positions
(:data:`CALL_COST_TOKENS`, :data:`KEYS_PER_TOKEN`). The optimum over contiguous cuts of the sorted
rows is a small dynamic programme (``O(B^2)`` for ``B`` rows).

Chunking changes no token and no draw: each row's keys, values and next-token logits are those of
its own tokens; only the floating-point rounding of the batched matmuls and of the masked softmax
(other widths) can differ in the last bits. Greedy trees on the warm start are tested token for
token against the single padded batch, sampled ones with the same seed too.
"""

from __future__ import annotations

from typing import Sequence

CALL_COST_TOKENS = 64
"""The fixed cost of one forward call (Python, set-up, copy-out), in token positions: ~2 ms on
this CPU at one thread, where the toy policy runs ~30 positions a millisecond."""
CHUNK_TOKENS = 1024
"""Padded token positions a chunk runs at most (a longer row runs alone): measured on a
prefill of 16 rows x 110 new tokens after 300 cached ones, chunks of 8 rows (880 positions) ran
10-15% faster than one of 16 (1,760), whose activations no longer stay in the CPU's cache; 4
rows were no faster than 8, 1 row slower than 16."""
KEYS_PER_TOKEN = 512
"""Query-key pairs of attention (two matmuls, the mask and the softmax over each pair) that
cost one token position through the linear layers of the toy policy (hidden 128, FFN 512)."""


def chunk_cost(rows: int, new: int, cached: int) -> float:
    """The modelled cost of one chunk (module docstring), in token positions."""
    return CALL_COST_TOKENS + rows * new + rows * new * (cached + new) / KEYS_PER_TOKEN


def plan_chunks(
    new_tokens: Sequence[int], cached_tokens: Sequence[int], max_rows: int
) -> list[list[int]]:
    """Rows (indices into the inputs) of each chunk, in the order they run; every row in
    exactly one chunk, at most ``max_rows`` rows and :data:`CHUNK_TOKENS` padded positions a
    chunk (a longer row alone), rows in original order within a chunk.

    ``new_tokens[i]``: tokens row ``i`` feeds; ``cached_tokens[i]``: tokens already in its cache.
    """
    count = len(new_tokens)
    if not count:
        return []
    order = sorted(range(count), key=lambda i: (-new_tokens[i], -cached_tokens[i], i))
    best = [0.0] * (count + 1)  # best[i]: the cheapest cut of order[i:]
    cut = [count] * (count + 1)
    for start in range(count - 1, -1, -1):
        widest = new_tokens[order[start]]  # sorted: the chunk's longest row comes first
        deepest = 0
        best[start] = float("inf")
        for end in range(start + 1, min(count, start + max_rows) + 1):
            if end - start > 1 and (end - start) * widest > CHUNK_TOKENS:
                break
            deepest = max(deepest, cached_tokens[order[end - 1]])
            cost = chunk_cost(end - start, widest, deepest) + best[end]
            if cost < best[start]:
                best[start], cut[start] = cost, end
    chunks, start = [], 0
    while start < count:
        chunks.append(sorted(order[start : cut[start]]))
        start = cut[start]
    return chunks


def unique_rows(contexts: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """``(firsts, owner)``: the index of each distinct context's first occurrence, and for every
    context the position in ``firsts`` of its copy (a prompt asked k times is read once)."""
    seen: dict[tuple[int, ...], int] = {}
    firsts: list[int] = []
    owner: list[int] = []
    for index, context in enumerate(contexts):
        key = tuple(context)
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(index)
        owner.append(seen[key])
    return firsts, owner
