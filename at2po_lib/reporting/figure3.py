r"""Figure 3: policy entropy over training steps per method (left) and the HotpotQA(-analogue)
EM over steps (right), mean over seeds with a 95% band.

The paper (docs/method.md §10) reads its Figure 3 as "token-level GRPO's entropy collapses
early while AT2PO's stays stable" and "AT2PO's validation EM rises highest". The band here is
the t-interval of the mean over seeds (none under three seeds), clipped to what the metric can
be (EM in [0, 1], entropy >= 0), so a reader can see whether the toy's curves separate at all;
GRPO and AT2PO, the pair the claim is about, are drawn bold and alone with a band (eight bands
overlapped into one grey field); every other method is a thin line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import t

from .labels import method_label

if TYPE_CHECKING:
    import pandas as pd


def seed_band(per_seed: pd.DataFrame, confidence: float = 0.95):
    """Mean over the columns (seeds) and its t-interval, per row (step). With one seed the
    band collapses onto the mean."""
    mean = per_seed.mean(axis=1)
    n = per_seed.count(axis=1)
    sem = per_seed.std(axis=1, ddof=1) / np.sqrt(n)
    half = sem * t.ppf(0.5 + confidence / 2, (n - 1).clip(lower=1))
    half = half.where(n > 1, 0.0).fillna(0.0)
    return mean, mean - half, mean + half


FOCUS_STYLES = {
    "grpo": {"color": "black", "lw": 2.2},
    "at2po": {"color": "tab:red", "lw": 2.2},
    "at2po_exact": {"color": "tab:red", "lw": 1.4, "ls": "--"},
}
"""The headline pair drawn bold (the claim is about GRPO against AT2PO), the exact-entropy
variant dashed in AT2PO's colour; every other method thin, in the default cycle."""
OTHER_STYLE = {"lw": 1.0, "alpha": 0.75}
OTHER_COLOURS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
)
"""The other methods' colours, in order: none is black or red (the headline pair's)."""
BAND_METHODS = ("grpo", "at2po")
"""The methods drawn with a band: the pair the paper's claim is about."""
BOUNDS = {"entropy": (0.0, None), "em": (0.0, 1.0)}
"""What each metric can be: a band is clipped to it (a 3-seed t-band of EM dipped below 0)."""
MIN_BAND_SEEDS = 3
"""Fewer seeds draw no band: with 2, t has one degree of freedom (12.7) and the band would
swamp the panel; the line alone is drawn."""


def _plot_band(
    ax,
    frame: pd.DataFrame,
    x: str,
    y: str,
    label: str,
    smooth: int = 1,
    style: dict | None = None,
    band: bool = True,
) -> None:
    per_seed = frame.pivot_table(index=x, columns="seed", values=y)
    if smooth > 1:  # a trailing mean per seed, before the band: noisy per-step metrics
        per_seed = per_seed.rolling(smooth, min_periods=1).mean()
    mean, low, high = seed_band(per_seed)
    lower, upper = BOUNDS.get(y, (None, None))
    low, high = low.clip(lower=lower, upper=upper), high.clip(lower=lower, upper=upper)
    (line,) = ax.plot(mean.index, mean.values, label=label, **(style or {}))
    if band and per_seed.shape[1] >= MIN_BAND_SEEDS:
        # a faint fill with its edges drawn: several methods' bands stay tellable apart
        ax.fill_between(
            mean.index, low.values, high.values, color=line.get_color(), alpha=0.08, linewidth=0
        )
        for edge in (low, high):
            ax.plot(edge.index, edge.values, color=line.get_color(), lw=0.6, ls=":")


def figure3(
    metrics: pd.DataFrame,
    evals: pd.DataFrame,
    dataset: str,
    methods: Sequence[str] | None = None,
    smooth: int = 4,
):
    """``(fig, axes)``; methods in the given order (default: as they appear in ``metrics``).
    ``smooth``: trailing mean over that many steps of each seed's entropy (1: raw)."""
    # one panel per row, 6.4 in wide: at the report's 150 dpi, 960 px, the image's natural
    # size in a notebook column
    fig, axes = plt.subplots(2, 1, figsize=(6.4, 7.2), sharex=True)
    if metrics.empty:
        for ax in axes:
            ax.text(
                0.5, 0.5, "no training records", ha="center", va="center", transform=ax.transAxes
            )
        return fig, axes
    methods = list(methods or dict.fromkeys(metrics["method"]))
    others = iter(OTHER_COLOURS * (1 + len(methods) // len(OTHER_COLOURS)))
    for method in methods:
        label = method_label(method)
        style = FOCUS_STYLES.get(method) or {**OTHER_STYLE, "color": next(others)}
        rows = metrics[metrics["method"] == method]
        band = method in BAND_METHODS
        if len(rows) and "entropy" in rows:
            _plot_band(axes[0], rows, "step", "entropy", label, smooth, style, band)
        if len(evals):
            val = evals[(evals["method"] == method) & (evals["dataset"] == dataset)]
            if len(val):
                _plot_band(axes[1], val, "step", "em", label, style=style, band=band)
    seeds = metrics.groupby("method")["seed"].nunique()
    axes[0].set_title(
        "Policy entropy over training\n(entropy of the next-token distribution, "
        "policy tokens" + (f"; {smooth}-step mean)" if smooth > 1 else ")"),
        fontsize=10,
    )
    axes[0].set_ylabel("nats / token")
    axes[1].set_title(f"Greedy validation EM on {dataset} over training", fontsize=10)
    axes[1].set_ylabel("EM")
    axes[1].set_xlabel("training step")
    for ax in axes:
        ax.grid(alpha=0.3)
    count = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}–{seeds.max()}"
    banded = " and ".join(method_label(m) for m in BAND_METHODS if m in methods)
    what = (
        f"mean of {count} seeds; band ({banded} only): 95% CI, dotted edges, none under "
        f"{MIN_BAND_SEEDS} seeds"
        if seeds.max() >= MIN_BAND_SEEDS and banded
        else f"mean of {count} seeds, no band"
    )
    handles, labels = axes[0].get_legend_handles_labels()
    columns = 2
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=min(len(labels), columns),
        fontsize=8,
        title=what,
        title_fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        "Figure 3 at toy scale (TinyWorld, a 1.3M-parameter policy):\nnot the paper's numbers",
        fontsize=10,
    )
    rows = (len(labels) + columns - 1) // columns
    fig.tight_layout(rect=(0, 0.03 + 0.027 * (rows + 1), 1, 1))
    return fig, axes
