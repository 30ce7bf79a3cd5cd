"""Demo trees for notebooks, docs, tests and benchmarks: :func:`example_tree` (a hand-made tree),
:func:`random_tree` (an AT2PO-shaped random tree) and :func:`synthetic_turn_rows` (the token
layout of every root→leaf row of a tree)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .tree import TreeArrays, leaf_paths, node_depths


def synthetic_turn_rows(
    parent: Any, model_tokens: Any, obs_tokens: Any = 4
) -> dict[str, torch.Tensor]:
    """Token layout of every root→leaf row of one tree, for demos and tests.

    Each non-root node on the path contributes ``obs_tokens[n]`` observation tokens (none for
    depth-1 nodes, which follow the prompt) and then ``model_tokens[n]`` model tokens.
    Returns ``turn_node`` (L, T) (local node id, -1 elsewhere), ``sampled_mask`` (L, T) and
    ``leaf`` (L,). Built with ``repeat_interleave``; no loop over rows.
    """
    parent_t = torch.as_tensor(np.asarray(parent), dtype=torch.long)
    n = parent_t.numel()
    model = torch.as_tensor(np.broadcast_to(np.asarray(model_tokens), (n,)).copy()).long()
    obs = torch.as_tensor(np.broadcast_to(np.asarray(obs_tokens), (n,)).copy()).long()
    obs = torch.where(node_depths(parent_t) >= 2, obs, 0)
    leaves, paths = leaf_paths(parent_t)
    nodes = paths[:, 1:]  # drop the root (prompt only)
    valid = nodes >= 0
    safe = nodes.clamp(min=0)
    seg_len = torch.stack([obs[safe] * valid, model[safe] * valid], dim=2).flatten(1)  # (L, 2K)
    seg_val = torch.stack([torch.full_like(nodes, -1), nodes], dim=2).flatten(1)
    row_len = seg_len.sum(dim=1)
    width = max(int(row_len.max()), 1)
    token_val = torch.repeat_interleave(seg_val.flatten(), seg_len.flatten())
    token_row = torch.repeat_interleave(torch.arange(leaves.numel()), row_len)
    row_start = torch.cumsum(row_len, 0) - row_len
    pos = torch.arange(token_val.numel()) - row_start[token_row]
    turn_node = torch.full((leaves.numel(), width), -1, dtype=torch.long)
    turn_node[token_row, pos] = token_val
    return {"turn_node": turn_node, "sampled_mask": (turn_node >= 0).long(), "leaf": leaves}


def example_tree() -> TreeArrays:
    """A small hand-made tree (9 nodes, 5 leaves) for notebooks, docs and tests.

    ::

        0 (root)
        ├── 1 (H=0.9) ─┬─ 3 (H=0.4) ── 6 (H=0.3, r=1)    node 3 has a single child
        │              └─ 4 (H=1.2, r=0)
        ├── 2 (H=0.5) ─── 5 (H=0.7, r=1)
        ├── 7 (H=1.5, r=0)                               an early wrong answer
        └── 8 (H=0.2, r=1)                               an early right answer

    Node ids are not topological (node 3's child 6 comes after node 5) on purpose.
    """
    parent = np.array([-1, 0, 0, 1, 1, 2, 3, 0, 0])
    entropy = np.array([0.0, 0.9, 0.5, 0.4, 1.2, 0.7, 0.3, 1.5, 0.2])
    nan = np.nan
    leaf_reward = np.array([nan, nan, nan, nan, 0.0, 1.0, 1.0, 0.0, 1.0])
    return TreeArrays(parent, entropy, leaf_reward)


def random_tree(
    generator: np.random.Generator,
    num_chains: int = 10,
    num_expansions: int = 12,
    max_turns: int = 6,
    stop_prob: float = 0.35,
    shuffle_ids: bool = True,
) -> TreeArrays:
    """An AT2PO-shaped random tree: ``num_chains`` chains from the root (each turn ends the
    trajectory with ``stop_prob``, at most ``max_turns`` deep), then ``num_expansions`` re-sampled
    turns (a new child of a random non-leaf node, rolled out to a leaf). Rewards in {0, 1},
    entropies uniform in [0.1, 2). With ``shuffle_ids`` the non-root ids are permuted, so
    children may have smaller ids than their parents. (Python loops: a test/demo generator.)"""
    parent, depth = [-1], [0]

    def rollout(from_node: int) -> None:
        node = from_node
        while True:
            parent.append(node)
            depth.append(depth[node] + 1)
            node = len(parent) - 1
            if depth[node] >= max_turns or generator.random() < stop_prob:
                return

    for _ in range(num_chains):
        rollout(0)
    for _ in range(num_expansions):
        has_child = np.zeros(len(parent), dtype=bool)
        has_child[[p for p in parent[1:]]] = True
        rollout(int(generator.choice(np.flatnonzero(has_child))))
    n = len(parent)
    parent_arr = np.array(parent)
    if shuffle_ids:
        perm = np.concatenate([[0], 1 + generator.permutation(n - 1)])  # old id -> new id
        new_parent = np.full(n, -1)
        new_parent[perm[1:]] = perm[parent_arr[1:]]
        parent_arr = new_parent
    is_leaf = np.bincount(parent_arr[1:], minlength=n) == 0
    reward = np.where(is_leaf, generator.integers(0, 2, n).astype(float), np.nan)
    entropy = generator.uniform(0.1, 2.0, n)
    entropy[0] = 0.0
    return TreeArrays(parent_arr, entropy, reward)
