r"""Table 1: EM per dataset and group for every method, beside the published numbers.

The paper's Table 1 (docs/method.md §10) reports greedy EM × 100 on seven test sets and the
multi-hop / single-hop "Avg" columns, which are sample-weighted (docs/method.md §4). Here each
of our cells is the mean over seeds and questions with its 95% crossed t interval; group averages
appear both sample-weighted (the paper's form) and unweighted (mean of the dataset columns).
The published row of the matching backbone (:func:`.common.published_backbone`) sits under
each of ours, labelled "published".

A second table, :func:`table1_differences`, gives every method minus GRPO and minus the warm
start (ReAct): paired over questions, unpaired over seeds (:func:`at2po_lib.evaluation.stats.difference_ci`),
with the probability of improvement (the share of run pairs in which the method's run scores
higher: a description, with no interval) and the permutation test's p.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from scipy.stats import norm

from ..evaluation import stats
from ..method.presets import TABLE1_REPORTED
from ..evaluation.paper_reference import published_table1
from .labels import cell as format_cell
from .labels import (
    column_label,
    groups_of,
    method_label,
    ordered_datasets,
    published_backbone,
    rows_with_outcomes,
    signed_cell,
)

GROUP_LABELS = {"multihop": "Multi-hop avg", "singlehop": "Single-hop avg"}
UNWEIGHTED = " (unweighted)"


def _our_rows(outcomes: pd.DataFrame, finals: pd.DataFrame, methods: Sequence[str]) -> list[dict]:
    rows = []
    for method in methods:
        if rows_with_outcomes(outcomes, method):
            rows += _rows_from_outcomes(outcomes, method)
        elif len(finals) and (finals["method"] == method).any():
            rows += _rows_from_finals(finals[finals["method"] == method], method)
    return rows


def _rows_from_outcomes(outcomes: pd.DataFrame, method: str) -> list[dict]:
    mine = outcomes[outcomes["method"] == method]
    datasets = ordered_datasets(mine["dataset"].unique())
    scopes = [(column_label(d), [d], "sample") for d in datasets]
    for group, members in groups_of(datasets).items():
        scopes.append((GROUP_LABELS[group], members, "sample"))
        scopes.append((GROUP_LABELS[group] + UNWEIGHTED, members, "dataset"))
    rows = []
    for column, members, weighting in scopes:
        ci = stats.mean_ci(outcomes, method, members, weighting=weighting)
        rows.append(
            {
                "source": "ours",
                "method": method,
                "column": column,
                "em": ci.estimate,
                "ci_low": ci.low,
                "ci_high": ci.high,
                "n_seeds": ci.n_seeds_a,
                "n_questions": ci.n_questions,
            }
        )
    return rows


def _rows_from_finals(finals: pd.DataFrame, method: str) -> list[dict]:
    """Runs recorded before per-question outcomes: means over seeds, no interval."""
    rows = []
    base = finals[~finals["dataset"].astype(str).str.endswith("avg")]
    datasets = ordered_datasets(base["dataset"].unique())
    seeds = int(finals["seed"].nunique())
    for d in datasets:
        sel = base[base["dataset"] == d]
        rows.append(
            {
                "source": "ours",
                "method": method,
                "column": column_label(d),
                "em": float(sel["em"].mean()),
                "ci_low": None,
                "ci_high": None,
                "n_seeds": seeds,
                "n_questions": int(sel["n"].iloc[0]),
            }
        )
    for group, members in groups_of(datasets).items():
        sel = base[base["dataset"].isin(members)]
        per_dataset = sel.groupby("dataset")["em"].mean()
        sizes = sel.groupby("dataset")["n"].first()
        for column, value in (
            (GROUP_LABELS[group], float((per_dataset * sizes).sum() / sizes.sum())),
            (GROUP_LABELS[group] + UNWEIGHTED, float(per_dataset.mean())),
        ):
            rows.append(
                {
                    "source": "ours",
                    "method": method,
                    "column": column,
                    "em": value,
                    "ci_low": None,
                    "ci_high": None,
                    "n_seeds": seeds,
                    "n_questions": int(sizes.sum()),
                }
            )
    return rows


def _published_rows(backbone: str, methods: Sequence[str]) -> list[dict]:
    table = published_table1()
    table = table[table["backbone"] == backbone]
    rows = []
    for method in methods:
        sel = table[table["method"] == method_label(method)]
        if sel.empty:
            continue
        cells = dict(zip(sel["dataset"], sel["em"] / 100))
        for key, value in cells.items():
            if key.endswith("_avg"):
                group = key.removesuffix("_avg")
                rows.append(_published(method, backbone, GROUP_LABELS[group], value))
                members = [
                    cells[d]
                    for d in groups_of([k for k in cells if not k.endswith("_avg")]).get(group, [])
                    if d in cells
                ]
                if members:
                    rows.append(
                        _published(
                            method,
                            backbone,
                            GROUP_LABELS[group] + UNWEIGHTED,
                            sum(members) / len(members),
                        )
                    )
            else:
                rows.append(_published(method, backbone, column_label(key), value))
    return rows


def _published(method: str, backbone: str, column: str, value: float) -> dict:
    return {
        "source": f"published ({backbone})",
        "method": method,
        "column": column,
        "em": value,
        "ci_low": None,
        "ci_high": None,
        "n_seeds": None,
        "n_questions": None,
    }


def table1(
    profile: str,
    outcomes: pd.DataFrame,
    finals: pd.DataFrame,
    model: str | None = None,
    methods: Sequence[str] = TABLE1_REPORTED,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)``: our cells with CIs and the published cells of the matching
    backbone. ``display`` has one row per (method, source) and one column per dataset/average."""
    ours = _our_rows(outcomes, finals, methods)
    present = [m for m in methods if any(r["method"] == m for r in ours)]
    backbone = published_backbone(profile, model)
    published = _published_rows(backbone, methods)
    tidy = pd.DataFrame(
        ours + published,
        columns=["source", "method", "column", "em", "ci_low", "ci_high", "n_seeds", "n_questions"],
    )
    if tidy.empty:
        return tidy, pd.DataFrame()
    tidy.insert(0, "profile", profile)
    columns = list(dict.fromkeys(r["column"] for r in ours)) or list(
        dict.fromkeys(r["column"] for r in published)
    )
    display_rows = []
    published_methods = {r["method"] for r in published}
    for method in [m for m in methods if m in present or m in published_methods]:
        for source in ("ours", f"published ({backbone})"):
            sel = tidy[(tidy["method"] == method) & (tidy["source"] == source)]
            if sel.empty:
                continue
            by_column = {r.column: format_cell(r.em, r.ci_low, r.ci_high) for r in sel.itertuples()}
            seeds = sel["n_seeds"].dropna()
            display_rows.append(
                {
                    "method": method_label(method),
                    "source": source,
                    **{c: by_column.get(c, "–") for c in columns},
                    "seeds": int(seeds.iloc[0]) if len(seeds) else "–",
                }
            )
    display = pd.DataFrame(display_rows).set_index(["method", "source"])
    return tidy, display


def table1_differences(
    profile: str,
    outcomes: pd.DataFrame,
    baselines: Sequence[str] = ("grpo", "react"),
    methods: Sequence[str] = TABLE1_REPORTED,
    metric: str = "em",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method minus each baseline (per dataset, per group, both weightings) with CIs and
    the probability of improvement. ``(tidy, display)``; display: sample-weighted groups.

    ``metric``: ``em`` (greedy) or ``sampled_em`` (the mean EM of k samples at the training
    temperature), computed over the datasets where every compared run measured it."""
    if metric not in outcomes.columns:
        return pd.DataFrame(), pd.DataFrame()
    outcomes = outcomes[outcomes[metric].notna()]
    present = [m for m in methods if rows_with_outcomes(outcomes, m)]
    baselines = [b for b in baselines if b in present]
    if not baselines or len(present) < 2:
        return pd.DataFrame(), pd.DataFrame()
    groups = groups_of(outcomes["dataset"].unique())
    tidy = stats.comparison_table(
        outcomes[outcomes["method"].isin(present)],
        baselines,
        groups,
        metric=metric,
        methods=present,
    )
    tidy.insert(0, "profile", profile)
    tidy["p_permutation"] = [
        group_test(outcomes, r.method, r.baseline, groups[r.scope], metric)
        if r.scope in groups and r.weighting == "sample"
        else np.nan
        for r in tidy.itertuples()
    ]
    display_rows = []
    for method in present:
        row = {"method": method_label(method)}
        for baseline in baselines:
            if baseline == method:
                continue
            for group in groups:
                sel = tidy[
                    (tidy["method"] == method)
                    & (tidy["baseline"] == baseline)
                    & (tidy["scope"] == group)
                    & (tidy["weighting"] == "sample")
                ]
                if sel.empty:
                    continue
                r = sel.iloc[0]
                label = f"{GROUP_LABELS[group].removesuffix(' avg')} vs {method_label(baseline)}"
                row[f"Δ {label}"] = signed_cell(r["diff"], r["ci_low"], r["ci_high"])
                row[f"P(better) {label}"] = f"{r['p_improve']:.2f}"
        if len(row) > 1:
            display_rows.append(row)
    display = pd.DataFrame(display_rows).set_index("method") if display_rows else pd.DataFrame()
    return tidy, display


def group_test(
    outcomes: pd.DataFrame, method: str, baseline: str, datasets: Sequence[str], metric: str
) -> float:
    """The two-sided permutation p of ``method`` − ``baseline`` over seed labels on a group's
    sample-weighted average (:func:`~at2po_lib.evaluation.stats.difference_test`), what a
    reading of the difference needs besides its interval. ReAct is one fixed
    model (the warm start, greedy), so a difference to it sign-flips the other side's runs."""
    if "react" in (method, baseline):
        trained = baseline if method == "react" else method
        return stats.difference_test(outcomes, trained, "react", datasets, metric, fixed_b=True).p
    return stats.difference_test(outcomes, method, baseline, datasets, metric).p


def table1_seeds(
    profile: str,
    outcomes: pd.DataFrame,
    methods: Sequence[str] = TABLE1_REPORTED,
    baseline: str = "grpo",
    target_half_width: float = stats.PLANNING_HALF_WIDTH,
    confidence: float = 0.95,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    r"""Each run's multi-hop average (greedy EM and the sampled metric), and how far the seeds
    spread: the intervals of the other tables mix question-level and seed-level variation, and
    this table shows the seed-level part on its own.

    Per method: the mean and standard deviation over seeds, each seed's mean tool calls per
    multi-hop question (a seed that stops searching early answers from fewer passages), and,
    for each metric, a projection of the seeds per method that a difference to ``baseline``
    would need for a seed-level half-width of ``target_half_width``, with both methods at the
    same number of seeds n and the seeds' standard deviations as measured (a rough guide,
    itself uncertain with few seeds; the question level adds a little on top):

    .. math::  n \ge z^2\,(s_m^2 + s_b^2) / h^2

    ``(tidy, display)``; tidy: one row per (method, seed, metric).
    """
    groups = groups_of(outcomes["dataset"].unique()) if len(outcomes) else {}
    members = groups.get("multihop", [])
    present = [m for m in methods if rows_with_outcomes(outcomes, m)]
    if not members or not present:
        return pd.DataFrame(), pd.DataFrame()
    rows = outcomes[outcomes["method"].isin(present) & outcomes["dataset"].isin(members)]
    metrics = [c for c in ("em", "sampled_em") if c in rows and rows[c].notna().any()]
    per_run = rows.groupby(["method", "seed"])[metrics].mean()  # sample-weighted
    tidy = (
        per_run.reset_index()
        .melt(["method", "seed"], var_name="metric", value_name="value")
        .dropna(subset=["value"])
    )
    tidy.insert(0, "profile", profile)
    z = float(norm.ppf((1 + confidence) / 2))
    spread = per_run.groupby(level="method").std(ddof=1)
    display_rows = []
    for method in present:
        runs = per_run.loc[method]
        row = {"method": method_label(method), "seeds": len(runs)}
        for metric, label in (("em", "greedy"), ("sampled_em", "sampled")):
            if metric not in runs or runs[metric].isna().all():
                continue
            values = runs[metric].dropna()
            row[f"{label}: per seed"] = " / ".join(f"{100 * v:.1f}" for v in values)
            row[f"{label}: mean"] = f"{100 * values.mean():.1f}"
            sd = spread.loc[method, metric] if len(values) > 1 else float("nan")
            row[f"{label}: sd over seeds"] = "–" if sd != sd else f"{100 * sd:.1f}"
            base_sd = spread.loc[baseline, metric] if baseline in spread.index else float("nan")
            if method not in (baseline, "react") and np.isfinite(sd) and np.isfinite(base_sd):
                need = int(np.ceil(z**2 * (sd**2 + base_sd**2) / target_half_width**2))
                row[
                    f"{label}: seeds for ±{100 * target_half_width:.0f} vs {method_label(baseline)}"
                ] = str(need)
        if "searches" in rows:  # how deep each seed searches: one reading of the spread
            calls = rows[rows["method"] == method].groupby("seed")["searches"].mean()
            row["calls per question: per seed"] = " / ".join(f"{v:.2f}" for v in calls)
        display_rows.append(row)
    display = pd.DataFrame(display_rows).set_index("method").fillna("–")
    return tidy, display
