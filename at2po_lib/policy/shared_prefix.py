r"""Leaf log-probabilities with every shared prefix computed once.

A tree rollout's leaves share their ancestors' turns: with M chains of L rounds of K branches
the same prompt and early turns appear in several training rows. A padded forward
recomputes them for every leaf (and computes the padding too). This module packs a batch's
rows into a few *segments*, each a token trie: a row's tokens that equal another row's
prefix (same tokens from the first on) are stored once, and a token attends exactly to the
tokens on its own row's path,

.. math::

    \text{mask}[q, k] = 1 \iff k \text{ is an ancestor of } q \text{ or } q \text{ itself},

with the position of a token its index on that path. In a causal transformer the state of a
token depends only on the tokens before it on its path, so a shared token's state is the same
for every row that passes through it; each row's log-probability at its scored token j is
read from the state of the token before j on its path:

.. math::

    \log\pi(y_j \mid y_{<j}) = z_{u(j-1)}[y_j] / T - \log\sum_v e^{z_{u(j-1)}[v] / T},

where :math:`u(i)` is the packed slot of path token i. The head runs once per distinct
state, and a state's value reaches every row that reads it, so the gradient of any loss of
the rows' log-probs is the per-row computation's (sums over the rows that share a token),
equal to fp32 rounding.

Segments: rows are sorted by their tokens (rows that share a prefix become neighbours and the
longest prefix a row shares with any other is the one with its predecessor), then filled in
that order while the segment's distinct tokens fit ``width`` (default: the longest row); a row
that opens a segment stores its whole path again. Segments are padded to the widest; a
padding slot attends only to itself.

Positions: RoPE scores depend on the distance between two tokens, so positions that start at
0 on every path give the states of the padded layout (whose left padding shifts them)
to fp32 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "PACKED_ATTENTION",
    "PackedCall",
    "PackedRows",
    "label_log_probs",
    "pack_rows",
    "scaled_logits",
    "shared_prefix_logps",
]

CALL_FILL = 0.75
"""A segment joins the backbone call of wider segments while it fills at least this share of
their width (less: a call of its own, so padding and masked attention stay small)."""

PACKED_ATTENTION = ("sdpa", "eager")
"""Attention implementations that take the packed layout's (S, 1, W, W) additive mask as given
(flash-attention kernels take only padding masks)."""


@dataclass
class PackedCall:
    """Segments of one width, run through the backbone in one call.

    Attributes:
        input_ids: (S, W) the distinct tokens of each segment (0 in padding slots).
        position_ids: (S, W) each token's index on its path (0 in padding slots).
        attention_bias: (S, 1, W, W) additive mask, 0 where a token attends, the dtype's
            minimum elsewhere.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_bias: torch.Tensor


@dataclass
class PackedRows:
    """A batch's rows as segments of a token trie (module docstring).

    Attributes:
        calls: the segments, in calls of similar width.
        state_slot: (N,) slot of the state that predicts each scored token in the calls'
            flattened outputs, concatenated (call by call, segment * W + column).
        labels: (N,) each scored token's id.
        scored_index: (N,) each scored token's flat index in the (B, T) completion grid.
        real_tokens: tokens of the rows' paths (what a per-row forward computes).
        distinct_tokens: tokens the packed forward computes (padding slots excluded).
    """

    calls: list[PackedCall]
    state_slot: torch.Tensor
    labels: torch.Tensor
    scored_index: torch.Tensor
    real_tokens: int
    distinct_tokens: int

    @property
    def slots(self) -> int:
        """Positions the backbone computes, padding included."""
        return sum(c.input_ids.numel() for c in self.calls)


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class _Group:
    """Rows of one prompt that share prefixes: each row's ``shared`` tokens are its
    predecessor's in the group; ``size`` distinct tokens in all."""

    rows: list[int]
    shared: list[int]
    size: int


def _prompt_groups(rows: list[int], paths: list[list[int]], prompt_lens: list[int], capacity: int):
    """Sorted rows cut into groups: a row joins its predecessor's group when it shares at
    least that row's prompt and the group stays within ``capacity`` distinct tokens (rows of
    different prompts share only the instruction's first tokens: not worth one segment)."""
    groups: list[_Group] = []
    previous: int | None = None
    for r in rows:
        shared = 0 if previous is None else _common_prefix(paths[previous], paths[r])
        fresh = len(paths[r]) - shared
        joins = previous is not None and shared >= prompt_lens[previous]
        if joins and groups[-1].size + fresh <= capacity:
            groups[-1].rows.append(r)
            groups[-1].shared.append(shared)
            groups[-1].size += fresh
        else:
            groups.append(_Group([r], [0], len(paths[r])))
        previous = r
    return groups


def _first_fit_decreasing(groups: list[_Group], capacity: int) -> list[list[_Group]]:
    """Groups into as few segments of ``capacity`` tokens as first-fit decreasing finds (a
    group larger than ``capacity`` takes a segment of its own)."""
    bins: list[list[_Group]] = []
    room: list[int] = []
    for group in sorted(groups, key=lambda g: -g.size):
        if group.size > capacity:
            bins.append([group])
            room.append(0)
            continue
        for i, free in enumerate(room):
            if group.size <= free:
                bins[i].append(group)
                room[i] -= group.size
                break
        else:
            bins.append([group])
            room.append(capacity - group.size)
    return bins


def pack_rows(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    width: int = 0,
    dtype: torch.dtype = torch.float32,
) -> PackedRows:
    """Pack TRL-layout rows into trie segments (module docstring).

    Args:
        input_ids, attention_mask: (B, P + T), prompts left-padded to width P, completions
            right-padded to width T.
        positions: (B, T) 1 where a completion token is scored.
        width: a segment's capacity in distinct tokens (0: the longest row's path).
        dtype: the attention bias's dtype (the model's compute dtype).
    """
    b, t = positions.shape
    prompt_width = input_ids.size(1) - t
    scored = positions.bool().cpu()  # (B, T)
    columns = torch.arange(1, t + 1)  # (T,)
    need = (scored * columns).amax(dim=1) if t else torch.zeros(b, dtype=torch.long)  # (B,)
    ids_host = input_ids.cpu()
    mask_host = attention_mask.cpu().bool()
    # A row's path: its real prompt tokens, then its completion up to the token before its last
    # scored one (the last state needed predicts that token).
    paths: list[list[int]] = []
    prompt_lens: list[int] = []
    for row in range(b):
        prompt = ids_host[row, :prompt_width][mask_host[row, :prompt_width]]
        completion = ids_host[row, prompt_width : prompt_width + max(int(need[row]) - 1, 0)]
        paths.append(prompt.tolist() + completion.tolist())
        prompt_lens.append(int(prompt.numel()))
    rows = [r for r in range(b) if need[r] > 0] or [0]  # none scored: one row keeps the graph
    rows.sort(key=lambda r: paths[r])
    longest = max(len(paths[r]) for r in rows)
    capacity = width or longest
    # A group may exceed the capacity only by rows that do not fit it whole.
    groups = _prompt_groups(rows, paths, prompt_lens, max(capacity, longest))
    bins = _first_fit_decreasing(groups, capacity)
    sizes = [sum(g.size for g in groups) for groups in bins]
    order = sorted(range(len(bins)), key=lambda i: -sizes[i])

    # Calls: segments of similar width (each at least CALL_FILL of its call's widest).
    calls_bins: list[list[int]] = []
    for i in order:
        if calls_bins and sizes[i] >= CALL_FILL * sizes[calls_bins[-1][0]]:
            calls_bins[-1].append(i)
        else:
            calls_bins.append([i])
    calls: list[PackedCall] = []
    seg_base: dict[int, int] = {}  # bin -> flat slot of its first column
    width_of: dict[int, int] = {}
    offset = 0
    for members in calls_bins:
        w = sizes[members[0]]
        for k, i in enumerate(members):
            seg_base[i], width_of[i] = offset + k * w, w
        offset += len(members) * w
    slots: dict[int, torch.Tensor] = {}  # row -> flat slot of each path token
    for members in calls_bins:
        w = sizes[members[0]]
        packed_ids = torch.zeros(len(members), w, dtype=torch.long)
        packed_pos = torch.zeros(len(members), w, dtype=torch.long)
        allowed = torch.eye(w, dtype=torch.bool).repeat(len(members), 1, 1)  # padding: itself
        for s, i in enumerate(members):
            filled = 0
            for group in bins[i]:
                before: torch.Tensor | None = None
                for r, shared in zip(group.rows, group.shared):
                    path = paths[r]
                    fresh = torch.arange(filled, filled + len(path) - shared)
                    own = fresh if before is None else torch.cat([before[:shared], fresh])
                    packed_ids[s, fresh] = torch.tensor(path[shared:], dtype=torch.long)
                    packed_pos[s, fresh] = torch.arange(shared, len(path))
                    # the row's path attends causally along itself
                    n = len(path)
                    allowed[s][own[:, None], own[None, :]] |= torch.ones(
                        n, n, dtype=torch.bool
                    ).tril()
                    filled += n - shared
                    slots[r], before = seg_base[i] + own, own
        bias = torch.zeros(len(members), 1, w, w, dtype=dtype)
        bias.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)
        calls.append(
            PackedCall(
                packed_ids.to(input_ids.device),
                packed_pos.to(input_ids.device),
                bias.to(input_ids.device),
            )
        )

    state_slot, labels, scored_index = [], [], []
    for r in rows:
        js = torch.nonzero(scored[r], as_tuple=True)[0]  # (n_r,) completion columns
        state_slot.append(slots[r][prompt_lens[r] + js - 1])
        labels.append(ids_host[r, prompt_width + js])
        scored_index.append(r * t + js)
    device = input_ids.device
    return PackedRows(
        calls=calls,
        state_slot=torch.cat(state_slot).to(device),
        labels=torch.cat(labels).to(device),
        scored_index=torch.cat(scored_index).to(device),
        real_tokens=sum(len(paths[r]) for r in rows),
        distinct_tokens=sum(sizes),
    )


def scaled_logits(
    head: torch.nn.Module, states: torch.Tensor, temperature: float, head_fp32: bool = False
) -> torch.Tensor:
    """The LM head's logits / T of ``states`` (n, H) → (n, V), as TRL's fused head; with
    ``head_fp32`` in float32 whatever the autocast (TRL's ``cast_lm_head_to_fp32``). At T = 1
    no division (x / 1 is x: the same values, a pass over (n, V) and its backward saved)."""
    if head_fp32:
        with torch.autocast(states.device.type, enabled=False):
            logits = torch.nn.functional.linear(
                states.float(),
                head.weight.float(),
                None if head.bias is None else head.bias.float(),
            )  # (n, V)
    else:
        logits = head(states)  # (n, V)
    return logits if temperature == 1.0 else logits / temperature


def label_log_probs(
    logits: torch.Tensor, state_of: torch.Tensor, labels: torch.Tensor, compute_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Log-probabilities of ``labels`` (N,) under the states' ``logits`` (U, V), the label
    ``i`` read from state ``state_of[i]``: :math:`\log \mathrm{softmax}(z_u)[y]`, with the
    gradient; and each state's entropy :math:`-\sum_v p_v \log p_v` (U,) without it, or
    None. One fused log-softmax (its backward one fused pass too: ~1.8x faster than
    ``z[y] - logsumexp(z)`` and their backwards, the same value to fp32 rounding)."""
    log_probs = torch.log_softmax(logits, dim=-1)  # (U, V)
    values = log_probs[state_of, labels]  # (N,)
    if not compute_entropy:
        return values, None
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)  # (U,)
    return values, entropy


def shared_prefix_logps(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    temperature: float,
    width: int = 0,
    compute_entropy: bool = False,
    head_fp32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the scored completion tokens, each shared prefix computed
    once (module docstring); the same inputs and outputs as
    :func:`at2po_lib.trainer.trainer.policy_position_logps`: (B, T) log-probs with the
    gradient to the model, (B, T) entropies without it (or None), 0 where ``positions`` is 0.
    """
    b, t = positions.shape
    backbone, head = model.base_model, model.get_output_embeddings()
    packed = pack_rows(input_ids, attention_mask, positions, width, dtype=head.weight.dtype)
    flat = torch.cat(
        [
            backbone(
                input_ids=call.input_ids,
                position_ids=call.position_ids,
                attention_mask=call.attention_bias,
                use_cache=False,
            ).last_hidden_state.flatten(0, 1)  # (S * W, H)
            for call in packed.calls
        ]
    )  # (all slots, H)
    # The head once per distinct state; each scored token reads its state's row.
    distinct, state_of = torch.unique(packed.state_slot, return_inverse=True)  # (U,), (N,)
    logits = scaled_logits(head, flat[distinct], temperature, head_fp32)  # (U, V)
    values, entropy = label_log_probs(logits, state_of, packed.labels, compute_entropy)  # (N,)
    logps = values.new_zeros(b * t).index_put((packed.scored_index,), values).view(b, t)
    entropies = None
    if entropy is not None:
        entropies = (
            values.new_zeros(b * t).index_put((packed.scored_index,), entropy[state_of]).view(b, t)
        )
    return logps, entropies
