r"""Figure 4: how many turns a sample takes, multi-hop vs single-hop.

The paper (docs/method.md §10) plots the distribution of turns per sample on its validation
sets: multi-hop questions take 3.71 turns on average and 43.5% of single-hop samples take one.
The paper's single-hop figure is about tool calls ("43.5% of samples need a single tool
call", its summary says); its "turns" are not defined more precisely. So the default unit here
is ``searches`` (tool calls per sample); ``unit="turns"`` counts model turns, the final answer
included (one search then an answer is 2 turns). Both published marks are drawn as published.
The distribution comes from the per-question outcomes of the final greedy evaluation, one method
at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import stats
from .labels import groups_of, method_label

if TYPE_CHECKING:
    import pandas as pd

PAPER_MULTIHOP_MEAN_TURNS = 3.71
PAPER_SINGLEHOP_ONE_TURN_SHARE = 0.435


UNIT_LABELS = {"searches": "tool calls per sample",
               "turns": "model turns per sample (final answer included)"}


def turn_shares(outcomes: pd.DataFrame, method: str, unit: str = "searches") -> pd.DataFrame:
    """Share of questions per count of ``unit`` (searches or turns), per group (pooled over
    seeds). The count column is called ``count_of``."""
    from ..data import dataset_group

    rows = outcomes[outcomes["method"] == method].copy()
    rows["group"] = rows["dataset"].map(dataset_group)
    rows["count_of"] = rows[unit]
    counts = rows.groupby(["group", "count_of"]).size().rename("count").reset_index()
    counts["share"] = counts["count"] / counts.groupby("group")["count"].transform("sum")
    return counts


def turn_summary(outcomes: pd.DataFrame, method: str, n_resamples: int = 2_000) -> pd.DataFrame:
    """Per group: mean turns, mean searches and the share of one-search samples, each with a
    95% CI over seeds and questions."""
    import pandas as pd

    rows = outcomes[outcomes["method"] == method].copy()
    rows["one_search"] = (rows["searches"] == 1).astype(float)
    out = []
    for group, members in groups_of(rows["dataset"].unique()).items():
        for metric in ("turns", "searches", "one_search"):
            ci = stats.mean_ci(rows, method, members, metric=metric, n_resamples=n_resamples)
            out.append({"method": method, "group": group, "metric": metric,
                        "value": ci.estimate, "ci_low": ci.low, "ci_high": ci.high,
                        "n_seeds": ci.n_seeds_a, "n_questions": ci.n_questions})
    return pd.DataFrame(out)


def figure4(outcomes: pd.DataFrame, method: str, unit: str = "searches"):
    """``(fig, ax)``: bars of the share of samples per count of ``unit``, one colour per group."""
    import matplotlib.pyplot as plt

    shares = turn_shares(outcomes, method, unit)
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    groups = list(dict.fromkeys(shares["group"]))
    width = 0.8 / max(len(groups), 1)
    for i, group in enumerate(groups):
        sel = shares[shares["group"] == group]
        ax.bar(sel["count_of"] + (i - (len(groups) - 1) / 2) * width, sel["share"], width,
               label=f"{group} (mean {(sel['count_of'] * sel['share']).sum():.2f})")
    ax.axvline(PAPER_MULTIHOP_MEAN_TURNS, color="black", linestyle="--", linewidth=1,
               label=f"paper: multi-hop mean {PAPER_MULTIHOP_MEAN_TURNS} turns")
    ax.scatter([1], [PAPER_SINGLEHOP_ONE_TURN_SHARE], marker="*", s=120, color="black",
               zorder=3, label=f"paper: {PAPER_SINGLEHOP_ONE_TURN_SHARE:.1%} of single-hop samples: 1 call")
    ax.set_xlabel(UNIT_LABELS[unit])
    ax.set_ylabel("share of samples")
    ax.set_title(f"{method_label(method)}: {UNIT_LABELS[unit]} (greedy, test sets)")
    ax.set_xticks(sorted(shares["count_of"].unique()))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig, ax
