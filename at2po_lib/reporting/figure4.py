r"""Figure 4: how many turns a sample takes, multi-hop vs single-hop.

The paper (docs/method.md §10) plots the distribution of turns per sample on its validation
sets: multi-hop questions take 3.71 turns on average and 43.5% of single-hop samples take one.
The paper's single-hop figure is about tool calls ("43.5% of samples need a single tool
call", its summary says), its multi-hop mean about turns. So :func:`figure4` draws two panels
and puts each published mark beside the same unit: model turns (the final answer included: one
search then an answer is 2 turns) with the 3.71 turns, tool calls with the 43.5%.
The distribution comes from the per-question outcomes of the final greedy evaluation, one method
at a time.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from ..evaluation import stats
from ..protocol.qa_data import dataset_group
from .labels import groups_of, method_label

PAPER_MULTIHOP_MEAN_TURNS = 3.71
PAPER_SINGLEHOP_ONE_TURN_SHARE = 0.435


UNIT_LABELS = {
    "searches": "tool calls per sample",
    "turns": "model turns per sample (final answer included)",
}


def turn_shares(outcomes: pd.DataFrame, method: str, unit: str = "searches") -> pd.DataFrame:
    """Share of questions per count of ``unit`` (searches or turns), per group (pooled over
    seeds). The count column is called ``count_of``."""
    rows = outcomes[outcomes["method"] == method].copy()
    rows["group"] = rows["dataset"].map(dataset_group)
    rows["count_of"] = rows[unit]
    counts = rows.groupby(["group", "count_of"]).size().rename("count").reset_index()
    counts["share"] = counts["count"] / counts.groupby("group")["count"].transform("sum")
    return counts


def turn_summary(outcomes: pd.DataFrame, method: str) -> pd.DataFrame:
    """Per group: mean turns, mean searches and the share of one-search samples, each with a
    95% CI over seeds and questions."""
    rows = outcomes[outcomes["method"] == method].copy()
    rows["one_search"] = (rows["searches"] == 1).astype(float)
    out = []
    for group, members in groups_of(rows["dataset"].unique()).items():
        for metric in ("turns", "searches", "one_search"):
            ci = stats.mean_ci(rows, method, members, metric=metric)
            out.append(
                {
                    "method": method,
                    "group": group,
                    "metric": metric,
                    "value": ci.estimate,
                    "ci_low": ci.low,
                    "ci_high": ci.high,
                    "n_seeds": ci.n_seeds_a,
                    "n_questions": ci.n_questions,
                }
            )
    return pd.DataFrame(out)


TURN_METRIC_WORDS = {
    "turns": "model turns per sample",
    "searches": "tool calls per sample",
    "one_search": "share of samples with one tool call",
}
""":func:`turn_summary`'s metrics as a learner reads them (the records' names are internal)."""


def turn_table(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`turn_summary` for display: method and group in words, each metric named, its value
    with the 95% interval in one cell (a share in %), the seeds and questions it rests on."""
    if summary.empty:
        return summary
    scale = summary["metric"].map(lambda m: 100.0 if m == "one_search" else 1.0)
    unit = summary["metric"].map(lambda m: "%" if m == "one_search" else "")
    cells = [
        f"{v * k:.2f}{u} [{lo * k:.2f}, {hi * k:.2f}]"
        for v, lo, hi, k, u in zip(
            summary["value"], summary["ci_low"], summary["ci_high"], scale, unit
        )
    ]
    return pd.DataFrame(
        {
            "method": summary["method"].map(method_label),
            "questions": summary["group"].map({"multihop": "multi-hop", "singlehop": "single-hop"}),
            "measure": summary["metric"].map(TURN_METRIC_WORDS),
            "value [95% CI]": cells,
            "seeds": summary["n_seeds"],
            "questions answered": summary["n_questions"],
        }
    ).set_index(["method", "questions", "measure"])


def _share_bars(ax, shares: "pd.DataFrame") -> None:
    groups = list(dict.fromkeys(shares["group"]))
    width = 0.8 / max(len(groups), 1)
    for i, group in enumerate(groups):
        sel = shares[shares["group"] == group]
        ax.bar(
            sel["count_of"] + (i - (len(groups) - 1) / 2) * width,
            sel["share"],
            width,
            label=f"ours, {group} (mean {(sel['count_of'] * sel['share']).sum():.2f})",
        )
    ax.set_xticks(sorted(shares["count_of"].unique()))
    ax.set_ylabel("share of samples")
    ax.grid(alpha=0.3, axis="y")


def figure4(outcomes: pd.DataFrame, method: str):
    """``(fig, axes)``, one panel per row, each comparing like with like: model **turns** per
    sample with the paper's multi-hop mean of 3.71 turns (top), **tool calls** per sample with
    the paper's 43.5% of single-hop samples making one call (bottom); bars: the share of
    samples per count, one colour per group."""
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 6.6))
    top, bottom = axes
    _share_bars(top, turn_shares(outcomes, method, "turns"))
    top.axvline(
        PAPER_MULTIHOP_MEAN_TURNS,
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"paper: multi-hop mean {PAPER_MULTIHOP_MEAN_TURNS} turns",
    )
    top.set_xlabel(UNIT_LABELS["turns"])
    top.set_title(
        f"{method_label(method)}: model turns per sample, beside the paper's turns", fontsize=10
    )
    _share_bars(bottom, turn_shares(outcomes, method, "searches"))
    bottom.scatter(
        [1],
        [PAPER_SINGLEHOP_ONE_TURN_SHARE],
        marker="*",
        s=140,
        color="black",
        zorder=3,
        label=f"paper: {PAPER_SINGLEHOP_ONE_TURN_SHARE:.1%} of single-hop samples make 1 call",
    )
    bottom.set_xlabel(UNIT_LABELS["searches"])
    bottom.set_title(
        f"{method_label(method)}: tool calls per sample, beside the paper's single-call share",
        fontsize=10,
    )
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(
        "Figure 4 at toy scale (greedy, TinyWorld test sets): not the paper's numbers", fontsize=10
    )
    fig.tight_layout()
    return fig, axes
