"""at2po_lib.analysis: useful-turn labels, AUC, GiGPO step groups, expansion statistics, all on
hand-built trees (docs/method.md §5, §6, §8)."""

from __future__ import annotations

import numpy as np
import torch
import pytest
from scipy.stats import mannwhitneyu

from at2po_lib.analysis.credit_accuracy import (
    ClusteredAUC,
    accuracy_table,
    auc,
    baseline_node_advantages,
    forest_rows,
    gigpo_row_advantages,
    group_normalise,
    mean_over_rows,
    turn_labels,
)
from at2po_lib.analysis.expansion_stats import (
    credit_weight_stats,
    expansion_counts,
    node_table,
    selection_stats,
)
from at2po_lib.analysis.study_trees import searched_nodes
from at2po_lib.method.examples import random_tree
from at2po_lib.method.tree import TreeArrays
from at2po_lib.method.credit import sibling_weights
from at2po_lib.method.expansion import select_entropy

NAN = np.nan


def planned_tree(prompt_id: int = 0) -> TreeArrays:
    """A 2-hop question with supporting passages A (hop 1) and B (hop 2)::

    0 root
    ├── 1 search -> [A, X]        new A: useful
    │   ├── 2 search -> [A, Y]    A again: useless
    │   │   └── 4 answer, r=1     correct: useful
    │   └── 3 search -> [B, X]    new B: useful
    │       └── 5 answer, r=0     wrong: useless
    ├── 6 search, no room         observation never shown (leaf, r=0): useless
    ├── 7 invalid turn, r=0       useless
    └── 8 duplicate of 7          not a sampled turn: not scored
    """
    parent = np.array([-1, 0, 1, 1, 2, 3, 0, 0, 0])
    reward = np.array([NAN, NAN, NAN, NAN, 1.0, 0.0, 0.0, 0.0, 0.0])
    entropy = np.array([0.0, 0.1, 0.3, 0.2, 0.05, 0.4, 0.2, 0.6, 0.6])
    actions = ["root", "search", "search", "search", "answer", "answer", "search", None, None]
    retrieved = {1: ["A", "X"], 2: ["A", "Y"], 3: ["B", "X"]}
    records = [
        {
            "action": a,
            "query": "q" if a == "search" else None,
            **({"retrieved": retrieved[i]} if i in retrieved else {}),
        }
        for i, a in enumerate(actions)
    ]
    arrays = {
        "tool_calls": np.array([0, 1, 2, 2, 2, 2, 1, 0, 0]),
        "num_obs_tokens": np.array([0, 9, 9, 9, 0, 0, 0, 0, 0]),
        "duplicate_of": np.array([-1, -1, -1, -1, -1, -1, -1, -1, 7]),
        "entropy_nll": entropy,
        "entropy_exact": entropy / 2,
    }
    return TreeArrays(
        parent,
        entropy,
        reward,
        prompt_id=prompt_id,
        node_arrays=arrays,
        records=records,
        info={"supporting_ids": ["A", "B"]},
    )


# ----------------------------------------------------------------------------- labels
def test_searched_nodes_need_a_new_tool_call_and_a_shown_observation():
    assert searched_nodes(planned_tree()).tolist() == [
        False,
        True,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]


def test_useful_turns_follow_the_plan():
    labels = turn_labels([planned_tree()])
    assert np.flatnonzero(labels.useful).tolist() == [1, 3, 4]
    assert np.flatnonzero(labels.scored).tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert labels.kind.tolist() == [
        "root",
        "search",
        "search",
        "search",
        "answer",
        "answer",
        "search",
        "other",
        "other",
    ]


def test_a_supporting_passage_counts_once_per_path_but_again_on_another_path():
    two = turn_labels([planned_tree(0), planned_tree(1)])
    assert np.flatnonzero(two.useful).tolist() == [1, 3, 4, 10, 12, 13]


def test_anchor_states_group_turns_with_the_same_retrieved_passages():
    labels = turn_labels([planned_tree(0), planned_tree(1)])
    state = labels.state[:9]
    # before: {} for 1, 6, 7, 8; {A, X} for 2 and 3; {A, X, Y} for 4; {A, B, X} for 5
    assert state[1] == state[6] == state[7] == state[8]
    assert state[2] == state[3]
    assert len({state[1], state[2], state[4], state[5]}) == 4
    # another prompt never shares a state
    assert not set(labels.state[9:]) & set(state)


def test_labels_refuse_trees_without_a_plan():
    bare = random_tree(np.random.default_rng(0))
    with pytest.raises(ValueError, match="supporting_ids"):
        turn_labels([bare])


# ----------------------------------------------------------------------------- AUC
def test_auc_is_one_for_the_label_itself_and_half_for_a_constant():
    labels = np.array([0, 1, 1, 0, 1, 0, 0], dtype=bool)
    assert auc(labels.astype(float), labels) == 1.0
    assert auc(-labels.astype(float), labels) == 0.0
    assert auc(np.full(labels.size, 3.0), labels) == 0.5


def test_auc_matches_mann_whitney_with_ties():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, 200).astype(float)
    labels = rng.random(200) < 0.4
    u = mannwhitneyu(scores[labels], scores[~labels]).statistic
    assert auc(scores, labels) == pytest.approx(u / (labels.sum() * (~labels).sum()))


def test_clustered_auc_weights_clusters_by_their_draw_counts():
    rng = np.random.default_rng(2)
    scores, labels = rng.normal(size=60), rng.random(60) < 0.5
    cluster = np.repeat(np.arange(6), 10)
    counts = np.array([2, 0, 1, 3, 0, 1])
    take = np.concatenate(
        [np.flatnonzero(cluster == c) for c in range(6) for _ in range(counts[c])]
    )
    scorer = ClusteredAUC(scores, labels, cluster)
    assert scorer(counts.astype(float)) == pytest.approx(auc(scores[take], labels[take]))
    low, high = scorer.interval(n_resamples=300, seed=0)
    assert low <= scorer.estimate() <= high


# ----------------------------------------------------------------------------- advantages
def test_effective_advantage_is_the_mean_over_rows():
    labels = turn_labels([planned_tree()])
    rows = forest_rows(labels.forest)
    assert sorted(rows.leaf.tolist()) == [4, 5, 6, 7, 8]
    mean = mean_over_rows(rows, rows.leaf[rows.pair_row].astype(float), labels.forest.num_nodes)
    assert mean[1] == pytest.approx(4.5) and mean[3] == 5.0 and np.isnan(mean[0])
    grpo = baseline_node_advantages(labels, rows, "grpo")
    assert grpo[4] > 0 > grpo[5] and grpo[1] == pytest.approx((grpo[4] + grpo[5]) / 2)


def test_group_normalise_gives_zero_to_groups_of_one_and_of_equal_values():
    out = group_normalise(np.array([1.0, 0.0, 5.0, 2.0, 2.0]), np.array([0, 0, 1, 2, 2]))
    assert out[:2] == pytest.approx([1 / np.sqrt(2), -1 / np.sqrt(2)], rel=1e-5)  # eps 1e-6
    assert out[2:].tolist() == [0.0, 0.0, 0.0]


def test_gigpo_step_part_on_the_hand_tree():
    labels = turn_labels([planned_tree()])
    rows = forest_rows(labels.forest)
    both = gigpo_row_advantages(labels, rows, gamma=0.5, omega=1.0)
    episode = gigpo_row_advantages(labels, rows, gamma=0.5, omega=0.0)
    step = both - episode
    at = {(int(rows.leaf[r]), int(n)): s for r, n, s in zip(rows.pair_row, rows.pair_node, step)}
    # nodes 2 and 3 share a state: returns 0.5 * 1 (row of leaf 4) and 0.5 * 0 (leaf 5)
    assert at[(4, 2)] == pytest.approx(1 / np.sqrt(2), rel=1e-5)
    assert at[(5, 3)] == pytest.approx(-1 / np.sqrt(2), rel=1e-5)
    # leaves 4 and 5 are alone in their states: no step advantage
    assert at[(4, 4)] == 0.0 and at[(5, 5)] == 0.0
    # the first turns {1 (twice), 6, 7, 8}: returns 0.25, 0, 0, 0, 0
    first = np.array([at[(4, 1)], at[(5, 1)], at[(6, 6)], at[(7, 7)], at[(8, 8)]])
    expected = group_normalise(np.array([0.25, 0, 0, 0, 0]), np.zeros(5))
    assert first == pytest.approx(expected, rel=1e-5)


def test_accuracy_table_scores_every_mode_and_grpo_is_its_own_reference():
    trees = [planned_tree(p) for p in range(4)]
    table = accuracy_table(trees, "entropy", n_resamples=200, seed=0)
    assert len(table) == 3 * (16 + 2)
    grpo = table[table.credit_mode == "grpo"]
    assert (grpo.delta_vs_grpo == 0).all()
    row = table[
        (table.credit_mode == "at2po")
        & (table.turns == "answer")
        & (table.advantage_mode == "node_value")
    ]
    assert (row.auc == 1.0).all()  # the correct answer's leaf value is the only positive one
    assert set(table.n_useful[table.turns == "all"]) == {12}


# ----------------------------------------------------------------------------- expansion
def chains(parent, entropy) -> TreeArrays:
    parent, entropy = np.array(parent), np.array(entropy, dtype=float)
    leaf = np.bincount(parent[parent >= 0], minlength=len(parent)) == 0
    records = [{"action": "root"}] + [{"action": "answer" if lf else "search"} for lf in leaf[1:]]
    return TreeArrays(
        parent,
        entropy,
        np.where(leaf, 1.0, NAN),
        node_arrays={"entropy_nll": entropy, "entropy_exact": entropy},
        records=records,
    )


def hand_chains() -> TreeArrays:
    """Two chains: 0 -> 1 (H .3) -> 3 (H .2) -> 5;  0 -> 2 (H 0) -> 4 (H .25) -> 6."""
    return chains([-1, 0, 0, 1, 2, 3, 4], [0, 0.3, 0.0, 0.2, 0.25, 0.1, 0.1])


def test_expansion_picks_on_a_hand_tree():
    nodes = node_table([hand_chains()])
    assert expansion_counts(nodes, "sampled_nll", 0.0, 2).tolist() == [0, 1, 0, 0, 1, 0, 0]
    # alpha * b = 0.2 on the first turns and the root: the deepest searches win
    assert expansion_counts(nodes, "sampled_nll", 0.2, 2).tolist() == [0, 0, 0, 1, 1, 0, 0]
    # K = 7 > 5 candidates: the ranked list cycles from the best (1, 4, 3, then 0 and 2)
    assert expansion_counts(nodes, "sampled_nll", 0.0, 7).tolist() == [1, 2, 1, 1, 2, 0, 0]
    pure = selection_stats(nodes, "sampled_nll", 0.0, 2)
    penalised = selection_stats(
        nodes, "sampled_nll", 0.2, 2, reference=expansion_counts(nodes, "sampled_nll", 0.0, 2)
    )
    assert (pure["share_depth1"], pure["share_last_search"]) == (0.5, 0.5)
    assert (penalised["share_depth1"], penalised["share_last_search"]) == (0.0, 1.0)
    assert penalised["overlap_with_entropy_topk"] == 0.5
    assert penalised["mean_pick_depth"] == 2.0


@pytest.mark.parametrize("alpha,k", [(0.0, 1), (0.05, 4), (0.3, 7)])
def test_vectorised_picks_equal_select_entropy_tree_by_tree(alpha, k):
    rng = np.random.default_rng(3)
    trees = []
    for _ in range(40):
        t = random_tree(
            rng, num_chains=int(rng.integers(1, 5)), num_expansions=int(rng.integers(0, 4))
        )
        h = np.round(t.entropy, 1)  # ties on purpose
        h[0] = 0.0
        trees.append(
            TreeArrays(
                t.parent, h, t.leaf_reward, node_arrays={"entropy_nll": h, "entropy_exact": h}
            )
        )
    counts = expansion_counts(node_table(trees), "sampled_nll", alpha, k)
    offsets = np.cumsum([0] + [t.num_nodes for t in trees])
    for i, t in enumerate(trees):
        expected = np.bincount(
            select_entropy(t.entropy, t.parent, t.is_leaf, k, alpha), minlength=t.num_nodes
        )
        assert counts[offsets[i] : offsets[i + 1]].tolist() == expected.tolist()


def test_sibling_weights_softmax_and_linear():
    parent = torch.tensor([-1, 0, 0, 0])
    h = torch.tensor([0.0, 0.0, np.log(2.0), 0.0], dtype=torch.float64)
    soft = sibling_weights(parent, h, "entropy_softmax").numpy()
    assert soft[1:] == pytest.approx([0.25, 0.5, 0.25])
    assert sibling_weights(parent, h, "entropy_linear").numpy()[1:] == pytest.approx([0, 1, 0])
    zero = sibling_weights(parent, torch.zeros(4, dtype=torch.float64), "entropy_linear").numpy()
    assert zero[1:] == pytest.approx([1 / 3] * 3) and np.isnan(zero[0])


def test_equal_sibling_entropies_give_uniform_credit_weights():
    tree = chains([-1, 0, 0, 1, 1], [0, 0.2, 0.2, 0.4, 0.4])
    tree = TreeArrays(
        tree.parent,
        tree.entropy,
        np.array([NAN, NAN, 1.0, 0.0, 1.0]),
        node_arrays=tree.node_arrays,
        records=tree.records,
    )
    stats = credit_weight_stats([tree])
    assert (stats.mean_abs_w_minus_uniform == 0).all()
    assert stats.mean_abs_value_gap.tolist() == pytest.approx([0.0] * 4, abs=1e-12)


# --------------------------------------------- caches keyed by what determines them (#50 item 4)
def test_the_tree_cache_is_keyed_by_the_policys_weights(tmp_path, monkeypatch):
    """b8f2d3f: after ``P/model.safetensors`` was replaced, ``credit-accuracy --trees-dir``
    reused the old policy's trees (keyed by the folder's path), byte-identical results."""
    from at2po_lib.analysis import study_trees
    from at2po_lib.config.profile import load_profile
    from at2po_lib.method.examples import example_tree

    grown: list = []

    def grow(cfg, rows, expansion, seed, policy, **kwargs):
        grown.append((policy / "model.safetensors").read_bytes())
        return [example_tree()]

    monkeypatch.setattr(study_trees, "grow_trees", grow)
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "model.safetensors").write_bytes(b"weights A")
    cfg, rows, cache = load_profile("smoke"), [{"id": "q0", "dataset": "d"}], tmp_path / "t.npz"
    for _ in range(2):
        study_trees.cached_trees(cache, cfg, rows, "entropy", 0, policy)
    assert grown == [b"weights A"]  # the second call read the cache
    (policy / "model.safetensors").write_bytes(b"weights B")  # same path, other weights
    study_trees.cached_trees(cache, cfg, rows, "entropy", 0, policy)
    assert grown == [b"weights A", b"weights B"]
    (policy / "tokenizer.json").write_text("{}")  # any file of the policy counts
    study_trees.cached_trees(cache, cfg, rows, "entropy", 0, policy)
    study_trees.cached_trees(cache, cfg, rows, "entropy", 0, policy, chunk=7)  # other seeds
    assert len(grown) == 4
