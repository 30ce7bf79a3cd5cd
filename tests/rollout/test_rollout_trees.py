"""Tree rollouts (docs/method.md §5): node selection on hand-built arrays, leaf budget, and the
invariants of whole trees (scripted backend for many shapes, the real tiny Qwen3 for ids and
log-probs)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from at2po_lib.rollout.agent import SearchEnv
from at2po_lib.rollout.export import recompute_gap, training_rows
from at2po_lib.rollout.structures import RolloutTree
from at2po_lib.rollout.stand_ins import ScriptedBackend, random_action_script
from at2po_lib.method.expansion import (
    breadth_first,
    expansion_scores,
    select_entropy,
    select_random,
    select_random_siblings,
    sibling_counts,
    top_k_cycled,
)
from at2po_lib.rollout.trees import equalize_leaves, rollout, tree_grpo_shape


@pytest.fixture(scope="module")
def toy(smoke_toy):
    return smoke_toy  # tests/conftest.py: one smoke ToySetup per module


# Hand-built tree:            0 (root)
#                  ┌──────────┼──────────┐
#                  1 (1.0)    2 (0.8)    3 (0.5, leaf)
#                ┌─┴─┐        │
#         4 (1.2, leaf) 5 (0.3, leaf)   6 (0.9, leaf)
PARENT = np.array([-1, 0, 0, 0, 1, 1, 2])
ENTROPY = np.array([0.0, 1.0, 0.8, 0.5, 1.2, 0.3, 0.9])
IS_LEAF = np.array([False, False, False, True, True, True, True])


def test_sibling_counts_by_hand():
    # root: its own 3 children - 1 = 2; nodes 1-3: root has 3 children -> 2;
    # nodes 4, 5: node 1 has 2 children -> 1; node 6: only child -> 0
    assert sibling_counts(PARENT).tolist() == [2, 2, 2, 2, 1, 1, 0]


def test_scores_and_top_k_by_hand():
    # alpha 0.1: root 0 - 0.2 = -0.2, n1 1.0 - 0.2 = 0.8, n2 0.8 - 0.2 = 0.6 (non-leaves)
    scores = expansion_scores(ENTROPY, PARENT, 0.1)
    assert scores[:3] == pytest.approx([-0.2, 0.8, 0.6])
    assert select_entropy(ENTROPY, PARENT, IS_LEAF, 2, 0.1).tolist() == [1, 2]
    # fewer candidates than K: the sorted list repeats from the best
    assert select_entropy(ENTROPY, PARENT, IS_LEAF, 5, 0.1).tolist() == [1, 2, 0, 1, 2]
    # a large alpha: n1 and n2 both lose 2 * 5 = 10, the root also 10 -> by entropy again;
    # with alpha = 0.45: n1 = 0.1, n2 = -0.1, root = -0.9
    assert select_entropy(ENTROPY, PARENT, IS_LEAF, 3, 0.45).tolist() == [1, 2, 0]


def test_alpha_penalises_crowded_parents():
    # root with children 1, 2; node 1 has four children (3-6), node 2 one child (7)
    parent = np.array([-1, 0, 0, 1, 1, 1, 1, 2])
    entropy = np.array([0.0, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 0.9])
    is_leaf = np.array([False, False, False, False, True, True, True, False])
    # alpha 0: node 3 (H = 1.0) beats node 7 (0.9); alpha 0.05: 1.0 - 0.15 = 0.85 < 0.9
    assert select_entropy(entropy, parent, is_leaf, 1, 0.0).tolist() == [3]
    assert select_entropy(entropy, parent, is_leaf, 1, 0.05).tolist() == [7]


def test_ties_keep_node_order():
    assert top_k_cycled(np.array([1.0, 1.0, 1.0]), np.array([2, 0, 1]), 2).tolist() == [2, 0]


def test_selection_ties_are_ranked_in_breadth_first_order():
    """The authors rank the root, then get_subtree_nodes (breadth-first), with a stable sort:
    node 4, a later sibling of 1 and 2 (an expansion), comes before node 3, 1's child."""
    parent = np.array([-1, 0, 0, 1, 0, 3])  # 0 -> 1, 2, 4; 1 -> 3; 3 -> 5
    assert breadth_first(parent).tolist() == [0, 1, 2, 4, 3, 5]
    entropy = np.array([0.0, 0.5, 0.5, 0.7, 0.7, 0.1])
    is_leaf = np.array([False, False, True, False, False, True])
    # alpha 0: nodes 3 and 4 tie at 0.7 -> 4 first (breadth-first), not 3 (creation order)
    assert select_entropy(entropy, parent, is_leaf, 3, 0.0).tolist() == [4, 3, 1]


def test_random_siblings_pick_k_distinct_candidates():
    """The authors' expansion_mode=random: random.sample (no replacement) over the non-leaf
    nodes, root included; random.choices (with replacement) when there are fewer than K."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        picked = select_random_siblings(PARENT, IS_LEAF, 2, rng)
        assert len(set(picked.tolist())) == 2 and not IS_LEAF[picked].any()
    counts = np.bincount(
        np.concatenate([select_random_siblings(PARENT, IS_LEAF, 1, rng) for _ in range(6000)]),
        minlength=7,
    )
    assert np.allclose(counts[:3] / 6000, 1 / 3, atol=0.03) and counts[3:].sum() == 0
    short = select_random_siblings(PARENT, IS_LEAF, 5, rng)
    assert len(short) == 5 and set(short.tolist()) <= {0, 1, 2}


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(2, 25), k=st.integers(1, 8), alpha=st.floats(0.0, 1.0))
def test_entropy_selection_matches_a_brute_force(data, n, k, alpha):
    parent = np.array([-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, n)])
    entropy = np.array([0.0] + data.draw(st.lists(st.floats(0, 5), min_size=n - 1, max_size=n - 1)))
    has_child = np.bincount(parent[1:], minlength=n) > 0
    is_leaf = ~has_child & np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    is_leaf[0] = False
    picked = select_entropy(entropy, parent, is_leaf, k, alpha)
    bfs, queue = [], [0]  # breadth-first from the root, children in creation order
    while queue:
        node = queue.pop(0)
        bfs.append(node)
        queue += [c for c in range(1, n) if parent[c] == node]
    cands = [i for i in bfs if not is_leaf[i]]
    siblings = [
        max((parent[1:] == (parent[i] if parent[i] >= 0 else i)).sum() - 1, 0) for i in range(n)
    ]
    brute = sorted(cands, key=lambda i: (-(entropy[i] - alpha * siblings[i]), cands.index(i)))
    assert len(picked) == k
    assert picked.tolist() == [brute[j % len(brute)] for j in range(k)]


@settings(max_examples=40, deadline=None)
@given(n_inner=st.integers(1, 10), k=st.integers(1, 12), seed=st.integers(0, 99))
def test_random_selection(n_inner, k, seed):
    """Tree-GRPO's pick: k non-leaf nodes, uniformly with replacement (random.choices)."""
    is_leaf = np.array([False] * n_inner + [True] * 5)
    picked = select_random(is_leaf, k, np.random.default_rng(seed))
    assert len(picked) == k and not is_leaf[picked].any()


def test_random_selection_is_uniform_with_replacement():
    is_leaf = np.array([False, False, True, False, True])
    picked = select_random(is_leaf, 30_000, np.random.default_rng(0))
    counts = np.bincount(picked, minlength=5)
    assert counts[[2, 4]].sum() == 0
    assert np.allclose(counts[[0, 1, 3]] / 30_000, 1 / 3, atol=0.01)


def hand_tree(num_chains: int, depth: int) -> RolloutTree:
    tree = RolloutTree(0, "q", ["a"], [1, 2, 3])
    for _ in range(num_chains):
        node = tree.add_child(0, 0)
        for _ in range(depth - 1):
            node.token_ids, node.obs_ids = [7], [8]
            node = tree.add_child(node.id, 0)
        node.token_ids, node.is_leaf, node.finish_reason, node.reward = [9], True, "answer", 1.0
    return tree


def test_equalize_prunes_surplus_leaves_with_their_branches():
    tree = hand_tree(5, 2)  # 5 chains of 2 nodes: 11 nodes, 5 leaves
    out = equalize_leaves(tree, 3, np.random.default_rng(0))
    assert len(out.leaves()) == 3
    assert len(out.nodes) == 1 + 3 * 2  # each pruned chain lost both of its nodes
    for n in out.nodes[1:]:
        assert out.nodes[n.parent].children.count(n.id) == 1
        assert n.is_leaf or n.children  # no childless inner node remains


def test_equalize_duplicates_the_last_leaf():
    tree = hand_tree(2, 2)
    out = equalize_leaves(tree, 4, np.random.default_rng(0))
    leaves = out.leaves()
    assert len(leaves) == 4
    last = out.nodes[leaves[1]]
    for dup in (out.nodes[i] for i in leaves[2:]):
        assert dup.parent == last.parent and dup.token_ids == last.token_ids
        assert dup.duplicate_of == last.id and dup.finish_reason == last.finish_reason


def sampled_from(node, expected, calls):
    """The node's first generation call was made from ``expected`` (``calls``: the backend's
    (context, result ids) pairs); an empty leaf (observation cut to the budget) made none."""
    if not node.token_ids:
        return node.is_leaf and node.finish_reason == "response_length"
    return any(ctx == expected and node.token_ids[: len(ids)] == ids for ctx, ids in calls)


def check_tree_invariants(tree, context_of, max_round):
    for node in tree.nodes[1:]:
        parent = tree.nodes[node.parent]
        # prefix consistency: the context a turn was sampled from is the parent's context,
        # the parent's turn and the parent's observation
        expected = (
            tree.prompt_ids
            if node.parent == 0
            else tree.context_ids(parent.id) + parent.token_ids + parent.obs_ids
        )
        assert sampled_from(node, expected, context_of)
        assert node.is_leaf != bool(node.children)
        assert not (node.is_leaf and node.obs_ids) or node.obs_kind == "eos"  # empty query
        assert 0 <= node.expansion_round <= max_round
    for row in training_rows([tree]):
        mask = np.array(row["sampled_mask"])
        turn_node = np.array(row["turn_node"])
        assert len(row["completion_ids"]) == len(mask) == len(turn_node) == len(row["old_logps"])
        assert ((turn_node >= 0) == (mask == 1)).all()
        assert all(lp == 0.0 for lp, m in zip(row["old_logps"], mask) if m == 0)
        assert turn_node[mask == 1][-1] == row["leaf_node"] if mask.any() else True


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    m=st.integers(1, 4),
    l_rounds=st.integers(0, 3),
    k=st.integers(1, 4),
    seed=st.integers(0, 1000),
    p_search=st.floats(0.2, 0.8),
)
def test_entropy_tree_invariants_over_many_shapes(toy, m, l_rounds, k, seed, p_search):
    cfg = dataclasses.replace(
        toy.cfg.rollout,
        tree_m=m,
        tree_l=l_rounds,
        tree_k=k,
        max_response_tokens=600,
        max_tool_calls=3,
    )
    questions, golden = toy.questions(2)
    backend = ScriptedBackend(toy.tokenizer, random_action_script(p_search, 0.3), seed=seed)
    trees = rollout(toy.sampler(cfg, backend, seed=seed), questions, golden, expansion="entropy")
    context_of = [(list(q.context), r.token_ids) for q, r in zip(backend.requests, backend.results)]
    for tree in trees:
        assert len(tree.leaves()) == m + l_rounds * k
        check_tree_invariants(tree, context_of, l_rounds)
        # every expansion round started exactly K new chains (new nodes whose parent is older)
        for r in range(1, l_rounds + 1):
            starts = [
                n
                for n in tree.nodes[1:]
                if n.expansion_round == r and tree.nodes[n.parent].expansion_round != r
            ]
            assert len(starts) == k


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    trees_per_prompt=st.integers(1, 3),
    l_rounds=st.integers(1, 3),
    n=st.integers(1, 3),
    seed=st.integers(0, 1000),
    p_search=st.floats(0.2, 0.8),
)
def test_random_expansion_is_tree_grpo(toy, trees_per_prompt, l_rounds, n, seed, p_search):
    """Tree-GRPO's expansion: m trees per question, each 1 + L*n leaves; every new chain of a
    round continues after a node that existed before the round (a child of the picked node,
    generated from its full state), so every tree has >= 2 leaves."""
    # Choose M, K so that M + L*K = m * (1 + L*n): M = m, K = m*n.
    cfg = dataclasses.replace(
        toy.cfg.rollout,
        tree_m=trees_per_prompt,
        tree_l=l_rounds,
        tree_k=trees_per_prompt * n,
        tree_grpo_trees=trees_per_prompt,
        max_response_tokens=600,
        max_tool_calls=3,
    )
    assert tree_grpo_shape(cfg) == (trees_per_prompt, l_rounds, n)
    questions, golden = toy.questions(2)
    backend = ScriptedBackend(toy.tokenizer, random_action_script(p_search, 0.3), seed=seed)
    trees = rollout(
        toy.sampler(cfg, backend, seed=seed),
        questions,
        golden,
        expansion="random",
        prompt_ids=[10, 20],
    )
    assert [t.prompt_index for t in trees] == [10] * trees_per_prompt + [20] * trees_per_prompt
    context_of = [(list(q.context), r.token_ids) for q, r in zip(backend.requests, backend.results)]
    for tree in trees:
        assert len(tree.leaves()) == 1 + l_rounds * n >= 2
        assert len(tree.nodes[0].children) >= 1
        check_tree_invariants(tree, context_of, l_rounds)
        assert sum(1 for c in tree.nodes[0].children if tree.nodes[c].expansion_round == 0) == 1
        for r in range(1, l_rounds + 1):
            # the first node of each new chain hangs under a node made in an earlier round
            starts = [
                x
                for x in tree.nodes[1:]
                if x.expansion_round == r and tree.nodes[x.parent].expansion_round < r
            ]
            assert len(starts) == n
            assert all(not tree.nodes[x.parent].is_leaf for x in starts)


def test_tree_grpo_shape_at_the_profiles_budgets(toy):
    paper = dataclasses.replace(toy.cfg.rollout, tree_m=10, tree_l=2, tree_k=6, tree_grpo_trees=2)
    assert tree_grpo_shape(paper) == (2, 2, 5)  # 2 trees x (1 + 2*5) = 22 = 10 + 2*6
    tiny = dataclasses.replace(paper, tree_m=4, tree_l=1, tree_k=4)
    assert tree_grpo_shape(tiny) == (2, 1, 3)  # 2 x 4 = 8
    smoke = dataclasses.replace(paper, tree_m=2, tree_l=1, tree_k=2)
    assert tree_grpo_shape(smoke) == (2, 1, 1)  # 2 x 2 = 4
    with pytest.raises(ValueError, match="cannot be split into rollout.tree_grpo_trees = 3"):
        tree_grpo_shape(dataclasses.replace(paper, tree_grpo_trees=3))
    with pytest.raises(ValueError, match="L = 0"):
        tree_grpo_shape(dataclasses.replace(paper, tree_l=0))


def test_real_model_tree_rows_match_a_full_recompute(toy):
    """Leaves of an entropy tree grown with KV reuse: every row's log-probs equal one plain
    forward pass over the row (1e-5), and there are exactly M + L*K leaves per tree."""
    # Temperature 1 (not the profile's 0.5): the random tag-biased toy policy then searches
    # more than once in some paths, which this test needs.
    cfg = dataclasses.replace(toy.cfg.rollout, temperature=1.0)
    questions, golden = toy.questions(3)
    trees = rollout(toy.sampler(cfg, seed=1), questions, golden, expansion="entropy")
    assert all(len(t.leaves()) == cfg.tree_m + cfg.tree_l * cfg.tree_k for t in trees)
    assert max(n.depth for t in trees for n in t.nodes) >= 2, "want some multi-turn paths"
    rows = training_rows(trees)
    assert recompute_gap(toy.model, rows, cfg.temperature, "cpu", limit=len(rows)) < 1e-5


def test_entropy_estimate_choice_changes_the_exported_entropy(toy):
    from at2po_lib.rollout.export import tree_arrays

    questions, golden = toy.questions(1)
    (tree,) = rollout(toy.sampler(seed=2), questions, golden)
    nll, exact = tree_arrays(tree, "sampled_nll"), tree_arrays(tree, "exact")
    assert nll.entropy[0] == exact.entropy[0] == 0.0
    assert np.allclose(nll.entropy, nll.node_arrays["entropy_nll"])
    assert np.allclose(exact.entropy, exact.node_arrays["entropy_exact"])
    assert not np.allclose(nll.entropy[1:], exact.entropy[1:])


def test_prefill_is_shared_by_the_chains_of_a_prompt(toy):
    """With reuse, each prompt is prefilled once however many chains start from it."""
    from at2po_lib.rollout.backends import make_backend
    from at2po_lib.rollout.agent import STOP_SEQUENCES

    questions, golden = toy.questions(2)
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    prompt_tokens = sum(len(env.prompt_ids(q)) for q in questions)
    counts = {}
    for keep in (True, False):
        backend = make_backend(
            toy.model, toy.tokenizer, toy.cfg.rollout, STOP_SEQUENCES, keep_cache=keep
        )
        cfg = dataclasses.replace(
            toy.cfg.rollout,
            max_response_tokens=1,  # every chain: one token, one turn
        )
        rollout(toy.sampler(cfg, backend), questions, golden, expansion="chain", num_leaves=5)
        counts[keep] = backend.stats.prefill_tokens
    # reuse: prompt[:-1] once per prompt + the last prompt token once per chain
    assert counts[True] == (prompt_tokens - 2) + 2 * 5
    assert counts[False] == 5 * prompt_tokens


def test_random_siblings_rollout_adds_k_siblings_per_round(toy):
    """expansion="random_siblings" (Table 2 steps 1-2): one tree per question; each round
    starts K new chains, each a new child of a picked node's parent (a sibling of the picked
    node; the root's own child when the root is picked); M + L*K leaves."""
    m, l_rounds, k = 3, 2, 2
    cfg = dataclasses.replace(
        toy.cfg.rollout,
        tree_m=m,
        tree_l=l_rounds,
        tree_k=k,
        max_response_tokens=600,
        max_tool_calls=3,
    )
    questions, golden = toy.questions(3)
    backend = ScriptedBackend(toy.tokenizer, random_action_script(0.7, 0.3), seed=1)
    trees = rollout(
        toy.sampler(cfg, backend, seed=1), questions, golden, expansion="random_siblings"
    )
    assert len(trees) == len(questions)
    calls = [(list(q.context), r.token_ids) for q, r in zip(backend.requests, backend.results)]
    for tree in trees:
        assert len(tree.leaves()) == m + l_rounds * k
        check_tree_invariants(tree, calls, l_rounds)
        for round_ in range(1, l_rounds + 1):
            starts = [
                n
                for n in tree.nodes[1:]
                if n.expansion_round == round_
                and n.duplicate_of < 0
                and (n.parent == 0 or tree.nodes[n.parent].expansion_round < round_)
            ]
            assert len(starts) == k  # one new chain per pick (each pick yields one leaf)
            for start in starts:  # a sibling of an earlier node: its parent is an inner node
                assert not tree.nodes[start.parent].is_leaf


def test_random_siblings_is_reproducible(toy):
    cfg = dataclasses.replace(
        toy.cfg.rollout, tree_m=2, tree_l=1, tree_k=2, max_response_tokens=600, max_tool_calls=3
    )
    questions, golden = toy.questions(2)

    def grow(expansion, seed):
        backend = ScriptedBackend(toy.tokenizer, random_action_script(0.7, 0.3), seed=5)
        trees = rollout(
            toy.sampler(cfg, backend, seed=seed), questions, golden, expansion=expansion
        )
        return [[(n.parent, tuple(n.token_ids)) for n in t.nodes] for t in trees]

    assert grow("random_siblings", 3) == grow("random_siblings", 3)


def _turn_tree(token_entropies: list[list[float]]):
    """A root with one inner turn per entry (each with a leaf child), the entry's per-token
    exact entropies and sampled-token NLLs equal to them."""
    from at2po_lib.rollout.structures import RolloutTree

    tree = RolloutTree(prompt_index=0, question="q", golden_answers=["a"], prompt_ids=[1])
    for values in token_entropies:
        node = tree.add_child(0, 0)
        node.append_sampled(
            list(range(len(values))), [-v for v in values], values, [0.0] * len(values)
        )
        leaf = tree.add_child(node.id, 0)
        leaf.append_sampled([7], [0.0], [0.0], [0.0])
        leaf.is_leaf, leaf.reward = True, 0.0
    return tree


def test_turn_entropy_max_lets_a_one_token_decision_stand_out():
    """Node 1: one uncertain token (0.69, a coin-flip decision) among six certain ones, mean
    0.0986; node 3: every token a little uncertain (0.2), mean 0.2. The paper's mean picks
    node 3, the max picks node 1; both estimates agree by construction here."""
    from at2po_lib.rollout.trees import node_entropy, pick_nodes

    tree = _turn_tree([[0.0, 0.0, 0.69, 0.0, 0.0, 0.0, 0.0], [0.2] * 4])
    for estimate in ("sampled_nll", "exact"):
        mean = node_entropy(tree, estimate, "mean")
        assert mean[[1, 3]] == pytest.approx([0.69 / 7, 0.2])
        assert node_entropy(tree, estimate, "max")[[1, 3]] == pytest.approx([0.69, 0.2])
        assert pick_nodes(tree, 1, 0.0, estimate) == [3]
        assert pick_nodes(tree, 1, 0.0, estimate, reduce="max") == [1]


def test_turn_entropy_max_ignores_inserted_tokens_and_names_a_bad_choice():
    from at2po_lib.rollout.trees import node_entropy

    tree = _turn_tree([[0.1, 0.3]])
    tree.nodes[1].append_inserted([9, 9])  # the tool-limit notice: not sampled
    tree.nodes[1].entropies[-1] = 5.0  # would win if inserted tokens counted
    assert node_entropy(tree, "exact", "max")[1] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="rollout.turn_entropy='median'"):
        node_entropy(tree, "exact", "median")
    tree.nodes[1].entropies[0] = float("nan")  # a backend without full distributions
    assert np.isnan(node_entropy(tree, "exact", "max")[1])


def test_turn_entropy_reaches_the_credit_arrays():
    from at2po_lib.rollout.export import tree_arrays

    tree = _turn_tree([[0.0, 0.6, 0.0]])
    assert tree_arrays(tree, "exact", "max").entropy[1] == pytest.approx(0.6)
    assert tree_arrays(tree, "exact").entropy[1] == pytest.approx(0.2)
    assert tree_arrays(tree, "exact", "max").info["turn_entropy"] == "max"
