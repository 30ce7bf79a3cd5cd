"""Tests for at2po_lib.reporting.tree_drawings: the layout's invariants, readable drawings (ids, no
overlapping labels, contrast, distinct near-miss answers, legend, colour range) and the rules
that choose the default example trees."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from at2po_lib.method.examples import example_tree, random_tree
from at2po_lib.method.credit import node_values
from at2po_lib.method.tree import TreeArrays  # noqa: E402
from at2po_lib.reporting.tree_drawings import (  # noqa: E402
    branch_depths,
    choose_credit_example,
    choose_example_tree,
    colour_norm,
    contrast_ratio,
    draw_rollout_tree,
    draw_tree,
    grown_by_round,
    label_overlaps,
    node_labels,
    node_text_table,
    shorten_distinct,
    text_color_for,
    tree_layout,
)

nan = np.nan


def near_miss_tree(rewards=(0, 1, 1, 0, 1, 0)) -> TreeArrays:
    """A hand-made rollout tree with records: long queries, an invalid turn, and the near-miss
    pair "Dadar" (right) / "Dadar Bay" (wrong) side by side; node 9 grown in round 1.

        0 ─┬─ 1 S ─┬─ 3 S ─┬─ 6 A:Dadar          r[2]
           │       │       └─ 9 A:long name      r[5]   (round 1)
           │       └─ 4 A:Dadar Bay              r[0]
           ├─ 2 S ── 5 A:Dadar                   r[1]   (both round 1)
           ├─ 7 x (invalid)                      r[3]
           └─ 8 A:Dadar                          r[4]
    """
    parent = np.array([-1, 0, 0, 1, 1, 2, 3, 0, 0, 3])
    entropy = np.array([0, 0.9, 0.5, 0.4, 1.2, 0.7, 0.3, 1.5, 0.2, 0.8])
    reward = np.full(10, nan)
    reward[[4, 5, 6, 7, 8, 9]] = rewards
    records = [
        {"action": "root", "text": "Where was the founder of Avaria born?"},
        {"action": "search", "query": "founder of Avaria kingdom history"},
        {"action": "search", "query": "Avaria founder"},
        {"action": "search", "query": "birthplace of Tomas Belmont the elder statesman"},
        {"action": "answer", "answer": "Dadar Bay"},
        {"action": "answer", "answer": "Dadar"},
        {"action": "answer", "answer": "Dadar"},
        {"action": None, "text": "<think> I am not sure what to do here and ramble"},
        {"action": "answer", "answer": "Dadar"},
        {"action": "answer", "answer": "the very long name of a municipality up north"},
    ]
    rounds = np.array([0, 0, 1, 0, 0, 1, 0, 0, 0, 1])
    return TreeArrays(
        parent,
        entropy,
        reward,
        node_arrays={"expansion_round": rounds},
        records=records,
        info={"question": records[0]["text"]},
    )


# -- layout ------------------------------------------------------------------------------------


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
    assert sorted(x[leaves]) == list(range(int(leaves.sum())))  # consecutive leaf columns
    np.testing.assert_array_equal(y[1:], y[t.parent[1:]] - 1)  # a child is one row down
    # two nodes of one row are at least one column apart (what keeps labels apart)
    for row in np.unique(y):
        xs = np.sort(x[y == row])
        assert (np.diff(xs) >= 1.0 - 1e-9).all()
    for p in np.flatnonzero(~leaves):  # a parent lies within the span of its children
        kids = np.flatnonzero(t.parent == p)
        assert x[kids].min() <= x[p] <= x[kids].max()


def test_layout_rejects_bad_parents():
    with pytest.raises(ValueError, match="parent\\[0\\] = -1"):
        tree_layout([0, 0])
    with pytest.raises(ValueError, match="cycle"):
        tree_layout([-1, 2, 1])


# -- readable drawings ---------------------------------------------------------------------------


def test_rollout_drawing_has_ids_legend_and_no_overlapping_labels():
    tree = near_miss_tree()
    fig, ax = draw_rollout_tree(tree, title="hand-made")
    texts = [t.get_text() for t in ax.texts]
    assert {str(i) for i in range(tree.num_nodes)} <= set(texts)  # every node id drawn
    assert label_overlaps(ax) == []
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("expansion round 1" in s for s in legend)
    assert any("reward > 0" in s for s in legend) and any("reward 0" in s for s in legend)
    plt.close(fig)


@pytest.mark.parametrize("seed", range(3))
def test_no_overlap_with_long_labels_on_random_trees(seed):
    rng = np.random.default_rng(seed)
    t = random_tree(rng, num_chains=6, num_expansions=6, max_turns=4)
    words = ["capital", "of", "the", "northern", "province", "river", "born", "year"]
    records = [{"action": "root"}] + [
        {"action": "search", "query": " ".join(rng.choice(words, 6))}
        if t.leaf_reward[i] != t.leaf_reward[i]
        else {"action": "answer", "answer": " ".join(rng.choice(words, 3))}
        for i in range(1, t.num_nodes)
    ]
    arrays = TreeArrays(t.parent, t.entropy, t.leaf_reward, records=records)
    fig, ax = draw_rollout_tree(arrays)
    assert label_overlaps(ax) == []
    plt.close(fig)


def test_label_overlap_checker_finds_a_clash():
    """The checker itself: two nodes forced into one small figure with wide labels clash."""
    fig, ax = plt.subplots(figsize=(3, 2))
    draw_tree(
        [-1, 0, 0],
        node_labels=["", "a very long label text here", "another long label"],
        ax=ax,
        legend=False,
    )
    fig.set_size_inches(1.0, 2.0)  # squeeze after drawing
    assert label_overlaps(ax) != []
    plt.close(fig)


def test_near_miss_answers_look_different():
    labels = node_labels(near_miss_tree())
    assert labels[4].splitlines()[0] == "A: Dadar Bay" and labels[5].splitlines()[0] == "A: Dadar"
    assert labels[4] != labels[5] and labels[4].endswith("r=0") and labels[5].endswith("r=1")
    side = node_text_table(near_miss_tree())
    assert side.loc[4, "query_or_answer"] == "Dadar Bay" and side.loc[9, "round"] == 1


def test_shorten_distinct_by_hand():
    assert shorten_distinct(["Dadar", "Dadar Bay"], 12) == ["Dadar", "Dadar Bay"]
    a, b = shorten_distinct(["the river of the north bay", "the river of the north sea"], 12)
    assert a != b and len(a) <= 12 and len(b) <= 12 and a.endswith("bay") and b.endswith("sea")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(alphabet="ab ", min_size=1, max_size=30), min_size=1, max_size=6),
    st.integers(5, 15),
)
def test_shorten_distinct_never_merges_different_texts(texts, max_chars):
    shown = shorten_distinct(texts, max_chars)
    assert len(shown) == len(texts)
    for t1, s1 in zip(texts, shown):
        for t2, s2 in zip(texts, shown):
            assert (t1 == t2) == (s1 == s2)


def test_contrast_rule():
    viridis, coolwarm = plt.get_cmap("viridis"), plt.get_cmap("coolwarm")
    assert text_color_for(viridis(0.0)) == "white"  # dark purple
    assert text_color_for(viridis(1.0)) == "black"  # yellow
    assert text_color_for(coolwarm(0.0)) == "white"  # deep blue
    assert text_color_for("white") == "black" and text_color_for("black") == "white"
    assert contrast_ratio((1, 1, 1), (0, 0, 0)) == pytest.approx(21.0)
    for v in np.linspace(0, 1, 11):  # the chosen colour always meets WCAG's 3:1 for large text
        fill = viridis(v)
        chosen = (1, 1, 1) if text_color_for(fill) == "white" else (0, 0, 0)
        assert contrast_ratio(fill, chosen) >= 3.0


def test_node_ids_drawn_in_contrasting_colour():
    t = example_tree()
    colours = np.array(t.entropy, dtype=float)
    fig, ax = draw_tree(t.parent, node_color=colours, cmap="viridis")
    ids = {t_.get_text(): t_.get_color() for t_ in ax.texts if t_.get_text().isdigit()}
    assert ids["7"] == "black"  # H = 1.5, the top of the scale: yellow
    assert ids["8"] == "white"  # H = 0.2: dark
    plt.close(fig)


def test_colour_range_is_symmetric_and_never_degenerate():
    zeros = colour_norm(np.zeros(5))
    assert (zeros.vmin, zeros.vmax) == (-1.0, 1.0)
    given_zero = colour_norm(np.zeros(5), vmin=0.0, vmax=0.0)
    assert (given_zero.vmin, given_zero.vmax) == (-1.0, 1.0)
    mixed = colour_norm(np.array([-0.5, 2.0]))
    assert (mixed.vmin, mixed.vmax) == (-2.0, 2.0)
    positive = colour_norm(np.array([0.2, 1.5, nan]))
    assert (positive.vmin, positive.vmax) == (0.2, 1.5)


def test_draw_tree_returns_figure_and_axes():
    t = example_tree()
    v = node_values(t.parent, t.entropy, t.leaf_reward).numpy()
    fig, ax = draw_tree(
        t.parent,
        node_color=v,
        node_labels=[f"{a:.2f}" for a in v],
        leaf_reward=t.leaf_reward,
        title="values",
    )
    texts = [txt.get_text() for txt in ax.texts]
    assert f"{v[0]:.2f}" in texts and "8" in texts
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


def test_growth_by_round():
    tree = near_miss_tree()
    assert grown_by_round(tree, 0).tolist() == [
        True,
        True,
        False,
        True,
        True,
        False,
        True,
        True,
        True,
        False,
    ]
    assert grown_by_round(tree, 1).all()
    fig, ax = draw_rollout_tree(tree, upto_round=0)
    assert "9" not in {t.get_text() for t in ax.texts}  # not grown yet: no id, no label
    plt.close(fig)


# -- default examples -----------------------------------------------------------------------------


def test_example_rule_picks_first_mixed_tree_with_branches_at_two_depths():
    all_right = near_miss_tree(rewards=(1, 1, 1, 1, 1, 1))
    mixed = near_miss_tree()
    assert branch_depths(mixed).tolist() == [0, 2]  # node 2 hangs from the root, 9 from node 3
    one_depth = TreeArrays(np.array([-1, 0, 0]), np.array([0, 0.5, 0.6]), np.array([nan, 1, 0]))
    assert branch_depths(one_depth).tolist() == [0]
    assert choose_example_tree([all_right, one_depth, mixed])[0] == 2
    index, why = choose_example_tree([all_right, one_depth])
    assert index == 1 and "mixed rewards" in why
    assert choose_example_tree([all_right])[0] == 0


def test_credit_rule_picks_the_tree_where_value_modes_differ_most():
    flat = TreeArrays(np.array([-1, 0, 0]), np.array([0, 0.5, 0.6]), np.array([nan, 1, 0]))
    index, why = choose_credit_example([flat, example_tree(), near_miss_tree(rewards=(1,) * 6)])
    assert index == 1 and "differ by up to" in why
    # flat: the root's two leaves weigh alike in child_mean and leaf_mean, but softmax(H)
    # weighs them 0.475 / 0.525: a spread of ~0.1, smaller than example_tree's
    assert choose_credit_example([flat])[0] == 0


def test_control_characters_in_a_turn_are_drawn_as_escapes():
    """A sampled turn may hold any token: labels never carry a character no font can draw."""
    from at2po_lib.reporting.tree_drawings import action_text

    label = action_text({"action": "invalid", "text": "ab\x0ecd\n e\x00"}, 3)
    assert label == "x: ab\\x0ecd e\\x00" and label.isprintable()
    assert action_text({"action": "answer", "answer": "Dadar\u00a0Bay"}, 2) == "A: Dadar Bay"
