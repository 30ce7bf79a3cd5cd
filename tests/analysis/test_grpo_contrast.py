"""GRPO's per-node credit beside AT2PO's (at2po_lib.analysis.grpo_contrast), by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from at2po_lib.analysis import grpo_contrast as gc
from at2po_lib.analysis.running_example import teaching_tree
from at2po_lib.method.tree import TreeArrays

nan = np.nan


def test_teaching_tree_by_hand():
    """Leaves 3, 5, 9, 10 with rewards 1, 0, 1, 0: mean 0.5, sample std √(1/3), population
    std 0.5. GRPO's leaf advantage ±0.5/√(1/3) = ±0.866, AT2PO's leaf value ±1."""
    tree = teaching_tree()
    table = gc.node_contrast(tree)
    s = np.sqrt(1 / 3)
    grpo_leaf = 0.5 / (s + 1e-6)
    assert table.loc[3, "grpo"] == pytest.approx(grpo_leaf)
    assert table.loc[5, "grpo"] == pytest.approx(-grpo_leaf)
    # node 1: rows of leaves 3 (right) and 10 (wrong): their mean is 0, not either row's own
    assert table.loc[1, "grpo"] == pytest.approx(0.0, abs=1e-12)
    assert table.loc[4, "grpo"] == pytest.approx(-grpo_leaf)  # chain 2: one row, stopped early
    # the constant (s + ε)/(σ + ε) = √(4/3) turns GRPO into AT2PO's leaf_mean value
    assert gc.grpo_scale(tree) == pytest.approx((s + 1e-6) / (0.5 + 1e-6))
    assert table.loc[3, "grpo_scaled"] == pytest.approx(1.0, abs=1e-5)
    # node 1 under entropy_softmax: children 2 (H 0.60, V +1) and 10 (H 0.65, V -1):
    # w2 - w10 = -tanh(0.025)
    assert table.loc[1, "at2po"] == pytest.approx(-np.tanh(0.025), abs=1e-5)
    assert table.loc[1, "residual"] == pytest.approx(-np.tanh(0.025), abs=1e-5)
    assert table.loc[1, "weights_part"] == pytest.approx(-np.tanh(0.025), abs=1e-5)
    assert table.loc[1, "shape_part"] == pytest.approx(0.0, abs=1e-12)
    # everywhere else AT2PO is GRPO times the constant
    others = table.drop(index=1)
    np.testing.assert_allclose(others["residual"], 0.0, atol=1e-5)
    np.testing.assert_allclose(
        table[["weights_part", "shape_part", "mode_part"]].sum(axis=1),
        table["residual"],
        atol=1e-12,
    )


def unequal_tree() -> TreeArrays:
    """0 ─┬─ 1 ─┬─ 2  r=1
    │     └─ 3 ─┬─ 4  r=0
    │           └─ 5  r=0
    └─ 6  r=1          (all entropies equal: softmax = child mean)"""
    parent = np.array([-1, 0, 1, 1, 3, 3, 0])
    return TreeArrays(parent, np.full(7, 0.3), np.array([nan, nan, 1, nan, 0, 0, 1]))


def test_unequal_subtrees_are_the_shape_part():
    table = gc.node_contrast(unequal_tree())
    # leaf values ±1 (mean 0.5, σ 0.5); node 3 = -1; node 1: child mean (1 - 1)/2 = 0,
    # leaf mean (1 - 1 - 1)/3 = -1/3; GRPO: -1/3 · 0.5/√(1/3)
    assert table.loc[1, "at2po"] == pytest.approx(0.0, abs=1e-6)
    assert table.loc[1, "grpo"] == pytest.approx(-1 / 3 * 0.5 / (np.sqrt(1 / 3) + 1e-6))
    assert table.loc[1, "shape_part"] == pytest.approx(1 / 3, abs=1e-5)
    assert table.loc[1, "weights_part"] == pytest.approx(0.0, abs=1e-12)
    assert table.loc[1, "residual"] == pytest.approx(1 / 3, abs=1e-5)


def test_diff_parent_puts_the_rule_into_the_mode_part():
    table = gc.node_contrast(unequal_tree(), adv_mode="diff_parent")
    # leaf 2 under diff_parent: V2 - V1 = 1 - 0 under child_mean (= softmax here); leaf_mean
    # gives V2 - V1 = 1 + 1/3, so mode part = (1 + 1/3) - 1
    assert table.loc[2, "at2po"] == pytest.approx(1.0, abs=1e-5)
    assert table.loc[2, "mode_part"] == pytest.approx(1 / 3, abs=1e-5)
    np.testing.assert_allclose(
        table[["weights_part", "shape_part", "mode_part"]].sum(axis=1),
        table["residual"],
        atol=1e-12,
    )


def one_round_tree() -> TreeArrays:
    """M = 2 chains, one expansion round (L = 1) with K = 1, equal entropies (softmax = child
    mean): turn 2 re-sampled as 6.

        0 ─┬─ 1 ─┬─ 2 ── 3  r=1
           │     └─ 6  r=0
           └─ 4 ── 5  r=0"""
    return TreeArrays(
        np.array([-1, 0, 1, 2, 0, 4, 1]), np.full(7, 0.3), np.array([nan, nan, nan, 1, nan, 0, 0])
    )


def nested_picks_tree() -> TreeArrays:
    """One round, K = 2: turns 3 and 2 of one branch both picked (7 beside 3, 8 beside 2).

    0 ─┬─ 1 ─┬─ 2 ─┬─ 3 ── 4  r=1
       │     │     └─ 7  r=0
       │     └─ 8  r=1
       └─ 5 ── 6  r=0"""
    parent = np.array([-1, 0, 1, 2, 3, 0, 5, 2, 1])
    return TreeArrays(parent, np.full(9, 0.3), np.array([nan, nan, nan, nan, 1, nan, 0, 0, 1]))


def test_one_round_trees_differ_in_shape_at_the_root_and_under_nested_picks():
    """Notebook 03 §2b and exercise 3c: with L = 1 the children's unequal leaf counts sit at the
    root, which node_value never reads and diff_parent does (for the first turns); below the
    root only where two picks lie on one branch, the upper one below the first turn."""
    node_value = gc.node_contrast(one_round_tree())
    np.testing.assert_allclose(node_value["shape_part"], 0.0, atol=1e-9)
    diff_parent = gc.node_contrast(one_round_tree(), adv_mode="diff_parent")
    assert (diff_parent.loc[[1, 4], "shape_part"].abs() > 0.1).all()
    np.testing.assert_allclose(diff_parent.loc[[2, 3, 5, 6], "shape_part"], 0.0, atol=1e-9)
    nested = gc.node_contrast(nested_picks_tree())
    assert abs(nested.loc[1, "shape_part"]) > 0.1  # node 1: children 2 (2 leaves) and 8 (1)
    np.testing.assert_allclose(nested.drop(index=[1])["shape_part"], 0.0, atol=1e-9)


def test_a_sharper_softmax_moves_the_weights():
    tree = teaching_tree()
    sharp = gc.node_contrast(tree, temperature=0.01)
    # H/τ: 60 vs 65, so node 10 (V -1) takes almost all the weight
    assert sharp.loc[1, "at2po"] == pytest.approx(-np.tanh(2.5), abs=1e-5)
    weights = gc.sibling_weight_table(tree, 2)
    assert list(weights.index) == [2, 10]
    assert weights.loc[2, "weight"] == pytest.approx(1 / (1 + np.exp(0.05)))
    assert (weights["child_mean"] == 0.5).all()


def test_summary_pools_trees_and_skips_those_without_signal():
    flat = replace(
        teaching_tree(), leaf_reward=np.where(np.isfinite(teaching_tree().leaf_reward), 1.0, nan)
    )
    summary = gc.contrast_summary([teaching_tree(), flat, unequal_tree()])
    assert summary["trees"] == 3 and summary["signal_trees"] == 2
    assert summary["nodes"] == 10 + 6
    assert summary["max_residual"] == pytest.approx(1 / 3, abs=1e-5)
    assert (summary["tree"], summary["node"]) == (2, 1)
    assert summary["max_weights_part"] == pytest.approx(np.tanh(0.025), abs=1e-5)
    # the largest gap is at the root's three children (H 0.02, 0.03, 0.25): e^0.25 / Σ e^H - 1/3
    root = np.exp([0.02, 0.03, 0.25])
    assert summary["max_weight_gap"] == pytest.approx(root[2] / root.sum() - 1 / 3)
    assert summary["rounds"] == 1  # the teaching tree's records; the others have none
    assert 0.9 < summary["correlation"] < 1.0
    text = gc.contrast_sentence(summary)
    assert "2 of 3 trees carry a signal" in text and "0.333" in text and "tree 2, node 1" in text
    assert "they differ" in text and "L = 1" in text
    near = gc.contrast_sentence(gc.contrast_summary([teaching_tree()]))
    assert "nearly coincide" in near and "0.025" in near and "share one reward" not in near
    assert gc.contrast_summary([unequal_tree()])["rounds"] is None
    empty = gc.contrast_summary([flat])
    assert empty["nodes"] == 0 and "nothing to compare" in gc.contrast_sentence(empty)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="value_mode"):
        gc.node_contrast(teaching_tree(), value_mode="max")
    with pytest.raises(ValueError, match="temperature"):
        gc.node_contrast(teaching_tree(), temperature=0)
    with pytest.raises(ValueError, match="node 0"):
        gc.sibling_weight_table(teaching_tree(), 0)
    with pytest.raises(ValueError, match="no scored leaf"):
        gc.grpo_node_advantages(TreeArrays(np.array([-1, 0]), np.zeros(2), np.array([nan, nan])))
