"""The credit of every node of a tree under every rule, side by side (the inspector's tables,
:mod:`at2po_lib.lab.inspector`): AT2PO's 4 value modes × 4 advantage modes, GRPO,
Tree-GRPO and a GiGPO-style step grouping (:func:`credit_table`), one node's grid
(:func:`node_credit_grid`) and the node the rules disagree on most (:func:`most_disputed_node`).

Baselines, per node. GRPO and GiGPO give one advantage per *row* (root→leaf path) and a node
lies on every row below it; its tokens are trained once per row, so the inspector shows the
mean over those rows (the node's effective advantage, as
:mod:`at2po_lib.analysis.credit_accuracy` scores it):

- ``grpo``: :func:`at2po_lib.method.outcome.grpo_advantages` of the rows' rewards, one group per
  prompt (all trees of the prompt);
- ``tree_grpo``: :func:`at2po_lib.method.outcome.tree_grpo_advantages` (prompt-level + tree-level
  GRPO). Tree-GRPO grows ``rollout.tree_grpo_trees`` trees per prompt (``random`` expansion);
  on a single tree both terms are GRPO over the same leaves, so it is twice GRPO;
- ``gigpo``: :func:`at2po_lib.analysis.credit_accuracy.gigpo_row_advantages` (episode GRPO +
  step returns γ^k r normalised within an *anchor state*: the passages the path retrieved
  before the turn). Trees grown here carry their passages (``retrieved`` records); trees
  without them (e.g. read from notebook 02's file) use the set of queries searched before the
  turn, which names the same passages because BM25 top-k is deterministic (two different
  queries that return the same passages then count as two states).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ..analysis.credit_accuracy import gigpo_row_advantages
from ..method.credit import ADVANTAGE_MODES, VALUE_MODES, forest_node_advantages, forest_node_values
from ..method.outcome import grpo_advantages, tree_grpo_advantages
from ..method.tree import Forest, TreeArrays, leaf_paths, node_depths
from .labels import ADVANTAGE_MODE_LABELS, VALUE_MODE_LABELS, credit_cell_label

BASELINES = ("grpo", "tree_grpo", "gigpo")
BASELINE_LABELS = {"grpo": "GRPO", "tree_grpo": "Tree-GRPO", "gigpo": "GiGPO-style step groups"}
"""The baselines' columns as the reader reads them."""
DEFAULT_MODE = ("entropy_softmax", "node_value")
"""AT2PO's default credit (the authors' code): the advantage the clip check uses."""


def rule_label(column: str) -> str:
    """A credit rule's column of :func:`credit_table` as the reader reads it: an AT2PO rule
    ``<value mode>/<advantage mode>`` as its values and advantage in words
    (``entropy-weighted children, node value``), a baseline by its name (``Tree-GRPO``)."""
    if "/" in column:
        value, _, advantage = column.partition("/")
        return credit_cell_label(value, advantage)
    return BASELINE_LABELS.get(column, column)


def _rows(forest: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root→leaf rows of a forest: (leaf (R,), pair_row (P,), pair_node (P,)) over every
    (row, non-root node on the row) pair, vectorised."""
    leaves, paths = leaf_paths(forest.parent)
    nodes = paths[:, 1:].numpy()
    row, col = np.nonzero(nodes >= 0)
    return leaves.numpy(), row, nodes[row, col]


def _mean_over_rows(
    pair_row: np.ndarray, pair_node: np.ndarray, per_row: np.ndarray, num_nodes: int
) -> np.ndarray:
    total = np.bincount(pair_node, weights=per_row[pair_row], minlength=num_nodes)
    count = np.bincount(pair_node, minlength=num_nodes)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def anchor_states(trees: Sequence[TreeArrays]) -> np.ndarray:
    """(N,) anchor-state id of every node of the trees (Forest order): the set of passages the
    path retrieved before the node (``retrieved`` records), else the set of queries searched
    before it (module docstring). Trees are one prompt's, so the prompt is not part of it."""
    keys: list[frozenset] = []
    for t in trees:
        seen: list[frozenset] = [frozenset()] * t.num_nodes
        depth_order = np.argsort(node_depths(t.parent).numpy(), kind="stable")
        for n in depth_order[1:]:  # parents come first: one pass in depth order
            p = int(t.parent[n])
            record = t.records[p] if len(t.records) else {}
            found = record.get("retrieved") or (
                [record["query"]]
                if record.get("action") == "search" and record.get("query")
                else []
            )
            seen[n] = seen[p] | frozenset(str(v) for v in found) if p > 0 else frozenset()
        keys += seen
    index: dict[frozenset, int] = {}
    return np.array([index.setdefault(k, len(index)) for k in keys], dtype=np.int64)


def credit_table(trees: Sequence[TreeArrays] | TreeArrays, index: int = 0) -> pd.DataFrame:
    """One row per node of ``trees[index]`` (``trees``: every tree of one prompt): ``entropy``,
    ``V:<value mode>`` for the 4 value modes, ``<value mode>/<advantage mode>`` for the 16 AT2PO
    advantages, and ``grpo``, ``tree_grpo``, ``gigpo`` (module docstring). ``attrs["notes"]``
    says why a baseline column is NaN, if one is."""
    trees = [trees] if isinstance(trees, TreeArrays) else list(trees)
    tree = trees[index]
    single = Forest.from_trees([tree], dtype=torch.float64)
    columns: dict[str, np.ndarray] = {"entropy": tree.entropy.astype(float)}
    for vm in VALUE_MODES:
        columns[f"V:{vm}"] = forest_node_values(single, vm).numpy()
    for vm in VALUE_MODES:
        values = torch.as_tensor(columns[f"V:{vm}"])
        for am in ADVANTAGE_MODES:
            columns[f"{vm}/{am}"] = forest_node_advantages(single, values, am).numpy()

    forest = Forest.from_trees(trees, dtype=torch.float64)
    start = int(forest.offsets[index])
    own = slice(start, start + tree.num_nodes)
    leaf, pair_row, pair_node = _rows(forest)
    reward = forest.leaf_reward.numpy()[leaf]
    notes: list[str] = []
    if np.isnan(reward).any():
        notes.append("rows ending in an unscored leaf are left out of the baselines")
        keep = ~np.isnan(reward)
        leaf, reward = leaf[keep], reward[keep]
        renumber = np.cumsum(keep) - 1
        pairs = keep[pair_row]
        pair_row, pair_node = renumber[pair_row[pairs]], pair_node[pairs]
    prompt = torch.zeros(len(leaf), dtype=torch.long)
    grpo = grpo_advantages(torch.as_tensor(reward), prompt).numpy()
    columns["grpo"] = _mean_over_rows(pair_row, pair_node, grpo, forest.num_nodes)[own]
    try:
        tree_ids = forest.tree_index.numpy()[leaf]
        tg = tree_grpo_advantages(
            torch.as_tensor(reward), torch.as_tensor(tree_ids), prompt
        ).numpy()
        columns["tree_grpo"] = _mean_over_rows(pair_row, pair_node, tg, forest.num_nodes)[own]
        if len(trees) == 1:
            notes.append(
                "Tree-GRPO on one tree: both of its terms are GRPO over the same "
                "leaves (Tree-GRPO grows several trees per prompt: expansion 'random')"
            )
    except ValueError as err:
        columns["tree_grpo"] = np.full(tree.num_nodes, np.nan)
        notes.append(f"Tree-GRPO: {err}")
    columns["gigpo"], note = _gigpo(forest, trees, leaf, pair_row, pair_node, own)
    if note:
        notes.append(note)
    frame = pd.DataFrame(columns)
    frame.index.name = "node"
    frame.attrs["notes"] = notes
    return frame


def _gigpo(
    forest: Any,
    trees: Sequence[TreeArrays],
    leaf: np.ndarray,
    pair_row: np.ndarray,
    pair_node: np.ndarray,
    own: slice,
) -> tuple[np.ndarray, str]:
    depth = node_depths(forest.parent).numpy()
    labels = SimpleNamespace(
        forest=forest, prompt=np.zeros(forest.num_nodes, dtype=np.int64), state=anchor_states(trees)
    )
    rows = SimpleNamespace(
        leaf=leaf,
        pair_row=pair_row,
        pair_node=pair_node,
        turns_after=depth[leaf][pair_row] - depth[pair_node],
    )
    per_pair = gigpo_row_advantages(labels, rows)
    total = np.bincount(pair_node, weights=per_pair, minlength=forest.num_nodes)
    count = np.bincount(pair_node, minlength=forest.num_nodes)
    effective = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    passages = any(r.get("retrieved") for t in trees for r in t.records)
    note = (
        ""
        if passages
        else (
            "GiGPO-style step groups: anchor states from the queries searched before each "
            "turn (these trees carry no retrieved passage ids)"
        )
    )
    return effective[own], note


def node_credit_grid(table: pd.DataFrame, node: int) -> pd.DataFrame:
    """One node's AT2PO advantages as a grid (rows: value modes, columns: advantage modes,
    both in words as Table 3 shows them), with the node value V_n as the first column."""
    row = table.loc[node]
    return pd.DataFrame(
        {
            "V_n": [row[f"V:{vm}"] for vm in VALUE_MODES],
            **{
                ADVANTAGE_MODE_LABELS[am]: [row[f"{vm}/{am}"] for vm in VALUE_MODES]
                for am in ADVANTAGE_MODES
            },
        },
        index=pd.Index([VALUE_MODE_LABELS[vm] for vm in VALUE_MODES], name="values"),
    )


def most_disputed_node(table: pd.DataFrame) -> tuple[int, str]:
    """(node, sentence): the non-root node the credit rules disagree on most: the most rules on
    the minority side of the sign (some push the turn up, others down), then the widest spread
    (max − min) of its advantages; node 1 when every rule agrees on every turn."""
    adv = table[[c for c in table.columns if "/" in c or c in BASELINES]].iloc[1:]
    eps = 1e-9
    minority = np.minimum((adv > eps).sum(axis=1), (adv < -eps).sum(axis=1)).to_numpy()
    spread = (adv.max(axis=1) - adv.min(axis=1)).fillna(0.0).to_numpy()
    if adv.empty or (spread.max() <= eps):
        first = int(table.index[1]) if len(table) > 1 else 0
        return first, f"node {first}: every credit rule gives every turn the same advantage here"
    best = int(np.lexsort((-spread, -minority))[0])
    node = int(adv.index[best])
    if minority[best] > 0:
        return node, (
            f"node {node}: the turn the credit rules disagree on most ({minority[best]} "
            f"of {adv.shape[1]} rules on the minority side of the sign; spread "
            f"{spread[best]:.3f})"
        )
    return node, (
        f"node {node}: every rule agrees on the sign of every turn; this one's "
        f"advantages spread most (max − min = {spread[best]:.3f})"
    )
