"""Drawing rollout trees with matplotlib only (no graphviz).

Layout (:func:`tree_layout`): a tidy layered drawing. Depth sets the row (root on top);
leaves take consecutive columns in depth-first order (children visited by increasing node
id), and every internal node sits at the midpoint of its first and last child, so subtrees
never overlap and edges never cross.

    >>> from at2po_lib.credit import example_tree, node_values
    >>> t = example_tree()
    >>> fig, ax = draw_tree(t.parent, node_color=node_values(t.parent, t.entropy, t.leaf_reward),
    ...                     leaf_reward=t.leaf_reward, title="entropy_softmax values")

Used by notebook 02 (rollout trees: colour = entropy) and notebook 03 (colour = value or
advantage). Functions take data and return ``(fig, ax)``; they never write files.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


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
        raise ValueError(f"node {int(np.flatnonzero(np.isnan(y))[0])} is not connected to the "
                         "root (the parent array has a cycle)")
    return x, y


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
) -> tuple[Any, Any]:
    """Draw one tree; returns ``(fig, ax)``.

    parent (N,) int, or a :class:`at2po_lib.forest.TreeArrays` (its ``parent``, and its
    ``leaf_reward`` unless given); node_color (N,) floats mapped through ``cmap`` (NaN → grey; a diverging
    norm centred on 0 when the values take both signs, as values and advantages do);
    node_labels (N,) strings written in the nodes (default: node ids); leaf_reward (N,) floats,
    written as ``r=…`` under each leaf (NaN skipped).
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize, TwoSlopeNorm

    if hasattr(parent, "parent") and hasattr(parent, "leaf_reward"):  # TreeArrays
        leaf_reward = parent.leaf_reward if leaf_reward is None else leaf_reward
        parent = parent.parent
    parent_np = _as_numpy(parent).astype(np.int64)
    x, y = tree_layout(parent_np)
    n = len(parent_np)
    if ax is None:
        width = max(4.0, 0.55 * (np.nanmax(x) + 1) + 1.5)
        height = max(2.5, 1.0 * (-np.nanmin(y) + 1) + 0.5)
        fig, ax = plt.subplots(figsize=(width, height))
    else:
        fig = ax.figure

    for node in range(1, n):
        p = parent_np[node]
        ax.plot([x[p], x[node]], [y[p], y[node]], color="0.6", lw=1.0, zorder=1)

    facecolors: Any = "white"
    if node_color is not None:
        values = _as_numpy(node_color).astype(float)
        if values.shape != (n,):
            raise ValueError(f"node_color has shape {values.shape}, expected ({n},)")
        finite = values[np.isfinite(values)]
        lo = vmin if vmin is not None else (finite.min() if finite.size else 0.0)
        hi = vmax if vmax is not None else (finite.max() if finite.size else 1.0)
        if lo < 0 < hi:
            bound = max(-lo, hi)
            norm: Any = TwoSlopeNorm(vcenter=0.0, vmin=-bound, vmax=bound)
        else:
            norm = Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1e-9)
        colormap = plt.get_cmap(cmap)
        grey = (0.85, 0.85, 0.85, 1.0)
        facecolors = [colormap(norm(v)) if np.isfinite(v) else grey for v in values]
        mappable = plt.cm.ScalarMappable(norm=norm, cmap=colormap)
        fig.colorbar(mappable, ax=ax, shrink=0.8, pad=0.02, label=colorbar_label)
    ax.scatter(x, y, s=520, c=facecolors, edgecolors="0.25", linewidths=1.0, zorder=2)

    labels = [str(i) for i in range(n)] if node_labels is None else list(node_labels)
    if len(labels) != n:
        raise ValueError(f"node_labels has {len(labels)} entries, expected {n}")
    for node in range(n):
        ax.text(x[node], y[node], labels[node], ha="center", va="center", fontsize=7, zorder=3)

    if leaf_reward is not None:
        rewards = _as_numpy(leaf_reward).astype(float)
        if rewards.shape != (n,):
            raise ValueError(f"leaf_reward has shape {rewards.shape}, expected ({n},)")
        for node in np.flatnonzero(np.isfinite(rewards)):
            ax.text(x[node], y[node] - 0.38, f"r={rewards[node]:g}", ha="center", va="top",
                    fontsize=7, color="0.2")

    ax.set_xlim(np.nanmin(x) - 0.7, np.nanmax(x) + 0.7)
    ax.set_ylim(np.nanmin(y) - 0.8, 0.5)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=10)
    return fig, ax
