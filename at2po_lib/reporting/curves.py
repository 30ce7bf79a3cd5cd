r"""Training curves over rollout steps (notebook 04; Figure 3 builds on them).

Plotting functions take the frames of :mod:`.records`, return ``(fig, axes)`` and write no
files, so a notebook decides where (and whether) a figure is saved.

- :func:`plot_training_curves`: reward, policy entropy, clip fractions... over steps.
- :func:`plot_figure3`: Figure 3 — policy entropy (left) and HotpotQA EM (right) over steps.
- :func:`table1_frame`: mean ± std over seeds per method and dataset column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import pandas as pd

CURVE_LABELS = {
    "reward": "mean leaf reward",
    "entropy": "policy entropy (nats/token)",
    "clip_frac": "clipped tokens (share)",
    "clip_frac_low": "clipped low (share)",
    "clip_frac_high": "clipped high (share)",
    "kl": "KL to reference",
    "turn_kl_entropy": "turn KL entropy",
    "turns_per_trajectory": "turns per trajectory",
    "tool_calls_per_trajectory": "searches per trajectory",
}


def _smooth(values: pd.Series, window: int) -> pd.Series:
    return values.rolling(window, min_periods=1).mean() if window > 1 else values


def plot_training_curves(metrics: pd.DataFrame,
                         columns: Sequence[str] = ("reward", "entropy", "clip_frac"),
                         smooth: int = 1, hue: str = "method", axes=None):
    """One panel per metric over rollout steps, one line per ``hue`` (mean over seeds, with a
    min–max band when there are several seeds). Returns ``(fig, axes)``."""
    import matplotlib.pyplot as plt
    import numpy as np

    columns = [c for c in columns if c in metrics.columns]
    if not columns:
        raise ValueError("none of the requested metric columns is in the records")
    if axes is None:
        fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.2),
                                 squeeze=False)
        axes = axes[0]
    else:
        axes = np.atleast_1d(axes)
        fig = axes[0].figure
    for ax, column in zip(axes, columns):
        for name, group in metrics.groupby(hue, sort=False):
            per_seed = group.pivot_table(index="step", columns="seed", values=column)
            per_seed = per_seed.apply(lambda s: _smooth(s, smooth))
            mean = per_seed.mean(axis=1)
            (line,) = ax.plot(mean.index, mean.values, label=str(name))
            if per_seed.shape[1] > 1:
                ax.fill_between(mean.index, per_seed.min(axis=1), per_seed.max(axis=1),
                                color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_xlabel("training step")
        ax.set_ylabel(CURVE_LABELS.get(column, column))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    return fig, axes


def plot_validation_em(evals: pd.DataFrame, dataset: str, hue: str = "method", ax=None):
    """Greedy validation EM of one dataset over rollout steps (mean over seeds)."""
    import matplotlib.pyplot as plt

    rows = evals[evals["dataset"] == dataset]
    if rows.empty:
        raise ValueError(f"no validation rows for dataset {dataset!r} "
                         f"(have: {sorted(evals['dataset'].unique()) if len(evals) else []})")
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
    fig = ax.figure
    for name, group in rows.groupby(hue, sort=False):
        mean = group.groupby("step")["em"].mean()
        ax.plot(mean.index, mean.values, marker="o", markersize=3, label=str(name))
    ax.set_xlabel("training step")
    ax.set_ylabel(f"{dataset} EM (greedy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig, ax


def plot_figure3(metrics: pd.DataFrame, evals: pd.DataFrame, dataset: str = "tiny_hotpotqa",
                 smooth: int = 1):
    """Figure 3: policy entropy over steps (left), ``dataset`` EM over steps (right)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.3))
    plot_training_curves(metrics, ["entropy"], smooth=smooth, axes=[axes[0]])
    plot_validation_em(evals, dataset, ax=axes[1])
    axes[0].set_title("policy entropy")
    axes[1].set_title(f"{dataset} EM")
    fig.tight_layout()
    return fig, axes


def table1_frame(finals: pd.DataFrame, value: str = "em") -> pd.DataFrame:
    """Methods × datasets (plus the weighted group averages): "mean ± std" over seeds (×100),
    with the number of seeds. ``finals`` as returned by :func:`load_final_evals`."""
    import pandas as pd

    if finals.empty:
        return pd.DataFrame()
    stats = (finals.groupby(["method", "dataset"], sort=False)[value]
             .agg(["mean", "std", "count"]).reset_index())

    def cell(row) -> str:
        if row["count"] > 1:
            return f"{100 * row['mean']:.1f} ± {100 * row['std']:.1f}"
        return f"{100 * row['mean']:.1f}"

    stats["cell"] = stats.apply(cell, axis=1)
    table = stats.pivot(index="method", columns="dataset", values="cell")
    order = list(dict.fromkeys(finals["dataset"]))
    table = table[[c for c in order if c in table.columns]]
    table["seeds"] = stats.groupby("method")["count"].max()
    return table.loc[list(dict.fromkeys(finals["method"]))]
