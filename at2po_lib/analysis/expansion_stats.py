r"""Where entropy-guided expansion branches at toy scale (docs/method.md §5).

AT2PO's expansion round scores every non-leaf node n (root included) by

.. math::  \mathrm{score}(n) = H(n) - \alpha\, b(n),

b(n) = siblings of n (children of n's parent minus one; the root: its children minus one), and
re-samples the K best (:func:`at2po_lib.method.expansion.select_entropy`). After the M initial
chains of round 1, every first turn (depth 1) and the root have b = M − 1 and every deeper
node b = 0; so with a penalty α·(M − 1) larger than the spread of turn entropies, the round
can only ever pick the deepest turns, whatever their entropy. This module measures that on
real trees of the warm start:

- :func:`expansion_counts`: round-1 picks for any α, for every tree at once (vectorised; equal
  to ``select_entropy`` tree by tree, ties in breadth-first order, cycling when fewer than K candidates);
- :func:`selection_stats`: depth of the picked nodes, share of picks that are the last search
  turn of their chain, and the Spearman correlation of being picked with entropy and with
  depth, among the candidates;
- :func:`entropy_distribution`: turn entropies by estimator (``entropy_nll``, the authors'
  sampled-token NLL; ``entropy_exact``, the paper's −Σ p log p; both recorded by the HF
  backend), by turn kind and depth.

The trees are M independent chains per prompt (``expansion="chain"``, M = ``rollout.tree_m``):
exactly the tree entropy-guided expansion scores in round 1, so one rollout serves every α and
both estimators. With L > 1, later rounds also see round-1 branches: only round 1 is measured.

Command: ``at2po expansion-stats --profile tiny --prompts 300 --seed 0``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from ..config.profile import load_profile
from ..method.credit import forest_node_values, sibling_weights
from ..method.expansion import breadth_first, expansion_scores, sibling_counts
from ..method.tree import Forest, TreeArrays, children_count, node_depths
from ..util.paths import recorded_path, results_dir
from ..util.provenance import run_metadata, write_csv_tables
from .study_trees import cached_trees, policy_folder, study_rows

ESTIMATORS = {"sampled_nll": "entropy_nll", "exact": "entropy_exact"}
"""rollout.entropy_estimate → the node array holding it (docs/method.md §5)."""
DEFAULT_ALPHAS = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.15)
LOW_ENTROPY = 0.01
"""A turn below this entropy (nats per token) is near-deterministic."""


@dataclass(frozen=True)
class NodeTable:
    """Every node of many trees as flat arrays (global ids; ``tree`` = tree position)."""

    tree: np.ndarray  # (N,) int
    parent: np.ndarray  # (N,) int, global, -1 at roots
    depth: np.ndarray  # (N,) int
    is_leaf: np.ndarray  # (N,) bool
    siblings: np.ndarray  # (N,) int, b(n)
    action: np.ndarray  # (N,) str: root / search / answer / None
    entropy: dict[str, np.ndarray]  # estimator → (N,) float (root 0)

    @property
    def is_candidate(self) -> np.ndarray:
        """Nodes an expansion round may pick: every non-leaf node, the root included."""
        return ~self.is_leaf

    @property
    def is_last_search(self) -> np.ndarray:
        """Non-root candidates whose children are all leaves: the last turn of a chain before
        its final one (with the tiny template, the last search before the answer)."""
        inner = ~self.is_leaf & (self.parent >= 0)
        has_inner_child = np.bincount(self.parent[inner], minlength=len(self.parent)) > 0
        return inner & ~has_inner_child


def node_table(trees: Sequence[TreeArrays]) -> NodeTable:
    """Flatten trees that carry ``entropy_nll`` / ``entropy_exact`` and node records."""
    forest = Forest.from_trees(trees)
    parent = forest.parent.numpy()
    entropy = {}
    for estimator, key in ESTIMATORS.items():
        missing = [i for i, t in enumerate(trees) if key not in t.node_arrays]
        if missing:
            raise ValueError(
                f"tree {missing[0]} has no node array {key!r} (trees from "
                "at2po_lib.rollout.export.tree_arrays carry it)"
            )
        h = np.concatenate([np.asarray(t.node_arrays[key], dtype=np.float64) for t in trees])
        entropy[estimator] = np.where(parent >= 0, h, 0.0)
    action = np.array(
        [
            (r.get("action") if r else None) or "none"
            for t in trees
            for r in (t.records or [{}] * t.num_nodes)
        ],
        dtype=object,
    )
    return NodeTable(
        tree=forest.tree_index.numpy(),
        parent=parent,
        depth=node_depths(forest.parent).numpy(),
        is_leaf=(children_count(forest.parent) == 0).numpy(),
        siblings=sibling_counts(parent),
        action=action,
        entropy=entropy,
    )


def expansion_counts(nodes: NodeTable, estimator: str, alpha: float, k: int) -> np.ndarray:
    """How often each node is picked (N,) int by one round of entropy-guided expansion.

    Per tree: candidates ranked by score H − α·b (descending, ties in breadth-first order, as
    ``select_entropy`` and the authors' code); the K picks are the ranked list cycled from the
    best, so with c candidates the candidate of rank r < K is picked ⌊(K − 1 − r) / c⌋ + 1 times.
    """
    score = expansion_scores(nodes.entropy[estimator], nodes.parent, alpha)
    bfs_rank = np.empty(len(nodes.parent), dtype=np.int64)
    bfs_rank[breadth_first(nodes.parent)] = np.arange(len(nodes.parent))
    cand = np.flatnonzero(nodes.is_candidate)
    order = cand[np.lexsort((bfs_rank[cand], -score[cand], nodes.tree[cand]))]  # tree, -score, bfs
    tree_of = nodes.tree[order]
    first = np.searchsorted(tree_of, tree_of, side="left")
    rank = np.arange(order.size) - first
    per_tree = np.bincount(tree_of, minlength=int(nodes.tree.max()) + 1)[tree_of]
    picks = np.where(rank < k, (k - 1 - rank) // np.maximum(per_tree, 1) + 1, 0)
    counts = np.zeros(len(nodes.tree), dtype=np.int64)
    counts[order] = picks
    return counts


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def selection_stats(
    nodes: NodeTable, estimator: str, alpha: float, k: int, reference: np.ndarray | None = None
) -> dict[str, float]:
    """Where one round's picks land (module docstring). ``reference``: picks of another
    setting (e.g. α = 0, pure entropy) to report the overlap with."""
    counts = expansion_counts(nodes, estimator, alpha, k)
    picked = counts > 0
    total = counts.sum()
    non_root = nodes.is_candidate & (nodes.parent >= 0)
    d = nodes.depth

    def share(mask: np.ndarray) -> float:
        return float(counts[mask].sum() / total)

    stats = {
        "estimator": estimator,
        "alpha": alpha,
        "k": k,
        "n_trees": int(nodes.tree.max()) + 1,
        "candidates_per_tree": float(nodes.is_candidate.sum() / (nodes.tree.max() + 1)),
        "distinct_picks_per_tree": float(picked.sum() / (nodes.tree.max() + 1)),
        "share_root": share(d == 0),
        "share_depth1": share(d == 1),
        "share_depth2": share(d == 2),
        "share_depth3plus": share(d >= 3),
        "share_last_search": share(nodes.is_last_search),
        "candidate_share_last_search": float(nodes.is_last_search.sum() / non_root.sum()),
        "mean_pick_depth": float((counts * d).sum() / total),
        "mean_candidate_depth": float(d[non_root].mean()),
        "mean_pick_entropy": float((counts * nodes.entropy[estimator]).sum() / total),
        "mean_candidate_entropy": float(nodes.entropy[estimator][non_root].mean()),
        # Re-sampling a near-deterministic turn mostly reproduces it: a wasted expansion.
        "share_picks_entropy_below_0.01": share(nodes.entropy[estimator] < LOW_ENTROPY),
        "candidate_share_entropy_below_0.01": float(
            (nodes.entropy[estimator][non_root] < LOW_ENTROPY).mean()
        ),
        "spearman_entropy": _spearman(nodes.entropy[estimator][non_root], picked[non_root]),
        "spearman_depth": _spearman(d[non_root].astype(float), picked[non_root]),
    }
    if reference is not None:
        stats["overlap_with_entropy_topk"] = float((picked & (reference > 0)).sum() / picked.sum())
    return stats


def selection_table(
    nodes: NodeTable, alphas: Sequence[float], k: int, estimators: Sequence[str] = tuple(ESTIMATORS)
):
    """One row of :func:`selection_stats` per (estimator, α); overlap measured against the
    same estimator's α = 0 picks (entropy alone)."""
    rows = []
    for estimator in estimators:
        pure = expansion_counts(nodes, estimator, 0.0, k)
        rows += [selection_stats(nodes, estimator, a, k, reference=pure) for a in alphas]
    return pd.DataFrame(rows)


def entropy_distribution(nodes: NodeTable, estimators: Sequence[str] = tuple(ESTIMATORS)):
    """Turn entropies (non-root nodes) per estimator and turn group: count, mean, std,
    quantiles, and the within-tree spread of candidate entropies (std over a tree's non-root
    candidates, averaged over trees: what α·b competes with)."""
    non_root = nodes.parent >= 0
    groups = {
        "all turns": non_root,
        "search turns": non_root & (nodes.action == "search"),
        "answer turns": non_root & (nodes.action == "answer"),
        "candidates (non-root, non-leaf)": non_root & nodes.is_candidate,
        "depth 1": nodes.depth == 1,
        "depth 2": nodes.depth == 2,
        "depth 3+": nodes.depth >= 3,
    }
    rows = []
    for estimator in estimators:
        h = nodes.entropy[estimator]
        for name, mask in groups.items():
            x = h[mask]
            if x.size == 0:
                continue
            q = np.quantile(x, [0.05, 0.25, 0.5, 0.75, 0.95])
            rows.append(
                {
                    "estimator": estimator,
                    "turns": name,
                    "n": int(x.size),
                    "mean": float(x.mean()),
                    "std": float(x.std()),
                    "q05": q[0],
                    "q25": q[1],
                    "median": q[2],
                    "q75": q[3],
                    "q95": q[4],
                    "share_below_0.01": float((x < 0.01).mean()),
                }
            )
        cand = non_root & nodes.is_candidate
        tree = nodes.tree[cand]
        n = np.bincount(tree).astype(float)
        s1, s2 = np.bincount(tree, h[cand]), np.bincount(tree, h[cand] ** 2)
        ok = n >= 2
        spread = np.sqrt(np.maximum(s2[ok] / n[ok] - (s1[ok] / n[ok]) ** 2, 0))
        rows.append(
            {
                "estimator": estimator,
                "turns": "within-tree std of candidates",
                "n": int(ok.sum()),
                "mean": float(spread.mean()),
                "std": float(spread.std()),
                "median": float(np.median(spread)),
            }
        )
    return pd.DataFrame(rows)


def run_expansion_study(
    profile: str = "tiny",
    num_prompts: int = 300,
    seed: int = 0,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    datasets: Sequence[str] | None = None,
    policy: str | None = None,
    overrides: dict | None = None,
    trees_file: str | None = None,
    command: str = "",
) -> dict[str, object]:
    """Grow M chains per prompt with the warm start, measure selection for every α and both
    estimators, write ``results/<profile>/expansion_stats.csv`` and ``turn_entropy.csv``
    (each with its ``.meta.json``). Returns the two tables and the paths.

    ``trees_file`` (a scratch ``.npz``): read the trees from it when it exists, else save the
    grown trees there (to re-analyse without rolling out again; never commit it)."""
    cfg = load_profile(profile, overrides or None)
    datasets = list(datasets or cfg.train.train_datasets)
    folder = policy_folder(cfg.name, policy)
    rows = study_rows(cfg.name, datasets, num_prompts, seed)
    trees = cached_trees(
        trees_file, cfg, rows, "chain", seed, folder, num_chains=cfg.rollout.tree_m
    )
    nodes = node_table(trees)
    selection = selection_table(nodes, alphas, cfg.rollout.tree_k)
    entropy = entropy_distribution(nodes)
    out = results_dir(cfg.name)
    meta = run_metadata(
        cfg.name,
        seed,
        config=cfg.rollout,
        command=command,
        policy=recorded_path(folder),
        datasets=datasets,
        prompts=num_prompts,
        trees="chains: rollout.tree_m per prompt (round-1 state of the "
        "entropy-guided tree); rebuild with the command",
    )
    paths = write_csv_tables(
        out, {"expansion_stats.csv": selection, "turn_entropy.csv": entropy}, meta
    )
    return {"selection": selection, "entropy": entropy, "paths": paths}


# --------------------------------------------------------------------------------------------
# The credit's entropy weights (docs/method.md §6)
# --------------------------------------------------------------------------------------------
def credit_weight_stats(trees: Sequence[TreeArrays]):
    """How far the entropy weights of the credit are from uniform on real trees, per entropy
    estimator and weighting: over every node with >= 2 children (a branching point),
    mean |w − 1/n|, mean n·max w (1 = uniform), mean sibling entropy range, and the effect on
    the value: mean |V_entropy − V_child_mean| at branching nodes, relative to mean
    |V_child_mean| there, and the Pearson correlation of the two values."""
    forest = Forest.from_trees(trees, dtype=torch.float64)
    parent = forest.parent.numpy()
    n_kids = children_count(forest.parent).numpy()
    kid_of_branch = (parent >= 0) & (n_kids[np.maximum(parent, 0)] >= 2)
    branch = n_kids >= 2
    v_mean = forest_node_values(forest, "child_mean").numpy()
    rows = []
    for estimator, key in ESTIMATORS.items():
        h = np.concatenate([np.asarray(t.node_arrays[key], dtype=np.float64) for t in trees])
        h = np.where(parent >= 0, h, 0.0)
        hmax, hmin = np.full(len(h), -np.inf), np.full(len(h), np.inf)
        np.maximum.at(hmax, parent[kid_of_branch], h[kid_of_branch])
        np.minimum.at(hmin, parent[kid_of_branch], h[kid_of_branch])
        with_h = Forest(
            forest.parent, torch.as_tensor(h), forest.leaf_reward, forest.tree_index, forest.offsets
        )
        for weighting in ("softmax", "linear"):
            w = sibling_weights(forest.parent, torch.as_tensor(h), f"entropy_{weighting}").numpy()
            uniform = 1.0 / n_kids[np.maximum(parent, 0)]
            wmax = np.zeros(len(h))
            np.maximum.at(wmax, parent[kid_of_branch], w[kid_of_branch])
            v = forest_node_values(with_h, f"entropy_{weighting}").numpy()
            gap = np.abs(v - v_mean)[branch]
            rows.append(
                {
                    "estimator": estimator,
                    "weighting": f"entropy_{weighting}",
                    "branching_nodes": int(branch.sum()),
                    "mean_children": float(n_kids[branch].mean()),
                    "mean_abs_w_minus_uniform": float(np.abs(w - uniform)[kid_of_branch].mean()),
                    "mean_n_times_max_w": float((wmax * n_kids)[branch].mean()),
                    "mean_sibling_entropy_range": float((hmax - hmin)[branch].mean()),
                    "mean_abs_value_gap": float(gap.mean()),
                    "gap_relative_to_mean_abs_value": float(
                        gap.mean() / np.abs(v_mean[branch]).mean()
                    ),
                    "corr_value_with_child_mean": float(
                        np.corrcoef(v[branch], v_mean[branch])[0, 1]
                    ),
                }
            )
    return pd.DataFrame(rows)
