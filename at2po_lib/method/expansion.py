r"""Entropy-guided expansion (AT2PO, docs/method.md §5): which nodes of a tree grow next.

After the root's M chains, each of L rounds scores every non-leaf node n (root included) and
picks the K best; each pick re-samples turn n from its context (a new child of n's parent; for
the root, of the root) and rolls it out to a leaf, so a tree ends with M + L·K leaves::

    score(n) = H(n) - alpha * b(n),   b(n) = |children(parent(n))| - 1   (root: |children(root)| - 1)

H(n) is the turn's entropy (its mean sampled-token NLL, the authors' code, or its mean exact
entropy, the paper's); b(n) counts n's siblings, so alpha = 0.05 (hard-coded in the authors'
code) steers the next pick away from where the tree already branched. The pick is a
deterministic top-K by score: ties keep breadth-first order (the authors' candidates are the
root then ``get_subtree_nodes``, a breadth-first walk, sorted by a stable sort), and with fewer
than K candidates the sorted list repeats from the best (authors' code: ``[a, b, c]`` for K = 5
gives ``[a, b, c, a, b]``).

The authors' own ablation mode (``expansion_mode=random``, Table 2's steps 1-2:
``rollout.expansion = "random_siblings"``) keeps AT2PO's tree and draws the K picks uniformly
*without replacement* among the non-leaf nodes (:func:`select_random_siblings`). Tree-GRPO's
random expansion (the Table 1 baseline) picks n nodes uniformly, *with replacement*
(:func:`select_random`), and continues after them in separate trees.

Everything here is arrays in, node ids out; growing the trees (batched turns, KV reuse, leaf
equalising) is the engine's, :mod:`at2po_lib.rollout.trees`.
"""

from __future__ import annotations

import numpy as np


def sibling_counts(parent: np.ndarray) -> np.ndarray:
    """b(n) for every node: children of n's parent minus 1; for the root its own children - 1.

    parent (N,) int with parent[root] = -1 -> (N,) int. Negative values (an only child with
    no siblings is 0; a childless root gives -1) are clipped at 0, as the authors' max(0, .).
    """
    parent = np.asarray(parent)
    children = np.bincount(parent[parent >= 0], minlength=len(parent))
    anchor = np.where(parent >= 0, parent, np.arange(len(parent)))
    return np.maximum(children[anchor] - 1, 0)


def expansion_scores(entropy: np.ndarray, parent: np.ndarray, alpha: float) -> np.ndarray:
    """score(n) = H(n) - alpha * b(n) for every node; (N,) -> (N,)."""
    return np.asarray(entropy, dtype=np.float64) - alpha * sibling_counts(parent)


def breadth_first(parent: np.ndarray) -> np.ndarray:
    """Node ids in breadth-first order from the root (children in creation order): the
    authors' candidate order (root, then ``get_subtree_nodes``). (N,) -> (N,). With several
    roots (a forest) the walk starts from all of them; within a tree the order is the same."""
    parent = np.asarray(parent)
    children: dict[int, list[int]] = {}
    for node, p in enumerate(parent.tolist()):
        if p >= 0:
            children.setdefault(p, []).append(node)
    order, queue = [], [int(r) for r in np.flatnonzero(parent < 0)]
    while queue:
        node = queue.pop(0)
        order.append(node)
        queue.extend(children.get(node, []))
    return np.array(order, dtype=np.int64)


def candidates_in_order(parent: np.ndarray, is_leaf: np.ndarray) -> np.ndarray:
    """The non-leaf nodes (root included) in breadth-first order."""
    order = breadth_first(parent)
    return order[~np.asarray(is_leaf, dtype=bool)[order]]


def top_k_cycled(scores: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """The K best candidates by score (stable: ties keep candidate order); if fewer than K
    candidates, the sorted list repeats from the best."""
    candidates = np.asarray(candidates)
    if candidates.size == 0 or k <= 0:
        return candidates[:0]
    ranked = candidates[np.argsort(-np.asarray(scores)[candidates], kind="stable")]
    return np.resize(ranked, k)  # np.resize cycles through the array


def select_entropy(
    entropy: np.ndarray, parent: np.ndarray, is_leaf: np.ndarray, k: int, alpha: float
) -> np.ndarray:
    """AT2PO's pick: top-K non-leaf nodes by H(n) - alpha * b(n), ties in breadth-first order."""
    candidates = candidates_in_order(parent, is_leaf)
    return top_k_cycled(expansion_scores(entropy, parent, alpha), candidates, k)


def select_random_siblings(
    parent: np.ndarray, is_leaf: np.ndarray, k: int, rng: np.random.Generator
) -> np.ndarray:
    """The authors' ``expansion_mode=random`` pick: K distinct non-leaf nodes (root included)
    drawn uniformly without replacement; with replacement when fewer than K exist."""
    candidates = candidates_in_order(parent, is_leaf)
    if candidates.size == 0 or k <= 0:
        return candidates[:0]
    return rng.choice(candidates, size=k, replace=candidates.size < k)


def select_random(is_leaf: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Tree-GRPO's pick in one tree: n nodes uniformly *with replacement* among the non-leaf
    nodes, the root included (its ``random.choices`` over the root and the subtree's non-leaf
    nodes). (N,) bool -> (n,) node ids."""
    candidates = np.flatnonzero(~np.asarray(is_leaf, dtype=bool))
    if candidates.size == 0 or n <= 0:
        return candidates[:0]
    return rng.choice(candidates, size=n, replace=True)
