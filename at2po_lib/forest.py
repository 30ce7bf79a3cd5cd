r"""Tree arrays and batches of trees: the data the credit stage consumes.

One rollout tree is a set of arrays over its nodes (node 0 is the root), shared with the rollout
stage (:mod:`at2po_lib.rollout.export` writes them, :func:`load_trees` reads them back)::

    parent[n]       int, parent id, parent[0] = -1; parent[n] < n is NOT assumed
    entropy[n]      float, H(n) = mean NLL of the turn's sampled tokens (root: 0)
    leaf_reward[n]  float, the final reward on leaves, NaN on internal nodes

A childless node whose reward is NaN is an *unscored* leaf (e.g. pruned by the rollout stage);
how the credit math treats it is described in :mod:`at2po_lib.credit`.

Containers:

- :class:`TreeArrays`: one tree as numpy arrays (N,); :func:`as_tree_arrays` accepts a
  ``TreeArrays``, a mapping or object with the three fields, or a ``(parent, entropy,
  leaf_reward)`` tuple.
- :class:`Forest`: many trees as one flat set of torch tensors (global node ids, ``tree_index``
  per node, ``offsets`` per tree), so :mod:`at2po_lib.credit` can run the math of every tree at
  once, level by level over depth.

Structure helpers (vectorised, one step per tree level, no loop over nodes):
:func:`node_depths`, :func:`children_count`, :func:`leaf_paths`.

Demo and loading helpers (notebooks, tests, benchmarks): :func:`synthetic_turn_rows` (the token
layout of every root→leaf row), :func:`example_tree` (a hand-made tree), :func:`random_tree`
(an AT2PO-shaped random tree), :func:`load_trees` (the rollout stage's ``trees.pkl``).

Every name here is also importable from :mod:`at2po_lib.credit`, where it used to live.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch


# --------------------------------------------------------------------------------------------
# Tree containers
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TreeArrays:
    """One rollout tree as arrays over nodes (node 0 = root, ``parent[0] = -1``)."""

    parent: np.ndarray
    entropy: np.ndarray
    leaf_reward: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(len(self.parent))


def _field(tree: Any, name: str) -> Any:
    if isinstance(tree, Mapping):
        if name not in tree:
            raise ValueError(f"tree mapping has no field {name!r} (keys: {sorted(tree)})")
        return tree[name]
    if not hasattr(tree, name):
        raise ValueError(f"tree object {type(tree).__name__} has no attribute {name!r}")
    return getattr(tree, name)


def as_tree_arrays(tree: Any) -> TreeArrays:
    """Accept a :class:`TreeArrays`, a mapping or object with ``parent``/``entropy``/
    ``leaf_reward``, or a ``(parent, entropy, leaf_reward)`` tuple."""
    if isinstance(tree, TreeArrays):
        return tree
    if isinstance(tree, (tuple, list)) and len(tree) == 3:
        parent, entropy, leaf_reward = tree
    else:
        parent, entropy, leaf_reward = (_field(tree, k)
                                        for k in ("parent", "entropy", "leaf_reward"))
    return TreeArrays(_to_numpy(parent).astype(np.int64), _to_numpy(entropy).astype(np.float64),
                      _to_numpy(leaf_reward).astype(np.float64))


def _to_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if torch.is_tensor(x) else np.asarray(x)


def _validate_tree(t: TreeArrays, name: str) -> None:
    n = t.num_nodes
    if n == 0:
        raise ValueError(f"{name}: empty tree")
    for field_name in ("parent", "entropy", "leaf_reward"):
        arr = getattr(t, field_name)
        if arr.shape != (n,):
            raise ValueError(f"{name}: {field_name} has shape {arr.shape}, expected ({n},)")
    if t.parent[0] != -1:
        raise ValueError(f"{name}: parent[0] must be -1 (node 0 is the root), got {t.parent[0]}")
    rest = t.parent[1:]
    bad = np.flatnonzero((rest < 0) | (rest >= n) | (rest == np.arange(1, n)))
    if bad.size:
        i = int(bad[0]) + 1
        raise ValueError(f"{name}: node {i} has invalid parent {t.parent[i]} (tree has {n} nodes)")


@dataclass(frozen=True)
class Forest:
    """Many trees as one flat set of nodes.

    parent (N,) int64: *global* parent id, -1 for each tree's root;
    entropy, leaf_reward (N,) float; tree_index (N,) int64 (sorted, contiguous);
    offsets (num_trees + 1,) int64: tree t owns global ids ``offsets[t]:offsets[t+1]``, and its
    root is ``offsets[t]`` (local node 0).
    """

    parent: torch.Tensor
    entropy: torch.Tensor
    leaf_reward: torch.Tensor
    tree_index: torch.Tensor
    offsets: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return int(self.parent.numel())

    @property
    def num_trees(self) -> int:
        return int(self.offsets.numel() - 1)

    @property
    def roots(self) -> torch.Tensor:
        return self.offsets[:-1]

    @property
    def device(self) -> torch.device:
        return self.parent.device

    def to(self, device: torch.device | str) -> "Forest":
        """The same forest on another device (the math follows the forest's device)."""
        return Forest(*(getattr(self, f).to(device) for f in
                        ("parent", "entropy", "leaf_reward", "tree_index", "offsets")))

    @classmethod
    def from_trees(cls, trees: Sequence[Any], dtype: torch.dtype = torch.float32) -> "Forest":
        """Concatenate trees (anything :func:`as_tree_arrays` accepts); local ids become global."""
        arrays = [as_tree_arrays(t) for t in trees]
        if not arrays:
            raise ValueError("Forest.from_trees: no trees given")
        for i, t in enumerate(arrays):
            _validate_tree(t, f"tree {i}")
        sizes = np.array([t.num_nodes for t in arrays], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        tree_index = np.repeat(np.arange(len(arrays)), sizes)
        local_parent = np.concatenate([t.parent for t in arrays])
        parent = np.where(local_parent >= 0, local_parent + offsets[tree_index], -1)
        return cls(
            parent=torch.as_tensor(parent, dtype=torch.long),
            entropy=torch.as_tensor(np.concatenate([t.entropy for t in arrays]), dtype=dtype),
            leaf_reward=torch.as_tensor(np.concatenate([t.leaf_reward for t in arrays]),
                                        dtype=dtype),
            tree_index=torch.as_tensor(tree_index, dtype=torch.long),
            offsets=torch.as_tensor(offsets, dtype=torch.long),
        )


# --------------------------------------------------------------------------------------------
# Structure: depth, children
# --------------------------------------------------------------------------------------------
def node_depths(parent: torch.Tensor) -> torch.Tensor:
    """Depth of every node (roots: 0) for global ``parent`` ids (N,), by repeated parent lookup
    (one vectorised step per tree level). Raises on a cycle."""
    n = parent.numel()
    has_parent = parent >= 0
    safe_parent = parent.clamp(min=0)
    depth = torch.zeros(n, dtype=torch.long, device=parent.device)
    for _ in range(n + 1):
        new = torch.where(has_parent, depth[safe_parent] + 1, 0)
        if torch.equal(new, depth):
            return depth
        depth = new
    raise ValueError("parent array contains a cycle (a node is its own ancestor)")


def children_count(parent: torch.Tensor) -> torch.Tensor:
    """Number of children (N,) of every node for global ``parent`` ids (N,); 0 marks a leaf."""
    n = parent.numel()
    kids = parent[parent >= 0]
    return torch.bincount(kids, minlength=n)


# --------------------------------------------------------------------------------------------
# Paths, synthetic rows, example trees (notebooks, tests, benchmarks)
# --------------------------------------------------------------------------------------------
def leaf_paths(parent: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Root→leaf paths of one tree: (leaves (L,), paths (L, D+1)) with paths[i, k] the node at
    depth k on leaf i's path (-1 past the leaf). One vectorised step per depth."""
    parent = torch.as_tensor(np.asarray(parent), dtype=torch.long)
    depth = node_depths(parent)
    leaves = torch.nonzero(children_count(parent) == 0).squeeze(1)
    max_depth = int(depth.max())
    paths = torch.full((leaves.numel(), max_depth + 1), -1, dtype=torch.long)
    cur, d = leaves.clone(), depth[leaves].clone()
    for _ in range(max_depth + 1):
        alive = d >= 0
        paths[alive.nonzero().squeeze(1), d[alive]] = cur[alive]
        cur = torch.where(alive, parent[cur.clamp(min=0)], -1)
        d = d - 1
    return leaves, paths


def synthetic_turn_rows(parent: Any, model_tokens: Any,
                        obs_tokens: Any = 4) -> dict[str, torch.Tensor]:
    """Token layout of every root→leaf row of one tree, for demos and tests.

    Each non-root node on the path contributes ``obs_tokens[n]`` observation tokens (none for
    depth-1 nodes, which follow the prompt) and then ``model_tokens[n]`` model tokens.
    Returns ``turn_node`` (L, T) (local node id, -1 elsewhere), ``completion_mask`` (L, T) and
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
    return {"turn_node": turn_node, "completion_mask": (turn_node >= 0).long(), "leaf": leaves}


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


def random_tree(generator: np.random.Generator, num_chains: int = 10, num_expansions: int = 12,
                max_turns: int = 6, stop_prob: float = 0.35,
                shuffle_ids: bool = True) -> TreeArrays:
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


def load_trees(path: str | Path) -> list[TreeArrays]:
    """Trees saved by the rollout stage: a pickle holding a list of trees (anything
    :func:`as_tree_arrays` accepts) or a dict with a ``"trees"`` list."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trees file not found: {path}")
    with path.open("rb") as fh:
        data = pickle.load(fh)
    trees = data["trees"] if isinstance(data, Mapping) and "trees" in data else data
    if not isinstance(trees, (list, tuple)) or not trees:
        raise ValueError(f"{path}: expected a non-empty list of trees, got {type(trees).__name__}")
    out = []
    for i, t in enumerate(trees):
        arrays = as_tree_arrays(t)
        _validate_tree(arrays, f"{path}: tree {i}")
        out.append(arrays)
    return out
