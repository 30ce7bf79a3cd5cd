"""A simulated policy change (notebook 03 §4, the inspector): which ratio level clips how many
tokens? Computed with the loss's definition, :mod:`at2po_lib.method.loss`."""

from __future__ import annotations

import torch

from ..method.loss import EPS_HIGH, EPS_LOW, LEVELS, importance_ratios, ratio_units


def simulate_policy_change(old_logp: torch.Tensor, mask: torch.Tensor,
                           turn_ids: torch.Tensor | None = None, turn_drift_std: float = 2e-3,
                           token_noise_std: float = 1e-2,
                           generator: torch.Generator | None = None) -> torch.Tensor:
    """New log-probs (B, T) = old + d_k + ε_t on model tokens: one drift d_k ~ N(0, σ_turn²)
    per turn (a coherent change of the turn's behaviour) plus per-token noise
    ε_t ~ N(0, σ_tok²) (the token-level jitter an update also causes)."""
    turn = ratio_units(mask, "turn", turn_ids)  # (N,) turn of each model token
    num_turns = int(turn.max()) + 1 if turn.numel() else 0
    # Drawn on the CPU (where the generator lives), then moved next to the log-probs.
    drift = torch.randn(num_turns, generator=generator, dtype=old_logp.dtype) * turn_drift_std
    noise = torch.randn(old_logp.shape, generator=generator, dtype=old_logp.dtype) * token_noise_std
    drift, noise = drift.to(old_logp.device), noise.to(old_logp.device)
    shift = torch.zeros_like(old_logp)  # (B, T)
    shift[mask.bool()] = drift[turn]
    return old_logp + torch.where(mask.bool(), shift + noise, 0)


def clip_fraction_by_level(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                           mask: torch.Tensor, turn_ids: torch.Tensor | None = None,
                           levels: tuple[str, ...] = LEVELS, eps_low: float = EPS_LOW,
                           eps_high: float = EPS_HIGH) -> dict[str, float]:
    """Share of model tokens whose clip binds (no gradient) at each ratio level: the clipped
    branch max(−A s, −A clip(s, 1 − eps_low, 1 + eps_high)) is strictly the larger one."""
    is_tok = mask.bool()
    rows = torch.arange(is_tok.shape[0], device=mask.device)[:, None].expand_as(is_tok)[is_tok]
    adv = advantages[rows] if advantages.ndim == 1 else advantages[is_tok]  # (N,)
    out = {}
    with torch.no_grad():
        for level in levels:
            s = importance_ratios(logp, old_logp, mask, level, turn_ids)  # (N,)
            binds = -adv * s.clamp(1 - eps_low, 1 + eps_high) > -adv * s
            # the count over the count of tokens as a tensor of the default dtype, as the
            # trainer's diagnostics compute it (the same number to the last bit)
            out[level] = float(torch.count_nonzero(binds) / max(binds.numel(), 1))
    return out
