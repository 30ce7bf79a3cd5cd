"""Exports of rollout trees: TreeArrays, training rows, tidy table, and a trees file read back
by the credit stage."""

from __future__ import annotations

import math

import numpy as np

from at2po_lib.method import credit
from at2po_lib.method.tree import TreeArrays
from at2po_lib.record.tree_files import load_trees, save_trees
from at2po_lib.rollout.export import (
    training_rows,
    tree_arrays,
    tree_summary,
    tree_table,
    with_decisions,
)
from at2po_lib.rollout.structures import RolloutTree


def small_tree() -> RolloutTree:
    """root ─ 1 (search, obs 2 tokens) ─┬─ 2 (answer, r=1)
    └─ 3 (answer, r=0, round 1)"""
    tree = RolloutTree(7, "q?", ["a"], prompt_ids=[100, 101])
    n1 = tree.add_child(0, 0)
    n1.token_ids, n1.logps, n1.entropies = [10, 11, 12], [-1.0, -2.0, -3.0], [0.5, 0.5, 0.5]
    n1.obs_ids, n1.obs_kind, n1.tool_calls = [50, 51], "observation", 1
    n2 = tree.add_child(1, 0)
    n2.token_ids, n2.logps, n2.entropies = [20], [-0.5], [0.1]
    n2.is_leaf, n2.finish_reason, n2.reward = True, "answer", 1.0
    n3 = tree.add_child(1, 1)
    n3.token_ids, n3.logps, n3.entropies = [30, 31], [-1.0, -1.0], [0.2, 0.4]
    n3.is_leaf, n3.finish_reason, n3.reward = True, "answer", 0.0
    return tree


def test_arrays_by_hand():
    a = tree_arrays(small_tree())
    assert isinstance(a, TreeArrays) and a.prompt_id == 7
    assert a.parent.tolist() == [-1, 0, 1, 1]
    # H(1) = (1 + 2 + 3) / 3 = 2; H(2) = 0.5; H(3) = 1
    assert a.entropy.tolist() == [0.0, 2.0, 0.5, 1.0]
    nodes = a.node_arrays
    assert np.allclose(nodes["entropy_exact"], [0.0, 0.5, 0.1, 0.3])
    # node 1 spans [0, 3); its observation takes [3, 5); children start at 5
    assert nodes["turn_start"].tolist() == [0, 0, 5, 5] and nodes["turn_end"].tolist() == [
        0,
        3,
        6,
        7,
    ]
    assert nodes["expansion_round"].tolist() == [0, 0, 0, 1]
    assert nodes["num_obs_tokens"].tolist() == [0, 2, 0, 0]
    assert a.is_leaf.tolist() == [False, False, True, True]
    assert math.isnan(a.leaf_reward[0]) and math.isnan(a.leaf_reward[1])
    assert a.leaf_reward[2:].tolist() == [1.0, 0.0]
    assert a.records[0]["text"] == "q?" and a.records[2]["finish_reason"] == "answer"
    assert a.info == {
        "question": "q?",
        "golden_answers": ["a"],
        "entropy_estimate": "sampled_nll",
        "turn_entropy": "mean",
    }


def test_training_rows_by_hand():
    rows = training_rows([small_tree()])
    assert [r["leaf_node"] for r in rows] == [2, 3]
    r = rows[1]
    assert r["completion_ids"] == [10, 11, 12, 50, 51, 30, 31]
    assert r["sampled_mask"] == [1, 1, 1, 0, 0, 1, 1]
    assert r["turn_node"] == [1, 1, 1, -1, -1, 3, 3]
    assert r["old_logps"] == [-1.0, -2.0, -3.0, 0.0, 0.0, -1.0, -1.0]
    assert (r["reward"], r["tree_id"], r["prompt_id"]) == (0.0, 0, 7)


def test_table_and_summary():
    df = tree_table([small_tree(), small_tree()])
    assert len(df) == 8 and set(df.tree_id) == {0, 1}
    assert {
        "prompt_id",
        "node",
        "parent",
        "depth",
        "round",
        "entropy_nll",
        "entropy_exact",
        "text",
        "action",
        "query",
        "answer",
        "reward",
    } <= set(df.columns)
    s = tree_summary([small_tree()])
    assert s["leaves_per_tree"] == 2 and s["correct_leaf_share"] == 0.5
    assert s["generated_tokens"] == 6
    # two trees of one prompt (Tree-GRPO's shape): per-prompt numbers pool them
    s = tree_summary([small_tree(), small_tree()])
    assert (s["trees"], s["prompts"]) == (2, 1)
    assert s["leaves_per_tree"] == 2 and s["leaves_per_prompt"] == 4


def test_file_round_trip_and_credit_reads_it(tmp_path):
    path = save_trees(
        [tree_arrays(small_tree())], tmp_path / "rollout" / "trees.npz", meta={"seed": 0}
    )
    (arrays,) = load_trees(path)
    assert arrays.equals(tree_arrays(small_tree()))
    values = credit.node_values(arrays.parent, arrays.entropy, arrays.leaf_reward)
    assert values.shape == (4,)
    assert load_trees(path)[0].records[1]["text"] == ""


def test_labels_and_drawing():
    import matplotlib

    matplotlib.use("Agg")
    from at2po_lib.protocol.actions import Action
    from at2po_lib.reporting.tree_drawings import draw_rollout_tree, turn_label

    tree = small_tree()
    tree.nodes[1].action = Action("search", query="capital of avaria")
    tree.nodes[2].action = Action("answer", answer="belmont")
    assert turn_label(tree, 0) == "Q"
    wrapped = turn_label(tree, 1, width=9)  # wrapped, never cut: the full query is short
    assert wrapped.replace("\n", " ") == "S: capital of avaria"
    assert max(len(line) for line in wrapped.splitlines()) <= 9
    assert turn_label(tree, 2) == "A: belmont\nr=1"
    fig, ax = draw_rollout_tree(tree)
    assert ax.get_legend() is not None  # node 3 comes from expansion round 1
    labels = sorted(t.get_text() for t in ax.texts)
    assert {"0", "1", "2", "3"} <= set(labels)  # node ids drawn in the nodes
    fig.clf()
    # the same drawing from the arrays (e.g. read back from a file)
    fig, ax = draw_rollout_tree(tree_arrays(tree))
    assert sorted(t.get_text() for t in ax.texts) == labels and ax.get_legend() is not None
    assert turn_label(tree_arrays(tree), 2) == "A: belmont\nr=1"
    fig.clf()


def test_entropy_summaries_by_hand():
    # node 1: NLLs 1, 2, 3 and exact 0.5 x 3; node 3: NLLs 1, 1 and exact 0.2, 0.4
    nodes = tree_arrays(small_tree()).node_arrays
    assert nodes["entropy_nll_max"].tolist() == [0.0, 3.0, 0.5, 1.0]
    assert nodes["entropy_nll_first"].tolist() == [0.0, 1.0, 0.5, 1.0]
    assert np.allclose(nodes["entropy_exact_max"], [0.0, 0.5, 0.1, 0.4])
    assert np.allclose(nodes["entropy_exact_first"], [0.0, 0.5, 0.1, 0.2])
    assert nodes["num_tokens"].tolist() == [0, 3, 1, 2]


def test_entropy_summaries_skip_inserted_tokens_and_keep_nan():
    tree = small_tree()
    n3 = tree.nodes[3]
    n3.token_mask = [1, 1]
    n3.append_inserted([90])  # a tool-limit notice: not the policy's token
    n3.append_sampled([32], [-4.0], [float("nan")], [0.0])
    nodes = tree_arrays(tree).node_arrays
    assert nodes["entropy_nll_max"][3] == 4.0 and nodes["entropy_nll_first"][3] == 1.0
    assert math.isnan(nodes["entropy_exact_max"][3])  # vLLM has no exact entropy
    assert nodes["entropy_exact_first"][3] == 0.2


def _decision_tree() -> RolloutTree:
    """root ─ 1 search "a x" ─┬─ 2 search "b y" ─ 4 answer
    ├─ 3 search "a x" (repeat)
    └─ 5 answer (early)"""
    from at2po_lib.protocol.actions import Action

    tree = RolloutTree(0, "q?", ["v"], prompt_ids=[1])
    for parent, kind, query in (
        (0, "search", "a x"),
        (1, "search", "b y"),
        (1, "search", "A  X"),
        (2, "answer", None),
        (1, "answer", None),
    ):
        node = tree.add_child(parent, 0)
        node.token_ids, node.logps, node.entropies = [5], [-0.1], [0.1]
        node.action = Action(kind=kind, query=query, answer="v" if kind == "answer" else None)
    for leaf in (3, 4, 5):
        tree.nodes[leaf].is_leaf, tree.nodes[leaf].reward = True, 0.0
    return tree


def test_decision_labels_read_each_nodes_own_path():
    plan = {"id": "q", "metadata": {"hop_queries": ["a x", "b y"]}}
    arrays = with_decisions(tree_arrays(_decision_tree()), plan)
    assert [r["decision"] for r in arrays.records] == [
        "root",
        "follow",
        "follow",
        "repeat",
        "final",
        "early",
    ]
    # a question without a plan (wiki-18): the action kind
    plain = with_decisions(tree_arrays(_decision_tree()), {"id": "q", "metadata": {}})
    assert [r["decision"] for r in plain.records] == [
        "root",
        "search",
        "search",
        "search",
        "answer",
        "answer",
    ]
    # the labels travel through a trees file
    assert [r["decision"] for r in _round_trip(arrays).records] == [
        r["decision"] for r in arrays.records
    ]


def _round_trip(arrays: TreeArrays) -> TreeArrays:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = save_trees([arrays], Path(folder) / "t.npz")
        return load_trees(path)[0]
