"""AEPO's online branching (docs/method.md §8): the branch rule by hand, the exact budget of leaves
over many shapes (scripted backend), and a real tiny-model run."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from at2po_lib.rollout.aepo import aepo_turn_entropy, branch_probability
from at2po_lib.rollout.export import training_rows
from at2po_lib.rollout.structures import Node
from at2po_lib.rollout.stand_ins import ScriptedBackend, random_action_script
from at2po_lib.rollout.trees import rollout


@pytest.fixture(scope="module")
def toy(smoke_toy):
    return smoke_toy  # tests/conftest.py: one smoke ToySetup per module


def test_branch_probability_by_hand():
    # (u + w (H_now - H_init)) (1 - 0.05 * consecutive) = (0.3 + 0.2 * 1.5) * 0.9 = 0.54
    assert branch_probability(0.3, 2.0, 0.5, 2) == pytest.approx(0.54)
    # clipped to [0, 1]; the penalty factor never goes below 0
    assert branch_probability(0.9, 5.0, 0.0, 0) == 1.0
    assert branch_probability(0.9, 0.0, 5.0, 0) == 0.0
    assert branch_probability(0.9, 1.0, 0.0, 40) == 0.0


def test_turn_entropy_sums_the_first_tokens_over_log_vocab():
    node = Node(id=1, parent=0, depth=1, expansion_round=0, topk_entropies=[1.0, 2.0, 4.0])
    # first 2 tokens: (1 + 2) / log(100)
    assert aepo_turn_entropy(node, 100, num_tokens=2) == pytest.approx(3.0 / math.log(100))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    budget=st.integers(1, 7),
    initial_frac=st.floats(0.01, 1.0),
    beam=st.integers(1, 4),
    seed=st.integers(0, 1000),
    p_search=st.floats(0.3, 0.9),
)
def test_exactly_budget_leaves_and_branches_are_siblings(
    toy, budget, initial_frac, beam, seed, p_search
):
    initial = max(1, round(initial_frac * budget))
    cfg = dataclasses.replace(
        toy.cfg.rollout,
        aepo_beam=beam,
        aepo_initial=initial,
        max_response_tokens=600,
        max_tool_calls=3,
    )
    questions, golden = toy.questions(3)
    backend = ScriptedBackend(toy.tokenizer, random_action_script(p_search, 0.3), seed=seed)
    sampler = toy.sampler(cfg, backend, seed=seed)
    trees = rollout(sampler, questions, golden, expansion="aepo", num_leaves=budget)
    calls = [(list(q.context), r.token_ids) for q, r in zip(backend.requests, backend.results)]
    for tree in trees:
        assert len(tree.leaves()) == budget
        assert len(tree.nodes[0].children) >= initial
        for node in tree.nodes[1:]:
            parent = tree.nodes[node.parent]
            expected = (
                tree.prompt_ids
                if node.parent == 0
                else tree.context_ids(parent.id) + parent.token_ids + parent.obs_ids
            )
            # the node's first generation call was made from exactly this context
            assert not node.token_ids or any(
                ctx == expected and node.token_ids[: len(ids)] == ids for ctx, ids in calls
            )
            assert node.is_leaf != bool(node.children)
            if beam == 1:  # beam 1 allows no branching: every inner node has one child
                assert len(node.children) <= 1
    assert len(training_rows(trees)) == budget * len(trees)


def test_real_model_aepo(toy):
    questions, golden = toy.questions(3)
    cfg = toy.cfg.rollout
    trees = rollout(toy.sampler(cfg, seed=0), questions, golden, expansion="aepo")
    assert all(len(t.leaves()) == cfg.aepo_budget for t in trees)
    assert all(not math.isnan(t.nodes[i].reward) for t in trees for i in t.leaves())


def test_branches_grow_from_inner_nodes(toy):
    """Chains that keep searching give AEPO branching points: some inner node gets a second
    child (a branch), and the budget is still met exactly."""
    cfg = dataclasses.replace(
        toy.cfg.rollout, aepo_initial=2, max_response_tokens=900, max_tool_calls=3
    )
    questions, golden = toy.questions(2)
    backend = ScriptedBackend(toy.tokenizer, random_action_script(0.9, 0.1), seed=0)
    trees = rollout(toy.sampler(cfg, backend), questions, golden, expansion="aepo", num_leaves=8)
    assert all(len(t.leaves()) == 8 for t in trees)
    branched = [n for t in trees for n in t.nodes[1:] if len(n.children) > 1]
    assert branched and all(
        c.expansion_round > 0
        for t in trees
        for n in t.nodes[1:]
        if len(n.children) > 1
        for c in (t.nodes[i] for i in n.children[1:])
    )
