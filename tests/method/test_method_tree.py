"""Tests for at2po_lib.method.tree (tree containers TreeArrays and Forest, structure helpers) and
the demo trees of at2po_lib.method.examples (tree files: tests/record/test_tree_files.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from at2po_lib.method.examples import example_tree, random_tree, synthetic_turn_rows
from at2po_lib.method.tree import (
    Forest,
    TreeArrays,
    as_tree_arrays,
    children_count,
    leaf_paths,
    node_depths,
)

NAN = float("nan")


# ------------------------------------------------------------------------------------------
# Containers
# ------------------------------------------------------------------------------------------
def test_as_tree_arrays_accepts_every_form():
    parent, h, r = [-1, 0, 0], [0.0, 0.5, 1.5], [NAN, 1.0, 0.0]
    forms = [
        (parent, h, r),
        {"parent": parent, "entropy": h, "leaf_reward": r},
        SimpleNamespace(parent=parent, entropy=h, leaf_reward=r),
        (torch.tensor(parent), torch.tensor(h, dtype=torch.float32), torch.tensor(r)),
    ]
    for form in forms:
        t = as_tree_arrays(form)
        assert (t.parent.dtype, t.entropy.dtype, t.leaf_reward.dtype) == (
            np.int64,
            np.float64,
            np.float64,
        )
        np.testing.assert_array_equal(t.parent, parent)
        np.testing.assert_allclose(t.entropy, h)
        np.testing.assert_array_equal(t.leaf_reward, r)  # NaNs compare equal here
    same = TreeArrays(np.array(parent), np.array(h), np.array(r))
    assert as_tree_arrays(same) is same


def test_as_tree_arrays_names_the_missing_field():
    with pytest.raises(ValueError, match="no field 'leaf_reward'"):
        as_tree_arrays({"parent": [-1], "entropy": [0.0]})
    with pytest.raises(ValueError, match="no attribute 'entropy'"):
        as_tree_arrays(SimpleNamespace(parent=[-1], leaf_reward=[1.0]))


def test_forest_from_trees_by_hand():
    # tree 0: root with two leaves (3 nodes); tree 1: a chain 0 -> 1 -> 2 (3 nodes)
    # offsets [0, 3, 6]; tree 1's local parents (-1, 0, 1) become global (-1, 3, 4)
    f = Forest.from_trees(
        [([-1, 0, 0], [0, 1, 2], [NAN, 1, 0]), ([-1, 0, 1], [0, 3, 4], [NAN, NAN, 5])]
    )
    assert f.parent.tolist() == [-1, 0, 0, -1, 3, 4]
    assert f.tree_index.tolist() == [0, 0, 0, 1, 1, 1]
    assert f.offsets.tolist() == [0, 3, 6]
    assert f.roots.tolist() == [0, 3]
    assert (f.num_nodes, f.num_trees) == (6, 2)
    assert f.entropy.tolist() == [0, 1, 2, 0, 3, 4]
    assert f.entropy.dtype == torch.float32  # the default dtype
    assert (
        Forest.from_trees([example_tree()], dtype=torch.float64).leaf_reward.dtype == torch.float64
    )
    moved = f.to("cpu")
    assert moved.device == torch.device("cpu")
    assert torch.equal(moved.parent, f.parent) and torch.equal(moved.offsets, f.offsets)


@pytest.mark.parametrize(
    "trees, match",
    [
        ([], "no trees given"),
        ([([], [], [])], "tree 0: empty tree"),
        ([([-1, 0], [0.0], [NAN, 1.0])], r"tree 0: entropy has shape \(1,\), expected \(2,\)"),
        (
            [([-1, 0], [0, 1], [NAN, 1]), ([0, 0], [0, 1], [NAN, 1])],
            r"tree 1: parent\[0\] must be -1",
        ),
        ([([-1, 1], [0, 1], [NAN, 1])], "tree 0: node 1 has invalid parent 1"),  # its own parent
        ([([-1, 0, 7], [0, 1, 1], [NAN, NAN, 1])], "tree 0: node 2 has invalid parent 7"),
    ],
)
def test_forest_from_trees_rejects_bad_trees(trees, match):
    with pytest.raises(ValueError, match=match):
        Forest.from_trees(trees)


# ------------------------------------------------------------------------------------------
# Structure
# ------------------------------------------------------------------------------------------
def test_depths_and_children_of_a_forest():
    # the forest of test_forest_from_trees_by_hand: global parents (-1, 0, 0, -1, 3, 4)
    parent = torch.tensor([-1, 0, 0, -1, 3, 4])
    assert node_depths(parent).tolist() == [0, 1, 1, 0, 1, 2]
    assert children_count(parent).tolist() == [2, 0, 0, 1, 1, 0]


def test_node_depths_rejects_a_cycle():
    # nodes 1 and 2 are each other's parent: neither ever reaches a root
    with pytest.raises(ValueError, match="cycle"):
        node_depths(torch.tensor([-1, 2, 1]))


def test_node_depths_takes_a_numpy_parent_array():
    # the example tree: 0 <- {1, 2, 7, 8}; 1 <- {3, 4}; 2 <- 5; 3 <- 6
    depth = node_depths(example_tree().parent)
    assert depth.dtype == torch.long
    assert depth.tolist() == [0, 1, 1, 2, 2, 2, 3, 1, 1]


# ------------------------------------------------------------------------------------------
# Rows, example and random trees
# ------------------------------------------------------------------------------------------
def test_synthetic_rows_layout_by_hand():
    t = example_tree()
    # model tokens per node 0..8, observations of 2 tokens before every depth >= 2 turn
    lay = synthetic_turn_rows(t.parent, model_tokens=[0, 3, 2, 4, 3, 2, 3, 2, 1], obs_tokens=2)
    assert lay["leaf"].tolist() == [4, 5, 6, 7, 8]
    # leaf 6: path 0 -> 1 -> 3 -> 6: 1,1,1, obs,obs, 3x4, obs,obs, 6x3
    row = lay["turn_node"][2].tolist()
    assert row == [1, 1, 1, -1, -1, 3, 3, 3, 3, -1, -1, 6, 6, 6]
    # leaf 8: a depth-1 leaf, one turn, then padding
    assert lay["turn_node"][4].tolist()[:2] == [8, -1]
    assert torch.equal(lay["sampled_mask"], (lay["turn_node"] >= 0).long())


def test_leaf_paths():
    t = example_tree()
    leaves, paths = leaf_paths(t.parent)
    assert leaves.tolist() == [4, 5, 6, 7, 8]
    assert paths[2].tolist() == [0, 1, 3, 6]
    assert paths[3].tolist() == [0, 7, -1, -1]


def test_random_tree_shape():
    rng = np.random.default_rng(0)
    t = random_tree(rng, num_chains=10, num_expansions=12, max_turns=6)
    leaves = np.bincount(t.parent[1:], minlength=t.num_nodes) == 0
    assert leaves.sum() == 22  # every chain and every expansion ends in exactly one leaf
    assert int(node_depths(torch.as_tensor(t.parent)).max()) <= 6
    assert np.all(np.isnan(t.leaf_reward) == ~leaves)
    assert np.any(t.parent[1:] > np.arange(1, t.num_nodes))  # ids are not topological


def test_random_tree_is_reproducible_and_topological_without_shuffle():
    a = random_tree(np.random.default_rng(3), shuffle_ids=False)
    b = random_tree(np.random.default_rng(3), shuffle_ids=False)
    np.testing.assert_array_equal(a.parent, b.parent)
    assert np.all(a.parent[1:] < np.arange(1, a.num_nodes))  # a chain grows by appending
    assert a.entropy[0] == 0.0 and np.all((a.entropy[1:] >= 0.1) & (a.entropy[1:] < 2.0))
