"""Tree-GRPO as its paper and code define it (issue 11 item 1; docs/method.md §5, §8): m separate
trees per prompt, each grown by continuing after uniformly picked nodes, and the advantage
GRPO(prompt) + GRPO(tree). Property tests on random forests: no group of one, and a tree whose
leaves are all equal gets a tree-level term of 0."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.method import outcome
from at2po_lib.method.tree import TreeArrays
from at2po_lib.method.expansion import select_random
from at2po_lib.trainer.batch import RolloutBatch, token_advantages


def grow_tree_grpo_tree(
    rng: np.random.Generator, rounds: int, n: int, stop_prob: float, max_turns: int = 5
) -> np.ndarray:
    """Parent array of one Tree-GRPO tree: one chain from the root, then ``rounds`` rounds of
    ``n`` picks (select_random, as the rollout does), each continued after the picked node."""
    parent, depth, leaf = [-1], [0], [False]

    def chain(after: int) -> None:
        node = after
        while True:
            parent.append(node)
            depth.append(depth[node] + 1)
            leaf.append(False)
            node = len(parent) - 1
            if depth[node] >= max_turns or rng.random() < stop_prob:
                leaf[node] = True
                return

    chain(0)
    for _ in range(rounds):
        for picked in select_random(np.array(leaf), n, rng).tolist():
            chain(picked)
    return np.array(parent)


@st.composite
def tree_grpo_batches(draw):
    """A rollout batch of P prompts x m Tree-GRPO trees with 0/1 rewards (some trees forced
    all-equal), one row per leaf, trees prompt-major as the rollout returns them."""
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    prompts, m = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    rounds, n = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    trees, rows = [], {"reward": [], "row_tree": [], "row_leaf": [], "group": []}
    for p in range(prompts):
        for _ in range(m):
            parent = grow_tree_grpo_tree(rng, rounds, n, draw(st.floats(0.1, 0.9)))
            is_leaf = np.bincount(parent[1:], minlength=len(parent)) == 0
            constant = draw(st.sampled_from([None, 0.0, 1.0]))
            reward = np.where(
                is_leaf, rng.integers(0, 2, len(parent)) if constant is None else constant, np.nan
            ).astype(float)
            trees.append(TreeArrays(parent, rng.uniform(0.1, 2, len(parent)), reward, prompt_id=p))
            for leaf in np.flatnonzero(is_leaf):
                rows["reward"].append(float(reward[leaf]))
                rows["row_tree"].append(len(trees) - 1)
                rows["row_leaf"].append(int(leaf))
                rows["group"].append(p)
    num = len(rows["reward"])
    turn_node = [[leaf] for leaf in rows["row_leaf"]]  # one token per row: its leaf's turn
    batch = RolloutBatch(
        prompt_ids=[[0]] * num,
        completion_ids=[[1]] * num,
        sampled_mask=[[1]] * num,
        turn_node=turn_node,
        old_logps=[[0.0]] * num,
        trees=trees,
        num_turns=[1] * num,
        num_tool_calls=[0] * num,
        **rows,
    )
    return batch, rounds, n


@settings(max_examples=60, deadline=None)
@given(case=tree_grpo_batches())
def test_tree_grpo_forests_have_no_group_of_one_and_equal_trees_get_zero(case):
    batch, rounds, n = case
    row_tree = torch.tensor(batch.row_tree)
    # every tree: 1 + L*n leaves (one per chain), so never a group of one
    assert torch.bincount(row_tree).tolist() == [1 + rounds * n] * len(batch.trees)
    rewards = torch.tensor(batch.reward, dtype=torch.float64)
    group = torch.tensor(batch.group)
    adv = token_advantages(batch, "tree_grpo")[:, 0].double()
    inter = outcome.grpo_advantages(rewards, group)
    inner = adv - inter
    for t in range(len(batch.trees)):
        rows = row_tree == t
        if len(set(rewards[rows].tolist())) == 1:  # all leaves of the tree equal
            assert torch.allclose(
                inner[rows], torch.zeros(int(rows.sum()), dtype=torch.float64), atol=1e-5
            )
    for p in set(batch.group):
        rows = group == p
        if len(set(rewards[rows].tolist())) == 1:  # all leaves of the prompt equal
            assert torch.all(adv[rows] == 0)
    # each term is a GRPO advantage: zero mean within its group
    for t in range(len(batch.trees)):
        assert abs(float(inner[row_tree == t].sum())) < 1e-4


def test_tree_grpo_by_hand_on_two_trees_of_one_prompt():
    # prompt 0: tree a leaves (1, 0), tree b leaves (1, 1)
    # prompt: rewards (1, 0, 1, 1): mean 0.75, unbiased std 0.5 -> (0.5, -1.5, 0.5, 0.5)
    # tree a: mean 0.5, std 0.7071 -> (0.7071, -0.7071); tree b: all equal -> 0
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    a = outcome.tree_grpo_advantages(
        r, torch.tensor([0, 0, 1, 1]), torch.zeros(4, dtype=torch.long)
    )
    np.testing.assert_allclose(a.numpy(), [0.5 + 0.707107, -1.5 - 0.707107, 0.5, 0.5], rtol=1e-5)


def test_a_tree_with_one_leaf_is_refused():
    """The old bias: re-sampling the root made one-leaf groups that kept their raw reward."""
    r = torch.tensor([1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="tree 7 of prompt 0 has a single leaf"):
        outcome.tree_grpo_advantages(r, torch.tensor([3, 3, 7]), torch.zeros(3, dtype=torch.long))
