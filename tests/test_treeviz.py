"""Tests for at2po_lib.treeviz: the layered layout's invariants and that drawing works."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from at2po_lib.credit import example_tree, node_values, random_tree  # noqa: E402
from at2po_lib.treeviz import draw_tree, tree_layout  # noqa: E402


def test_layout_of_example_tree_by_hand():
    # leaves in depth-first order (children by id): 6 (under 1-3), 4, 5, 7, 8 -> columns 0..4
    # node 3 sits over its single child 6 (x 0); node 1 over 3 and 4: (0 + 1)/2 = 0.5
    # node 2 over 5: 2; root over first/last child 1 and 8: (0.5 + 4)/2 = 2.25
    t = example_tree()
    x, y = tree_layout(t.parent)
    np.testing.assert_allclose(x, [2.25, 0.5, 2.0, 0.0, 1.0, 2.0, 0.0, 3.0, 4.0])
    np.testing.assert_allclose(y, [0, -1, -1, -2, -2, -2, -3, -1, -1])


@pytest.mark.parametrize("seed", range(5))
def test_layout_invariants_on_random_trees(seed):
    t = random_tree(np.random.default_rng(seed))
    x, y = tree_layout(t.parent)
    n = t.num_nodes
    leaves = np.bincount(t.parent[1:], minlength=n) == 0
    # leaves take distinct consecutive columns
    assert sorted(x[leaves]) == list(range(int(leaves.sum())))
    # every child is exactly one row below its parent
    np.testing.assert_array_equal(y[1:], y[t.parent[1:]] - 1)
    # no two nodes share a position
    assert len({(a, b) for a, b in zip(x, y)}) == n
    # a parent lies within the span of its children
    for p in np.flatnonzero(~leaves):
        kids = np.flatnonzero(t.parent == p)
        assert x[kids].min() <= x[p] <= x[kids].max()


def test_layout_rejects_bad_parents():
    with pytest.raises(ValueError, match="parent\\[0\\] = -1"):
        tree_layout([0, 0])
    with pytest.raises(ValueError, match="cycle"):
        tree_layout([-1, 2, 1])


def test_draw_tree_returns_figure_and_axes():
    t = example_tree()
    v = node_values(t.parent, t.entropy, t.leaf_reward).numpy()
    fig, ax = draw_tree(t.parent, node_color=v, node_labels=[f"{a:.2f}" for a in v],
                        leaf_reward=t.leaf_reward, title="values")
    texts = [txt.get_text() for txt in ax.texts]
    assert "r=1" in texts and f"{v[0]:.2f}" in texts
    assert ax.get_title() == "values"
    assert len(fig.axes) == 2  # the tree and its colour bar
    plt.close(fig)


def test_draw_tree_into_given_axes_and_nan_colours():
    t = example_tree()
    fig, axes = plt.subplots(1, 2)
    colours = np.array(t.leaf_reward)  # NaN on internal nodes: drawn grey, no crash
    out_fig, out_ax = draw_tree(t.parent, node_color=colours, ax=axes[1])
    assert out_fig is fig and out_ax is axes[1]
    with pytest.raises(ValueError, match="node_labels"):
        draw_tree(t.parent, node_labels=["a"], ax=axes[0])
    plt.close(fig)
