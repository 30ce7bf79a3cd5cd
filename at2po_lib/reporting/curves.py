r"""Training curves over rollout steps (notebook 04; Figure 3 builds on them).

Plotting functions take the frames of :mod:`at2po_lib.record.reading`, return ``(fig, axes)`` and write no
files, so a notebook decides where (and whether) a figure is saved.

- :func:`plot_training_curves`: reward, policy entropy, clip fractions... over steps.
- :func:`plot_figure3`: Figure 3 — policy entropy (left) and HotpotQA EM (right) over steps.
- :func:`start_end_table`: a metric over the first and the last steps of each run, and its
  change, with t intervals over seeds (is the entropy collapsing? is the reward rising?);
  :func:`format_start_end` for reading it.
- :func:`table1_frame`: mean ± std over seeds per method and dataset column.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..evaluation.stats import permutation_test, seed_difference_ci, seed_mean_ci

CURVE_LABELS = {
    # metric name as TRL / AT2POTrainer log it (the metrics.jsonl column): axis label
    "reward": "mean leaf reward",
    "entropy": "policy entropy (nats/token)",
    "clip_ratio/region_mean": "clipped tokens (share)",
    "clip_ratio/low_mean": "clipped low (share)",
    "clip_ratio/high_mean": "clipped high (share)",
    "kl": "KL to reference",
    "turn_kl_entropy": "turn KL entropy",
    "rollout/turns_mean": "turns per trajectory",
    "rollout/tool_calls_mean": "searches per trajectory",
    "rollout/answered": "leaves that answered (share)",
    "completions/mean_length": "policy tokens per trajectory",
}


def _smooth(values: pd.Series, window: int) -> pd.Series:
    return values.rolling(window, min_periods=1).mean() if window > 1 else values


def plot_training_curves(
    metrics: pd.DataFrame,
    columns: Sequence[str] = ("reward", "entropy", "clip_ratio/region_mean"),
    smooth: int = 1,
    hue: str = "method",
    axes=None,
):
    """One panel per metric over rollout steps, one line per ``hue`` (mean over seeds, with a
    min–max band when there are several seeds). Returns ``(fig, axes)``."""
    columns = [c for c in columns if c in metrics.columns]
    if not columns:
        raise ValueError("none of the requested metric columns is in the records")
    own = axes is None
    if own:
        rows = (len(columns) + 1) // 2  # two panels per row: readable in a notebook column
        fig, grid = plt.subplots(rows, 2, figsize=(8, 2.9 * rows + 0.5), squeeze=False)
        spare = list(grid.ravel()[len(columns) :])
        for ax in spare:
            ax.set_axis_off()
        axes = grid.ravel()[: len(columns)]
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
                ax.fill_between(
                    mean.index,
                    per_seed.min(axis=1),
                    per_seed.max(axis=1),
                    color=line.get_color(),
                    alpha=0.15,
                    linewidth=0,
                )
        ax.set_xlabel("training step")
        ax.set_title(f"{CURVE_LABELS.get(column, column)} per step", fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if not own:
        axes[0].legend(fontsize="small")  # drawn into a caller's figure: keep it local
        return fig, axes
    seeds = metrics.groupby(hue)["seed"].nunique().max() if "seed" in metrics else 1
    title = "mean over seeds, band: min-max" if seeds > 1 else "one seed per method"
    if spare:  # the empty panel holds the legend, away from every curve
        spare[0].legend(handles, labels, loc="center", fontsize=9, title=title, title_fontsize=9)
        fig.tight_layout()
    else:
        fig.legend(
            handles,
            labels,
            loc="lower center",
            ncol=min(len(labels), 4),
            fontsize=9,
            frameon=False,
            title=title,
            title_fontsize=9,
        )
        fig.tight_layout(rect=(0, 0.7 / fig.get_size_inches()[1], 1, 1))
    return fig, axes


def plot_validation_em(evals: pd.DataFrame, dataset: str, hue: str = "method", ax=None):
    """Greedy validation EM of one dataset over rollout steps (mean over seeds)."""
    rows = evals[evals["dataset"] == dataset]
    if rows.empty:
        raise ValueError(
            f"no validation rows for dataset {dataset!r} "
            f"(have: {sorted(evals['dataset'].unique()) if len(evals) else []})"
        )
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


def plot_figure3(
    metrics: pd.DataFrame, evals: pd.DataFrame, dataset: str = "tiny_hotpotqa", smooth: int = 1
):
    """Figure 3: policy entropy over steps (left), ``dataset`` EM over steps (right)."""
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
    if finals.empty:
        return pd.DataFrame()
    stats = (
        finals.groupby(["method", "dataset"], sort=False)[value]
        .agg(["mean", "std", "count"])
        .reset_index()
    )

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


def start_end_table(
    metrics: pd.DataFrame,
    columns: Sequence[str] = ("entropy", "reward"),
    max_window: int = 8,
    confidence: float = 0.95,
    baseline: str | None = None,
) -> pd.DataFrame:
    """Each metric over the first and the last steps of every run, and the change between them.

    Per run (method, seed) the window is the first / last quarter of its recorded steps (at
    least 1, at most ``max_window`` steps); per method the table gives the mean over seeds of
    the start value, the end value and the change (end − start, paired within each seed),
    each with its Student-t interval over seeds (:func:`at2po_lib.evaluation.stats.seed_mean_ci`; NaN
    bounds with one seed). With a ``baseline`` method, ``vs_baseline`` is each method's change
    minus the baseline's, with Welch's interval (runs of two methods are unpaired:
    :func:`at2po_lib.evaluation.stats.seed_difference_ci`) and the permutation test over seed labels
    (``vs_baseline_p``: :func:`at2po_lib.evaluation.stats.permutation_test`). One tidy row per (method,
    metric).
    """
    columns = [c for c in columns if c in metrics.columns]
    if metrics.empty or not columns:
        return pd.DataFrame()
    ordered = metrics.sort_values(["method", "seed", "step"], kind="stable")
    runs = ordered.groupby(["method", "seed"], sort=False)
    size = runs["step"].transform("size")
    window = (size // 4).clip(lower=1, upper=max_window)
    position = runs.cumcount()
    start = ordered[position < window].groupby(["method", "seed"], sort=False)[columns].mean()
    end = ordered[position >= size - window].groupby(["method", "seed"], sort=False)[columns].mean()
    rows = []
    for method in dict.fromkeys(metrics["method"]):
        for column in columns:
            first, last = start.loc[method, column], end.loc[method, column]
            change = last - first
            row = {"method": method, "metric": column, "seeds": int(change.notna().sum())}
            if not row["seeds"]:
                continue  # a metric these runs did not record (e.g. added after them)
            for name, values in (("start", first), ("end", last), ("change", change)):
                ci = seed_mean_ci(values.to_numpy(), confidence)
                row.update({name: ci.estimate, f"{name}_low": ci.low, f"{name}_high": ci.high})
            base = (
                end.loc[baseline, column] - start.loc[baseline, column]
                if baseline is not None and baseline != method and baseline in start.index
                else None
            )
            if base is not None and base.notna().any():
                ci = seed_difference_ci(change.to_numpy(), base.to_numpy(), confidence)
                test = permutation_test(change.dropna().to_numpy(), base.dropna().to_numpy())
                row.update(
                    {
                        "vs_baseline": ci.estimate,
                        "vs_baseline_low": ci.low,
                        "vs_baseline_high": ci.high,
                        "baseline": baseline,
                        "vs_baseline_p": test.p,
                        "vs_baseline_splits": test.splits,
                        "vs_baseline_exact": test.exact,
                    }
                )
            rows.append(row)
    return pd.DataFrame.from_records(rows)


def format_start_end(table: pd.DataFrame, digits: int = 3, flat: bool = False) -> pd.DataFrame:
    """:func:`start_end_table` for reading: one row per method, ``0.083 [0.078, 0.089]`` cells
    per (metric, start / end / change [/ change vs the baseline]), and the number of seeds.
    ``flat``: one level of column names (``entropy change``), for Markdown and LaTeX."""
    if table.empty:
        return table
    baseline = (
        table["baseline"].dropna().iloc[0]
        if "baseline" in table and table["baseline"].notna().any()
        else None
    )
    labels = {"start": "start", "end": "end", "change": "change"}
    if baseline is not None:
        labels["vs_baseline"] = f"change vs {baseline}"

    def fmt(row, name: str) -> str:
        value, low, high = row[name], row[f"{name}_low"], row[f"{name}_high"]
        if pd.isna(value):
            return "–"
        sign = "+" if name in ("change", "vs_baseline") else ""
        text = f"{value:{sign}.{digits}f}"
        return text if pd.isna(low) else f"{text} [{low:{sign}.{digits}f}, {high:{sign}.{digits}f}]"

    cells = [
        {
            "method": row["method"],
            "seeds": row["seeds"],
            **{(row["metric"], label): fmt(row, name) for name, label in labels.items()},
        }
        for _, row in table.iterrows()
    ]
    frame = pd.DataFrame(cells).groupby("method", sort=False).first()
    seeds = frame.pop("seeds")
    if flat:
        frame.columns = [f"{metric} {label}" for metric, label in frame.columns]
        frame["seeds"] = seeds
        return frame
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    frame[("", "seeds")] = seeds
    return frame
