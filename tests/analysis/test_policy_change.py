"""The inspector's simulated turn ratios (at2po_lib.analysis.policy_change) go through the loss's
own ratio (at2po_lib.method.loss.importance_ratios): checked here against the per-turn formula
written out in NumPy, exp(mean_t (log π_new − log π_old)), and the clip window, on random trees."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from at2po_lib.analysis.policy_change import simulate_policy_change, simulated_turn_ratios
from at2po_lib.method.tree import TreeArrays


def random_tree(rng: np.random.Generator, with_counts: bool) -> TreeArrays:
    n = int(rng.integers(2, 12))
    parent = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
    leaf_reward = np.where(np.isin(np.arange(n), parent), np.nan, rng.integers(0, 2, n))
    arrays = {"num_tokens": rng.integers(0, 9, n)} if with_counts else {}
    return TreeArrays(parent, rng.random(n), leaf_reward, node_arrays=arrays)


def numpy_turn_ratios(
    tree: TreeArrays,
    adv: np.ndarray,
    eps_low: float,
    eps_high: float,
    drift: float,
    noise: float,
    seed: int,
    tokens_per_turn: int = 16,
) -> pd.DataFrame:
    """The turn ratio and clip written out per node in NumPy (the formula the function had
    before it called the loss's ratio)."""
    n = tree.num_nodes
    counts = np.asarray(tree.node_arrays.get("num_tokens", np.full(n, tokens_per_turn)))
    counts = np.where(np.arange(n) > 0, np.maximum(counts, 1), 0).astype(np.int64)
    turn_of_token = np.repeat(np.arange(n), counts)
    mask = torch.ones(1, len(turn_of_token), dtype=torch.long)
    old = torch.zeros(1, len(turn_of_token), dtype=torch.float64)
    new = simulate_policy_change(
        old,
        mask,
        turn_ids=torch.as_tensor(turn_of_token)[None],
        turn_drift_std=drift,
        token_noise_std=noise,
        generator=torch.Generator().manual_seed(seed),
    )
    log_r = (new - old)[0].numpy()
    turn_ratio = np.exp(
        np.bincount(turn_of_token, weights=log_r, minlength=n) / np.maximum(counts, 1)
    )
    token_ratio = np.exp(log_r)
    sign = np.sign(adv)[turn_of_token]
    binds = ((sign > 0) & (token_ratio > 1 + eps_high)) | ((sign < 0) & (token_ratio < 1 - eps_low))
    clipped = ((adv > 0) & (turn_ratio > 1 + eps_high)) | ((adv < 0) & (turn_ratio < 1 - eps_low))
    with np.errstate(invalid="ignore"):
        share = np.bincount(turn_of_token, weights=binds, minlength=n) / np.maximum(counts, 1)
    return pd.DataFrame(
        {
            "tokens": counts,
            "turn_ratio": np.where(counts > 0, turn_ratio, np.nan),
            "token_ratio_min": [
                token_ratio[turn_of_token == i].min() if counts[i] else np.nan for i in range(n)
            ],
            "token_ratio_max": [
                token_ratio[turn_of_token == i].max() if counts[i] else np.nan for i in range(n)
            ],
            "token_clip_share": np.where(counts > 0, share, np.nan),
            "turn_clipped": np.where(counts > 0, clipped, False),
        }
    )


@pytest.mark.parametrize("case", range(40))
def test_simulated_turn_ratios_equal_the_numpy_formula(case):
    rng = np.random.default_rng(case)
    tree = random_tree(rng, with_counts=case % 3 != 0)
    adv = rng.normal(size=tree.num_nodes) * (rng.random(tree.num_nodes) > 0.2)
    eps_low, eps_high = float(rng.uniform(1e-3, 0.2)), float(rng.uniform(1e-3, 0.3))
    drift, noise = float(rng.choice([0.0, 2e-3, 0.05, 0.5])), float(rng.choice([0.0, 1e-2, 0.3]))
    seed = int(rng.integers(0, 1000))
    got = simulated_turn_ratios(tree, adv, eps_low, eps_high, drift, noise, seed)
    want = numpy_turn_ratios(tree, adv, eps_low, eps_high, drift, noise, seed)
    assert list(got.columns) == list(want.columns)
    assert got["tokens"].tolist() == want["tokens"].tolist()
    for column in ("turn_ratio", "token_ratio_min", "token_ratio_max", "token_clip_share"):
        np.testing.assert_allclose(
            got[column].to_numpy(float),
            want[column].to_numpy(float),
            rtol=1e-12,
            atol=0,
            equal_nan=True,
            err_msg=column,
        )
    assert got["turn_clipped"].tolist() == want["turn_clipped"].tolist()
    assert got.attrs["window"] == (1 - eps_low, 1 + eps_high)


def test_a_drift_beyond_the_window_clips_in_the_advantage_direction_only():
    tree = TreeArrays(
        np.array([-1, 0, 0]),
        np.zeros(3),
        np.array([np.nan, 1.0, 0.0]),
        node_arrays={"num_tokens": np.array([0, 4, 4])},
    )
    moved = simulated_turn_ratios(
        tree, np.array([0.0, 1.0, -1.0]), turn_drift_std=0.5, token_noise_std=0.0, seed=3
    )
    r = moved["turn_ratio"].to_numpy()
    assert np.isnan(r[0]) and not np.isclose(r[1], 1) and not np.isclose(r[2], 1)
    assert moved["turn_clipped"].tolist() == [False, r[1] > 1 + 4e-3, r[2] < 1 - 3e-3]
