"""One node and one tree in words, tables and figures (the inspector's views,
:mod:`at2po_lib.lab.inspector`): a node's description (:func:`describe_node`), its
advantage under every credit rule as bars (:func:`plot_node_credit`), the questions shown
(:func:`questions_table`), the tree figure (:func:`tree_view`) round by round
(:func:`draw_growth`) and one PNG per view (:func:`render_png`).
"""

from __future__ import annotations

import io
import textwrap
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..method.tree import TreeArrays
from .node_credit import BASELINES, DEFAULT_MODE, rule_label
from .tree_drawings import (
    CHOSEN_ROLE,
    close_figure,
    draw_rollout_tree,
    grown_by_round,
    new_figure,
    node_text_table,
)


def describe_node(tree: TreeArrays, table: pd.DataFrame, ratios: pd.DataFrame, node: int) -> str:
    """A few lines on one node: its action and full text, entropy, reward, default advantage,
    turn ratio and whether the turn-level clip binds."""
    side = node_text_table(tree).loc[node]
    lo, hi = ratios.attrs["window"]
    lines = [
        f"node {node} (parent {int(side['parent'])}, depth {int(side['depth'])}, "
        f"round {int(side['round'])}): {side['action']}"
    ]
    if side["query_or_answer"]:
        lines.append(f"  query/answer: {side['query_or_answer']}")
    if side["turn_text"]:
        lines.append(f"  text: {side['turn_text'][:400]}")
    lines.append(
        f"  entropy H = {tree.entropy[node]:.4f}"
        + (
            f", reward r = {tree.leaf_reward[node]:g}"
            if np.isfinite(tree.leaf_reward[node])
            else ""
        )
    )
    adv = table.loc[node, "/".join(DEFAULT_MODE)]
    if node == 0:
        lines.append("  the root holds only the prompt: no tokens, no ratio")
    else:
        r = ratios.loc[node]
        binds = "binds (no gradient from this turn)" if r["turn_clipped"] else "does not bind"
        lines.append(
            f"  AT2PO default advantage ({rule_label('/'.join(DEFAULT_MODE))}) {adv:+.4f}; "
            f"turn ratio after one simulated update {r['turn_ratio']:.5f} over "
            f"{int(r['tokens'])} tokens; clip window [{lo:.4f}, {hi:.4f}]: the turn-level "
            f"clip {binds}; a token-level clip would bind on "
            f"{100 * r['token_clip_share']:.0f}% of its tokens"
        )
    return "\n".join(lines)


def baseline_frame(table: pd.DataFrame, node: int) -> pd.DataFrame:
    return pd.DataFrame(
        {"advantage": [table.loc[node, b] for b in BASELINES]},
        index=pd.Index([rule_label(b) for b in BASELINES], name="baseline"),
    )


def signal_note(tree: TreeArrays) -> str:
    """A sentence when the tree carries no learning signal (every scored leaf has one reward,
    so every normalised value and every AT2PO advantage is 0), else ''."""
    scored = tree.leaf_reward[np.isfinite(tree.leaf_reward)]
    if scored.size == 0:
        return "no signal here: no leaf of this tree is scored"
    if np.all(scored == scored[0]):
        return (
            f"no signal here: all {scored.size} leaves have reward {scored[0]:g}, so every "
            "value and every AT2PO advantage of this tree is 0 (GRPO too, if the prompt's "
            "other trees agree)"
        )
    return ""


def questions_table(trees: Sequence[TreeArrays]) -> pd.DataFrame:
    """One row per prompt of ``trees``: its question, gold answer, how many trees and leaves it
    has, and its leaves' mean reward (the inspector lists what it shows)."""
    rows: dict[int, dict] = {}
    for i, t in enumerate(trees):
        scored = t.leaf_reward[np.isfinite(t.leaf_reward)]
        row = rows.setdefault(
            t.prompt_id,
            {
                "prompt": t.prompt_id,
                "question": t.info.get("question", ""),
                "gold": (list(t.info.get("golden_answers") or [""]) or [""])[0],
                "trees": [],
                "leaves": 0,
                "_sum": 0.0,
            },
        )
        row["trees"].append(i)
        row["leaves"] += int(scored.size)
        row["_sum"] += float(scored.sum())
    frame = pd.DataFrame(
        [
            {
                **{k: v for k, v in r.items() if k != "_sum"},
                "mean_reward": r["_sum"] / max(r["leaves"], 1),
            }
            for r in rows.values()
        ]
    )
    return frame.set_index("prompt") if len(frame) else frame


def plot_node_credit(
    table: pd.DataFrame, node: int, ax: Any = None, note: str = ""
) -> tuple[Any, Any]:
    """Horizontal bars: the node's advantage under every credit rule (16 AT2PO + baselines);
    ``note`` (e.g. :func:`signal_note`) is written in the plot. Without ``ax`` the figure is
    detached from pyplot (:func:`~at2po_lib.reporting.tree_drawings.new_figure`): the widget's
    callbacks build it on a kernel side thread."""
    names = [c for c in table.columns if "/" in c] + list(BASELINES)
    vals = np.array([table.loc[node, c] for c in names], dtype=float)
    if ax is None:
        fig, ax = new_figure((9.0, 0.24 * len(names) + 1.4), detached=True)  # words for labels
    else:
        fig = ax.figure
    colours = ["C0" if "/" in n else "C3" for n in names]
    ax.barh(range(len(names)), np.nan_to_num(vals), color=colours)
    for i, v in enumerate(vals):
        if not np.isfinite(v):
            ax.text(0, i, " n/a", va="center", fontsize=8, color="0.4")
    ax.set_yticks(range(len(names)), [rule_label(n) for n in names], fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="0.3", lw=0.8)
    if not np.nan_to_num(vals).any():
        ax.set_xlim(-1, 1)
    ax.set_xlabel("advantage of the turn (baselines: mean over the rows through it)", fontsize=9)
    ax.set_title(
        f"Advantage of node {node} under every credit rule\n(blue: AT2PO, its values, then "
        "its advantage; red: baselines)",
        fontsize=10,
    )
    if note:
        ax.text(
            0.5,
            0.5,
            "\n".join(textwrap.wrap(note, 60)),
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=9,
            bbox=dict(boxstyle="round", facecolor="#fff3cd", edgecolor="#c9a227"),
        )
    fig.tight_layout()
    return fig, ax


def tree_view(
    tree: TreeArrays,
    upto_round: int | None = None,
    node: int | None = None,
    title: str | None = None,
    highlight: Mapping[int, str] | None = None,
) -> Any:
    """The inspector's tree figure: the tree after ``upto_round`` with ``node`` ringed as the
    chosen node (or the rings of ``highlight``) and a no-signal line in the title. The widget and
    the offline drawing both call this, so their images can be compared byte for byte. The
    figure is detached from pyplot (safe on a widget callback's side thread)."""
    marks = dict(highlight or {})
    if node is not None and node not in marks:
        marks[int(node)] = CHOSEN_ROLE
    heading = title if title is not None else str(tree.info.get("question", ""))
    gold = (list(tree.info.get("golden_answers") or []) or [None])[0]
    if gold is not None:  # on the question's line, before any round label
        first, _, rest = heading.partition("\n")
        heading = f"{first}  (gold: {gold})" + (f"\n{rest}" if rest else "")
    note = signal_note(tree)
    if note:
        heading = f"{heading}\n{note.split(':')[0]}: all leaves share one reward"
    fig, _ = draw_rollout_tree(
        tree, upto_round=upto_round, title=heading, highlight=marks, detached=True
    )
    return fig


def render_png(fig: Any) -> bytes:
    """``fig`` as PNG bytes, then closed: one image per view, nothing left on pyplot's stack
    (a figure left open is what the inline backend redraws over a later view). The inspector's
    own figures are detached (never on the stack): rasterising them touches no global state."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=fig.dpi, bbox_inches="tight")
    finally:
        close_figure(fig)
    return buffer.getvalue()


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels of PNG bytes, from the IHDR chunk."""
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not PNG bytes")
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def draw_growth(
    tree: TreeArrays, title: str | None = None, highlight: Mapping[int, str] | None = None
) -> list[Any]:
    """One figure per round, 0 (the initial chains) to the last expansion round, later nodes
    faint, the layout of the final tree throughout."""
    rounds = tree.node_arrays.get("expansion_round")
    last = int(np.max(rounds)) if rounds is not None and len(rounds) else 0
    out = []
    for r in range(last + 1):
        grown = int(grown_by_round(tree, r).sum())
        label = f"after round {r}: {grown} of {tree.num_nodes} nodes"
        head = f"{title}\n{label}" if title else label
        out.append(tree_view(tree, upto_round=r, title=head, highlight=highlight))
    return out
