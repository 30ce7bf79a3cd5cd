r"""The headline blocks in one picture: the differences the paired interval reads.

- **Left, block by block.** In each headline block, AT2PO minus GRPO and AT2PO minus GRPO at
  AT2PO's budget on the multi-hop average (greedy EM × 100): one point per block and method.
  Beside them, each comparison's mean over blocks with its paired 95% interval, the interval
  the claims report (:func:`.block_pairs.blocked_difference`: block differences crossed with
  the question term), 0, and the paper's AT2PO − GRPO (Qwen3-4B, Table 1).
- **Right, as blocks accumulate.** AT2PO − GRPO on the first n blocks, n = 2, 3, ...: the
  estimate and its interval after each block. How many blocks a set runs is fixed before the
  data, not by this reading (the headline is closed at 15: docs/toy_study.md, the looks the
  study took); the panel shows how far the estimate moves on a few blocks, and how the
  interval narrows with √n.

Both panels are computed from the finished blocks (:func:`.block_pairs.load_block_outcomes`);
nothing is drawn before two blocks hold both methods.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..study.block_records import HEADLINE_SET
from .block_pairs import block_scores, blocked_difference, set_rows
from .claims import published_avg
from .labels import method_label

REFERENCE = "at2po"
COMPARED = ("grpo", "grpo_tree_budget")
"""AT2PO minus each of these, in the order drawn."""

MARKERS = {"grpo": "o", "grpo_tree_budget": "s"}
COLOURS = {"grpo": "tab:blue", "grpo_tree_budget": "tab:orange"}


def per_block_differences(profile: str, blocks: pd.DataFrame) -> pd.DataFrame:
    """Block × compared method: AT2PO's multi-hop average minus the method's, in each headline
    block (fractions; the rows of :func:`.block_pairs.block_scores`)."""
    tidy, _ = block_scores(profile, blocks, HEADLINE_SET)
    if tidy.empty:
        return pd.DataFrame()
    wide = tidy.pivot(index="block", columns="method", values="multihop").sort_index()
    present = [m for m in COMPARED if m in wide and REFERENCE in wide]
    return pd.DataFrame({m: wide[REFERENCE] - wide[m] for m in present}).dropna(how="all")


def accumulating_intervals(
    blocks: pd.DataFrame, method: str = "grpo", *, allow_revisions: bool = False
) -> pd.DataFrame:
    """AT2PO − ``method`` on the first n headline blocks (in block order) for every n from 2:
    columns ``blocks``, ``estimate``, ``low``, ``high`` (fractions), the last row the claims'."""
    rows, members = set_rows(blocks, HEADLINE_SET)
    if not members:
        return pd.DataFrame(columns=["blocks", "estimate", "low", "high"])
    numbers = sorted(rows["block"].unique())
    out = []
    for n in range(2, len(numbers) + 1):
        first = rows[rows["block"].isin(numbers[:n])]
        found = blocked_difference(
            first, HEADLINE_SET, REFERENCE, method, members, allow_revisions=allow_revisions
        )
        if found is not None:
            i = found.interval
            out.append(
                {"blocks": len(found.blocks), "estimate": i.estimate, "low": i.low, "high": i.high}
            )
    return pd.DataFrame(out, columns=["blocks", "estimate", "low", "high"])


def headline_blocks_figure(
    profile: str, blocks: pd.DataFrame, *, allow_revisions: bool = False
) -> Figure | None:
    """The two panels of the module docstring; None before two blocks hold AT2PO and GRPO."""
    differences = per_block_differences(profile, blocks)
    growing = accumulating_intervals(blocks, allow_revisions=allow_revisions)
    if differences.empty or growing.empty:
        return None
    _, members = set_rows(blocks, HEADLINE_SET)
    paper = published_avg(REFERENCE, "multihop") - published_avg("grpo", "multihop")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    _draw_blocks(left, differences, blocks, members, paper, allow_revisions)
    _draw_growing(right, growing, paper)
    fig.tight_layout()
    return fig


def _draw_blocks(
    ax: Axes,
    differences: pd.DataFrame,
    blocks: pd.DataFrame,
    members: Sequence[str],
    paper: float,
    allow_revisions: bool,
) -> None:
    """Left panel: the block differences, then each comparison's mean and paired interval."""
    numbers = differences.index.to_numpy()
    end = numbers.max() + 1.2
    for k, method in enumerate(differences.columns):
        offset = (k - (len(differences.columns) - 1) / 2) * 0.18
        label = f"AT2PO − {method_label(method)}"
        ax.scatter(
            numbers + offset,
            100 * differences[method],
            marker=MARKERS.get(method, "o"),
            color=COLOURS.get(method),
            label=label,
            zorder=3,
        )
        found = blocked_difference(
            blocks, HEADLINE_SET, REFERENCE, method, members, allow_revisions=allow_revisions
        )
        if found is None:
            continue
        i = found.interval
        x = end + 0.5 * k
        ax.errorbar(
            [x],
            [100 * i.estimate],
            yerr=[[100 * (i.estimate - i.low)], [100 * (i.high - i.estimate)]],
            fmt=MARKERS.get(method, "o"),
            color=COLOURS.get(method),
            markerfacecolor="white",
            capsize=4,
            zorder=3,
        )
    ax.axhline(0, color="black", linewidth=0.8)
    if np.isfinite(paper):
        ax.axhline(paper, color="grey", linestyle="--", linewidth=1, label=_paper_label(paper))
    ax.axvline(end - 0.6, color="lightgrey", linewidth=0.8)
    ticks = [*numbers, end + 0.25]
    ax.set_xticks(ticks, [*(str(b) for b in numbers), "mean\n[95% CI]"])
    ax.set_xlabel("headline block (seed 100 + block)")
    ax.set_ylabel("multi-hop EM difference (points)")
    ax.set_title(f"AT2PO minus each baseline, block by block ({len(numbers)} blocks)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2, fontsize=8, frameon=False)


def _draw_growing(ax: Axes, growing: pd.DataFrame, paper: float) -> None:
    """Right panel: AT2PO − GRPO on the first n blocks."""
    n = growing["blocks"].to_numpy()
    estimate = 100 * growing["estimate"].to_numpy()
    ax.errorbar(
        n,
        estimate,
        yerr=[
            estimate - 100 * growing["low"].to_numpy(),
            100 * growing["high"].to_numpy() - estimate,
        ],
        fmt="o",
        color=COLOURS["grpo"],
        capsize=3,
    )
    ax.axhline(0, color="black", linewidth=0.8)
    if np.isfinite(paper):
        ax.axhline(paper, color="grey", linestyle="--", linewidth=1, label=_paper_label(paper))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.24), fontsize=8, frameon=False)
    ax.set_xticks(n)
    ax.set_xlabel("blocks read (the first n)")
    ax.set_ylabel("AT2PO − GRPO, multi-hop EM (points)")
    ax.set_title("The paired interval as blocks accumulate")


def _paper_label(paper: float) -> str:
    return f"the paper's AT2PO − GRPO (Qwen3-4B): {paper:+.1f}"
