r"""Turn-wise credit assignment (docs/method.md §6): leaf rewards -> node values -> advantages.

A rollout tree gives every leaf (a finished trajectory) a reward. AT2PO pushes those rewards up
the tree so that every *turn* (node) gets its own value, then turns values into advantages, and
every model token of a turn is trained with its node's advantage.

The trees come as arrays over nodes (``parent``, ``entropy``, ``leaf_reward``; node 0 is the
root) and are batched into a :class:`~at2po_lib.method.tree.Forest`. A tree is a
:class:`~at2po_lib.method.tree.TreeArrays` (the project's one tree type, :mod:`.tree`); the
functions below also take the three arrays directly.

A childless node whose reward is NaN is an *unscored* leaf (e.g. pruned by the rollout stage):
like the authors' code, which skips children without a value, it takes no part in its parent's
value, and a node whose whole subtree is unscored gets value NaN.

Batched path: a :class:`Forest` is the flat concatenation of many trees (global node ids,
``tree_index`` per node, ``offsets`` per tree). Training rows carry ``turn_node`` ids that are
*local* to the row's tree (``row_tree``); :func:`batch_token_advantages` turns them into a
(B, T) tensor of per-token advantages. All tree math runs level by level over depth (every
node of one depth at once, with ``index_add``/``scatter_reduce``); no Python loop over nodes.

Equations (docs/method.md §6; paper vs authors' code named where they differ):

1. Leaf value, normalised within the tree (population std, ddof 0)::

       V_l = (r_l - mean_tree(r)) / (std_tree(r) + 1e-6)

   When all scored leaves of a tree share one reward the centred values are set to exactly 0
   (``r - mean`` can be a few ulps off otherwise, and ``/ 1e-6`` would blow that up).
2. Internal node value from its (scored) children C(n)::

       entropy_softmax (code default): V_n = sum_c softmax_c(H_c) V_c
       entropy_linear  (paper text):   V_n = sum_c H_c / sum_c' H_c' V_c   (all H_c = 0: mean)
       child_mean:                     V_n = mean_c V_c
       leaf_mean:                      V_n = mean of all scored leaves below n

   A single child passes its value up unchanged in every mode.
3. Advantage per node::

       node_value (default): A_n = V_n
       diff_parent:          A_n = V_n - V_parent(n)
       diff_global:          A_n = V_n - V_root
       diff_localglobal:     A_n = (V_n - V_root) + (V_n - V_parent(n))

   The root has no tokens; like the authors' code it keeps A_root = V_root.
   ``vanilla`` (plain GRPO over a prompt's leaf rewards) and ``tree_grpo`` are per row, not per
   node: :data:`.outcome.OUTCOME_ADVANTAGES`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .outcome import group_equal
from .tree import Forest, children_count, node_depths

LEAF_NORM_EPS = 1e-6


# --------------------------------------------------------------------------------------------
# The registries: value modes (how children weigh) and advantage modes, by name
# --------------------------------------------------------------------------------------------
def _softmax_weights(h: torch.Tensor, up: torch.Tensor, n: int) -> torch.Tensor:
    """entropy_softmax: w_c = exp(H_c - max_siblings H), the softmax numerator shifted for
    stability. h (C,) children's entropies, up (C,) their parents, n nodes -> (C,)."""
    hmax = torch.full((n,), -float("inf"), dtype=h.dtype, device=h.device).scatter_reduce(
        0, up, h, reduce="amax", include_self=True
    )
    return torch.exp(h - hmax[up])


def _linear_weights(h: torch.Tensor, up: torch.Tensor, n: int) -> torch.Tensor:
    """entropy_linear: w_c = H_c; siblings whose entropies sum to 0 fall back to the plain mean."""
    total = torch.zeros(n, dtype=h.dtype, device=h.device).index_add_(0, up, h)
    return torch.where(total[up] > 0, h, torch.ones_like(h))


def _uniform_weights(h: torch.Tensor, up: torch.Tensor, n: int) -> torch.Tensor:
    """child_mean: w_c = 1."""
    return torch.ones_like(h)


SIBLING_WEIGHTS = {
    "entropy_softmax": _softmax_weights,
    "entropy_linear": _linear_weights,
    "child_mean": _uniform_weights,
}
"""Value mode → unnormalised child weights w_c (the caller divides by the per-parent sum)."""
VALUE_MODES = (*SIBLING_WEIGHTS, "leaf_mean")
"""Every value mode; ``leaf_mean`` averages the scored leaves below a node instead."""


def _node_value(v: torch.Tensor, v_parent: torch.Tensor, v_root: torch.Tensor) -> torch.Tensor:
    return v


def _diff_parent(v: torch.Tensor, v_parent: torch.Tensor, v_root: torch.Tensor) -> torch.Tensor:
    return v - v_parent


def _diff_global(v: torch.Tensor, v_parent: torch.Tensor, v_root: torch.Tensor) -> torch.Tensor:
    return v - v_root


def _diff_localglobal(
    v: torch.Tensor, v_parent: torch.Tensor, v_root: torch.Tensor
) -> torch.Tensor:
    return (v - v_parent) + (v - v_root)


NODE_ADVANTAGES = {
    "node_value": _node_value,
    "diff_parent": _diff_parent,
    "diff_global": _diff_global,
    "diff_localglobal": _diff_localglobal,
}
"""Advantage mode → A_n from (V_n, V_parent(n), V_root), each (N,)."""
ADVANTAGE_MODES = tuple(NODE_ADVANTAGES)


# --------------------------------------------------------------------------------------------
# Structure: levels (depth and children counts come from at2po_lib.method.tree)
# --------------------------------------------------------------------------------------------
def _levels(depth: torch.Tensor) -> list[torch.Tensor]:
    """Node ids grouped by depth: ``levels[d]`` holds every node at depth d."""
    order = torch.argsort(depth, stable=True)
    counts = torch.bincount(depth).tolist()
    return list(torch.split(order, counts))


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------
def _scored_leaves_per_tree(forest: Forest, scored: torch.Tensor) -> torch.Tensor:
    """Number of scored leaves per tree (num_trees,); raises if a tree has none."""
    per_tree = torch.bincount(forest.tree_index[scored], minlength=forest.num_trees)
    if bool((per_tree == 0).any()):
        t = int(torch.nonzero(per_tree == 0)[0])
        raise ValueError(f"tree {t} has no scored leaf (every leaf_reward is NaN)")
    return per_tree


def normalized_leaf_values(forest: Forest, is_leaf: torch.Tensor) -> torch.Tensor:
    """(N,) leaf values (r - mean_tree) / (std_tree + 1e-6), population std; NaN elsewhere."""
    scored = is_leaf & ~torch.isnan(forest.leaf_reward)
    per_tree_scored = _scored_leaves_per_tree(forest, scored)
    idx = torch.nonzero(scored).squeeze(1)
    r, tree = forest.leaf_reward[idx], forest.tree_index[idx]
    count = per_tree_scored.to(r.dtype)
    zeros = torch.zeros(forest.num_trees, dtype=r.dtype, device=r.device)
    mean = zeros.clone().index_add_(0, tree, r) / count
    centred = r - mean[tree]
    var = zeros.clone().index_add_(0, tree, centred**2) / count
    # All-equal rewards: force exact zeros (see module docstring).
    centred = torch.where(group_equal(r, tree, forest.num_trees), torch.zeros_like(r), centred)
    values = torch.full_like(forest.leaf_reward, float("nan"))
    values[idx] = centred / (var.sqrt()[tree] + LEAF_NORM_EPS)
    return values


def _node_name(forest: Forest, g: int) -> str:
    t = int(forest.tree_index[g])
    return f"tree {t}, node {g - int(forest.offsets[t])}"


def _check_rewards_and_entropies(forest: Forest, is_leaf: torch.Tensor, mode: str) -> None:
    """Only leaves carry rewards; entropy modes need finite (linear: non-negative) entropies."""
    internal_scored = ~is_leaf & ~torch.isnan(forest.leaf_reward)
    if bool(internal_scored.any()):
        g = int(torch.nonzero(internal_scored)[0])
        raise ValueError(
            f"{_node_name(forest, g)}: internal node has a leaf_reward "
            f"({float(forest.leaf_reward[g])}); only leaves may"
        )
    if not mode.startswith("entropy"):
        return
    not_root, h = forest.parent >= 0, forest.entropy
    bad = not_root & ~torch.isfinite(h)
    if mode == "entropy_linear":
        bad |= not_root & (h < 0)
    if bool(bad.any()):
        g = int(torch.nonzero(bad)[0])
        need = "finite, non-negative" if mode == "entropy_linear" else "finite"
        raise ValueError(
            f"{_node_name(forest, g)}: entropy {float(h[g])} is not usable by "
            f"{mode} ({need} needed)"
        )


def forest_node_values(
    forest: Forest, mode: str = "entropy_softmax", normalize_leaves: bool = True
) -> torch.Tensor:
    """Node values V (N,) for every tree of ``forest`` (equations in the module docstring).

    Bottom-up over depth levels: all children at depth d+1 push ``w_c * V_c`` and ``w_c`` into
    their parents with ``index_add`` at once (siblings share a depth, so the per-parent softmax
    or linear normalisation is complete within one level).
    """
    if mode not in VALUE_MODES:
        raise ValueError(f"unknown value mode {mode!r}; choose one of {VALUE_MODES}")
    parent, entropy, n = forest.parent, forest.entropy, forest.num_nodes
    is_leaf = children_count(parent) == 0
    _check_rewards_and_entropies(forest, is_leaf, mode)
    if normalize_leaves:
        values = normalized_leaf_values(forest, is_leaf)
    else:
        values = torch.where(is_leaf, forest.leaf_reward, torch.full_like(entropy, float("nan")))
        _scored_leaves_per_tree(forest, is_leaf & ~torch.isnan(values))
    has_value = is_leaf & ~torch.isnan(values)
    num = torch.zeros_like(values)  # sum_c w_c V_c (leaf_mean: sum of leaf values)
    den = torch.zeros_like(values)  # sum_c w_c      (leaf_mean: number of leaves)
    levels = _levels(node_depths(parent))
    for depth in range(len(levels) - 1, 0, -1):
        kids = levels[depth]
        kids = kids[has_value[kids]]
        if kids.numel() == 0:
            continue
        up = parent[kids]
        if mode == "leaf_mean":
            leaf = is_leaf[kids]
            contrib = torch.where(leaf, values[kids], num[kids])
            weight = torch.where(leaf, torch.ones_like(contrib), den[kids])
        else:
            weight = SIBLING_WEIGHTS[mode](entropy[kids], up, n)
            contrib = weight * values[kids]
        num.index_add_(0, up, contrib)
        den.index_add_(0, up, weight)
        parents = torch.unique(up)
        values[parents] = num[parents] / den[parents]
        has_value[parents] = True
    return values


def sibling_weights(parent: torch.Tensor, entropy: torch.Tensor, mode: str) -> torch.Tensor:
    """The normalised weight w_c / sum_siblings w_c' of every child (N,) under ``mode``'s
    weighting (NaN at roots): how an entropy value mode weighs a node among its siblings.
    parent (N,) int, entropy (N,) float."""
    kid = parent >= 0
    up = parent[kid]
    raw = SIBLING_WEIGHTS[mode](entropy[kid], up, parent.numel())
    total = torch.zeros(parent.numel(), dtype=raw.dtype, device=raw.device).index_add_(0, up, raw)
    weights = torch.full(parent.shape, float("nan"), dtype=raw.dtype, device=raw.device)
    weights[kid] = raw / total[up]
    return weights


def sibling_spread(
    parent: Any, entropy: Any, mode: str = "entropy_softmax"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How far ``mode``'s weights are from the plain child mean, per sibling set of >= 2.

    For every node p with n >= 2 children: the mean over its children of |w_c - 1/n|, the
    range max_c H_c - min_c H_c of their entropies, and n. The softmax is shift-invariant
    (softmax(H + c) = softmax(H)), so only the spread of the siblings' entropies can move
    entropy_softmax away from the child mean; for small ranges |w - 1/n| ~ range / (3n)
    (the dissection fits this). parent (N,) int, entropy (N,) float -> three (S,) arrays.
    """
    parent_t = torch.as_tensor(np.asarray(parent), dtype=torch.long)
    entropy_t = torch.as_tensor(np.asarray(entropy, dtype=np.float64))
    weights = sibling_weights(parent_t, entropy_t, mode).numpy()
    parent_np, h = parent_t.numpy(), entropy_t.numpy()
    kids = np.flatnonzero(parent_np >= 0)
    sets, inverse, counts = np.unique(parent_np[kids], return_inverse=True, return_counts=True)
    n = counts[inverse]  # (C,) siblings of each child
    dev = np.bincount(inverse, np.abs(weights[kids] - 1.0 / n), len(sets)) / counts
    hi = np.full(len(sets), -np.inf)
    lo = np.full(len(sets), np.inf)
    np.maximum.at(hi, inverse, h[kids])
    np.minimum.at(lo, inverse, h[kids])
    keep = counts >= 2
    return dev[keep], (hi - lo)[keep], counts[keep]


def forest_node_advantages(
    forest: Forest, values: torch.Tensor, mode: str = "node_value"
) -> torch.Tensor:
    """Node advantages A (N,) from values V (N,) (modes in the module docstring)."""
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"unknown advantage mode {mode!r}; choose one of {ADVANTAGE_MODES}")
    if values.shape != forest.parent.shape:
        raise ValueError(f"values has shape {tuple(values.shape)}, expected ({forest.num_nodes},)")
    if mode == "node_value":
        return values.clone()
    is_root = forest.parent < 0
    v_parent = torch.where(is_root, values, values[forest.parent.clamp(min=0)])
    v_root = values[forest.roots][forest.tree_index]
    adv = NODE_ADVANTAGES[mode](values, v_parent, v_root)
    return torch.where(is_root, values, adv)  # the root keeps A_root = V_root (authors' code)


def node_values(
    parent: Any,
    entropy: Any,
    leaf_reward: Any,
    mode: str = "entropy_softmax",
    normalize_leaves: bool = True,
) -> torch.Tensor:
    """Values V (N,) of one tree (arrays or tensors of shape (N,)); see the module docstring."""
    forest = Forest.from_trees([(parent, entropy, leaf_reward)], dtype=_float_dtype(leaf_reward))
    return forest_node_values(forest, mode=mode, normalize_leaves=normalize_leaves)


def node_advantages(parent: Any, values: Any, mode: str = "node_value") -> torch.Tensor:
    """Advantages A (N,) of one tree from its node values (N,); root = node 0."""
    values = torch.as_tensor(values)
    zeros = np.zeros(values.numel())
    forest = Forest.from_trees([(parent, zeros, zeros)], dtype=values.dtype)
    return forest_node_advantages(forest, values, mode=mode)


def _float_dtype(x: Any) -> torch.dtype:
    if torch.is_tensor(x) and x.is_floating_point():
        return x.dtype
    return torch.float64


# --------------------------------------------------------------------------------------------
# Batched: trees -> per-token advantages
# --------------------------------------------------------------------------------------------
def batch_token_advantages(
    forest: Forest,
    turn_node: torch.Tensor,
    row_tree: torch.Tensor,
    value_mode: str = "entropy_softmax",
    adv_mode: str = "node_value",
    normalize_leaves: bool = True,
) -> torch.Tensor:
    r"""Per-token advantages (B, T) for B training rows drawn from the trees of ``forest``.

    turn_node (B, T) int: the *local* node id (within the row's tree) of each model token,
    -1 for observation/prompt/padding tokens; row_tree (B,) int: which tree each row came from.
    Token t of row b gets ``A[offsets[row_tree[b]] + turn_node[b, t]]``, other tokens 0.
    (Advantages of whole rows, GRPO's and Tree-GRPO's, are :data:`.outcome.OUTCOME_ADVANTAGES`.)
    """
    out_device = torch.as_tensor(turn_node).device
    turn_node = torch.as_tensor(turn_node).to(forest.device)
    row_tree = torch.as_tensor(row_tree).to(forest.device)
    if turn_node.ndim != 2 or row_tree.shape != (turn_node.shape[0],):
        raise ValueError(
            f"turn_node must be (B, T) and row_tree (B,); got "
            f"{tuple(turn_node.shape)} and {tuple(row_tree.shape)}"
        )
    if bool(((row_tree < 0) | (row_tree >= forest.num_trees)).any()):
        b = int(torch.nonzero((row_tree < 0) | (row_tree >= forest.num_trees))[0])
        raise ValueError(
            f"row {b}: row_tree {int(row_tree[b])} is not a tree of the forest "
            f"({forest.num_trees} trees)"
        )
    size = (forest.offsets[1:] - forest.offsets[:-1])[row_tree]  # (B,)
    bad = (turn_node < -1) | (turn_node >= size[:, None])
    if bool(bad.any()):
        b, t = (int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(
            f"row {b}, token {t}: turn_node {int(turn_node[b, t])} is not a node of "
            f"tree {int(row_tree[b])} ({int(size[b])} nodes)"
        )
    is_model = turn_node >= 0
    global_node = turn_node.clamp(min=0) + forest.offsets[row_tree][:, None]  # (B, T)
    values = forest_node_values(forest, value_mode, normalize_leaves)
    adv = forest_node_advantages(forest, values, adv_mode)
    per_token = torch.where(is_model, adv[global_node], 0.0)
    if bool(torch.isnan(per_token).any()):
        b, t = (int(i) for i in torch.nonzero(torch.isnan(per_token))[0])
        raise ValueError(
            f"row {b}, token {t}: node {int(turn_node[b, t])} of tree "
            f"{int(row_tree[b])} has no scored leaf below it (advantage NaN)"
        )
    return per_token.to(out_device)
