r"""Clipped policy losses with token, sequence or turn importance ratios (docs/method.md §7–§8).

One function, :func:`policy_loss`, covers the paper's methods:

=========  ===========  ============================  ==================================
method     ``level``    clip (eps_low / eps_high)      other options
=========  ===========  ============================  ==================================
GRPO       token        0.2 / 0.2                      ``beta=0.001`` with ``ref_logp``
DAPO       token        0.2 / 0.28                     ``agg="token-mean"``
GSPO       sequence     3e-4 / 4e-4                    ``agg="seq-mean-token-mean"``
AEPO       token        0.2 / 0.28                     ``entropy_balanced_clip=True``,
                                                       ``entropy_aware_adv=0.2``
AT2PO      turn         3e-3 / 4e-3 (the defaults)     ``agg="seq-mean-token-mean"``
=========  ===========  ============================  ==================================

Shapes: every input is (B, T) (B rows = root→leaf trajectories, T tokens); ``advantages`` may
also be (B,). ``mask`` is 1 on the model's own tokens (``completion_mask``), 0 on prompt,
observation and padding tokens. Everything is vectorised: turn sums are ``index_add`` over
(row, turn) segment ids, with no Python loop over rows or turns.

Equations. With r_t = log π_θ(y_t) − log π_old(y_t) on model tokens:

* token (GRPO/DAPO): ratio_t = exp(r_t) (no clamp, as in TRL and verl).
* sequence (GSPO): log s = (1/|y|) Σ_t r_t over the row's model tokens.
* turn (ATPO): a turn k is a maximal run of mask 1 inside a row (or, when ``turn_ids`` is
  given, the row's tokens sharing one id)::

      log s_k = (1/|y_k|) Σ_{t∈k} r_t      turn_ratio="geometric" (authors' code, default)
      log s_k =          Σ_{t∈k} r_t      turn_ratio="product"   (paper text: full turn ratio)

  For sequence and turn levels each token uses the stop-gradient form::

      log s_{k,t} = log π_θ(y_t) − sg[log π_θ(y_t)] + sg[log s_k],   clamped at 10

  whose value is s_k and whose gradient is s_k ∇log π_θ(y_t).
* Clipped surrogate per token, then aggregation (``agg``)::

      ℓ_t = max(−A_t s_t, −A_t clip(s_t, 1 − eps_low, 1 + eps_high)) + beta · KL_t

  ``token-mean``: Σ_{b,t} m ℓ / Σ m; ``seq-mean-token-mean``: mean over rows with at least
  one model token of (Σ_t m ℓ / Σ_t m); ``seq-mean-token-sum``: mean over rows of Σ_t m ℓ.
* KL (k3 estimator, TRL's): KL_t = exp(ref_t − logp_t) − (ref_t − logp_t) − 1.
* AEPO (docs/method.md §8, as in its released code): entropy-balanced clipping replaces the upper
  bound by (1 + eps_high)·s/sg(s), so an upper-clipped token keeps a gradient scaled by
  (1 + eps_high)/s (the lower bound stays a constant); entropy-aware advantage
  A_t ← A_t (1 + γ z(H_t)), z the standardisation of ``token_entropy`` over the batch's model
  tokens (unbiased std; std 0 counts as 1), no gradient.

The authors' GRPO path also applies verl's dual clip (c = 3 on negative advantages); it is not
offered here (TRL does not use it either).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

LEVELS = ("token", "sequence", "turn")
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
TURN_RATIOS = ("geometric", "product")
LOG_RATIO_CLAMP = 10.0


# --------------------------------------------------------------------------------------------
# Turn segments
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TurnSegments:
    """Every (row, turn) pair as one segment id.

    seg (B, T) int64: segment of each model token, ``num`` (a dummy bucket) elsewhere;
    row (num,) int64: the row of each segment; length (num,) int64: its number of tokens;
    num: number of segments S.
    """

    seg: torch.Tensor
    row: torch.Tensor
    length: torch.Tensor
    num: int

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Σ of ``values`` (B, T) over each segment → (S,) (non-model tokens ignored)."""
        out = torch.zeros(self.num + 1, dtype=values.dtype, device=values.device)
        return out.index_add_(0, self.seg.flatten(), values.flatten())[: self.num]

    def broadcast(self, per_segment: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """(S,) → (B, T): each model token gets its segment's entry, others ``fill``."""
        padded = torch.cat([per_segment, per_segment.new_full((1,), fill)])
        return padded[self.seg]

    def turns_per_row(self, num_rows: int) -> torch.Tensor:
        return torch.bincount(self.row, minlength=num_rows)


def turn_segments(mask: torch.Tensor, turn_ids: torch.Tensor | None = None) -> TurnSegments:
    """Turns of each row: maximal runs of ``mask`` 1 (default) or, with ``turn_ids`` (B, T),
    the model tokens of a row that share one non-negative id."""
    is_tok = mask.bool()
    b, t = is_tok.shape
    device = is_tok.device
    if turn_ids is None:
        prev = F.pad(is_tok[:, :-1], (1, 0), value=False)
        start = is_tok & ~prev  # first token of each run
        # Row-major running count of starts numbers the segments; nonzero() lists them in the
        # same order, so row[s] is the row of segment s.
        seg = torch.cumsum(start.flatten().long(), 0).view(b, t) - 1
        row = torch.nonzero(start)[:, 0]
    else:
        ids = turn_ids.long()
        if bool((is_tok & (ids < 0)).any()):
            r, c = (int(i) for i in torch.nonzero(is_tok & (ids < 0))[0])
            raise ValueError(f"turn_ids[{r}, {c}] = {int(ids[r, c])}: model tokens need an id >= 0")
        width = int(ids[is_tok].max()) + 1 if bool(is_tok.any()) else 1
        key = torch.arange(b, device=device)[:, None] * width + ids.clamp(min=0)
        uniq, inverse = torch.unique(key[is_tok], return_inverse=True)
        seg = torch.zeros((b, t), dtype=torch.long, device=device)
        seg[is_tok] = inverse
        row = torch.div(uniq, width, rounding_mode="floor")
    num = int(row.numel())
    seg = torch.where(is_tok, seg, num)
    length = torch.bincount(seg.flatten(), minlength=num + 1)[:num]
    return TurnSegments(seg, row, length, num)


# --------------------------------------------------------------------------------------------
# Pieces of the loss
# --------------------------------------------------------------------------------------------
def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x * m).sum() / m.sum().clamp(min=1)


def _stop_gradient_ratio(logp: torch.Tensor, log_s: torch.Tensor,
                         is_tok: torch.Tensor) -> torch.Tensor:
    """exp(log π − sg[log π] + sg[log s]) clamped at 10: value s, gradient s ∇log π."""
    log_ratio = (logp - logp.detach() + log_s.detach()).clamp(max=LOG_RATIO_CLAMP)
    return torch.exp(torch.where(is_tok, log_ratio, torch.zeros_like(log_ratio)))


def importance_ratio(level: str, logp: torch.Tensor, log_ratio: torch.Tensor, is_tok: torch.Tensor,
                     segments: TurnSegments, turn_ratio: str = "geometric",
                     turn_sum: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token ratio (B, T) at the given level (equations in the module docstring).
    ``turn_sum`` (S,): Σ of the log-ratio per turn, if already computed."""
    if level == "token":
        return torch.exp(log_ratio)
    with torch.no_grad():
        if level == "sequence":
            m = is_tok.to(log_ratio.dtype)
            log_s = ((log_ratio * m).sum(1) / m.sum(1).clamp(min=1))[:, None].expand_as(log_ratio)
        else:
            if turn_sum is None:
                turn_sum = segments.sum(log_ratio.detach())
            if turn_ratio == "geometric":
                turn_sum = turn_sum / segments.length.clamp(min=1)
            log_s = segments.broadcast(turn_sum)
    return _stop_gradient_ratio(logp, log_s, is_tok)


def entropy_aware_advantages(advantages: torch.Tensor, token_entropy: torch.Tensor,
                             is_tok: torch.Tensor, gamma: float) -> torch.Tensor:
    """AEPO: A_t (1 + γ z(H_t)), z over the batch's model tokens (unbiased std, 0 → 1)."""
    h = token_entropy.detach()[is_tok]
    if h.numel() == 0:
        return advantages
    std = h.std() if h.numel() > 1 else h.new_zeros(())
    std = torch.where(std > 0, std, torch.ones_like(std))
    z = torch.where(is_tok, (token_entropy.detach() - h.mean()) / std, 0)  # padding may be NaN
    return advantages * (1 + gamma * z)


def aggregate(per_token_loss: torch.Tensor, m: torch.Tensor, agg: str) -> torch.Tensor:
    """Scalar loss from (B, T) per-token losses and mask ``m`` (float)."""
    summed = (per_token_loss * m).sum(1)
    if agg == "token-mean":
        return summed.sum() / m.sum().clamp(min=1)
    if agg == "seq-mean-token-sum":
        return summed.mean()
    tokens = m.sum(1)
    has_tokens = tokens > 0
    per_row = summed / tokens.clamp(min=1)
    return (per_row * has_tokens).sum() / has_tokens.sum().clamp(min=1)


def turn_kl_entropy(turn_sum: torch.Tensor, segments: TurnSegments, num_rows: int) -> torch.Tensor:
    """The authors' diagnostic (docs/method.md §7), from the per-turn sums of the log-ratio (S,):
    per row, softmax over its turns of each turn's share of the row's summed log-ratio,
    Shannon entropy / log(#turns); 0 for rows with one turn or a zero sum; mean over rows."""
    row_sum = torch.zeros(num_rows, dtype=turn_sum.dtype, device=turn_sum.device)
    row_sum.index_add_(0, segments.row, turn_sum)
    usable = (row_sum != 0)[segments.row]
    share = torch.where(usable, turn_sum / torch.where(row_sum == 0, 1, row_sum)[segments.row], 0)
    top = torch.full_like(row_sum, -float("inf")).scatter_reduce(
        0, segments.row, share, reduce="amax", include_self=True)
    e = torch.exp(share - top[segments.row])
    z = torch.zeros_like(row_sum).index_add_(0, segments.row, e)
    p = e / z[segments.row]
    h = torch.zeros_like(row_sum).index_add_(0, segments.row, -p * torch.log(p + 1e-10))
    turns = segments.turns_per_row(num_rows)
    norm = torch.log(turns.clamp(min=2).to(h.dtype))
    per_row = torch.where((turns > 1) & (row_sum != 0), h / norm, 0)
    return per_row.mean() if num_rows else per_row.sum()


# --------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------
def _check_inputs(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, level: str, agg: str, turn_ratio: str,
                  turn_ids: torch.Tensor | None, ref_logp: torch.Tensor | None, beta: float,
                  token_entropy: torch.Tensor | None, entropy_aware_adv: float) -> None:
    """Raise a ValueError naming the input (and the row, column) that is wrong."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if agg not in AGGREGATIONS:
        raise ValueError(f"agg must be one of {AGGREGATIONS}, got {agg!r}")
    if turn_ratio not in TURN_RATIOS:
        raise ValueError(f"turn_ratio must be one of {TURN_RATIOS}, got {turn_ratio!r}")
    if logp.ndim != 2:
        raise ValueError(f"logp must be (B, T), got shape {tuple(logp.shape)}")
    named = {"old_logp": old_logp, "mask": mask, "turn_ids": turn_ids, "ref_logp": ref_logp,
             "token_entropy": token_entropy}
    for name, x in named.items():
        if x is not None and x.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, logp has {tuple(logp.shape)}")
    if advantages.shape not in (logp.shape, logp.shape[:1]):
        raise ValueError(f"advantages must be (B,) or (B, T); got {tuple(advantages.shape)} "
                         f"for logp {tuple(logp.shape)}")
    if bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError("mask must hold only 0 and 1")
    if beta and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp")
    if entropy_aware_adv and token_entropy is None:
        raise ValueError("entropy_aware_adv > 0 needs token_entropy")
    is_tok = mask.bool()
    adv = advantages if advantages.ndim == 2 else advantages[:, None].expand_as(logp)
    for name, x in {"logp": logp, "old_logp": old_logp, "advantages": adv,
                    "ref_logp": ref_logp if beta else None}.items():
        if x is not None and not bool((torch.isfinite(x.detach()) | ~is_tok).all()):
            r, c = (int(i) for i in torch.nonzero(~torch.isfinite(x.detach()) & is_tok)[0])
            raise ValueError(f"{name}[{r}, {c}] is not finite on a model token")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    level: str = "turn",
    eps_low: float = 3e-3,
    eps_high: float = 4e-3,
    agg: str = "seq-mean-token-mean",
    turn_ids: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    entropy_balanced_clip: bool = False,
    token_entropy: torch.Tensor | None = None,
    entropy_aware_adv: float = 0.0,
    turn_ratio: str = "geometric",
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""Clipped policy loss and its diagnostics (equations in the module docstring).

    Args: logp (B, T) log π_θ of the sampled tokens (carries the gradient); old_logp (B, T)
    log π_old (sampling policy); advantages (B,) or (B, T); mask (B, T) 1 = model token;
    level ``token`` | ``sequence`` | ``turn``; turn_ids (B, T) optional turn id per token;
    ref_logp (B, T) with ``beta`` > 0 adds the k3 KL penalty; token_entropy (B, T) for
    ``entropy_aware_adv`` (γ); ``turn_ratio`` ``geometric`` (code) | ``product`` (paper).

    Returns ``(loss, metrics)``; metrics: ``clip_frac_low``, ``clip_frac_high``, ``clip_frac``
    (share of model tokens whose clipped branch binds), ``approx_kl`` (mean of old − new),
    ``ratio_mean``, ``turn_kl_entropy``, ``single_turn_rows`` (rows with ≤ 1 turn),
    ``mean_turns_per_row`` and, with ``beta``, ``ref_kl``.
    """
    advantages = torch.as_tensor(advantages, device=logp.device)
    _check_inputs(logp, old_logp, advantages, mask, level, agg, turn_ratio, turn_ids, ref_logp,
                  beta, token_entropy, entropy_aware_adv)
    is_tok = mask.bool()
    m = is_tok.to(logp.dtype)
    zeros = torch.zeros_like(logp)
    # r_t on model tokens, 0 elsewhere (padding may hold -inf or garbage).
    log_ratio = torch.where(is_tok, logp - old_logp.detach(), zeros)
    adv = advantages.detach().to(logp.dtype)
    adv = torch.where(is_tok, adv if adv.ndim == 2 else adv[:, None].expand_as(logp), zeros)
    if entropy_aware_adv:
        adv = entropy_aware_advantages(adv, token_entropy, is_tok, entropy_aware_adv)
    segments = turn_segments(mask, turn_ids)
    with torch.no_grad():  # shared by the turn ratio and the turn_kl_entropy diagnostic
        turn_sum = segments.sum(log_ratio.detach())

    ratio = importance_ratio(level, logp, log_ratio, is_tok, segments, turn_ratio, turn_sum)
    lower, upper = 1.0 - eps_low, 1.0 + eps_high
    if entropy_balanced_clip:
        upper_bound = upper * ratio / ratio.detach().clamp(min=torch.finfo(ratio.dtype).tiny)
        clipped = torch.clamp(ratio, min=torch.full_like(ratio, lower), max=upper_bound)
    else:
        clipped = ratio.clamp(lower, upper)
    unclipped_loss, clipped_loss = -adv * ratio, -adv * clipped
    per_token_loss = torch.maximum(unclipped_loss, clipped_loss)
    ref_kl = None
    if beta:
        diff = torch.where(is_tok, ref_logp.detach() - logp, zeros)
        ref_kl = torch.exp(diff) - diff - 1
        per_token_loss = per_token_loss + beta * ref_kl
    loss = aggregate(per_token_loss, m, agg)

    with torch.no_grad():
        binds = (clipped_loss > unclipped_loss) & is_tok
        turns = segments.turns_per_row(logp.shape[0])
        metrics = {
            "clip_frac_low": _masked_mean((binds & (ratio < lower)).to(m.dtype), m).item(),
            "clip_frac_high": _masked_mean((binds & (ratio > upper)).to(m.dtype), m).item(),
            "clip_frac": _masked_mean(binds.to(m.dtype), m).item(),
            "approx_kl": _masked_mean(-log_ratio, m).item(),
            "ratio_mean": _masked_mean(ratio, m).item(),
            "turn_kl_entropy": turn_kl_entropy(turn_sum, segments, logp.shape[0]).item(),
            "single_turn_rows": int((turns <= 1).sum()),
            "mean_turns_per_row": turns.to(m.dtype).mean().item(),
        }
        if ref_kl is not None:
            metrics["ref_kl"] = _masked_mean(ref_kl, m).item()
    return loss, metrics


# --------------------------------------------------------------------------------------------
# A simulated policy change (notebook 03): which ratio level clips how many tokens?
# --------------------------------------------------------------------------------------------
def simulate_policy_change(old_logp: torch.Tensor, mask: torch.Tensor,
                           turn_ids: torch.Tensor | None = None, turn_drift_std: float = 2e-3,
                           token_noise_std: float = 1e-2,
                           generator: torch.Generator | None = None) -> torch.Tensor:
    """New log-probs (B, T) = old + d_k + ε_t on model tokens: one drift d_k ~ N(0, σ_turn²)
    per turn (a coherent change of the turn's behaviour) plus per-token noise
    ε_t ~ N(0, σ_tok²) (the token-level jitter an update also causes)."""
    segments = turn_segments(mask, turn_ids)
    # Drawn on the CPU (where the generator lives), then moved next to the log-probs.
    drift = torch.randn(segments.num, generator=generator, dtype=old_logp.dtype) * turn_drift_std
    noise = torch.randn(old_logp.shape, generator=generator, dtype=old_logp.dtype) * token_noise_std
    drift, noise = drift.to(old_logp.device), noise.to(old_logp.device)
    return old_logp + torch.where(mask.bool(), segments.broadcast(drift) + noise, 0)


def clip_fraction_by_level(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                           mask: torch.Tensor, turn_ids: torch.Tensor | None = None,
                           levels: tuple[str, ...] = LEVELS, eps_low: float = 3e-3,
                           eps_high: float = 4e-3) -> dict[str, float]:
    """Share of model tokens whose clip binds (no gradient) at each ratio level."""
    out = {}
    with torch.no_grad():
        for level in levels:
            _, metrics = policy_loss(logp, old_logp, advantages, mask, level=level,
                                     eps_low=eps_low, eps_high=eps_high, turn_ids=turn_ids)
            out[level] = metrics["clip_frac"]
    return out
