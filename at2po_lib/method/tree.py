r"""Tree arrays, batches of trees and tree files: the one tree type every stage shares.

One rollout tree is a :class:`TreeArrays`: arrays over its nodes (node 0 is the root). The
rollout stage makes them (:func:`at2po_lib.rollout.export.tree_arrays`, the one place where
its growing ``RolloutTree`` becomes arrays), the trainer's :class:`~at2po_lib.trainer.batch.
RolloutBatch` holds them, :mod:`at2po_lib.method.credit` computes on them,
:mod:`at2po_lib.reporting.tree_drawings` draws them, and :func:`save_trees` /
:func:`load_trees` store them. The credit math reads::

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
  tuple.
- :class:`Forest`: many trees as one flat set of torch tensors (global node ids, ``tree_index``
  per node, ``offsets`` per tree), so :mod:`at2po_lib.method.credit` can run the math of every
  tree at once, level by level over depth.

Files (:func:`save_trees`, :func:`load_trees`): one ``.npz`` archive, numbers as arrays and
text/metadata as a JSON document inside it, read with ``np.load(allow_pickle=False)``: a trees
file can never run code. Old ``trees.pkl`` pickles load only with ``trust_pickle=True``.

Structure helpers (vectorised, one step per tree level, no loop over nodes):
:func:`node_depths`, :func:`children_count`, :func:`leaf_paths`.

Demo helpers (notebooks, tests, benchmarks): :func:`synthetic_turn_rows` (the token layout of
every root→leaf row), :func:`example_tree` (a hand-made tree), :func:`random_tree` (an
AT2PO-shaped random tree).
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
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
        same_arrays = all(a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
                          for a, b in pairs)
        return (same_arrays and [dict(r) for r in self.records] == [dict(r) for r in other.records]
                and dict(self.info) == dict(other.info))


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
    for key, arr in t.node_arrays.items():
        if np.shape(arr) != (n,):
            raise ValueError(f"{name}: node array {key!r} has shape {np.shape(arr)}, expected ({n},)")
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
        raise ValueError(f"{name}: node {int(cyclic[0])} never reaches the root (a cycle of "
                         f"parents; {cyclic.size} node(s) affected)")


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


# --------------------------------------------------------------------------------------------
# Files: one .npz archive per batch of trees (no pickle)
# --------------------------------------------------------------------------------------------
TREES_FORMAT = "at2po-trees/2"
"""Format tag of :func:`save_trees` archives."""

_JSON_MEMBER = "json"
_NODE_PREFIX = "node."


class UntrustedPickleError(ValueError):
    """A trees file is a pickle and the caller did not say it trusts it."""


def save_trees(trees: Sequence[Any], path: str | Path,
               meta: Mapping[str, Any] | None = None) -> Path:
    """Write trees to one ``.npz`` archive that :func:`load_trees` reads without pickle.

    Layout (T trees, N nodes in all; each tree's nodes are contiguous, ids stay local)::

        tree_offsets   (T+1,) int64  tree t owns rows tree_offsets[t]:tree_offsets[t+1]
        prompt_id      (T,)   int64
        parent, entropy, leaf_reward        (N,)  the credit arrays
        node.<name>                          (N,)  each of the trees' ``node_arrays``
        json           uint8  UTF-8 JSON: {"format", "meta", "node_arrays": [names],
                                            "trees": [{"info", "records"}]}

    Every tree must carry the same ``node_arrays`` names (numeric or bool arrays only: text
    belongs in ``records``). ``meta`` is JSON-able run information (profile, seed, ...). The
    archive is written to a temporary file and moved into place, so a crash never leaves half
    a file under ``path``.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"{path}: trees are saved as a .npz archive; give a path ending in .npz")
    arrays = [as_tree_arrays(t) for t in trees]
    if not arrays:
        raise ValueError(f"{path}: no trees to save")
    names = sorted(arrays[0].node_arrays)
    for i, t in enumerate(arrays):
        _validate_tree(t, f"tree {i}")
        if sorted(t.node_arrays) != names:
            raise ValueError(f"tree {i} has node arrays {sorted(t.node_arrays)}, tree 0 has "
                             f"{names}; every tree of one file must carry the same ones")
        for key, arr in t.node_arrays.items():
            if np.asarray(arr).dtype.kind not in "biuf":
                raise ValueError(f"tree {i}: node array {key!r} has dtype {np.asarray(arr).dtype};"
                                 " only numbers and booleans are stored as arrays (text goes in "
                                 "records)")
    sizes = np.array([t.num_nodes for t in arrays], dtype=np.int64)
    members: dict[str, np.ndarray] = {
        "tree_offsets": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        "prompt_id": np.array([int(t.prompt_id) for t in arrays], dtype=np.int64),
    }
    for name in CREDIT_FIELDS:
        members[name] = np.concatenate([getattr(t, name) for t in arrays])
    for name in names:
        members[_NODE_PREFIX + name] = np.concatenate([np.asarray(t.node_arrays[name])
                                                       for t in arrays])
    document = {"format": TREES_FORMAT, "meta": dict(meta or {}), "node_arrays": names,
                "trees": [{"info": dict(t.info), "records": [dict(r) for r in t.records]}
                          for t in arrays]}
    text = json.dumps(document, allow_nan=False, default=_json_default)
    members[_JSON_MEMBER] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **members)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _json_default(value: Any) -> Any:
    """JSON for the few non-JSON types run metadata holds (numpy scalars/arrays, paths)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} value {value!r:.80} is not JSON-serialisable "
                    "(tree info, records and meta must be JSON)")


def load_trees(path: str | Path, *, trust_pickle: bool = False) -> list[TreeArrays]:
    """Trees from a :func:`save_trees` archive (``.npz``, read with ``allow_pickle=False``).

    A legacy ``trees.pkl`` (pickle: a list of trees, or a dict with a ``"trees"`` list) is read
    only with ``trust_pickle=True``: unpickling runs whatever code the file names, so without
    the flag it raises :class:`UntrustedPickleError` naming the file and never unpickles it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trees file not found: {path}")
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK"):  # a zip archive: .npz
        return _trees_from_archive(path, *_read_archive(path))
    if head.startswith(b"\x80") or path.suffix in (".pkl", ".pickle"):
        if not trust_pickle:
            raise UntrustedPickleError(
                f"{path} is a pickle; loading a pickle can run arbitrary code, so it is refused. "
                "If you wrote this file yourself, pass trust_pickle=True, then re-save it with "
                "save_trees(trees, '....npz')")
        return _trees_from_pickle(path)
    raise ValueError(f"{path}: not a trees file (expected a .npz archive written by save_trees)")


def load_trees_meta(path: str | Path) -> dict[str, Any]:
    """The ``meta`` a :func:`save_trees` archive was written with (profile, seed, ...)."""
    document, _ = _read_archive(Path(path))
    return dict(document["meta"])


MAX_MEMBER_BYTES = 1 << 30
"""A trees archive member larger than this (1 GiB uncompressed) is refused before reading."""
MAX_MEMBER_RATIO = 100
"""...and so is a member above 16 MiB that compresses more than 100-fold (numeric arrays and
JSON text compress 2-10-fold; a 256 MiB member squeezed into 262 kB is a decompression bomb)."""


def _check_member_sizes(path: Path) -> None:
    """Refuse oversized or bomb-like members from the zip directory, before decompressing."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError) as err:
        raise ValueError(f"{path}: cannot read the trees archive ({err})") from err
    for info in infos:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > MAX_MEMBER_BYTES or (info.file_size > 16 << 20
                                                 and ratio > MAX_MEMBER_RATIO):
            raise ValueError(f"{path}: member {info.filename} holds {info.file_size:,} bytes "
                             f"({info.compress_size:,} compressed): refused unread (limits: "
                             f"{MAX_MEMBER_BYTES:,} bytes, {MAX_MEMBER_RATIO}-fold compression)")


def _read_archive(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not path.is_file():
        raise FileNotFoundError(f"trees file not found: {path}")
    _check_member_sizes(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            members = {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as err:
        raise ValueError(f"{path}: cannot read the trees archive ({err})") from err
    missing = [k for k in ("tree_offsets", "prompt_id", *CREDIT_FIELDS, _JSON_MEMBER)
               if k not in members]
    if missing:
        raise ValueError(f"{path}: not a trees archive (missing {', '.join(missing)})")
    try:
        document = json.loads(members.pop(_JSON_MEMBER).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"{path}: the archive's json member is not valid JSON "
                         f"({str(err)[:200]})") from None
    if not isinstance(document, dict) or document.get("format") != TREES_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: not an {TREES_FORMAT} archive (format {found!r})")
    return document, members


def _trees_from_archive(path: Path, document: dict[str, Any],
                        members: dict[str, np.ndarray]) -> list[TreeArrays]:
    offsets, entries = members["tree_offsets"], document.get("trees", [])
    total = len(members["parent"])
    if (offsets.ndim != 1 or len(offsets) != len(entries) + 1 or len(entries) == 0
            or offsets[0] != 0 or offsets[-1] != total or np.any(np.diff(offsets) < 1)
            or len(members["prompt_id"]) != len(entries)):
        raise ValueError(f"{path}: tree_offsets {offsets.tolist()[:8]} do not match "
                         f"{len(entries)} trees and {total} nodes")
    names = list(document.get("node_arrays", []))
    absent = [n for n in names if _NODE_PREFIX + n not in members]
    if absent:
        raise ValueError(f"{path}: node arrays {absent} listed but not stored")
    columns = {n: members[n] for n in CREDIT_FIELDS}
    columns.update({n: members[_NODE_PREFIX + n] for n in names})
    bad = [n for n, col in columns.items() if col.shape != (total,)]
    if bad:
        raise ValueError(f"{path}: arrays {bad} do not have one value per node ({total})")
    trees = []
    for t, entry in enumerate(entries):
        rows = slice(int(offsets[t]), int(offsets[t + 1]))
        tree = TreeArrays(
            parent=columns["parent"][rows], entropy=columns["entropy"][rows],
            leaf_reward=columns["leaf_reward"][rows], prompt_id=int(members["prompt_id"][t]),
            node_arrays={n: columns[n][rows] for n in names},
            records=list(entry.get("records", [])), info=dict(entry.get("info", {})))
        _validate_tree(tree, f"{path}: tree {t}")
        trees.append(tree)
    return trees


_LEGACY_NODE_ARRAYS = ("entropy_nll", "entropy_exact", "turn_start", "turn_end",
                       "expansion_round", "depth")
_RECORD_TEXT = ("text", "action", "query", "answer", "finish_reason")


def _trees_from_pickle(path: Path) -> list[TreeArrays]:
    """A trusted legacy pickle (``at2po-rollout-trees/1`` or a plain list of trees)."""
    with path.open("rb") as fh:
        data = pickle.load(fh)  # noqa: S301  (only reached with trust_pickle=True)
    trees = data["trees"] if isinstance(data, Mapping) and "trees" in data else data
    if not isinstance(trees, (list, tuple)) or not trees:
        raise ValueError(f"{path}: expected a non-empty list of trees, got {type(trees).__name__}")
    out = []
    for i, entry in enumerate(trees):
        arrays = as_tree_arrays(entry)
        if isinstance(entry, Mapping):  # the rollout stage's old export dicts carry more
            arrays = TreeArrays(
                arrays.parent, arrays.entropy, arrays.leaf_reward,
                prompt_id=int(entry.get("prompt_id", 0)),
                node_arrays={k: np.asarray(entry[k]) for k in _LEGACY_NODE_ARRAYS if k in entry},
                records=[{k: r.get(k) for k in _RECORD_TEXT} for r in entry.get("table", [])],
                info={k: entry[k] for k in ("question", "golden_answers") if k in entry})
        _validate_tree(arrays, f"{path}: tree {i}")
        out.append(arrays)
    return out
