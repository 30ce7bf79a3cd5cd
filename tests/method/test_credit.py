"""Tests for at2po_lib.method.credit: hand-computed trees, degenerate trees, baselines, and the
vectorised forest path against a naive recursive reference on random trees. The tree
containers and demo/loading helpers of at2po_lib.method.tree are tested in tests/method/test_method_tree.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.method.credit import (
    ADVANTAGE_MODES,
    VALUE_MODES,
    batch_token_advantages,
    forest_node_advantages,
    forest_node_values,
    node_advantages,
    node_values,
)
from at2po_lib.method.outcome import OUTCOME_ADVANTAGES, grpo_advantages, tree_grpo_advantages
from at2po_lib.method.examples import example_tree, synthetic_turn_rows
from at2po_lib.method.tree import Forest, TreeArrays

NAN = float("nan")


# ------------------------------------------------------------------------------------------
# A naive, recursive reference (one node at a time) for comparison
# ------------------------------------------------------------------------------------------
def naive_values(parent, entropy, reward, mode, normalize=True):
    n = len(parent)
    children = {i: [c for c in range(n) if parent[c] == i] for i in range(n)}
    leaves = [i for i in range(n) if not children[i] and not math.isnan(reward[i])]
    r = np.array([reward[i] for i in leaves], dtype=float)
    if normalize:
        std = r.std()
        norm = np.zeros_like(r) if np.all(r == r[0]) else (r - r.mean()) / (std + 1e-6)
    else:
        norm = r
    leaf_value = dict(zip(leaves, norm))

    def value(i):  # (value, list of scored leaf values below) or None when unscored
        if not children[i]:
            return (leaf_value[i], [leaf_value[i]]) if i in leaf_value else None
        got = [(c, value(c)) for c in children[i]]
        got = [(c, v) for c, v in got if v is not None]
        if not got:
            return None
        vals = np.array([v[0] for _, v in got])
        h = np.array([entropy[c] for c, _ in got])
        below = [x for _, v in got for x in v[1]]
        if mode == "child_mean":
            out = vals.mean()
        elif mode == "entropy_softmax":
            w = np.exp(h - h.max())
            out = (w * vals).sum() / w.sum()
        elif mode == "entropy_linear":
            out = vals.mean() if h.sum() == 0 else (h * vals).sum() / h.sum()
        else:
            out = float(np.mean(below))
        return out, below

    out = np.full(n, np.nan)
    for i in range(n):
        v = value(i)
        if v is not None:
            out[i] = v[0]
    return out


def naive_advantages(parent, values, mode):
    out = np.array(values, dtype=float)
    for i in range(1, len(parent)):
        vp, vr = values[parent[i]], values[0]
        out[i] = {
            "node_value": values[i],
            "diff_parent": values[i] - vp,
            "diff_global": values[i] - vr,
            "diff_localglobal": 2 * values[i] - vp - vr,
        }[mode]
    return out


# ------------------------------------------------------------------------------------------
# Hand-computed trees
# ------------------------------------------------------------------------------------------
# T1:      0
#        /   \
#       1     2 (H=3, r=1)
#      / \
#  (H=1,r=0) 3   4 (H=3, r=1)          node 1 has H=1
T1_PARENT = [-1, 0, 0, 1, 1]
T1_ENTROPY = [0.0, 1.0, 3.0, 1.0, 3.0]
T1_REWARD = [NAN, NAN, 1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    "mode, expected",
    [
        # V1 = (0 + 1)/2 = 0.5;  V0 = (0.5 + 1)/2 = 0.75
        ("child_mean", [0.75, 0.5, 1.0, 0.0, 1.0]),
        # V1 = (1*0 + 3*1)/(1+3) = 0.75;  V0 = (1*0.75 + 3*1)/4 = 0.9375
        ("entropy_linear", [0.9375, 0.75, 1.0, 0.0, 1.0]),
        # weight of the H=3 child: w = e^3/(e^1+e^3) = sigmoid(2) = 0.880797
        # V1 = w*1 = 0.880797;  V0 = (1-w)*V1 + w*1 = 0.119203*0.880797 + 0.880797 = 0.985791
        ("entropy_softmax", [0.985791, 0.880797, 1.0, 0.0, 1.0]),
        # V1 = mean(0, 1) = 0.5;  V0 = mean of leaves (1, 0, 1) = 2/3 (differs from child_mean)
        ("leaf_mean", [2 / 3, 0.5, 1.0, 0.0, 1.0]),
    ],
)
def test_value_modes_on_hand_tree(mode, expected):
    v = node_values(T1_PARENT, T1_ENTROPY, T1_REWARD, mode=mode, normalize_leaves=False)
    np.testing.assert_allclose(v.numpy(), expected, rtol=1e-5)


def test_leaf_normalisation_uses_population_std():
    # leaves (1, 0, 1): mean 2/3, population std sqrt(2/9) = 0.471405
    # 1 -> (1/3)/0.471405 = 0.707106;  0 -> -(2/3)/0.471405 = -1.414213
    v = node_values(T1_PARENT, T1_ENTROPY, T1_REWARD, mode="child_mean")
    np.testing.assert_allclose(v.numpy()[2:], [0.707106, -1.414213, 0.707106], rtol=1e-5)
    # child_mean: V1 = (-1.414213 + 0.707106)/2 = -0.353553; V0 = (-0.353553 + 0.707106)/2
    np.testing.assert_allclose(v.numpy()[:2], [0.176777, -0.353553], rtol=1e-5)


@pytest.mark.parametrize(
    "mode, expected",
    [
        # values (child_mean, no normalisation) V = [0.75, 0.5, 1, 0, 1]
        ("node_value", [0.75, 0.5, 1.0, 0.0, 1.0]),
        # V_n - V_parent: 1: 0.5-0.75, 2: 1-0.75, 3: 0-0.5, 4: 1-0.5 (root keeps V_root)
        ("diff_parent", [0.75, -0.25, 0.25, -0.5, 0.5]),
        # V_n - V_root: 0.5-0.75, 1-0.75, 0-0.75, 1-0.75
        ("diff_global", [0.75, -0.25, 0.25, -0.75, 0.25]),
        # sum of the two above
        ("diff_localglobal", [0.75, -0.5, 0.5, -1.25, 0.75]),
    ],
)
def test_advantage_modes_on_hand_tree(mode, expected):
    v = node_values(T1_PARENT, T1_ENTROPY, T1_REWARD, mode="child_mean", normalize_leaves=False)
    a = node_advantages(T1_PARENT, v, mode=mode)
    np.testing.assert_allclose(a.numpy(), expected, rtol=1e-6)


def test_example_tree_values():
    # leaves 4,5,6,7,8 with r = 0,1,1,0,1: mean 0.6, std sqrt(0.24) = 0.489898
    # 1 -> 0.816497, 0 -> -1.224745; node 3 (single child 6) = 0.816497
    # child_mean: V1 = (0.816497 - 1.224745)/2 = -0.204124; V2 = 0.816497
    # V0 = (-0.204124 + 0.816497 - 1.224745 + 0.816497)/4 = 0.051031
    t = example_tree()
    v = node_values(t.parent, t.entropy, t.leaf_reward, mode="child_mean").numpy()
    np.testing.assert_allclose(
        v,
        [
            0.051031,
            -0.204124,
            0.816497,
            0.816497,
            -1.224745,
            0.816497,
            0.816497,
            -1.224745,
            0.816497,
        ],
        rtol=1e-5,
    )


# ------------------------------------------------------------------------------------------
# Degenerate trees
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", VALUE_MODES)
@pytest.mark.parametrize("reward", [0.0, 1.0, 0.1, -1.0])
def test_equal_rewards_give_exactly_zero(mode, reward):
    # 0.1 is the trap: mean(0.1, 0.1, 0.1) - 0.1 is a few ulps, /1e-6 would not be 0
    t = example_tree()
    r = np.where(np.isnan(t.leaf_reward), np.nan, reward)
    v = node_values(t.parent, t.entropy, r, mode=mode)
    assert torch.all(v == 0)
    for adv_mode in ADVANTAGE_MODES:
        assert torch.all(node_advantages(t.parent, v, adv_mode) == 0)


@pytest.mark.parametrize("mode", VALUE_MODES)
def test_zero_entropies_fall_back_to_the_mean(mode):
    zero_h = [0.0] * 5
    v = node_values(T1_PARENT, zero_h, T1_REWARD, mode=mode, normalize_leaves=False)
    expected = [2 / 3 if mode == "leaf_mean" else 0.75, 0.5, 1.0, 0.0, 1.0]
    np.testing.assert_allclose(v.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("mode", VALUE_MODES)
def test_single_child_chain_passes_value_up(mode):
    parent, h, r = [-1, 0, 1, 2], [0.0, 0.5, 2.0, 1.0], [NAN, NAN, NAN, 0.7]
    np.testing.assert_allclose(node_values(parent, h, r, mode=mode, normalize_leaves=False), 0.7)
    # normalised, a single leaf is its tree's mean: everything is exactly 0, finite
    assert torch.all(node_values(parent, h, r, mode=mode) == 0)


def test_single_node_tree_is_finite():
    v = node_values([-1], [0.0], [1.0])
    assert v.tolist() == [0.0]


def test_unscored_leaves_are_ignored():
    # T1 plus node 5: a child of node 1 without a reward (pruned). Its high entropy would
    # dominate the softmax if it counted; it must not change any other node's value.
    parent = T1_PARENT + [1]
    v = node_values(
        parent,
        T1_ENTROPY + [9.0],
        T1_REWARD + [NAN],
        mode="entropy_softmax",
        normalize_leaves=False,
    )
    ref = node_values(
        T1_PARENT, T1_ENTROPY, T1_REWARD, mode="entropy_softmax", normalize_leaves=False
    )
    np.testing.assert_allclose(v.numpy()[:5], ref.numpy())
    assert math.isnan(v[5])


@pytest.mark.parametrize(
    "parent, reward, match",
    [
        ([-1, 0, 0], [1.0, 0.0, 1.0], "internal node"),
        ([-1, 0, 0], [NAN, NAN, NAN], "no scored leaf"),
        ([0, 0, 0], [NAN, 0.0, 1.0], r"parent\[0\] must be -1"),
        ([-1, 5, 0], [NAN, 0.0, 1.0], "invalid parent"),
        ([-1, 2, 1, 0], [NAN, NAN, NAN, 1.0], "cycle"),
    ],
)
def test_bad_trees_raise(parent, reward, match):
    with pytest.raises(ValueError, match=match):
        node_values(parent, [0.5] * len(parent), reward)


def test_unusable_entropies_rejected_by_entropy_modes():
    with pytest.raises(ValueError, match="node 1: entropy -1.0 .* non-negative"):
        node_values(T1_PARENT, [0, -1.0, 1, 1, 1], T1_REWARD, mode="entropy_linear")
    with pytest.raises(ValueError, match="node 3: entropy nan"):
        node_values(T1_PARENT, [0, 1, 1, NAN, 1], T1_REWARD, mode="entropy_softmax")
    # child_mean ignores entropies, and the root's entropy is never used
    node_values(T1_PARENT, [NAN, 1, 1, NAN, 1], T1_REWARD, mode="child_mean")


# ------------------------------------------------------------------------------------------
# GRPO and Tree-GRPO
# ------------------------------------------------------------------------------------------
def test_grpo_hand_case():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0, 5.0])
    g = torch.tensor([7, 7, 7, 7, 3, 3])
    # group 7: mean 0.5, unbiased std sqrt(4*0.25/3) = 0.577350 -> +-0.866025; group 3 equal -> 0
    a = grpo_advantages(r, g)
    np.testing.assert_allclose(
        a.numpy(), [0.866025, -0.866025, -0.866025, 0.866025, 0, 0], rtol=1e-5
    )
    np.testing.assert_allclose(
        grpo_advantages(r, g, scale="none").numpy(), [0.5, -0.5, -0.5, 0.5, 0, 0]
    )
    # population std 0.5 -> +-1
    np.testing.assert_allclose(
        grpo_advantages(r, g, unbiased=False).numpy()[:4], [1, -1, -1, 1], rtol=1e-5
    )


def test_grpo_singleton_group_keeps_raw_reward():
    # verl: a group of one gets mean 0, std 1
    a = grpo_advantages(torch.tensor([3.0, 1.0, 0.0]), torch.tensor([0, 1, 1]))
    np.testing.assert_allclose(a.numpy(), [3.0 / (1 + 1e-6), 0.707106, -0.707106], rtol=1e-5)


def test_tree_grpo_hand_case():
    # one prompt, tree a: (1, 0, 0), tree b: (1, 1, 0)
    # prompt: mean 0.5, unbiased std sqrt(6*0.25/5) = 0.547723 -> +-0.912871
    # tree a: mean 1/3, std sqrt(1/3) = 0.577350 -> 1: 1.154701, 0: -0.577350
    # tree b: mean 2/3, std 0.577350           -> 1: 0.577350, 0: -1.154701
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    a = tree_grpo_advantages(r, torch.tensor([0, 0, 0, 1, 1, 1]), torch.zeros(6, dtype=torch.long))
    np.testing.assert_allclose(
        a.numpy(), [2.067572, -1.490221, -1.490221, 1.490221, 1.490221, -2.067572], rtol=1e-5
    )


def test_tree_grpo_tree_ids_may_restart_per_prompt():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    prompts = torch.tensor([0, 0, 0, 1, 1, 1])
    restart = tree_grpo_advantages(r, torch.tensor([0, 0, 0, 0, 0, 0]), prompts)
    unique = tree_grpo_advantages(r, torch.tensor([0, 0, 0, 1, 1, 1]), prompts)
    torch.testing.assert_close(restart, unique)
    # one tree per prompt: both terms are the same GRPO advantage
    torch.testing.assert_close(restart, 2 * grpo_advantages(r, prompts))


def test_depth1_tree_child_mean_is_grpo():
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    parent = [-1] + [0] * len(rewards)
    h = [0.0] + list(np.linspace(0.1, 2, len(rewards)))
    v = node_values(parent, h, [NAN] + list(rewards), mode="child_mean")
    a = node_advantages(parent, v, "node_value")
    grpo = grpo_advantages(torch.tensor(rewards), torch.zeros(len(rewards)), unbiased=False)
    np.testing.assert_allclose(a.numpy()[1:], grpo.numpy(), rtol=1e-6)
    assert abs(float(v[0])) < 1e-12  # the root is the mean of normalised leaves


# ------------------------------------------------------------------------------------------
# Batched forest vs naive per-tree loop (hypothesis)
# ------------------------------------------------------------------------------------------
@st.composite
def trees(draw):
    n = draw(st.integers(1, 14))
    # random topological order, then permuted ids (root stays 0): parent[i] < i not assumed
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    perm = [0] + list(draw(st.permutations(range(1, n)))) if n > 1 else [0]
    new_parent = [-1] * n
    for old in range(1, n):
        new_parent[perm[old]] = perm[parents[old]]
    is_leaf = [all(p != i for p in new_parent) for i in range(n)]
    rewards = [
        draw(st.sampled_from([0.0, 1.0, 0.5, -1.0, NAN])) if leaf else NAN for leaf in is_leaf
    ]
    first_leaf = is_leaf.index(True)
    if math.isnan(rewards[first_leaf]):
        rewards[first_leaf] = 1.0
    entropy = [0.0] + [draw(st.sampled_from([0.0, 0.3, 1.0, 2.5])) for _ in range(n - 1)]
    return TreeArrays(np.array(new_parent), np.array(entropy), np.array(rewards))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(trees(), min_size=1, max_size=4),
    st.sampled_from(VALUE_MODES),
    st.sampled_from(ADVANTAGE_MODES),
    st.booleans(),
)
def test_forest_matches_naive_per_tree(tree_list, value_mode, adv_mode, normalize):
    forest = Forest.from_trees(tree_list, dtype=torch.float64)
    values = forest_node_values(forest, value_mode, normalize)
    adv = forest_node_advantages(forest, values, adv_mode)
    for t, tree in enumerate(tree_list):
        lo, hi = int(forest.offsets[t]), int(forest.offsets[t + 1])
        ref_v = naive_values(tree.parent, tree.entropy, tree.leaf_reward, value_mode, normalize)
        np.testing.assert_allclose(values[lo:hi].numpy(), ref_v, rtol=1e-9, atol=1e-9)
        ref_a = naive_advantages(tree.parent, ref_v, adv_mode)
        np.testing.assert_allclose(adv[lo:hi].numpy(), ref_a, rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(trees(), min_size=1, max_size=4),
    st.sampled_from(VALUE_MODES),
    st.sampled_from(ADVANTAGE_MODES),
)
def test_batch_token_advantages_matches_naive(tree_list, value_mode, adv_mode):
    forest = Forest.from_trees(tree_list, dtype=torch.float64)
    rows, row_tree = [], []
    for t, tree in enumerate(tree_list):
        lay = synthetic_turn_rows(tree.parent, model_tokens=2, obs_tokens=1)
        scored = ~np.isnan(tree.leaf_reward[lay["leaf"].numpy()])
        for r in np.flatnonzero(scored):
            rows.append(lay["turn_node"][r])
            row_tree.append(t)
    width = max(len(r) for r in rows)
    turn_node = torch.stack(
        [torch.nn.functional.pad(r, (0, width - len(r)), value=-1) for r in rows]
    )
    got = batch_token_advantages(forest, turn_node, torch.tensor(row_tree), value_mode, adv_mode)
    for b in range(len(rows)):
        tree = tree_list[row_tree[b]]
        ref_a = naive_advantages(
            tree.parent,
            naive_values(tree.parent, tree.entropy, tree.leaf_reward, value_mode),
            adv_mode,
        )
        for t in range(width):
            node = int(turn_node[b, t])
            expected = 0.0 if node < 0 else ref_a[node]
            assert got[b, t].item() == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(trees(), st.randoms(use_true_random=False), st.sampled_from(VALUE_MODES))
def test_permuting_node_ids_permutes_values(tree, rnd, mode):
    n = tree.num_nodes
    perm = np.array([0] + rnd.sample(range(1, n), n - 1))  # old id -> new id
    parent = np.full(n, -1)
    parent[perm[1:]] = perm[tree.parent[1:]]
    entropy, reward = np.empty(n), np.empty(n)
    entropy[perm], reward[perm] = tree.entropy, tree.leaf_reward
    v = node_values(tree.parent, tree.entropy, tree.leaf_reward, mode)
    v_perm = node_values(parent, entropy, reward, mode)
    np.testing.assert_allclose(v_perm.numpy()[perm], v.numpy(), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------
# Per-token advantages
# ------------------------------------------------------------------------------------------
def test_batch_token_advantages_every_turn_shares_its_node_value():
    t = example_tree()
    forest = Forest.from_trees([t, t])
    lay = synthetic_turn_rows(t.parent, model_tokens=3, obs_tokens=2)
    row_tree = torch.tensor([1] * 5)
    got = batch_token_advantages(forest, lay["turn_node"], row_tree, "child_mean", "diff_parent")
    v = node_values(t.parent, t.entropy, t.leaf_reward, "child_mean")
    a = node_advantages(t.parent, v, "diff_parent").float()
    tn = lay["turn_node"]
    torch.testing.assert_close(got[tn >= 0], a[tn[tn >= 0]])
    assert torch.all(got[tn < 0] == 0)


def test_vanilla_is_grpo_over_the_prompt_rows_and_not_a_node_mode():
    t = example_tree()
    # leaves 4..8 rewards 0,1,1,0,1 of one prompt: mean 0.6, unbiased std sqrt(1.2/4) = 0.547723
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    got = OUTCOME_ADVANTAGES["vanilla"](rewards, torch.zeros(5), torch.zeros(5))
    expected = torch.tensor(
        [-1.095445, 0.730297, 0.730297, -1.095445, 0.730297], dtype=torch.float64
    )
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # two prompts: each is its own group (tree ids do not matter to GRPO)
    two = OUTCOME_ADVANTAGES["vanilla"](
        torch.tensor([0.0, 1.0, 1.0, 1.0]), torch.arange(4), torch.tensor([0, 0, 1, 1])
    )
    torch.testing.assert_close(
        two, torch.tensor([-0.707106, 0.707106, 0.0, 0.0]), rtol=1e-5, atol=1e-6
    )
    lay = synthetic_turn_rows(t.parent, model_tokens=2, obs_tokens=1)
    with pytest.raises(ValueError, match="unknown advantage mode 'vanilla'"):
        batch_token_advantages(
            Forest.from_trees([t]),
            lay["turn_node"],
            torch.zeros(5, dtype=torch.long),
            adv_mode="vanilla",
        )


def test_batch_token_advantages_errors_name_the_row():
    forest = Forest.from_trees([example_tree()])
    with pytest.raises(ValueError, match="row 1, token 0"):
        batch_token_advantages(forest, torch.tensor([[1, -1], [9, -1]]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="row 0: row_tree 3"):
        batch_token_advantages(forest, torch.tensor([[1, -1]]), torch.tensor([3]))
