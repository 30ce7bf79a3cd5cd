"""A simulated policy change (notebook 03 §4, the inspector): which ratio level clips how many
tokens, and each turn's ratio after one simulated update? Computed with the loss's definition,
:mod:`at2po_lib.method.loss`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from ..method.loss import EPS_HIGH, EPS_LOW, LEVELS, importance_ratios, ratio_units
from ..method.tree import TreeArrays


def simulate_policy_change(
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    turn_ids: torch.Tensor | None = None,
    turn_drift_std: float = 2e-3,
    token_noise_std: float = 1e-2,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
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


def clip_fraction_by_level(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    turn_ids: torch.Tensor | None = None,
    levels: tuple[str, ...] = LEVELS,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
) -> dict[str, float]:
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


def simulated_turn_ratios(
    tree: TreeArrays,
    advantages: Any,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    turn_drift_std: float = 2e-3,
    token_noise_std: float = 1e-2,
    seed: int = 0,
    tokens_per_turn: int = 16,
) -> pd.DataFrame:
    """Per node of ``tree``: ``tokens``, the turn ratio after one simulated update
    (:func:`simulate_policy_change`; the geometric mean of its token ratios, as
    :func:`at2po_lib.method.loss.importance_ratios` computes it for the loss), the range of its
    token ratios, the share of its tokens a *token*-level clip would bind, and ``turn_clipped``
    (ATPO's turn-level clip binds, given the sign of ``advantages`` (N,)). The tree's nodes are
    the turns of one row; token counts from ``num_tokens`` when the tree has them."""
    n = tree.num_nodes
    counts = np.asarray(tree.node_arrays.get("num_tokens", np.full(n, tokens_per_turn)))
    counts = np.where(np.arange(n) > 0, np.maximum(counts, 1), 0).astype(np.int64)
    turn_of_token = np.repeat(np.arange(n), counts)  # (N,) the node of each token
    mask = torch.ones(1, len(turn_of_token), dtype=torch.long)
    turn_ids = torch.as_tensor(turn_of_token)[None]
    old = torch.zeros(1, len(turn_of_token), dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    new = simulate_policy_change(
        old,
        mask,
        turn_ids=turn_ids,
        turn_drift_std=turn_drift_std,
        token_noise_std=token_noise_std,
        generator=generator,
    )
    with torch.no_grad():
        turn_s = importance_ratios(new, old, mask, "turn", turn_ids).numpy()  # (N,) s of its turn
        token_ratio = importance_ratios(new, old, mask, "token").numpy()  # (N,) exp(r_t)
    turn_ratio = np.full(n, np.nan)
    turn_ratio[turn_of_token] = turn_s  # nodes without tokens (the root) stay NaN
    adv = np.asarray(advantages, dtype=float)
    sign = np.sign(adv)[turn_of_token]
    token_binds = ((sign > 0) & (token_ratio > 1 + eps_high)) | (
        (sign < 0) & (token_ratio < 1 - eps_low)
    )
    by_turn = pd.Series(token_ratio).groupby(turn_of_token)
    clipped = ((adv > 0) & (turn_ratio > 1 + eps_high)) | ((adv < 0) & (turn_ratio < 1 - eps_low))
    frame = pd.DataFrame(
        {
            "tokens": counts,
            "turn_ratio": turn_ratio,
            "token_ratio_min": by_turn.min().reindex(range(n)).to_numpy(),
            "token_ratio_max": by_turn.max().reindex(range(n)).to_numpy(),
            "token_clip_share": np.where(
                counts > 0,
                np.bincount(turn_of_token, weights=token_binds, minlength=n)
                / np.maximum(counts, 1),
                np.nan,
            ),
            "turn_clipped": np.where(counts > 0, clipped, False),
        }
    )
    frame.index.name = "node"
    frame.attrs["window"] = (1 - eps_low, 1 + eps_high)
    return frame
