r"""The clipped policy loss with a token, sequence or turn importance ratio (docs/method.md §7–§8).

:func:`policy_loss` is the definition: it reads top to bottom as the paper's equations, on the
model tokens of a batch, and the trainer calls it as it is; :func:`loss_diagnostics`, beside
it, gives what the trainer logs of the same update (clip shares, at this level and at the token
and the turn level, approximate KL, the turn-KL entropy) from the same inputs, without
recomputing the loss. (A fused form with a hand-written backward saved nothing measurable: the
loss is under 1% of a tiny RL step, benchmarks/README.md.) Both take the update's tensors as one
:class:`LossBatch` and the method's choices as one :class:`LossOptions` (the trainer builds it
once from its config). One function covers the paper's methods (the options column:
:class:`LossOptions` fields):

=========  ===========  ============================  ==================================
method     ``level``    clip (eps_low / eps_high)      other options
=========  ===========  ============================  ==================================
GRPO       token        0.2 / 0.2                      ``beta=0.001`` with ``ref_logp``,
                                                       ``agg="token-mean"``
DAPO       token        0.2 / 0.28                     ``agg="token-mean"``
GSPO       sequence     3e-4 / 4e-4                    ``agg="seq-mean-token-mean"``
Tree-GRPO  token        0.2 / 0.2                      ``beta=0.001``, ``agg="token-mean"``
AEPO       token        0.2 / 0.28                     ``entropy_balanced_clip=True``,
                                                       ``entropy_aware_adv=0.2``,
                                                       ``agg="token-mean"``
AT2PO      turn         3e-3 / 4e-3 (the defaults)     ``agg="seq-mean-token-mean"``
=========  ===========  ============================  ==================================

Shapes: every input is (B, T) (B rows = root→leaf trajectories, T tokens); ``advantages`` may
also be (B,). ``mask`` is 1 on the model's own tokens (the rollout's ``sampled_mask``; TRL's
``completion_mask * tool_mask``), 0 on prompt, observation and padding tokens, whose entries are
never read. A turn is a maximal run of mask 1 inside a row or, with ``turn_ids``, the row's
model tokens sharing one id. The KL is verl's ``low_var_kl`` (k3, as the authors' GRPO uses
it); verl's dual clip (c = 3 on negative advantages) is not offered (TRL does not use it either).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LEVELS = ("token", "sequence", "turn")
"""Ratio levels: one ratio per token (GRPO, DAPO), per row (GSPO) or per turn (ATPO)."""
TURN_RATIOS = ("geometric", "product")
"""Turn ratio: the geometric mean of the turn's token ratios (authors' code, the default) or
their product (the paper's text)."""
AGGREGATIONS = ("token-mean", "seq-mean-token-mean")
"""verl's ``loss_agg_mode`` names of the per-token losses' aggregation."""
EPS_LOW, EPS_HIGH = 3e-3, 4e-3
"""ATPO's turn-level clip range 1 − 3e-3 … 1 + 4e-3 (the paper's; the ``at2po`` preset's)."""
REFERENCE_CLIP = 0.2
"""GRPO's clip range: a run whose own range differs logs both levels' clipped share at it too
(``clip_ratio/token_level_eps0.2``, ``clip_ratio/turn_level_eps0.2``), so one run's
updates are read at both ranges (:mod:`at2po_lib.analysis.dissection`)."""
LOG_RATIO_CLAMP = 10.0
"""Sequence and turn log-ratios are clamped here (no gradient beyond), as GSPO's code does."""
KL_CLAMP = 10.0
"""verl's per-token bound on the k3 KL (``low_var_kl``)."""


@dataclass(frozen=True)
class LossOptions:
    r"""A method's choices of the loss (docs/method.md §7–§8); the defaults are ATPO's. The
    trainer builds them once from its config (``AT2POConfig.loss_options``), where the
    method presets set them (:mod:`.presets`)."""

    level: str = "turn"
    """The ratio unit k(t) (:data:`LEVELS`): each token (GRPO, DAPO), its row (GSPO) or its turn
    (ATPO, §7 "Turn ratio")."""
    eps_low: float = EPS_LOW
    """ε_low of clip(s_t, 1 − ε_low, 1 + ε_high) (§7 "Clipped objective per token")."""
    eps_high: float = EPS_HIGH
    """ε_high of the same clip (DAPO's clip-higher: ε_high > ε_low, §8)."""
    agg: str = "seq-mean-token-mean"
    """How the per-token losses ℓ_t become one number (:data:`AGGREGATIONS`, verl's
    ``loss_agg_mode``): Σ_t ℓ_t / N, or the mean over rows of each row's mean (§7
    "Aggregation")."""
    turn_ratio: str = "geometric"
    """log s_k = (1/|y_k|) Σ_{t∈k} r_t (geometric, the authors' code) or Σ_{t∈k} r_t (product,
    the paper's ρ^turn) for a turn unit (:data:`TURN_RATIOS`, §7)."""
    beta: float = 0.0
    """β of the penalty ℓ_t += β KL_t(π_θ ‖ π_ref), verl's k3 ``low_var_kl`` (GRPO,
    Tree-GRPO: 1e-3, §8); > 0 needs ``ref_logp``."""
    entropy_balanced_clip: bool = False
    """AEPO's entropy-balanced clipping: above 1 + ε_high the clipped ratio
    (1 + ε_high) s_t / sg(s_t) keeps a gradient (§8)."""
    entropy_aware_adv: float = 0.0
    """γ of AEPO's entropy-aware advantage A_t (1 + γ z(H_t)) (§8); > 0 needs
    ``token_entropy``."""

    def __post_init__(self) -> None:
        for name, allowed in (
            ("level", LEVELS),
            ("agg", AGGREGATIONS),
            ("turn_ratio", TURN_RATIOS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")


ATPO_LOSS = LossOptions()
"""ATPO's loss: turn ratio, clip 1 − 3e-3 … 1 + 4e-3, seq-mean-token-mean (the ``at2po``
preset's)."""


@dataclass(frozen=True)
class LossBatch:
    """The tensors of one update that :func:`policy_loss` and :func:`loss_diagnostics` read
    (shapes: the module docstring)."""

    logp: torch.Tensor
    """(B, T) log π_θ; the loss is differentiable in it."""
    old_logp: torch.Tensor
    """(B, T) log π_old, the rollout's."""
    advantages: torch.Tensor
    """(B,) or (B, T) A."""
    mask: torch.Tensor
    """(B, T) 1 = model token."""
    turn_ids: torch.Tensor | None = None
    """(B, T) the turn of each model token, optional (maximal runs of mask 1 otherwise)."""
    ref_logp: torch.Tensor | None = None
    """(B, T) log π_ref: with ``beta`` > 0, the k3 KL penalty."""
    token_entropy: torch.Tensor | None = None
    """(B, T) H_t: with ``entropy_aware_adv`` γ > 0, AEPO's advantage."""


def ratio_units(
    mask: torch.Tensor, level: str = "turn", turn_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """The ratio unit (N,) int64 of each model token of ``mask`` (B, T), row-major: the token
    itself (token), its row (sequence) or its turn (turn; numbered in order of first token)."""
    is_tok = mask.bool()  # (B, T)
    b, t = is_tok.shape
    if level == "token":
        return torch.arange(int(is_tok.sum()), device=mask.device)
    rows = torch.arange(b, device=mask.device)[:, None].expand(b, t)[is_tok]  # (N,)
    if level == "sequence":
        return rows
    if turn_ids is None:  # a turn starts at a model token whose left neighbour is not one
        start = is_tok.clone()
        start[:, 1:] &= ~is_tok[:, :-1]
        turn_ids = start.cumsum(1)  # (B, T)
    ids = turn_ids[is_tok].long()  # (N,)
    if ids.numel() and int(ids.min()) < 0:
        r, c = (int(i) for i in torch.nonzero(is_tok & (turn_ids < 0))[0])
        raise ValueError(
            f"turn_ids[{r}, {c}] = {int(turn_ids[r, c])}: model tokens need an id >= 0"
        )
    width = int(ids.max()) + 1 if ids.numel() else 1
    return torch.unique(rows * width + ids, return_inverse=True)[1]


def importance_ratios(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    level: str = "turn",
    turn_ids: torch.Tensor | None = None,
    turn_ratio: str = "geometric",
) -> torch.Tensor:
    r"""s_t (N,) of each model token, differentiable: the ratio of its unit, in the stop-gradient
    form exp(log π_θ(y_t) − sg[log π_θ(y_t)] + sg[log s_k]), whose value is s_k and whose
    gradient is s_k ∇log π_θ(y_t) (GSPO's form; for a token unit it is exp(r_t) itself)."""
    is_tok = mask.bool()
    lp = logp[is_tok]  # (N,) log π_θ(y_t)
    r = (lp - old_logp[is_tok]).detach()  # (N,) r_t = log π_θ(y_t) − log π_old(y_t)
    unit = ratio_units(mask, level, turn_ids)  # (N,) k(t)
    total = r.new_zeros(int(unit.max()) + 1 if unit.numel() else 0).index_add(0, unit, r)
    size = torch.bincount(unit, minlength=total.numel())  # |y_k|
    log_s = total if level == "turn" and turn_ratio == "product" else total / size.clamp(min=1)
    # log s_k = Σ_{t∈k} r_t (product) or (1/|y_k|) Σ_{t∈k} r_t (geometric, sequence, token)
    log_s_t = lp - lp.detach() + log_s[unit]  # (N,)
    return torch.exp(log_s_t if level == "token" else log_s_t.clamp(max=LOG_RATIO_CLAMP))


def policy_loss(batch: LossBatch, options: LossOptions = ATPO_LOSS) -> torch.Tensor:
    r"""The clipped policy loss (scalar), differentiable in ``batch.logp`` (:class:`LossBatch`),
    with the method's ``options`` (:class:`LossOptions`)."""
    o, b, logp, mask = options, batch, batch.logp, batch.mask
    advantages = torch.as_tensor(b.advantages, device=logp.device)
    check_loss_inputs(b, o, advantages)
    is_tok = mask.bool()
    a = token_advantages(advantages, mask, logp.dtype, b.token_entropy, o.entropy_aware_adv)  # (N,)
    s = importance_ratios(logp, b.old_logp, mask, o.level, b.turn_ids, o.turn_ratio)  # (N,) s_t
    clipped = s.clamp(1 - o.eps_low, 1 + o.eps_high)  # clip(s_t, 1 − ε_low, 1 + ε_high)
    if o.entropy_balanced_clip:  # AEPO: the upper bound (1 + ε_high) s / sg(s) keeps a gradient
        upper = 1 + o.eps_high
        clipped = torch.where(s.detach() > upper, upper * s / s.detach(), clipped)
    per_token = torch.maximum(-a * s, -a * clipped)  # ℓ_t = max(−A_t s_t, −A_t clip(s_t, …))
    if o.beta:  # ℓ_t += β KL_t(π_θ ‖ π_ref)
        per_token = per_token + o.beta * low_var_kl(b.ref_logp[is_tok], logp[is_tok])
    if o.agg == "token-mean":  # Σ_t ℓ_t / N
        return per_token.sum() / max(per_token.numel(), 1)
    # seq-mean-token-mean: the mean, over rows with a model token, of the row's mean ℓ_t
    rows = torch.arange(is_tok.shape[0], device=mask.device)[:, None].expand_as(is_tok)[is_tok]
    row_sum = per_token.new_zeros(is_tok.shape[0]).index_add(0, rows, per_token)  # (B,)
    row_len = is_tok.sum(1)  # (B,)
    return (row_sum / row_len.clamp(min=1)).sum() / max(int(torch.count_nonzero(row_len)), 1)


def token_advantages(
    advantages: torch.Tensor,
    mask: torch.Tensor,
    dtype: torch.dtype,
    token_entropy: torch.Tensor | None = None,
    entropy_aware_adv: float = 0.0,
) -> torch.Tensor:
    """A_t (N,) of each model token, detached, in ``dtype`` promoted to float32 at least: its
    row's advantage (``advantages`` (B,)) or its own ((B, T)); AEPO's entropy-aware form with
    ``entropy_aware_adv`` γ > 0."""
    is_tok = mask.bool()
    rows = torch.arange(is_tok.shape[0], device=mask.device)[:, None].expand_as(is_tok)[is_tok]
    a = (advantages[rows] if advantages.ndim == 1 else advantages[is_tok]).detach()
    a = a.to(torch.promote_types(dtype, torch.float32))
    if entropy_aware_adv:  # AEPO: A_t ← A_t (1 + γ z(H_t))
        a = entropy_aware_advantages(a, token_entropy[is_tok], entropy_aware_adv)
    return a


@torch.no_grad()
def loss_diagnostics(batch: LossBatch, options: LossOptions = ATPO_LOSS) -> dict[str, float]:
    """What the trainer logs of the update :func:`policy_loss` makes with the same arguments
    (``agg`` and ``entropy_balanced_clip`` change no statistic), from the log-ratios alone, in
    one device sync. Shares are of the N model tokens:

    ``clip_frac`` (the clipped branch binds: A_t > 0 and s_t > 1 + ε_high, or A_t < 0 and
    s_t < 1 − ε_low), split into ``clip_frac_low`` / ``clip_frac_high``; ``clip_frac_token`` /
    ``clip_frac_turn``, the same share had the ratio been per token / per turn, at this clip
    range (the paper: a turn ratio clips far fewer tokens); ``approx_kl`` = mean(log π_old −
    log π); ``ratio_mean`` = mean s_t; ``turn_kl_entropy`` (the authors' diagnostic,
    docs/method.md §7: per row, the entropy of a softmax over its turns' shares of the row's
    summed log-ratio, / log(#turns); 0 for a row of one turn or a zero sum; mean over rows);
    ``single_turn_rows`` (rows with at most one turn), ``mean_turns_per_row``; with ``beta``,
    ``ref_kl`` (mean k3 KL to the reference)."""
    o, logp, mask, turn_ids = options, batch.logp, batch.mask, batch.turn_ids
    is_tok = mask.bool()
    dtype = torch.promote_types(logp.dtype, torch.float32)
    r = (logp.detach().to(dtype) - batch.old_logp.detach().to(dtype))[is_tok]  # (N,) log-ratios
    a = token_advantages(
        torch.as_tensor(batch.advantages, device=logp.device),
        mask,
        logp.dtype,
        batch.token_entropy,
        o.entropy_aware_adv,
    )  # (N,)
    lower, upper = 1 - o.eps_low, 1 + o.eps_high
    turn = ratio_units(mask, "turn", turn_ids)  # (N,) each token's turn
    turn_sum = r.new_zeros(int(turn.max()) + 1 if turn.numel() else 0).index_add(0, turn, r)

    def ratios(at: str) -> torch.Tensor:  # s_t (N,) with the ratio taken per ``at`` unit
        if at == "token":
            return torch.exp(r)
        unit = turn if at == "turn" else ratio_units(mask, at, turn_ids)
        total = (
            turn_sum
            if at == "turn"
            else r.new_zeros(int(unit.max()) + 1 if unit.numel() else 0).index_add(0, unit, r)
        )
        size = torch.bincount(unit, minlength=total.numel()).clamp(min=1)
        log_s = total if at == "turn" and o.turn_ratio == "product" else total / size
        return torch.exp(log_s.clamp(max=LOG_RATIO_CLAMP))[unit]

    def binds(s: torch.Tensor) -> torch.Tensor:  # the clipped branch is the larger loss
        return -a * s.clamp(lower, upper) > -a * s

    s = ratios(o.level)
    bound = binds(s)
    count = max(r.numel(), 1)
    rows = torch.arange(is_tok.shape[0], device=mask.device)[:, None].expand_as(is_tok)[is_tok]
    turn_row = rows.new_zeros(turn_sum.numel()).scatter(0, turn, rows)  # (S,) row of each turn
    turns_per_row = torch.bincount(turn_row, minlength=is_tok.shape[0])  # (B,)
    values = [
        (bound & (s < lower)).sum() / count,
        (bound & (s > upper)).sum() / count,
        bound.sum() / count,
        binds(ratios("token")).sum() / count,
        binds(ratios("turn")).sum() / count,
        -r.sum() / count,
        s.sum() / count,
        _turn_kl_entropy(turn_sum, turn_row, turns_per_row),
        (turns_per_row <= 1).sum(),
        turns_per_row.to(dtype).mean(),
    ]
    names = [
        "clip_frac_low",
        "clip_frac_high",
        "clip_frac",
        "clip_frac_token",
        "clip_frac_turn",
        "approx_kl",
        "ratio_mean",
        "turn_kl_entropy",
        "single_turn_rows",
        "mean_turns_per_row",
    ]
    if o.beta:
        values.append(low_var_kl(batch.ref_logp[is_tok], logp.detach()[is_tok]).sum() / count)
        names.append("ref_kl")
    stats = dict(
        zip(names, torch.stack([torch.as_tensor(v, dtype=torch.float64) for v in values]).tolist())
    )
    stats["single_turn_rows"] = int(stats["single_turn_rows"])
    return stats


def _turn_kl_entropy(
    turn_sum: torch.Tensor, turn_row: torch.Tensor, turns_per_row: torch.Tensor
) -> torch.Tensor:
    """:func:`loss_diagnostics`' ``turn_kl_entropy`` from each turn's summed log-ratio (S,) and
    row (S,)."""
    b = turns_per_row.numel()
    row_sum = turn_sum.new_zeros(b).index_add(0, turn_row, turn_sum)  # (B,)
    usable = (row_sum != 0)[turn_row]  # (S,)
    share = torch.where(usable, turn_sum / torch.where(row_sum == 0, 1, row_sum)[turn_row], 0)
    top = torch.full_like(row_sum, -float("inf")).scatter_reduce(
        0, turn_row, share, reduce="amax", include_self=True
    )  # (B,)
    e = torch.exp(share - top[turn_row])  # (S,)
    p = e / e.new_zeros(b).index_add(0, turn_row, e)[turn_row]  # (S,) softmax within a row
    h = turn_sum.new_zeros(b).index_add(0, turn_row, -p * torch.log(p + 1e-10))  # (B,)
    norm = torch.log(turns_per_row.clamp(min=2).to(h.dtype))
    per_row = torch.where((turns_per_row > 1) & (row_sum != 0), h / norm, 0)  # (B,)
    return per_row.mean() if b else per_row.sum()


def entropy_aware_advantages(
    advantages: torch.Tensor, token_entropy: torch.Tensor, gamma: float
) -> torch.Tensor:
    """AEPO: A_t (1 + γ z(H_t)), z over the batch's model tokens (unbiased std, 0 → 1).
    Both inputs (N,)."""
    h = token_entropy.detach()  # (N,)
    if h.numel() == 0:
        return advantages
    std = h.std() if h.numel() > 1 else h.new_zeros(())
    std = torch.where(std > 0, std, torch.ones_like(std))
    return advantages * (1 + gamma * (h - h.mean()) / std)


def low_var_kl(ref_logp: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(π_θ ‖ π_ref) per token as verl's ``low_var_kl``: d = ref − logp clamped
    at ±20 (no overflow in exp), KL = e^d − d − 1 clamped at ±10 (TRL's k3 has no clamp)."""
    d = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1).clamp(-KL_CLAMP, KL_CLAMP)


def check_loss_inputs(batch: LossBatch, options: LossOptions, advantages: torch.Tensor) -> None:
    """Raise a ValueError naming the input of ``batch`` that is wrong (shapes, a mask of 0/1,
    the inputs an option needs; the options' own choices are checked when they are made);
    ``advantages`` are the batch's as a tensor."""
    logp, old_logp, mask, ref_logp = batch.logp, batch.old_logp, batch.mask, batch.ref_logp
    turn_ids, token_entropy = batch.turn_ids, batch.token_entropy
    if logp.ndim != 2:
        raise ValueError(f"logp must be (B, T), got shape {tuple(logp.shape)}")
    named = {
        "old_logp": old_logp,
        "mask": mask,
        "turn_ids": turn_ids,
        "ref_logp": ref_logp,
        "token_entropy": token_entropy,
    }
    for name, x in named.items():
        if x is not None and x.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, logp has {tuple(logp.shape)}")
    if advantages.shape not in (logp.shape, logp.shape[:1]):
        raise ValueError(
            f"advantages must be (B,) or (B, T); got {tuple(advantages.shape)} "
            f"for logp {tuple(logp.shape)}"
        )
    if mask.dtype.is_floating_point or mask.dtype.is_complex:
        only_01 = torch.equal(mask.bool().to(mask.dtype), mask)
    else:  # integers: one min/max pass
        only_01 = (
            mask.dtype == torch.bool
            or mask.numel() == 0
            or all(0 <= int(v) <= 1 for v in torch.aminmax(mask))
        )
    if not only_01:
        raise ValueError("mask must hold only 0 and 1")
    if options.beta and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp")
    if options.entropy_aware_adv and token_entropy is None:
        raise ValueError("entropy_aware_adv > 0 needs token_entropy")
    is_tok = mask.bool()
    named = {
        "logp": logp,
        "old_logp": old_logp,
        "advantages": advantages,
        "ref_logp": ref_logp if options.beta else None,
    }
    for name, x in named.items():  # only the model tokens' entries are read
        if x is None:
            continue
        bad = ~torch.isfinite(
            x.detach()[is_tok] if x.shape == is_tok.shape else x.detach()[is_tok.any(1)]
        )
        if bool(bad.any()):
            where = torch.nonzero(is_tok)[bad] if x.shape == is_tok.shape else None
            if where is not None:
                r, c = (int(i) for i in where[0])
                raise ValueError(f"{name}[{r}, {c}] is not finite on a model token")
            r = int(torch.nonzero(is_tok.any(1))[bad][0, 0])
            raise ValueError(f"{name}[{r}] is not finite (a row with model tokens)")
