"""Figures of rollout trees (notebook 02). Functions take data and return ``(fig, ax)``; they
never write files. Tree drawing itself is :func:`at2po_lib.treeviz.draw_tree`."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .structures import ROOT, RolloutTree

_KIND_MARK = {"search": "S", "answer": "A", "invalid": "x"}


def turn_label(tree: RolloutTree, node_id: int, width: int = 9) -> str:
    """A short label: ``S:<query>`` / ``A:<answer>`` / ``x:<text>``, cut to ``width`` chars."""
    node = tree.nodes[node_id]
    if node_id == ROOT:
        return "Q"
    kind = getattr(node.action, "kind", "invalid")
    body = {"search": node.action.query if kind == "search" else None,
            "answer": node.action.answer if kind == "answer" else None}.get(kind) or node.text
    body = " ".join(str(body).split())
    label = f"{_KIND_MARK.get(kind, '?')}:{body}"
    return label if len(label) <= width else label[: width - 1] + "…"


def draw_rollout_tree(tree: RolloutTree, entropy_estimate: str = "sampled_nll", ax: Any = None,
                      title: str | None = None, label_width: int = 9) -> tuple[Any, Any]:
    """One rollout tree: colour = turn entropy H(n) (root grey), label = the turn's action,
    ``r=`` under each leaf, and a dashed ring (one colour per round) around nodes grown by an
    expansion round."""
    from ..treeviz import draw_tree, tree_layout
    from .export import tree_arrays

    arrays = tree_arrays(tree, entropy_estimate)
    labels = [turn_label(tree, n.id, label_width) for n in tree.nodes]
    color = arrays["entropy"].copy()
    color[ROOT] = np.nan  # the root has no turn: grey, and kept out of the colour scale
    fig, ax = draw_tree(arrays["parent"], node_color=color, node_labels=labels,
                        leaf_reward=arrays["reward"], ax=ax, cmap="viridis", title=title,
                        colorbar_label=f"turn entropy ({entropy_estimate})")
    x, y = tree_layout(arrays["parent"])
    rounds = arrays["expansion_round"]
    for r in sorted(set(rounds[rounds > 0].tolist())):
        sel = rounds == r
        ax.scatter(x[sel], y[sel], s=900, facecolors="none", edgecolors=f"C{r}",
                   linestyles="--", linewidths=1.3, zorder=1.5, label=f"expansion round {r}")
    if (rounds > 0).any():
        ax.legend(loc="upper left", fontsize=7, frameon=False, markerscale=0.4)
    return fig, ax


def plot_expansion_comparison(table, metrics: Sequence[str] = (
        "distinct_queries_per_tree", "distinct_answers_per_tree", "correct_leaf_share",
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
