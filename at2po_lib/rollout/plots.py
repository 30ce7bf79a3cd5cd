"""Figures of rollout trees (notebook 02). Functions take data and return ``(fig, ax)``; they
never write files. Tree drawing itself is :func:`at2po_lib.treeviz.draw_tree`.

Trees are drawn from :class:`at2po_lib.forest.TreeArrays` (a rollout's ``RolloutTree`` is
converted with :func:`.export.tree_arrays` first), so trees read back from a file draw the
same way as fresh ones.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..forest import TreeArrays
from .structures import ROOT, RolloutTree

_KIND_MARK = {"search": "S", "answer": "A", "invalid": "x"}


def record_label(record: Mapping[str, Any], node_id: int, width: int = 9) -> str:
    """A short label from a node record: ``S:<query>`` / ``A:<answer>`` / ``x:<text>``, cut to
    ``width`` characters; the root is ``Q``."""
    if node_id == ROOT:
        return "Q"
    kind = record.get("action") or "invalid"
    body = {"search": record.get("query"), "answer": record.get("answer")}.get(kind) or \
        record.get("text") or ""
    body = " ".join(str(body).split())
    label = f"{_KIND_MARK.get(kind, '?')}:{body}"
    return label if len(label) <= width else label[: width - 1] + "…"


def turn_label(tree: RolloutTree | TreeArrays, node_id: int, width: int = 9) -> str:
    """:func:`record_label` of one node of a rollout tree or of tree arrays with records."""
    from .export import node_record

    record = tree.records[node_id] if isinstance(tree, TreeArrays) else node_record(tree, node_id)
    return record_label(record, node_id, width)


def draw_rollout_tree(tree: TreeArrays | RolloutTree, entropy_estimate: str = "sampled_nll",
                      ax: Any = None, title: str | None = None,
                      label_width: int = 9) -> tuple[Any, Any]:
    """One rollout tree: colour = turn entropy H(n) (root grey), label = the turn's action
    (node ids when the arrays carry no records), ``r=`` under each leaf, and a dashed ring
    (one colour per round) around nodes grown by an expansion round. ``entropy_estimate``
    applies when ``tree`` is a ``RolloutTree``; arrays carry their own entropy."""
    from ..treeviz import draw_tree, tree_layout
    from .export import tree_arrays

    arrays = tree if isinstance(tree, TreeArrays) else tree_arrays(tree, entropy_estimate)
    estimate = arrays.info.get("entropy_estimate", entropy_estimate)
    labels = ([record_label(r, i, label_width) for i, r in enumerate(arrays.records)]
              if len(arrays.records) else None)
    color = arrays.entropy.copy()
    color[ROOT] = np.nan  # the root has no turn: grey, and kept out of the colour scale
    fig, ax = draw_tree(arrays.parent, node_color=color, node_labels=labels,
                        leaf_reward=arrays.leaf_reward, ax=ax, cmap="viridis", title=title,
                        colorbar_label=f"turn entropy ({estimate})")
    rounds = arrays.node_arrays.get("expansion_round")
    if rounds is None or not (rounds > 0).any():
        return fig, ax
    x, y = tree_layout(arrays.parent)
    for r in sorted(set(rounds[rounds > 0].tolist())):
        sel = rounds == r
        ax.scatter(x[sel], y[sel], s=900, facecolors="none", edgecolors=f"C{r}",
                   linestyles="--", linewidths=1.3, zorder=1.5, label=f"expansion round {r}")
    ax.legend(loc="upper left", fontsize=7, frameon=False, markerscale=0.4)
    return fig, ax


def plot_expansion_comparison(table, metrics: Sequence[str] = (
        "distinct_queries_per_prompt", "distinct_answers_per_prompt", "correct_leaf_share",
        "generated_tokens_per_leaf"), method_column: str = "method") -> tuple[Any, Any]:
    """One bar chart per metric, one bar per rollout method (rows of ``table``)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3.0))
    axes = np.atleast_1d(axes)
    methods = list(table[method_column])
    for ax, metric in zip(axes, metrics):
        ax.bar(methods, table[metric], color=[f"C{i}" for i in range(len(methods))])
        ax.set_title(metric.replace("_", " "), fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    return fig, axes
