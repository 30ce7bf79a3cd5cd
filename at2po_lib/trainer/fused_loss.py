r"""The trainer's policy loss: :func:`at2po_lib.method.loss.policy_loss`, fused for speed, with
the diagnostics the trainer logs.

The loss is defined by :func:`at2po_lib.method.loss.policy_loss` (equations, options, shapes);
``tests/test_losses.py`` checks :func:`fused_policy_loss` equal to it, value and gradient, on
random inputs. What differs is how it runs: the loss first gathers the N model tokens
(N ≪ B·T: prompts, observations and padding carry nothing) and works on (N,) vectors; turn and
row sums are one ``index_add`` (NumPy's ``add.reduceat`` on a CPU) over flattened (row, turn)
segment ids, with no Python loop over rows or turns; the ratio, clip and aggregation run
forward without autograd and :class:`_ClippedSurrogate` writes their gradient out as one
multiply (``benchmarks/bench_losses.py`` times it against a per-row loop in the authors' style).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..method.loss import (EPS_HIGH, EPS_LOW, LOG_RATIO_CLAMP, check_loss_inputs,
                           entropy_aware_advantages, low_var_kl)


# --------------------------------------------------------------------------------------------
# Turn segments
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenTurns:
    """The batch's model tokens, flattened, with their (row, turn) segment ids.

    The loss works on these N tokens only (never on the B x T grid, whose prompt, observation
    and padding positions carry nothing): every per-turn or per-row quantity is one
    ``index_add`` over a segment id, whatever the number of rows or turns.

    index (N,) int64: flat position (row * T + column) of each model token, row-major;
    token_row (N,), seg (N,): the row and the segment of each token (``seg`` None until
    :meth:`token_segments` needs it, on the contiguous path);
    row (S,): the row of each segment; length (S,): its number of tokens;
    row_tokens (B,): model tokens per row; num: S; num_rows: B;
    first (S,) or None: each segment's first token when every segment is a contiguous run of
    ``index`` (always without ``turn_ids``), which lets segment sums run as one ``reduceat``.
    """

    index: torch.Tensor
    token_row: torch.Tensor
    seg: torch.Tensor | None
    row: torch.Tensor
    length: torch.Tensor
    row_tokens: torch.Tensor
    num: int
    num_rows: int
    first: torch.Tensor | None = None

    def gather(self, values: torch.Tensor) -> torch.Tensor:
        """(B, T) → (N,): the model tokens' entries (differentiable; ``index_select`` is several
        times faster than advanced indexing on a CPU)."""
        return values.reshape(-1).index_select(0, self.index)

    def per_token(self, per_row: torch.Tensor) -> torch.Tensor:
        """(B,) → (N,): each model token gets its row's entry."""
        return per_row.index_select(0, self.token_row)

    def per_token_of_segment(self, per_segment: torch.Tensor) -> torch.Tensor:
        """(S,) → (N,): each model token gets its turn's entry."""
        if self.first is not None:  # contiguous runs: no per-token segment ids needed
            return torch.repeat_interleave(per_segment, self.length,
                                           output_size=self.index.numel())
        return per_segment.index_select(0, self.token_segments())

    def token_segments(self) -> torch.Tensor:
        """``seg`` (N,), computed on first use on the contiguous path (the loss never needs
        it there on a CPU); cached in the frozen instance."""
        if self.seg is None:
            ids = torch.arange(self.num, device=self.index.device)
            object.__setattr__(self, "seg", torch.repeat_interleave(
                ids, self.length, output_size=self.index.numel()))
        return self.seg

    def segment_sum(self, values: torch.Tensor) -> torch.Tensor:
        """(N,) → (S,): Σ over each (row, turn) segment (no gradient on the contiguous path).

        Contiguous segments on a CPU: NumPy's ``add.reduceat`` (measured ~13x faster than
        ``index_add_`` into ~1k segments, which serialises on the colliding bins); elsewhere
        ``index_add_``."""
        if self.first is not None and values.device.type == "cpu" and self.num:
            sums = np.add.reduceat(values.detach().numpy(), self.first.numpy())
            return torch.from_numpy(sums)
        return values.new_zeros(self.num).index_add_(0, self.token_segments(), values)

    def row_sum(self, values: torch.Tensor) -> torch.Tensor:
        """(N,) → (B,): Σ over each row's model tokens."""
        return values.new_zeros(self.num_rows).index_add_(0, self.token_row, values)

    def turns_per_row(self, num_rows: int | None = None) -> torch.Tensor:
        return torch.bincount(self.row, minlength=self.num_rows if num_rows is None else num_rows)


def _flat_nonzero(flags: torch.Tensor) -> torch.Tensor:
    """Positions (int64) of the true entries of a flat bool tensor. On a CPU NumPy's
    ``flatnonzero`` is used: it was ~10x faster than ``torch.nonzero`` on 360k flags (measured,
    torch 2.13), and the compaction is the largest single step of the loss."""
    if flags.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(flags.numpy()).astype(np.int64, copy=False))
    return torch.nonzero(flags).squeeze(1)


def token_turns(mask: torch.Tensor, turn_ids: torch.Tensor | None = None) -> TokenTurns:
    """The model tokens of ``mask`` (B, T) and their turns: maximal runs of mask 1 (default) or,
    with ``turn_ids`` (B, T), the model tokens of a row that share one non-negative id."""
    is_tok = mask.bool()  # (B, T)
    b, t = is_tok.shape
    index = _flat_nonzero(is_tok.reshape(-1)).to(mask.device)  # (N,) row-major
    # Rows are contiguous in ``index``: each row's tokens lie between two searchsorted bounds.
    bounds = torch.searchsorted(index, torch.arange(b + 1, device=index.device) * t)  # (B + 1,)
    row_tokens = bounds.diff()  # (B,)
    token_row = torch.repeat_interleave(torch.arange(b, device=index.device), row_tokens,
                                        output_size=index.numel())  # (N,)
    if turn_ids is None:
        # A turn starts at a model token whose left neighbour (same row) is not one.
        start_grid = is_tok.clone()  # (B, T)
        start_grid[:, 1:] &= ~is_tok[:, :-1]
        start = start_grid.reshape(-1).index_select(0, index)  # (N,)
        first = _flat_nonzero(start).to(mask.device)  # (S,) first token of each turn
        row = token_row.index_select(0, first)  # (S,)
        num = int(first.numel())
        length = torch.diff(first, append=first.new_full((1,), index.numel()))  # (S,)
        return TokenTurns(index=index, token_row=token_row, seg=None, row=row, length=length,
                          row_tokens=row_tokens, num=num, num_rows=b, first=first)
    ids = turn_ids.reshape(-1).index_select(0, index).long()  # (N,)
    negative = torch.nonzero(ids < 0)
    if negative.numel():
        r, c = divmod(int(index[negative[0, 0]]), t)
        raise ValueError(f"turn_ids[{r}, {c}] = {int(turn_ids[r, c])}: model tokens need an id >= 0")
    width = int(ids.max()) + 1 if ids.numel() else 1
    uniq, seg = torch.unique(token_row * width + ids, return_inverse=True)  # (S,), (N,)
    row = torch.div(uniq, width, rounding_mode="floor")  # (S,)
    num = int(row.numel())
    # Turn ids that grow along each row (a root-to-leaf path) give contiguous segments.
    contiguous = bool((seg[1:] >= seg[:-1]).all())
    first = (torch.searchsorted(seg, torch.arange(num, device=seg.device)) if contiguous
             else None)  # (S,)
    return TokenTurns(index=index, token_row=token_row, seg=seg, row=row,
                      length=torch.bincount(seg, minlength=num), row_tokens=row_tokens,
                      num=num, num_rows=b, first=first)


# --------------------------------------------------------------------------------------------
# Pieces of the loss (every tensor here is (N,): one entry per model token)
# --------------------------------------------------------------------------------------------
def _token_units(log_ratio: torch.Tensor, turns: TokenTurns, turn_ratio: str,
                 turn_sum: torch.Tensor | None):
    """token (GRPO/DAPO): every token is its own unit, log s_t = r_t."""
    return log_ratio.detach(), lambda x: x


def _sequence_units(log_ratio: torch.Tensor, turns: TokenTurns, turn_ratio: str,
                    turn_sum: torch.Tensor | None):
    """sequence (GSPO): one unit per row, log s = mean of its r_t (B,)."""
    row_mean = turns.row_sum(log_ratio) / turns.row_tokens.clamp(min=1)  # (B,)
    return row_mean, turns.per_token


def _turn_units(log_ratio: torch.Tensor, turns: TokenTurns, turn_ratio: str,
                turn_sum: torch.Tensor | None):
    """turn (ATPO): one unit per turn, log s_k = mean (geometric) or sum (product) of r_t (S,)."""
    if turn_sum is None:
        turn_sum = turns.segment_sum(log_ratio.detach())  # (S,)
    if turn_ratio == "geometric":
        turn_sum = turn_sum / turns.length.clamp(min=1)  # (S,)
    return turn_sum, turns.per_token_of_segment


_RATIO_UNITS = {"token": _token_units, "sequence": _sequence_units, "turn": _turn_units}
"""Ratio level → (log s per unit, the map from units to tokens)."""


def unit_log_ratio(level: str, log_ratio: torch.Tensor, turns: TokenTurns,
                   turn_ratio: str = "geometric", turn_sum: torch.Tensor | None = None,
                   ) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """log s of each ratio unit, no gradient, and the map from units to tokens: tokens (N,)
    with r_t (token), rows (B,) with their mean (sequence), turns (S,) with their mean / sum
    (turn, geometric / product). ``turn_sum`` (S,): Σ r_t per turn, if computed. Per-unit
    work (exp, clamp checks) then runs on B or S entries instead of N."""
    with torch.no_grad():
        return _RATIO_UNITS[level](log_ratio, turns, turn_ratio, turn_sum)


def _token_mean(turns: TokenTurns, dtype: torch.dtype) -> torch.Tensor:
    """token-mean: 1/N for each of the N model tokens."""
    n = turns.index.numel()  # N
    return torch.full((n,), 1.0 / max(n, 1), dtype=dtype, device=turns.index.device)


def _seq_mean_token_mean(turns: TokenTurns, dtype: torch.dtype) -> torch.Tensor:
    """seq-mean-token-mean: 1/(|row| · rows with a model token)."""
    rows_with_tokens = max(int(torch.count_nonzero(turns.row_tokens)), 1)
    per_row = 1.0 / (turns.row_tokens.clamp(min=1).to(dtype) * rows_with_tokens)  # (B,)
    return turns.per_token(per_row)  # (N,)


def aggregation_weights(turns: TokenTurns, agg: str, dtype: torch.dtype) -> torch.Tensor:
    """Weight (N,) of each model token's loss in the scalar loss Σ_t w_t ℓ_t: 1/N
    (``token-mean``) or 1/(|row| · rows with a model token) (``seq-mean-token-mean``)."""
    return _token_mean(turns, dtype) if agg == "token-mean" else _seq_mean_token_mean(turns, dtype)


class _ClippedSurrogate(torch.autograd.Function):
    r"""Σ_t w_t max(−A_t r_t, −A_t clip(r_t, lower, upper)) with a one-multiply backward.

    ``logp`` (B, T) receives the gradient at the model tokens ``index`` (N,); inputs (N,):
    ``ratio`` r_t (value), ``adv``, ``weight``
    (:func:`aggregation_weights`), ``live`` (bool: ∂r_t/∂logp_t = r_t there, 0 where the log
    ratio hit its clamp); ``balanced``: AEPO's entropy-balanced clip. The gradient is what
    autograd gives the stop-gradient form (``method.loss.importance_ratios``), written out:
    ∂ℓ_t/∂logp_t = −A_t r_t on the unclipped branch (ties included: both branches agree
    there), 0 where the clip binds, and −A_t (1 + eps_high) where an entropy-balanced upper
    clip binds (its bound (1 + eps_high)·r/sg(r) keeps the gradient). Fused so that the
    backward pass is one multiply instead of the chain exp → clamp → maximum → weights
    (measured in ``benchmarks/bench_losses.py``). Returns the scalar and ``binds`` (N,).
    """

    @staticmethod
    def forward(ctx, logp, index, ratio, adv, weight, live, lower: float, upper: float,
                balanced: bool):
        neg_adv = -adv  # (N,)
        unclipped = neg_adv * ratio  # (N,)
        clipped = neg_adv * ratio.clamp(lower, upper)  # (N,)
        binds = clipped > unclipped  # (N,) the clipped branch is the larger loss
        loss = torch.dot(torch.maximum(unclipped, clipped), weight)
        no_gradient = binds if live is None else binds | ~live  # (N,)
        slope = torch.where(no_gradient, 0.0, unclipped)  # (N,) ∂ℓ_t/∂logp_t
        if balanced:  # an upper clip that binds keeps the gradient −A (1 + eps_high)
            kept = binds & (ratio > upper) if live is None else binds & (ratio > upper) & live
            slope = torch.where(kept, neg_adv * upper, slope)
        ctx.save_for_backward(index, slope * weight)
        ctx.logp_shape, ctx.logp_dtype = logp.shape, logp.dtype
        ctx.mark_non_differentiable(binds)
        return loss, binds

    @staticmethod
    def backward(ctx, grad_loss, grad_binds):
        index, slope = ctx.saved_tensors
        grad = slope.new_zeros(ctx.logp_shape.numel()).index_copy_(0, index, grad_loss * slope)
        return grad.view(ctx.logp_shape).to(ctx.logp_dtype), None, None, None, None, None, None, None, None


def turn_kl_entropy(turn_sum: torch.Tensor, segments: TokenTurns,
                    num_rows: int) -> torch.Tensor:
    """The authors' diagnostic (docs/method.md §7), from the per-turn sums of the log-ratio (S,):
    per row, softmax over its turns of each turn's share of the row's summed log-ratio,
    Shannon entropy / log(#turns); 0 for rows with one turn or a zero sum; mean over rows."""
    row_sum = torch.zeros(num_rows, dtype=turn_sum.dtype, device=turn_sum.device)  # (B,)
    row_sum.index_add_(0, segments.row, turn_sum)
    usable = (row_sum != 0)[segments.row]  # (S,)
    share = torch.where(usable, turn_sum / torch.where(row_sum == 0, 1, row_sum)[segments.row], 0)
    top = torch.full_like(row_sum, -float("inf")).scatter_reduce(
        0, segments.row, share, reduce="amax", include_self=True)  # (B,)
    e = torch.exp(share - top[segments.row])  # (S,)
    z = torch.zeros_like(row_sum).index_add_(0, segments.row, e)  # (B,)
    p = e / z[segments.row]  # (S,)
    h = torch.zeros_like(row_sum).index_add_(0, segments.row, -p * torch.log(p + 1e-10))  # (B,)
    turns = segments.turns_per_row(num_rows)  # (B,)
    norm = torch.log(turns.clamp(min=2).to(h.dtype))
    per_row = torch.where((turns > 1) & (row_sum != 0), h / norm, 0)  # (B,)
    return per_row.mean() if num_rows else per_row.sum()


# --------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------
def _check_finite(turns: TokenTurns, width: int, gathered: list[torch.Tensor],
                  named: dict[str, torch.Tensor | None]) -> None:
    """Are the model tokens' inputs finite? One sum per ``gathered`` (N,) vector and one device
    sync (a NaN or ±inf makes the sum non-finite; finite log-probs and advantages cannot
    overflow it). On failure, the ``named`` (B, T) or (B,) inputs are searched to name the
    input, row and column."""
    if bool(torch.isfinite(torch.stack([v.sum() for v in gathered])).all()):
        return
    for name, x in named.items():
        if x is None:
            continue
        v = turns.per_token(x.detach()) if x.ndim == 1 else turns.gather(x.detach())
        bad = torch.nonzero(~torch.isfinite(v))
        if bad.numel():
            r, c = divmod(int(turns.index[bad[0, 0]]), width)
            raise ValueError(f"{name}[{r}, {c}] is not finite on a model token")


def fused_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    level: str = "turn",
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    agg: str = "seq-mean-token-mean",
    turn_ids: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    entropy_balanced_clip: bool = False,
    token_entropy: torch.Tensor | None = None,
    entropy_aware_adv: float = 0.0,
    turn_ratio: str = "geometric",
) -> tuple[torch.Tensor, dict[str, float]]:
    r""":func:`at2po_lib.method.loss.policy_loss` (same arguments, same value and gradient)
    and its diagnostics.

    Args: logp (B, T) log π_θ of the sampled tokens (carries the gradient); old_logp (B, T)
    log π_old (sampling policy); advantages (B,) or (B, T); mask (B, T) 1 = model token;
    level ``token`` | ``sequence`` | ``turn``; turn_ids (B, T) optional turn id per token;
    ref_logp (B, T) with ``beta`` > 0 adds the k3 KL penalty; token_entropy (B, T) for
    ``entropy_aware_adv`` (γ); ``turn_ratio`` ``geometric`` (code) | ``product`` (paper).

    Only the N model tokens are gathered from the (B, T) inputs; everything after that is a
    handful of operations on (N,) vectors, per-turn and per-row sums one ``index_add`` each.

    Returns ``(loss, metrics)``; metrics: ``clip_frac_low``, ``clip_frac_high``, ``clip_frac``
    (share of model tokens whose clipped branch binds), ``approx_kl`` (mean of old − new),
    ``ratio_mean``, ``turn_kl_entropy``, ``single_turn_rows`` (rows with ≤ 1 turn),
    ``mean_turns_per_row`` and, with ``beta``, ``ref_kl``.
    """
    advantages = torch.as_tensor(advantages, device=logp.device)
    check_loss_inputs(logp, old_logp, advantages, mask, level, agg, turn_ratio, turn_ids, ref_logp,
                  beta, token_entropy, entropy_aware_adv)
    turns = token_turns(mask, turn_ids)
    # The loss runs in float32 at least: half-precision log-probs (a bf16 model without
    # autocast, as under DeepSpeed) meet float32 old log-probs; the gradient returns in
    # logp's dtype.
    dtype = torch.promote_types(logp.dtype, torch.float32)
    with torch.no_grad():
        # r_t: one gather of the grid difference (positions off the mask may hold -inf; they
        # are never gathered). The gradient reaches logp through _ClippedSurrogate.
        log_ratio = turns.gather(logp.detach().to(dtype) - old_logp.detach().to(dtype))  # (N,)
        adv = (turns.per_token(advantages) if advantages.ndim == 1
               else turns.gather(advantages)).detach().to(dtype)  # (N,)
        ref = turns.gather(ref_logp.detach()) if beta else None  # (N,)
        _check_finite(turns, logp.shape[1], [v for v in (log_ratio, adv, ref) if v is not None],
                      {"logp": logp, "old_logp": old_logp, "advantages": advantages,
                       "ref_logp": ref_logp if beta else None})
        if entropy_aware_adv:
            adv = entropy_aware_advantages(adv, turns.gather(token_entropy), entropy_aware_adv)
        turn_sum = turns.segment_sum(log_ratio)  # (S,) turn ratio and turn_kl_entropy

    with torch.no_grad():
        unit, to_tokens = unit_log_ratio(level, log_ratio, turns, turn_ratio, turn_sum)
        # Where the log ratio exceeds its clamp the ratio has no gradient (rare: checked once,
        # per unit: S turns or B rows, not N tokens).
        clamped = level != "token" and bool((unit > LOG_RATIO_CLAMP).any())
        live = to_tokens(unit <= LOG_RATIO_CLAMP) if clamped else None  # (N,) or None: all live
        ratio = to_tokens(torch.exp(unit.clamp(max=LOG_RATIO_CLAMP) if clamped else unit))  # (N,)
    lower, upper = 1.0 - eps_low, 1.0 + eps_high
    weight = aggregation_weights(turns, agg, dtype)  # (N,)
    loss, binds = _ClippedSurrogate.apply(logp, turns.index, ratio, adv, weight, live, lower,
                                          upper, entropy_balanced_clip)
    ref_kl = None
    if beta:
        ref_kl = low_var_kl(ref, turns.gather(logp))  # (N,) differentiable
        loss = loss + beta * (ref_kl * weight).sum()

    return loss, _diagnostics(turns, log_ratio, ratio, binds, turn_sum, lower, ref_kl)


@torch.no_grad()
def _diagnostics(turns: TokenTurns, log_ratio: torch.Tensor, ratio: torch.Tensor,
                 binds: torch.Tensor, turn_sum: torch.Tensor, lower: float,
                 ref_kl: torch.Tensor | None) -> dict[str, float]:
    """The metrics :func:`fused_policy_loss` returns, from its (N,) log-ratios, ratios and
    binding flags, (S,) turn sums and (N,) reference KL (or None), in one device sync."""
    turn_counts = turns.turns_per_row()  # (B,)
    count = max(log_ratio.numel(), 1)
    # A binding clip means r < lower or r > upper (exclusive): high = all − low.
    low, binding = torch.count_nonzero(binds & (ratio < lower)), torch.count_nonzero(binds)
    stats = torch.stack([x.to(torch.float64) for x in (
        low / count, (binding - low) / count,
        binding / count, -(log_ratio.sum()) / count, ratio.sum() / count,
        turn_kl_entropy(turn_sum, turns, turns.num_rows),
        torch.count_nonzero(turn_counts <= 1), turn_counts.to(log_ratio.dtype).mean(),
        ref_kl.sum() / count if ref_kl is not None else log_ratio.new_zeros(()),
    )]).tolist()  # one device sync for every diagnostic
    names = ("clip_frac_low", "clip_frac_high", "clip_frac", "approx_kl", "ratio_mean",
             "turn_kl_entropy", "single_turn_rows", "mean_turns_per_row", "ref_kl")
    metrics = dict(zip(names, stats))
    metrics["single_turn_rows"] = int(metrics["single_turn_rows"])
    if ref_kl is None:
        del metrics["ref_kl"]
    return metrics
