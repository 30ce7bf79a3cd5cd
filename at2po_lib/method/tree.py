r"""Tree arrays and batches of trees: the one tree type every stage shares.

One rollout tree is a :class:`TreeArrays`: arrays over its nodes (node 0 is the root). The
rollout stage makes them (:func:`at2po_lib.rollout.export.tree_arrays`, the one place where
its growing ``RolloutTree`` becomes arrays), the trainer's :class:`~at2po_lib.trainer.batch.
RolloutBatch` holds them, :mod:`at2po_lib.method.credit` computes on them,
:mod:`at2po_lib.reporting.tree_drawings` draws them, and :mod:`at2po_lib.record.tree_files` stores
them. The credit math reads::

    parent[n]       int, parent id, parent[0] = -1; parent[n] < n is NOT assumed
    entropy[n]      float, H(n) = mean NLL of the turn's sampled tokens (root: 0)
    leaf_reward[n]  float, the final reward on leaves, NaN on internal nodes

and a tree may carry more (prompt id, per-node arrays such as turn spans and expansion
rounds, per-node text records, question and golden answers): see :class:`TreeArrays`.

A childless node whose reward is NaN is an *unscored* leaf (e.g. pruned by the rollout stage);
how the credit math treats it is described in :mod:`at2po_lib.method.credit`.

Containers:

- :class:`TreeArrays`: one tree as numpy arrays (N,); :func:`as_tree_arrays` also builds one
  from a mapping or object with the three fields, or a ``(parent, entropy, leaf_reward)``
  tuple; :func:`validate_tree` names what is wrong with one.
- :class:`Forest`: many trees as one flat set of torch tensors (global node ids, ``tree_index``
  per node, ``offsets`` per tree), so :mod:`at2po_lib.method.credit` can run the math of every
  tree at once, level by level over depth.

Structure helpers (vectorised, one step per tree level, no loop over nodes):
:func:`node_depths`, :func:`children_count`, :func:`leaf_paths`. Demo trees (a hand-made one,
random AT2PO-shaped ones, their token rows) are in :mod:`.examples`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch


# --------------------------------------------------------------------------------------------
# Tree containers
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TreeArrays:
    """One rollout tree as arrays over nodes (node 0 = root, ``parent[0] = -1``).

    The three credit arrays (module docstring) are all :mod:`at2po_lib.method.credit` reads. The
    rollout stage (:func:`at2po_lib.rollout.export.tree_arrays`) also fills:

    - ``prompt_id``: the prompt the tree grew from. Several trees may share one (Tree-GRPO
      grows ``rollout.tree_grpo_trees`` separate trees per prompt, docs/method.md §5);
    - ``node_arrays``: further numeric (N,) arrays by name (``entropy_nll``,
      ``entropy_exact``, ``turn_start``, ``turn_end``, ``expansion_round``, ``depth``, ...);
    - ``records``: one JSON-able dict per node with its text (``text``, ``action``,
      ``query``, ``answer``, ``finish_reason``) for tables and drawings, or empty;
    - ``info``: JSON-able facts about the tree (``question``, ``golden_answers``, ...).

    Arrays are compared by :meth:`equals` (``==`` on arrays is elementwise, so the dataclass
    does not define it).
    """

    parent: np.ndarray
    entropy: np.ndarray
    leaf_reward: np.ndarray
    prompt_id: int = 0
    node_arrays: Mapping[str, np.ndarray] = field(default_factory=dict)
    records: Sequence[Mapping[str, Any]] = ()
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(len(self.parent))

    @property
    def is_leaf(self) -> np.ndarray:
        """(N,) bool: childless nodes (every rollout leaf; the root only if it has no child)."""
        return np.bincount(self.parent[self.parent >= 0], minlength=self.num_nodes) == 0

    def equals(self, other: "TreeArrays") -> bool:
        """Same arrays (dtype and values, NaN equal to NaN), prompt id, records and info."""
        if not isinstance(other, TreeArrays) or self.prompt_id != other.prompt_id:
            return False
        if set(self.node_arrays) != set(other.node_arrays):
            return False
        pairs = [(getattr(self, f), getattr(other, f)) for f in CREDIT_FIELDS]
        pairs += [(self.node_arrays[k], other.node_arrays[k]) for k in self.node_arrays]
        same_arrays = all(
            a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
            for a, b in pairs
        )
        return (
            same_arrays
            and [dict(r) for r in self.records] == [dict(r) for r in other.records]
            and dict(self.info) == dict(other.info)
        )


CREDIT_FIELDS = ("parent", "entropy", "leaf_reward")
"""The arrays every tree carries (what the credit math reads)."""


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
    ``leaf_reward``, or a ``(parent, entropy, leaf_reward)`` tuple (then only those three
    arrays are kept)."""
    if isinstance(tree, TreeArrays):
        return tree
    if isinstance(tree, (tuple, list)) and len(tree) == 3:
        parent, entropy, leaf_reward = tree
    else:
        parent, entropy, leaf_reward = (_field(tree, k) for k in CREDIT_FIELDS)
    return TreeArrays(
        _to_numpy(parent).astype(np.int64),
        _to_numpy(entropy).astype(np.float64),
        _to_numpy(leaf_reward).astype(np.float64),
    )


def _to_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if torch.is_tensor(x) else np.asarray(x)


def validate_tree(t: TreeArrays, name: str) -> None:
    """Raise a ValueError starting with ``name`` if ``t`` is not a tree: array shapes, integer
    parent ids, node 0 the root, every parent an existing other node, no cycle."""
    n = t.num_nodes
    if n == 0:
        raise ValueError(f"{name}: empty tree")
    for field_name in ("parent", "entropy", "leaf_reward"):
        arr = getattr(t, field_name)
        if arr.shape != (n,):
            raise ValueError(f"{name}: {field_name} has shape {arr.shape}, expected ({n},)")
    for key, arr in t.node_arrays.items():
        if np.shape(arr) != (n,):
            raise ValueError(
                f"{name}: node array {key!r} has shape {np.shape(arr)}, expected ({n},)"
            )
    if len(t.records) not in (0, n):
        raise ValueError(f"{name}: {len(t.records)} node records for {n} nodes")
    if not np.issubdtype(np.asarray(t.parent).dtype, np.integer):
        raise ValueError(f"{name}: parent ids must be integers, got dtype {t.parent.dtype}")
    if t.parent[0] != -1:
        raise ValueError(f"{name}: parent[0] must be -1 (node 0 is the root), got {t.parent[0]}")
    rest = t.parent[1:]
    bad = np.flatnonzero((rest < 0) | (rest >= n) | (rest == np.arange(1, n)))
    if bad.size:
        i = int(bad[0]) + 1
        raise ValueError(f"{name}: node {i} has invalid parent {t.parent[i]} (tree has {n} nodes)")
    cyclic = _nodes_not_reaching_root(t.parent)
    if cyclic.size:
        raise ValueError(
            f"{name}: node {int(cyclic[0])} never reaches the root (a cycle of "
            f"parents; {cyclic.size} node(s) affected)"
        )


def _nodes_not_reaching_root(parent: np.ndarray) -> np.ndarray:
    """Nodes whose chain of parents never reaches node 0 (they sit on or under a cycle), by
    pointer doubling: O(n log n), no Python loop over nodes."""
    ancestor = np.asarray(parent, dtype=np.int64).copy()
    ancestor[0] = 0  # the root points to itself, so reaching it is a fixed point
    for _ in range(max(1, int(ancestor.size).bit_length()) + 1):
        ancestor = ancestor[ancestor]
    return np.flatnonzero(ancestor != 0)


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
        return Forest(
            *(
                getattr(self, f).to(device)
                for f in ("parent", "entropy", "leaf_reward", "tree_index", "offsets")
            )
        )

    @classmethod
    def from_trees(cls, trees: Sequence[Any], dtype: torch.dtype = torch.float32) -> "Forest":
        """Concatenate trees (anything :func:`as_tree_arrays` accepts); local ids become global."""
        arrays = [as_tree_arrays(t) for t in trees]
        if not arrays:
            raise ValueError("Forest.from_trees: no trees given")
        for i, t in enumerate(arrays):
            validate_tree(t, f"tree {i}")
        sizes = np.array([t.num_nodes for t in arrays], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        tree_index = np.repeat(np.arange(len(arrays)), sizes)
        local_parent = np.concatenate([t.parent for t in arrays])
        parent = np.where(local_parent >= 0, local_parent + offsets[tree_index], -1)
        return cls(
            parent=torch.as_tensor(parent, dtype=torch.long),
            entropy=torch.as_tensor(np.concatenate([t.entropy for t in arrays]), dtype=dtype),
            leaf_reward=torch.as_tensor(
                np.concatenate([t.leaf_reward for t in arrays]), dtype=dtype
            ),
            tree_index=torch.as_tensor(tree_index, dtype=torch.long),
            offsets=torch.as_tensor(offsets, dtype=torch.long),
        )


# --------------------------------------------------------------------------------------------
# Structure: depth, children, root→leaf paths
# --------------------------------------------------------------------------------------------
def node_depths(parent: Any) -> torch.Tensor:
    """Depth of every node (roots: 0) for global ``parent`` ids (N,) (a tensor, or an array
    converted to one), by repeated parent lookup (one vectorised step per tree level). Raises
    on a cycle."""
    parent = torch.as_tensor(
        np.asarray(parent) if not torch.is_tensor(parent) else parent, dtype=torch.long
    )
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
