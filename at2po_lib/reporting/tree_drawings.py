r"""Drawing rollout trees (matplotlib only, no graphviz) and choosing which tree to draw.

A drawing must let a student match the picture to the node table and see the lesson, so:

- every node shows its **id** (the side table, :func:`node_text_table`, is keyed by it), in
  black or white, whichever contrasts more with the node's fill (:func:`text_color_for`);
- under each node a **label** (:func:`node_labels`): ``S: <query>`` / ``A: <answer>`` /
  ``x: <invalid turn>`` wrapped on a few lines; an answer is never cut so that two different
  answers look alike (``"Dadar"`` with reward 1 and ``"Dadar Bay"`` with reward 0 stay apart:
  :func:`shorten_distinct`); a leaf's label ends with ``r=<reward>`` in a box whose edge is
  green (reward > 0) or red (reward 0);
- labels never overlap: columns and rows are sized from the measured labels, then checked
  (:func:`label_overlaps`) and the figure is widened until they do not;
- a **legend** says what the fill colour, the dashed rings (the expansion round that grew a
  node) and the leaf boxes encode; the colour range is never degenerate (all-zero values get a
  symmetric range, :func:`colour_norm`).

Layout (:func:`tree_layout`): depth sets the row (root on top); leaves take consecutive columns
in depth-first order (children by increasing id), and every internal node sits at the midpoint
of its first and last child, so subtrees never overlap, edges never cross, and two nodes of
one row are at least one column apart.

Default examples are chosen by a stated rule, not by position: :func:`choose_example_tree`
(notebook 02: the first tree with mixed leaf rewards whose expansions branch at different
depths) and :func:`choose_credit_example` (notebook 03: the tree where the value modes of
docs/method.md §6 disagree most).

    >>> from at2po_lib.method.examples import example_tree
    >>> from at2po_lib.method.credit import node_values
    >>> t = example_tree()
    >>> fig, ax = draw_tree(t.parent, node_color=node_values(t.parent, t.entropy, t.leaf_reward),
    ...                     leaf_reward=t.leaf_reward, title="entropy_softmax values")

Functions take data and return ``(fig, ax)`` (or tables); they never write files.
"""

from __future__ import annotations

import base64
import html
import io
import textwrap
from typing import Any, Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, TwoSlopeNorm, to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox
from PIL import Image

from ..method.credit import VALUE_MODES, forest_node_values
from ..method.tree import Forest, TreeArrays, node_depths
from ..rollout.export import tree_arrays
from ..evaluation.stats import seed_mean_ci

ROOT = 0
NODE_SIZE = 400.0
"""Marker area of a node (points²): radius ~10 pt, room for a three-digit id."""
LABEL_FONTSIZE = 7.0
LABEL_WIDTH = 18
"""Characters per label line (narrowed, down to :data:`MIN_LABEL_WIDTH`, to fit a column)."""
MIN_LABEL_WIDTH = 7
NOTEBOOK_COLUMN_PX = 900
"""Width of JupyterLab's output column on a laptop screen (1,280-1,440 px window, file browser
open), in CSS pixels. A wider image is scaled down to it, and its text with it."""
MIN_DISPLAYED_TEXT_PX = 8.0
"""The label-size rule: no text of a notebook figure is smaller than this as displayed in the
column (:func:`displayed_text_px`); the issue's illegible panels had ~4 px labels."""
HIGHLIGHT_COLOURS = ("#e7298a", "#8c510a", "#01665e")
"""Solid rings around highlighted nodes (the running example's n and x), in the order given;
none is a colour of the dashed expansion-round rings (C1, C2, ...)."""
CHOSEN_ROLE = "chosen node"
CHOSEN_COLOUR = "#000000"
"""The inspector's chosen node has its own ring colour, never one of a highlight's: one meaning
per colour in a drawing."""


def new_figure(figsize: tuple[float, float], detached: bool = False) -> tuple[Any, Any]:
    """(fig, ax): a pyplot figure, or with ``detached`` a :class:`matplotlib.figure.Figure` on
    its own Agg canvas that pyplot never sees. A detached figure touches no global state, so a
    widget callback on a kernel side thread can build and rasterise it while the main thread
    draws (pyplot's figure stack and current-figure pointer are shared and not thread-safe)."""
    if detached:
        fig = Figure(figsize=figsize)
        FigureCanvasAgg(fig)
        return fig, fig.add_subplot()

    return plt.subplots(figsize=figsize)


def close_figure(fig: Any) -> None:
    """Close a pyplot figure; a detached one (:func:`new_figure`) needs nothing."""
    if getattr(fig.canvas, "manager", None) is not None:
        plt.close(fig)


REWARD_EDGE = {True: "#1a9641", False: "#d7191c"}
"""Leaf box edge: green for a positive reward, red for reward 0."""
_KIND_MARK = {"search": "S", "answer": "A"}


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------
def _as_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _children_lists(parent: np.ndarray) -> list[list[int]]:
    n = len(parent)
    if n == 0 or parent[0] != -1:
        raise ValueError("parent must be non-empty with parent[0] = -1 (node 0 is the root)")
    bad = np.flatnonzero((parent[1:] < 0) | (parent[1:] >= n))
    if bad.size:
        raise ValueError(f"node {int(bad[0]) + 1} has invalid parent {parent[bad[0] + 1]}")
    children: list[list[int]] = [[] for _ in range(n)]
    for node in range(1, n):  # increasing ids: children lists come out sorted
        children[int(parent[node])].append(node)
    return children


def tree_layout(parent: Any) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) coordinates (N,) each: y = -depth; leaves on consecutive integer columns in
    depth-first order; internal nodes centred over their first and last child."""
    parent = _as_numpy(parent).astype(np.int64)
    children = _children_lists(parent)
    n = len(parent)
    x = np.full(n, np.nan)
    y = np.full(n, np.nan)
    next_column = 0
    # Iterative post-order walk (deep trees would overflow recursion).
    stack: list[tuple[int, int, bool]] = [(0, 0, False)]
    while stack:
        node, depth, expanded = stack.pop()
        y[node] = -depth
        if not children[node]:
            x[node] = next_column
            next_column += 1
        elif expanded:
            x[node] = 0.5 * (x[children[node][0]] + x[children[node][-1]])
        else:
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in reversed(children[node]))
    if np.isnan(y).any():  # each node has one parent, so only a cycle leaves nodes unvisited
        raise ValueError(
            f"node {int(np.flatnonzero(np.isnan(y))[0])} is not connected to the "
            "root (the parent array has a cycle)"
        )
    return x, y


# --------------------------------------------------------------------------------------------
# Colours
# --------------------------------------------------------------------------------------------
def relative_luminance(rgba: Sequence[float]) -> float:
    """WCAG 2 relative luminance of an sRGB colour (components in [0, 1])."""
    rgb = np.clip(np.asarray(rgba, dtype=float)[:3], 0.0, 1.0)
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return float(linear @ np.array([0.2126, 0.7152, 0.0722]))


def contrast_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """WCAG contrast ratio (1 to 21) of two colours."""
    la, lb = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_color_for(fill: Any) -> str:
    """``"white"`` or ``"black"``: whichever has the higher WCAG contrast on ``fill`` (any
    matplotlib colour). Dark fills (viridis' purple, coolwarm's deep blue/red) get white."""
    rgba = to_rgba(fill)
    return "white" if contrast_ratio(rgba, (1, 1, 1)) > contrast_ratio(rgba, (0, 0, 0)) else "black"


def colour_norm(values: Any, vmin: float | None = None, vmax: float | None = None) -> Any:
    """The colour scale of ``values``: centred on 0 (symmetric) when the range spans 0, as
    values and advantages do; never degenerate: a range of one value v becomes
    [v − max(|v|, 1), v + max(|v|, 1)] (all-zero advantages: [−1, 1], not [0, 1e-9])."""
    finite = _as_numpy(values).astype(float)
    finite = finite[np.isfinite(finite)]
    lo = float(vmin) if vmin is not None else (float(finite.min()) if finite.size else 0.0)
    hi = float(vmax) if vmax is not None else (float(finite.max()) if finite.size else 0.0)
    if hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi)):
        pad = max(abs(lo), 1.0)
        lo, hi = lo - pad, hi + pad
    if lo < 0 < hi:
        bound = max(-lo, hi)
        return TwoSlopeNorm(vcenter=0.0, vmin=-bound, vmax=bound)
    return Normalize(vmin=lo, vmax=hi)


# --------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------
def _clean(text: Any) -> str:
    """One line of drawable text: white space folded, other control characters (a sampled turn
    may hold any token, and no font has a glyph for them) written as escapes (``\\x0e``)."""
    folded = " ".join(str(text or "").split())
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in folded)


def action_text(record: Mapping[str, Any], node_id: int) -> str:
    """The full text a node's label abbreviates: ``S: <query>``, ``A: <answer>``, ``x: <turn
    text>`` (an invalid or truncated turn), ``Q`` for the root."""
    if node_id == ROOT:
        return "Q"
    kind = record.get("action")
    if kind == "search":
        return f"S: {_clean(record.get('query'))}"
    if kind == "answer":
        return f"A: {_clean(record.get('answer'))}"
    return f"x: {_clean(record.get('text')) or '(empty turn)'}"


def shorten_distinct(texts: Sequence[str], max_chars: int) -> list[str]:
    """Texts cut to at most ``max_chars`` characters, with the guarantee that two *different*
    texts never come out the same: colliding cuts keep the head and the differing tail
    (``"the river…bay"``), growing the tail a whole word at a time (a character at a time when
    the next word does not fit) until they differ."""
    if max_chars < 5:
        raise ValueError(f"max_chars must be >= 5, got {max_chars}")

    def cut(text: str, tail: int) -> str:
        if len(text) <= max_chars:
            return text
        if tail == 0:
            return text[: max_chars - 1] + "…"
        head = max(max_chars - tail - 1, 1)
        return text[:head] + "…" + text[-tail:]

    tails = {t: 0 for t in texts}
    while True:
        shown = {t: cut(t, tails[t]) for t in tails}
        by_form: dict[str, list[str]] = {}
        for t, s in shown.items():
            by_form.setdefault(s, []).append(t)
        clashes = [ts for ts in by_form.values() if len(ts) > 1]
        if not clashes:
            return [shown[t] for t in texts]
        grew = False
        for group in clashes:
            for t in group:
                if tails[t] < max_chars - 2 and len(t) > max_chars:
                    tails[t] = _next_tail(t, tails[t], max_chars - 2)
                    grew = True
        if not grew:  # cannot separate within max_chars: show the full texts
            return [t if len(by_form[shown[t]]) > 1 else shown[t] for t in texts]


def _next_tail(text: str, tail: int, limit: int) -> int:
    """The next longer tail of ``text`` that starts a word (after a space), if it fits in
    ``limit`` characters; else one character more."""
    starts = [len(text) - i - 1 for i, ch in enumerate(text) if ch == " "]
    longer = [k for k in starts if tail < k <= limit]
    return min(longer) if longer else tail + 1


def node_labels(tree: TreeArrays, width: int = LABEL_WIDTH, lines: int = 3) -> list[str]:
    """One multi-line label per node: the action text (:func:`action_text`) wrapped at
    ``width`` characters on at most ``lines`` lines (answers on ``lines + 1``), cut without
    ever merging two different answers (:func:`shorten_distinct`); ``copy of <id>`` for a
    duplicate leaf; ``r=<reward>`` on scored leaves. Without records: the reward only."""
    n = tree.num_nodes
    records = list(tree.records) if len(tree.records) else [{} for _ in range(n)]
    full = [action_text(r, i) if len(tree.records) else "" for i, r in enumerate(records)]
    answer_budget = width * (lines + 1)
    answers = sorted({t for t, r in zip(full, records) if r.get("action") == "answer"})
    short_answer = dict(zip(answers, shorten_distinct(answers, answer_budget)))
    duplicate = _as_numpy(tree.node_arrays.get("duplicate_of", np.full(n, -1)))
    out = []
    for i, (text, record) in enumerate(zip(full, records)):
        if record.get("action") == "answer":
            body = textwrap.wrap(short_answer[text], width, break_long_words=True) or [text]
        else:
            body = (
                textwrap.wrap(text, width, max_lines=lines, placeholder=" …", break_long_words=True)
                if text
                else []
            )
        if duplicate[i] >= 0:
            body.append(f"copy of {int(duplicate[i])}")
        if np.isfinite(tree.leaf_reward[i]):
            body.append(f"r={tree.leaf_reward[i]:g}")
        out.append("\n".join(body))
    return out


def node_text_table(tree: TreeArrays) -> "pd.DataFrame":
    """The side table of a drawing, one row per node keyed by ``node`` (the ids drawn in the
    nodes): parent, depth, expansion round, entropy, action, the full query or answer, the
    reward, and the turn's full text."""
    n = tree.num_nodes
    records = list(tree.records) if len(tree.records) else [{} for _ in range(n)]
    depth = tree.node_arrays.get("depth")
    frame = pd.DataFrame(
        {
            "node": np.arange(n),
            "parent": tree.parent,
            "depth": depth if depth is not None else node_depths(tree.parent).numpy(),
            "round": tree.node_arrays.get("expansion_round", np.zeros(n, dtype=np.int64)),
            "entropy": tree.entropy,
            "action": [
                r.get("action") or ("root" if i == ROOT else None) for i, r in enumerate(records)
            ],
            "query_or_answer": [_clean(r.get("query") or r.get("answer")) or None for r in records],
            "reward": tree.leaf_reward,
            "turn_text": [_clean(r.get("text")) or None for r in records],
        }
    )
    return frame.set_index("node")


# --------------------------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------------------------
def _text_boxes(fig: Any, artists: Sequence[Any]) -> list[Any]:
    """Display boxes of text artists, grown by their rounded box (pad 0.2 em + edge), which
    ``get_window_extent`` leaves out."""
    renderer = fig.canvas.get_renderer()
    boxes = []
    for a in artists:
        box = a.get_window_extent(renderer)
        grow = (0.2 * a.get_fontsize() + 1.5) * fig.dpi / 72 if a.get_bbox_patch() else 0.0
        boxes.append(Bbox.from_extents(box.x0 - grow, box.y0 - grow, box.x1 + grow, box.y1 + grow))
    return boxes


def label_overlaps(ax: Any, pad: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of labels (and node markers) of a :func:`draw_tree` drawing whose boxes overlap
    on the rendered figure (display pixels, ``pad`` pixels of slack). Empty: all readable."""
    artists = list(getattr(ax, "_at2po_labels", []))
    if not artists:
        return []
    fig = ax.figure
    boxes = _text_boxes(fig, artists)
    names = [getattr(a, "_at2po_name", repr(a.get_text())) for a in artists]
    circles = getattr(ax, "_at2po_circles", None)
    if circles is not None:  # node markers: boxes of the marker radius around their centres
        radius = np.sqrt(NODE_SIZE) / 2 * fig.dpi / 72
        centres = ax.transData.transform(circles)
        for i, (cx, cy) in enumerate(centres):
            boxes.append(Bbox([[cx - radius, cy - radius], [cx + radius, cy + radius]]))
            names.append(f"node marker {i}")
    extents = np.array([[b.x0, b.y0, b.x1, b.y1] for b in boxes])
    x0, y0, x1, y1 = (extents[:, k][:, None] for k in range(4))
    overlap = (x0 < x1.T - pad) & (x0.T < x1 - pad) & (y0 < y1.T - pad) & (y0.T < y1 - pad)
    labels_n = len(artists)
    # marker vs marker pairs are not labels; a label never overlaps its own node (placed below)
    out = []
    for i, j in zip(*np.nonzero(np.triu(overlap, 1))):
        if i >= labels_n and j >= labels_n:
            continue
        out.append((names[i], names[j]))
    return out


def draw_tree(
    parent: Any,
    node_color: Any = None,
    node_labels: Sequence[str] | None = None,
    leaf_reward: Any = None,
    ax: Any = None,
    cmap: str = "coolwarm",
    title: str | None = None,
    colorbar_label: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    rings: Any = None,
    visible: Any = None,
    legend: bool = True,
    highlight: Mapping[int, str] | None = None,
    detached: bool = False,
) -> tuple[Any, Any]:
    """Draw one tree; returns ``(fig, ax)``.

    highlight: node → role (e.g. ``{5: "picked turn n"}``): a thick solid ring and a legend
    entry per node (the running example, the inspector's chosen node), one colour per role
    (:data:`HIGHLIGHT_COLOURS` in order; the role :data:`CHOSEN_ROLE` always
    :data:`CHOSEN_COLOUR`). detached: a new figure outside pyplot (:func:`new_figure`).

    parent (N,) int, or a :class:`~at2po_lib.method.tree.TreeArrays` (its ``parent``, and its
    ``leaf_reward`` unless given). node_color (N,) floats through ``cmap`` (NaN: grey, kept out
    of the scale; :func:`colour_norm`). node_labels (N,) strings written *under* the nodes
    (multi-line allowed; default: ``r=…`` on scored leaves); the node id is always written
    *in* the node. leaf_reward (N,): scored leaves get a green (r > 0) or red (r = 0) label box.
    rings (N,) ints: a dashed ring, one colour per value > 0 (the expansion round that grew the
    node). visible (N,) bool: nodes not yet grown are drawn faint without labels (the layout
    stays that of the whole tree, so rounds line up). The figure is sized so that no two labels
    overlap (widened when ``ax`` is given and labels would touch).
    """
    if isinstance(parent, TreeArrays):
        leaf_reward = parent.leaf_reward if leaf_reward is None else leaf_reward
        parent = parent.parent
    parent_np, rewards, labels, shown = _checked_node_arrays(
        parent, leaf_reward, node_labels, visible
    )
    x, y = tree_layout(parent_np)
    own_figure = ax is None
    if own_figure:
        fig, ax = new_figure((4, 3), detached)
    else:
        fig = ax.figure
    fills = _fills(fig, ax, node_color, len(parent_np), cmap, vmin, vmax, colorbar_label)
    _draw_nodes(ax, parent_np, x, y, fills, shown)
    label_artists = _draw_labels(ax, x, y, labels, rewards, shown)
    ring_handles = _draw_rings(ax, x, y, rings, highlight, shown)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=10)
    if legend:
        _legend(ax, ring_handles, rewards, shown, node_color)
    _fit(fig, ax, x, y, label_artists, resize=own_figure)
    return fig, ax


GREY = (0.85, 0.85, 0.85, 1.0)
"""The fill of a node without a value (NaN colour), kept out of the colour scale."""


def _checked_node_arrays(
    parent: Any, leaf_reward: Any, node_labels: Sequence[str] | None, visible: Any
) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """parent (N,) int64, rewards (N,) float (NaN: not a scored leaf), the N labels under the
    nodes (default ``r=…`` on scored leaves) and which nodes are shown; a wrong shape is an
    error naming the argument."""
    parent_np = _as_numpy(parent).astype(np.int64)
    n = len(parent_np)
    rewards = np.full(n, np.nan) if leaf_reward is None else _as_numpy(leaf_reward).astype(float)
    if rewards.shape != (n,):
        raise ValueError(f"leaf_reward has shape {rewards.shape}, expected ({n},)")
    if node_labels is None:
        labels = [f"r={r:g}" if np.isfinite(r) else "" for r in rewards]
    else:
        labels = [str(s) for s in node_labels]
    if len(labels) != n:
        raise ValueError(f"node_labels has {len(labels)} entries, expected {n}")
    shown = np.ones(n, dtype=bool) if visible is None else _as_numpy(visible).astype(bool)
    if shown.shape != (n,):
        raise ValueError(f"visible has shape {shown.shape}, expected ({n},)")
    return parent_np, rewards, labels, shown


def _fills(
    fig: Any,
    ax: Any,
    node_color: Any,
    n: int,
    cmap: str,
    vmin: float | None,
    vmax: float | None,
    colorbar_label: str | None,
) -> list[Any]:
    """Each node's fill: white, or ``node_color`` through ``cmap`` (NaN: grey) with a colour
    bar beside the axes (the legend of the fill)."""
    fills: list[Any] = ["white"] * n
    if node_color is not None:
        values = _as_numpy(node_color).astype(float)
        if values.shape != (n,):
            raise ValueError(f"node_color has shape {values.shape}, expected ({n},)")
        norm = colour_norm(values, vmin, vmax)
        colormap = matplotlib.colormaps[cmap]
        fills = [colormap(norm(v)) if np.isfinite(v) else GREY for v in values]
        mappable = ScalarMappable(norm=norm, cmap=colormap)
        fig.colorbar(mappable, ax=ax, shrink=0.8, pad=0.02, label=colorbar_label)
    return fills


def _draw_nodes(
    ax: Any,
    parent_np: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    fills: list[Any],
    shown: np.ndarray,
) -> None:
    """Edges, nodes and the node ids inside them; nodes not yet grown are faint."""
    n = len(parent_np)
    alpha = np.where(shown, 1.0, 0.12)
    for node in range(1, n):
        p = parent_np[node]
        ax.plot(
            [x[p], x[node]],
            [y[p], y[node]],
            color="0.55",
            lw=1.0,
            zorder=1,
            alpha=float(alpha[node]),
        )
    ax.scatter(
        x,
        y,
        s=NODE_SIZE,
        c=fills,
        edgecolors="0.25",
        linewidths=1.0,
        zorder=2,
        alpha=None if shown.all() else alpha,
    )
    ax._at2po_circles = np.column_stack([x, y])

    for node in np.flatnonzero(shown):
        ax.text(
            x[node],
            y[node],
            str(node),
            ha="center",
            va="center",
            fontsize=7,
            fontweight="bold",
            color=text_color_for(fills[node]),
            zorder=3,
        )


def _draw_labels(
    ax: Any, x: np.ndarray, y: np.ndarray, labels: list[str], rewards: np.ndarray, shown: np.ndarray
) -> list[Any]:
    """The label under each shown node, boxed green (r > 0) or red (r = 0) on scored leaves."""
    radius_pt = np.sqrt(NODE_SIZE) / 2
    label_artists = []
    for node in np.flatnonzero(shown):
        if not labels[node]:
            continue
        box = dict(
            boxstyle="round,pad=0.2", facecolor="white", alpha=0.9, linewidth=0.8, edgecolor="none"
        )
        if np.isfinite(rewards[node]):
            box.update(edgecolor=REWARD_EDGE[bool(rewards[node] > 0)], linewidth=1.2)
        text = ax.annotate(
            labels[node],
            (x[node], y[node]),
            xytext=(0, -1.45 * radius_pt - 3),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=LABEL_FONTSIZE,
            bbox=box,
            zorder=4,
            linespacing=1.1,
        )
        text._at2po_name = f"label of node {node}"
        label_artists.append(text)
    ax._at2po_labels = label_artists
    return label_artists


def _draw_rings(
    ax: Any,
    x: np.ndarray,
    y: np.ndarray,
    rings: Any,
    highlight: Mapping[int, str] | None,
    shown: np.ndarray,
) -> list[Any]:
    """Dashed rings per expansion round and thick rings on highlighted nodes; returns their
    legend handles."""
    n = len(x)
    round_values = (
        np.zeros(n, dtype=np.int64) if rings is None else _as_numpy(rings).astype(np.int64)
    )
    ring_handles = []
    for r in sorted(set(round_values[(round_values > 0) & shown].tolist())):
        sel = (round_values == r) & shown
        ax.scatter(
            x[sel],
            y[sel],
            s=NODE_SIZE * 2.0,
            facecolors="none",
            edgecolors=f"C{r}",
            linestyles="--",
            linewidths=1.3,
            zorder=1.5,
        )
        ring_handles.append(
            Line2D(
                [],
                [],
                marker="o",
                markersize=11,
                linestyle="none",
                markerfacecolor="none",
                markeredgecolor=f"C{r}",
                label=f"dashed ring: grown in expansion round {r}",
            )
        )

    others = (c for c in HIGHLIGHT_COLOURS * (1 + len(highlight or {})))
    for node, role in (highlight or {}).items():
        if not 0 <= int(node) < n:
            continue
        colour = CHOSEN_COLOUR if role == CHOSEN_ROLE else next(others)
        ax.scatter(
            [x[node]],
            [y[node]],
            s=NODE_SIZE * 2.6,
            facecolors="none",
            edgecolors=colour,
            linewidths=3.0,
            zorder=1.6,
        )
        ring_handles.append(
            Line2D(
                [],
                [],
                marker="o",
                markersize=13,
                linestyle="none",
                markerfacecolor="none",
                markeredgecolor=colour,
                markeredgewidth=3.0,
                label=f"node {int(node)}: {role}",
            )
        )
    return ring_handles


def _legend(
    ax: Any, ring_handles: list[Any], rewards: np.ndarray, shown: np.ndarray, node_color: Any
) -> None:
    """The rings' entries, then the reward boxes and the grey fill where the tree has them."""
    handles = list(ring_handles)
    scored = rewards[np.isfinite(rewards) & shown]
    if (scored > 0).any():
        handles.append(
            Line2D(
                [],
                [],
                marker="s",
                markersize=9,
                linestyle="none",
                markerfacecolor="white",
                markeredgecolor=REWARD_EDGE[True],
                label="leaf, reward > 0 (green box)",
            )
        )
    if (scored <= 0).any():
        handles.append(
            Line2D(
                [],
                [],
                marker="s",
                markersize=9,
                linestyle="none",
                markerfacecolor="white",
                markeredgecolor=REWARD_EDGE[False],
                label="leaf, reward 0 (red box)",
            )
        )
    if node_color is not None and np.isnan(_as_numpy(node_color).astype(float)).any():
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                markersize=9,
                linestyle="none",
                markerfacecolor=GREY,
                markeredgecolor="0.25",
                label="grey: no value (root: no turn)",
            )
        )
    if handles:
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(0.0, -0.01),
            fontsize=7,
            frameon=False,
            ncol=min(len(handles), 2),
        )


def _fit(
    fig: Any, ax: Any, x: np.ndarray, y: np.ndarray, labels: Sequence[Any], resize: bool
) -> None:
    """Axis limits and figure size from the measured labels: a column is as wide as the widest
    label (+ margin), a row as tall as a node plus the tallest label; then widen/heighten the
    figure until :func:`label_overlaps` finds nothing (at most a few rounds)."""
    dpi = fig.dpi
    radius_in = np.sqrt(NODE_SIZE) / 2 / 72
    boxes = _text_boxes(fig, labels) if labels else []
    label_w = max([b.width / dpi for b in boxes], default=0.3)
    label_h = max([b.height / dpi for b in boxes], default=0.0)
    col_in = max(label_w + 0.15, 2 * radius_in + 0.15)
    row_in = 2 * radius_in + label_h + 0.25
    columns = float(np.nanmax(x) - np.nanmin(x)) + 1.0
    rows = float(np.nanmax(y) - np.nanmin(y)) + 1.0
    ax.set_xlim(np.nanmin(x) - 0.5, np.nanmax(x) + 0.5)
    bottom_pad = (label_h + radius_in + 0.1) / row_in  # the lowest row's labels
    ax.set_ylim(np.nanmin(y) - max(bottom_pad, 0.4), np.nanmax(y) + 0.45)
    width_needed, height_needed = (
        columns * col_in,
        (rows - 1 + max(bottom_pad, 0.4) + 0.45) * row_in,
    )
    for _ in range(6):
        pos = ax.get_position()
        fig_w, fig_h = fig.get_size_inches()
        grow_w = width_needed / max(pos.width * fig_w, 1e-6)
        grow_h = height_needed / max(pos.height * fig_h, 1e-6)
        if resize:
            extra_w = 1.6 if len(fig.axes) > 1 else 0.6  # colour bar and margins
            fig.set_size_inches(max(width_needed + extra_w, 3.5), max(height_needed + 1.2, 2.2))
            resize = False  # size once from the estimate, then only grow
        elif grow_w > 1.0 or grow_h > 1.0:
            fig.set_size_inches(fig_w * max(grow_w, 1.0), fig_h * max(grow_h, 1.0))
        clashes = label_overlaps(ax)
        if not clashes:
            return
        width_needed *= 1.25
        height_needed *= 1.15


def draw_rollout_tree(
    tree: TreeArrays | Any,
    entropy_estimate: str = "sampled_nll",
    ax: Any = None,
    title: str | None = None,
    label_width: int = LABEL_WIDTH,
    upto_round: int | None = None,
    highlight: Mapping[int, str] | None = None,
    column_px: float = NOTEBOOK_COLUMN_PX,
    detached: bool = False,
) -> tuple[Any, Any]:
    """One rollout tree: colour = turn entropy H(n) (root grey), node ids in the nodes, labels
    (:func:`node_labels`) under them, green/red boxes on the leaves by reward, a dashed ring
    (one colour per round) around nodes grown by an expansion round, a solid ring around each
    ``highlight`` node, and a legend. ``upto_round``: draw the tree as it stood after that
    round (later nodes faint). On its own figure (``ax`` None) the labels are wrapped narrower,
    down to :data:`MIN_LABEL_WIDTH` characters, until the figure fits ``column_px`` (so its
    text stays readable in a notebook column; :func:`displayed_text_px`).
    A ``RolloutTree`` is converted with :func:`at2po_lib.rollout.export.tree_arrays`
    (``entropy_estimate`` applies to it; arrays carry their own entropy). ``detached``: on a
    figure outside pyplot (:func:`new_figure`)."""
    arrays = tree if isinstance(tree, TreeArrays) else _rollout_arrays(tree, entropy_estimate)
    estimate = arrays.info.get("entropy_estimate", entropy_estimate)
    color = arrays.entropy.astype(float).copy()
    color[ROOT] = np.nan  # the root has no turn: grey, and kept out of the colour scale
    rounds = arrays.node_arrays.get("expansion_round")
    visible = None if upto_round is None else grown_by_round(arrays, upto_round)
    width = label_width
    while True:
        fig, out_ax = draw_tree(
            arrays.parent,
            node_color=color,
            node_labels=node_labels(arrays, width=width),
            leaf_reward=arrays.leaf_reward,
            ax=ax,
            cmap="viridis",
            title=title,
            colorbar_label=f"fill: turn entropy H(n) ({estimate})",
            rings=rounds,
            visible=visible,
            highlight=highlight,
            detached=detached,
        )
        too_wide = fig.get_size_inches()[0] * fig.dpi > column_px
        if ax is not None or not too_wide or width <= MIN_LABEL_WIDTH:
            return fig, out_ax
        close_figure(fig)
        width = max(MIN_LABEL_WIDTH, width - 3)


def displayed_text_px(fig: Any, column_px: float = NOTEBOOK_COLUMN_PX) -> float:
    """The height in CSS pixels of the smallest text of ``fig`` as a notebook shows it: the
    inline backend writes the PNG at ``fig.dpi`` and JupyterLab scales an image wider than its
    column down to the column, so a font of s points shows as
    s/72 · min(dpi, column_px / width in inches) pixels. Tick labels, titles, legends and node
    labels all count; empty and invisible texts do not."""
    fig.canvas.draw()
    sizes = [
        t.get_fontsize()
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.figure is not None
    ]
    if not sizes:
        return float("inf")
    scale = min(fig.dpi, column_px / fig.get_size_inches()[0])
    return float(min(sizes)) / 72.0 * scale


def figure_png(fig: Any) -> bytes:
    """``fig`` as the inline backend writes it: a PNG at ``fig.dpi``, cropped to its content."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi, bbox_inches="tight")
    return buffer.getvalue()


SCROLL_BOX = (
    '<div style="overflow-x: auto; max-width: 100%;">'
    '<img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
    'style="max-width: none; width: {width}px; height: {height}px;" alt="{alt}"></div>'
)
"""A PNG at its natural size in a box as wide as the output column that scrolls sideways (the
inspector's widget does the same for its tree image)."""


def show_figure(fig: Any, column_px: float = NOTEBOOK_COLUMN_PX, alt: str = "") -> float:
    """Show ``fig`` in a notebook, legibly, and close it; returns its smallest text in CSS
    pixels as displayed. A figure as wide as the column or narrower is shown as the inline
    backend shows it. JupyterLab scales a wider image down to the column, and a large tree's
    labels with it (a tree of M = 1, L = 4, K = 8 drawn at 993 px from 2,914): such a
    figure is shown at its natural size in a box that scrolls sideways (:data:`SCROLL_BOX`),
    so its text keeps its size. Without IPython nothing is shown."""
    png = figure_png(fig)
    width, height = Image.open(io.BytesIO(png)).size
    scrolls = width > column_px
    smallest = displayed_text_px(fig, column_px=float("inf") if scrolls else column_px)
    try:
        from IPython.display import HTML, Image as PngImage, display  # a notebook's, only here
    except ImportError:  # pragma: no cover - IPython ships with the notebooks' environment
        close_figure(fig)
        return smallest
    if scrolls:
        display(
            HTML(
                SCROLL_BOX.format(
                    data=base64.b64encode(png).decode("ascii"),
                    width=width,
                    height=height,
                    alt=html.escape(alt or "a figure wider than the column: scroll sideways"),
                )
            )
        )
    else:
        display(PngImage(data=png, format="png"))
    close_figure(fig)
    return smallest


def _rollout_arrays(tree: Any, entropy_estimate: str) -> TreeArrays:
    return tree_arrays(tree, entropy_estimate)


def turn_label(tree: TreeArrays | Any, node_id: int, width: int = LABEL_WIDTH) -> str:
    """The drawn label of one node of a rollout tree or of tree arrays with records."""
    arrays = tree if isinstance(tree, TreeArrays) else _rollout_arrays(tree, "sampled_nll")
    return node_labels(arrays, width=width)[node_id]


def grown_by_round(tree: TreeArrays, upto_round: int) -> np.ndarray:
    """(N,) bool: the nodes that existed after expansion round ``upto_round`` (0 = the initial
    chains), from the ``expansion_round`` node array (ancestors included, so the mask is always
    a tree); every node when the tree has no rounds."""
    rounds = tree.node_arrays.get("expansion_round")
    if rounds is None:
        return np.ones(tree.num_nodes, dtype=bool)
    keep = _as_numpy(rounds) <= upto_round
    keep[ROOT] = True
    for _ in range(tree.num_nodes):  # close under ancestors, one level per step
        closed = keep.copy()
        closed[tree.parent[keep & (tree.parent >= 0)]] = True
        if np.array_equal(closed, keep):
            break
        keep = closed
    return keep


COMPARISON_METRICS = {
    "distinct_queries": "distinct queries per prompt",
    "distinct_answers": "distinct answers per prompt",
    "correct_leaf_share": "share of correct leaves",
    "generated_tokens_per_leaf": "generated tokens per leaf",
}


def plot_expansion_comparison(
    per_prompt: "pd.DataFrame",
    method_column: str = "method",
    metrics: Mapping[str, str] = COMPARISON_METRICS,
    confidence: float = 0.95,
) -> tuple[Any, Any]:
    """Small multiples (2 per row, readable in a notebook column): per metric, one bar per
    rollout method at its mean over prompts, with its 95% Student-t interval over prompts as
    error bar (``per_prompt``: one row per (method, prompt),
    :func:`at2po_lib.rollout.export.prompt_summary`). The intervals are returned in
    ``fig.at2po_intervals`` (method, metric, mean, low, high, prompts)."""
    names = list(metrics)
    rows = int(np.ceil(len(names) / 2))
    fig, axes = plt.subplots(rows, 2, figsize=(8.0, 2.9 * rows), squeeze=False)
    methods = list(dict.fromkeys(per_prompt[method_column]))
    intervals = []
    for ax, metric in zip(axes.ravel(), names):
        means, errs = [], [[], []]
        for m in methods:
            values = per_prompt.loc[per_prompt[method_column] == m, metric].to_numpy(float)
            ci = seed_mean_ci(values, confidence)
            low, high = (ci.low, ci.high) if np.isfinite(ci.low) else (ci.estimate, ci.estimate)
            means.append(ci.estimate)
            errs[0].append(ci.estimate - low)
            errs[1].append(high - ci.estimate)
            intervals.append(
                {
                    "method": m,
                    "metric": metric,
                    "mean": ci.estimate,
                    "low": low,
                    "high": high,
                    "prompts": int(np.isfinite(values).sum()),
                }
            )
        ax.bar(methods, means, yerr=errs, capsize=4, color=[f"C{i}" for i in range(len(methods))])
        ax.set_title(metrics[metric], fontsize=10)
        ax.tick_params(labelsize=9)
    for ax in axes.ravel()[len(names) :]:
        ax.set_axis_off()
    n = per_prompt.groupby(method_column).size().min() if len(per_prompt) else 0
    fig.suptitle(
        f"Rollout methods on the same {n} prompts and leaf budget "
        f"(mean, {confidence:.0%} t-interval over prompts)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.at2po_intervals = pd.DataFrame(intervals)
    return fig, axes


def comparison_sentence(intervals: "pd.DataFrame", method: str = "entropy") -> str:
    """One generated sentence per metric: the best method, and whether ``method``'s interval
    overlaps the best one's (at a few prompts, the comparison rarely separates methods)."""
    lower_is_better = {"generated_tokens_per_leaf"}
    parts = []
    for metric, group in intervals.groupby("metric", sort=False):
        g = group.set_index("method")
        best = g["mean"].idxmin() if metric in lower_is_better else g["mean"].idxmax()
        text = f"{COMPARISON_METRICS.get(metric, metric)}: best {best} ({g.loc[best, 'mean']:.2f})"
        if method in g.index and best != method:
            overlap = not (
                g.loc[method, "high"] < g.loc[best, "low"]
                or g.loc[method, "low"] > g.loc[best, "high"]
            )
            text += f", {method} {g.loc[method, 'mean']:.2f}: " + (
                "the intervals overlap, no difference shown" if overlap else "clearly behind"
            )
        parts.append(text)
    return "; ".join(parts) + "."


# --------------------------------------------------------------------------------------------
# Which tree to show: stated rules
# --------------------------------------------------------------------------------------------
EXAMPLE_RULE = (
    "the first tree whose scored leaves have mixed rewards (some right, some wrong) "
    "and whose branch points lie at more than one depth"
)


def branch_depths(tree: TreeArrays) -> np.ndarray:
    """Sorted depths of the nodes where the tree branches: parents of expansion-grown nodes
    when the tree records rounds, else nodes with two or more children."""
    depth = node_depths(tree.parent).numpy()
    rounds = tree.node_arrays.get("expansion_round")
    if rounds is not None and (_as_numpy(rounds) > 0).any():
        grown = np.flatnonzero(_as_numpy(rounds) > 0)
        duplicate = _as_numpy(tree.node_arrays.get("duplicate_of", np.full(tree.num_nodes, -1)))
        grown = grown[duplicate[grown] < 0]
        starts = grown[
            (_as_numpy(rounds)[tree.parent[grown]] < _as_numpy(rounds)[grown])
            | (tree.parent[grown] == ROOT)
        ]  # a branch's first node, not its chain
        return np.unique(depth[tree.parent[starts]])
    kids = np.bincount(tree.parent[1:], minlength=tree.num_nodes)
    return np.unique(depth[kids >= 2])


def has_mixed_rewards(tree: TreeArrays) -> bool:
    scored = tree.leaf_reward[np.isfinite(tree.leaf_reward)]
    return bool(scored.size and (scored > 0).any() and (scored <= 0).any())


def choose_example_tree(trees: Sequence[TreeArrays]) -> tuple[int, str]:
    """(index, sentence): the tree to draw by :data:`EXAMPLE_RULE`; falling back to the first
    tree with mixed rewards, then to tree 0, and saying which rule picked it."""
    if not trees:
        raise ValueError("choose_example_tree: no trees")
    for i, t in enumerate(trees):
        if has_mixed_rewards(t) and len(branch_depths(t)) >= 2:
            return i, (f"tree {i}: {EXAMPLE_RULE} (branch depths {branch_depths(t).tolist()})")
    for i, t in enumerate(trees):
        if has_mixed_rewards(t):
            return i, (
                f"tree {i}: no tree branches at more than one depth; the first with mixed "
                f"rewards (branch depths {branch_depths(t).tolist()})"
            )
    return 0, (
        "tree 0: no tree has mixed rewards (every leaf of every tree shares one reward, "
        "so every advantage is 0)"
    )


CREDIT_RULE = (
    "the tree, among those with mixed rewards, where the four value modes disagree "
    "most: the largest max-minus-min of V_n over modes at any node (first on ties)"
)


def value_mode_spread(trees: Sequence[TreeArrays]) -> np.ndarray:
    """(T,) per tree: the largest difference between value modes at any node (max over nodes of
    max_mode V_n − min_mode V_n; docs/method.md §6), all trees in one batched call per mode."""
    forest = Forest.from_trees(list(trees), dtype=torch.float64)
    stacked = torch.stack([forest_node_values(forest, m) for m in VALUE_MODES])  # (modes, N)
    spread = (stacked.amax(0) - stacked.amin(0)).nan_to_num(0.0).numpy()
    return np.maximum.reduceat(spread, forest.offsets[:-1].numpy())


def choose_credit_example(trees: Sequence[TreeArrays]) -> tuple[int, str]:
    """(index, sentence): the tree for notebook 03's value-mode figure by :data:`CREDIT_RULE`
    (tree 0 when no tree has mixed rewards)."""
    if not trees:
        raise ValueError("choose_credit_example: no trees")
    mixed = np.array([has_mixed_rewards(t) for t in trees])
    if not mixed.any():
        return 0, "tree 0: no tree has mixed rewards (all values and advantages are 0)"
    spread = np.full(len(trees), -np.inf)
    spread[mixed] = value_mode_spread([t for t, m in zip(trees, mixed) if m])
    best = int(np.argmax(spread))
    return best, (f"tree {best}: {CREDIT_RULE}; its modes differ by up to {spread[best]:.3g}")
