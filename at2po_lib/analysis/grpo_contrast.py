r"""GRPO's per-node credit beside AT2PO's on the same tree, and by how much they differ.

GRPO gives every row (root→leaf path) its leaf's outcome advantage; a turn lies on every row
below it and is trained once per row, so its *effective* advantage is the mean over those rows
(as the inspector and :mod:`.credit_accuracy` read it). With the tree's N scored leaves as one
group (mean r̄, sample std s, population std σ),

    GRPO(n)   = mean_{ℓ under n} (r_ℓ − r̄) / (s + ε)
    leaf_mean(n) = mean_{ℓ under n} (r_ℓ − r̄) / (σ + ε)          (AT2PO's leaf_mean value)

so GRPO(n) · (s + ε)/(σ + ε) = leaf_mean(n) **exactly**: GRPO is AT2PO's ``leaf_mean`` value
times one constant per tree, √((N−1)/N) for ε → 0 (0.935 for N = 8). AT2PO's default
(``entropy_softmax`` values, ``node_value`` advantages) departs from it in two ways only:

- **weights part** = A(V_mode) − A(V_child_mean): the entropy weights' distance from the plain
  child mean. Softmax weights are shift-invariant, so only sibling entropy *differences* move
  them; at toy scale those are a tenth of a nat and the weights stay near 1/n.
- **shape part** = A(V_child_mean) − A(V_leaf_mean): the child mean weighs each child equally,
  the leaf mean each leaf; they differ only where a node's children hold unequal numbers of
  leaves. With one expansion round (L = 1) each re-sample adds one leaf beside the turn it
  re-samples, so that happens at the root (a chain re-sampled below its first turn holds two
  leaves, the others one), whose value ``node_value`` never uses but ``diff_parent`` (for the
  first turns) and ``diff_global`` subtract, and below the root only where two picks lie on
  one branch, the upper one below the first turn; more often with L ≥ 2
  (tests/analysis/test_grpo_contrast.py).
- **mode part** = A(V_leaf_mean) − V_leaf_mean: zero for ``node_value``; the advantage rule's
  own change for ``diff_parent`` and the others.

The advantage rules are linear in V, so residual = AT2PO − GRPO·(s + ε)/(σ + ε) = weights part
+ shape part + mode part, exactly (:func:`node_contrast`). :func:`contrast_summary` pools the
nodes of many trees (correlation, the largest residual and its parts, the trees without signal),
and :func:`contrast_sentence` says it in words, so a notebook never types a number in.

A softmax temperature τ (``temperature``) computes the what-if of sharper weights, softmax(H/τ),
as :mod:`.credit_accuracy` does; τ = 1 is the authors' code.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from ..method.credit import (
    ADVANTAGE_MODES,
    VALUE_MODES,
    node_advantages,
    node_values,
    sibling_weights,
)
from ..method.tree import TreeArrays

EPS = 1e-6
"""The ε of both normalisations (GRPO's and AT2PO's leaf values)."""
NEAR = 0.05
"""A largest difference below this (in units of a leaf's normalised value, ±1 for a 50/50 tree)
reads as "they nearly coincide"."""
COLUMNS = [
    "grpo",
    "scale",
    "grpo_scaled",
    "at2po",
    "residual",
    "weights_part",
    "shape_part",
    "mode_part",
]


def _check(value_mode: str, adv_mode: str, temperature: float) -> None:
    if value_mode not in VALUE_MODES:
        raise ValueError(f"value_mode {value_mode!r}; choose one of {VALUE_MODES}")
    if adv_mode not in ADVANTAGE_MODES:
        raise ValueError(f"adv_mode {adv_mode!r}; choose one of {ADVANTAGE_MODES}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def scored_leaves(tree: TreeArrays) -> np.ndarray:
    """Ids of the tree's leaves that carry a reward."""
    return np.flatnonzero(tree.is_leaf & np.isfinite(tree.leaf_reward))


def has_signal(tree: TreeArrays) -> bool:
    """Do the scored leaves differ in reward? (Otherwise every advantage of every rule is 0.)"""
    r = tree.leaf_reward[scored_leaves(tree)]
    return r.size >= 2 and bool(r.max() > r.min())


def grpo_node_advantages(tree: TreeArrays, eps: float = EPS) -> np.ndarray:
    """(N,) GRPO's effective advantage of every node: the mean over the rows through it of
    (r_ℓ − r̄)/(s + ε), the tree's scored leaves as one group, s their sample std (ddof 1, as
    verl and TRL); NaN for the root and for nodes with no scored leaf below."""
    leaves = scored_leaves(tree)
    if leaves.size == 0:
        raise ValueError("the tree has no scored leaf: GRPO has no group")
    r = tree.leaf_reward[leaves].astype(float)
    s = float(r.std(ddof=1)) if r.size > 1 else 1.0  # a group of one keeps its reward (verl)
    mean = float(r.mean()) if r.size > 1 else 0.0
    per_row = (r - mean) / (s + eps)
    total = np.zeros(tree.num_nodes)
    count = np.zeros(tree.num_nodes)
    for leaf, adv in zip(leaves, per_row):  # walk each row up to the root
        node = int(leaf)
        while node > 0:
            total[node] += adv
            count[node] += 1
            node = int(tree.parent[node])
    out = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    out[0] = np.nan
    return out


def grpo_scale(tree: TreeArrays, eps: float = EPS) -> float:
    """(s + ε)/(σ + ε): GRPO's per-node mean times this is AT2PO's leaf_mean value (module
    docstring); √(N/(N−1)) for ε → 0, 1 when the tree has no signal."""
    r = tree.leaf_reward[scored_leaves(tree)].astype(float)
    if r.size < 2:
        return 1.0
    return float((r.std(ddof=1) + eps) / (r.std(ddof=0) + eps))


def _advantages(
    tree: TreeArrays, entropy: np.ndarray, value_mode: str, adv_mode: str
) -> np.ndarray:
    values = node_values(tree.parent, entropy, tree.leaf_reward, mode=value_mode)
    return node_advantages(tree.parent, values.double(), mode=adv_mode).numpy()


def node_contrast(
    tree: TreeArrays,
    value_mode: str = "entropy_softmax",
    adv_mode: str = "node_value",
    temperature: float = 1.0,
) -> pd.DataFrame:
    """One row per non-root node: ``grpo`` (:func:`grpo_node_advantages`), ``scale`` and
    ``grpo_scaled`` = grpo · scale, ``at2po`` (the node's advantage under ``value_mode`` /
    ``adv_mode``, entropies divided by ``temperature``), ``residual`` = at2po − grpo_scaled and
    its exact parts ``weights_part``, ``shape_part``, ``mode_part`` (module docstring)."""
    _check(value_mode, adv_mode, temperature)
    entropy = np.asarray(tree.entropy, dtype=float) / temperature
    at2po = _advantages(tree, entropy, value_mode, adv_mode)
    child = _advantages(tree, entropy, "child_mean", adv_mode)
    leaf_adv = _advantages(tree, entropy, "leaf_mean", adv_mode)
    leaf_value = node_values(tree.parent, entropy, tree.leaf_reward, mode="leaf_mean").numpy()
    grpo = grpo_node_advantages(tree)
    scale = grpo_scale(tree)
    frame = pd.DataFrame(
        {
            "grpo": grpo,
            "scale": scale,
            "grpo_scaled": grpo * scale,
            "at2po": at2po,
            "residual": at2po - grpo * scale,
            "weights_part": at2po - child,
            "shape_part": child - leaf_adv,
            "mode_part": leaf_adv - leaf_value,
        }
    )
    frame.index.name = "node"
    return frame.iloc[1:]


def sibling_weight_table(
    tree: TreeArrays, node: int, value_mode: str = "entropy_softmax", temperature: float = 1.0
) -> pd.DataFrame:
    """The siblings of ``node`` (its parent's children, ``node`` included): their entropies,
    their weights under ``value_mode`` and the plain child mean 1/n."""
    if not 0 < node < tree.num_nodes:
        raise ValueError(
            f"node {node}: choose a non-root node of this tree (1..{tree.num_nodes - 1})"
        )
    _check(value_mode, "node_value", temperature)
    entropy = torch.as_tensor(np.asarray(tree.entropy, dtype=float) / temperature)
    weights = sibling_weights(torch.as_tensor(np.asarray(tree.parent)), entropy, value_mode).numpy()
    kids = np.flatnonzero(tree.parent == tree.parent[node])
    frame = pd.DataFrame(
        {"entropy": tree.entropy[kids], "weight": weights[kids], "child_mean": 1.0 / len(kids)},
        index=pd.Index(kids, name="node"),
    )
    return frame


def contrast_summary(
    trees: Sequence[TreeArrays],
    value_mode: str = "entropy_softmax",
    adv_mode: str = "node_value",
    temperature: float = 1.0,
) -> dict:
    """The nodes of every tree with signal pooled: ``trees``, ``signal_trees``, ``nodes``,
    ``correlation`` (Pearson, GRPO vs AT2PO), ``max_residual`` (largest |residual|) with its
    ``tree``, ``node`` and the largest |part| of each kind, ``scales`` (min, max of the trees'
    constants), ``rounds`` (the most expansion rounds of any tree; None without expansion
    records) and ``max_weight_gap``
    (largest |w − 1/n| over the sibling sets of the trees with signal)."""
    parts = []
    gaps = [0.0]
    rounds = None  # trees without expansion records (hand-made, random) say nothing of L
    for index, tree in enumerate(trees):
        r = tree.node_arrays.get("expansion_round")
        if r is not None and len(r):
            rounds = max(rounds or 0, int(np.max(r)))
        if not has_signal(tree):
            continue
        parts.append(
            node_contrast(tree, value_mode, adv_mode, temperature).assign(tree=index).reset_index()
        )
        table = sibling_weights(
            torch.as_tensor(np.asarray(tree.parent)),
            torch.as_tensor(np.asarray(tree.entropy, float) / temperature),
            value_mode,
        ).numpy()
        kids = np.flatnonzero(tree.parent >= 0)
        n = np.bincount(tree.parent[kids], minlength=tree.num_nodes)[tree.parent[kids]]
        gaps += list(np.abs(table[kids] - 1.0 / n)[n >= 2])
    out = {
        "trees": len(trees),
        "signal_trees": len(parts),
        "value_mode": value_mode,
        "adv_mode": adv_mode,
        "temperature": temperature,
        "rounds": rounds,
        "max_weight_gap": float(max(gaps)),
    }
    if not parts:
        return {
            **out,
            "nodes": 0,
            "correlation": float("nan"),
            "max_residual": 0.0,
            "tree": -1,
            "node": -1,
            "max_weights_part": 0.0,
            "max_shape_part": 0.0,
            "max_mode_part": 0.0,
            "scales": (float("nan"), float("nan")),
        }
    nodes = pd.concat(parts, ignore_index=True).dropna(subset=["grpo", "at2po"])
    worst = nodes.loc[nodes["residual"].abs().idxmax()]
    both_vary = nodes["grpo"].std() > 0 and nodes["at2po"].std() > 0
    return {
        **out,
        "nodes": len(nodes),
        "correlation": float(np.corrcoef(nodes["grpo"], nodes["at2po"])[0, 1])
        if both_vary
        else float("nan"),
        "max_residual": float(abs(worst["residual"])),
        "tree": int(worst["tree"]),
        "node": int(worst["node"]),
        "max_weights_part": float(nodes["weights_part"].abs().max()),
        "max_shape_part": float(nodes["shape_part"].abs().max()),
        "max_mode_part": float(nodes["mode_part"].abs().max()),
        "scales": (float(nodes["scale"].min()), float(nodes["scale"].max())),
    }


def contrast_sentence(summary: dict) -> str:
    """:func:`contrast_summary` in words: when AT2PO's credit and GRPO's coincide and by how
    much they differ (below :data:`NEAR`: "nearly coincide")."""
    s = summary
    mode = f"{s['value_mode']}/{s['adv_mode']}" + (
        f", τ = {s['temperature']:g}" if s["temperature"] != 1 else ""
    )
    head = f"{s['signal_trees']} of {s['trees']} trees carry a signal"
    if s["signal_trees"] < s["trees"]:
        head += " (the others' leaves all share one reward: every advantage of every rule is 0)"
    if not s["nodes"]:
        return head + "; there is nothing to compare."
    lo, hi = s["scales"]
    scale = f"{lo:.3f}" if abs(hi - lo) < 5e-4 else f"{lo:.3f}–{hi:.3f}"
    rounds = (
        ""
        if s["rounds"] is None
        else f"; the trees grew in {s['rounds']} expansion round(s) (L = {s['rounds']})"
    )
    verdict = (
        "they nearly coincide: AT2PO's turn credit here is GRPO's per-node credit rescaled"
        if s["max_residual"] < NEAR
        else "they differ"
    )
    return (
        f"{head}. Over their {s['nodes']} turns, AT2PO's advantage ({mode}) against GRPO's "
        f"per-node mean: correlation {s['correlation']:.3f}; after GRPO is multiplied by its "
        f"tree's constant (s + ε)/(σ + ε) = {scale}, the largest difference is "
        f"{s['max_residual']:.3f} (tree {s['tree']}, node {s['node']}): {verdict}. The "
        f"difference's parts at most: entropy weights {s['max_weights_part']:.3f} (the "
        f"weights sit within {s['max_weight_gap']:.3f} of 1/n), unequal subtrees "
        f"{s['max_shape_part']:.3f}, the advantage rule {s['max_mode_part']:.3f}{rounds}."
    )
