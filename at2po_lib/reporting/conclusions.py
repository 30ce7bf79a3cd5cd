"""One generated sentence of conclusion under each of notebook 05's tables, from the numbers.

Each function reads the tidy CSV that :func:`at2po_lib.reporting.report.write_report` wrote
(``results/<profile>/tables/<name>.csv``; the credit-accuracy study's
``results/<profile>/credit_accuracy.csv``) and says what it shows, including when it shows
nothing: a table with no or one method says so, never a fabricated comparison. An interval
that contains 0 is read as "cannot tell apart". :func:`credit_accuracy_summary` keeps the rows
of the credit-accuracy table that matter instead of its 72 × 16 raw form.
"""

from __future__ import annotations

import math
from numbers import Real
from pathlib import Path

import numpy as np
import pandas as pd

from ..method.credit import VALUE_MODES
from ..util.paths import results_dir
from .figure4 import PAPER_MULTIHOP_MEAN_TURNS, PAPER_SINGLEHOP_ONE_TURN_SHARE
from .labels import credit_cell_label, credit_words, method_label
from .output import read_markdown_table


def _read(path: Path) -> "pd.DataFrame | None":
    return pd.read_csv(path) if path.is_file() else None


def _tables(profile: str) -> Path:
    return results_dir(profile, "tables")


def _ci(value: float, low: float, high: float, scale: float = 100.0, signed: bool = True) -> str:
    fmt = "{:+.1f}" if signed else "{:.1f}"
    return f"{fmt.format(scale * value)} [{fmt.format(scale * low)}, {fmt.format(scale * high)}]"


def _shown(profile: str, name: str) -> "pd.DataFrame | None":
    """The display table ``name`` as the report wrote it (``<name>.md``: every cell the text
    shown), or None. A sentence quotes a number from here, rounded once: the CSV keeps six
    decimals, and rounding its 0.028500 again to one decimal of points gives 2.9 where the
    table, rounded from the exact 0.02849.., shows 2.8."""
    path = _tables(profile) / f"{name}.md"
    return read_markdown_table(path.read_text()) if path.is_file() else None


def _shown_cell(shown: "pd.DataFrame | None", row: str, column: str) -> str | None:
    """The text a display table shows at (``row``, ``column``), or None (no table, no cell)."""
    if shown is None or row not in shown.index or column not in shown.columns:
        return None
    text = str(shown.loc[row, column]).strip()
    return text or None


def seed_spread_conclusion(profile: str) -> str:
    """Whether the sampled metric's seeds spread less than greedy EM's, method by method, as
    ``table1_seeds`` shows the two standard deviations (one decimal): the methods where it does
    not are named with both numbers."""
    shown = _shown(profile, "table1_seeds")
    columns = ("greedy: sd over seeds", "sampled: sd over seeds")
    if shown is None or not all(c in shown.columns for c in columns):
        return "No seed spreads recorded for this profile yet."
    pairs = {}
    for method, row in shown.iterrows():
        try:
            pairs[method] = (
                float(row[columns[0]]),
                float(row[columns[1]]),
                row[columns[0]],
                row[columns[1]],
            )
        except ValueError:  # "–": one seed, no spread
            continue
    if not pairs:
        return "No method has two seeds yet: no spread to compare."
    less = [m for m, (g, s, _, _) in pairs.items() if s < g]
    others = [
        f"{m} (sampled {ts}, greedy {tg})" for m, (g, s, tg, ts) in pairs.items() if m not in less
    ]
    text = (
        f"The sampled metric's seeds spread less than greedy EM's for {len(less)} of the "
        f"{len(pairs)} methods with two or more seeds (the two `sd over seeds` columns)"
    )
    if others:
        text += "; not for " + ", ".join(others)
    return text + "."


def _side_of_zero(low: float, high: float) -> str:
    """Where an interval lies: for a change within one method's runs (Figure 3's entropy) or a
    difference paired over prompts (credit accuracy), which no seed labels split."""
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "not distinguishable"


def _reading(low: float, high: float, p: float, family: str = "") -> str:
    """A difference read by the study's rule: "better" or "worse" only where its 95%
    interval excludes 0 and the permutation test over seed (or block) labels agrees at 0.05
    (``p``: Holm's corrected p where the difference is one of a family, named by ``family``)."""
    if low <= 0 <= high:
        return "not distinguishable"
    if not _finite(p):
        return "the interval excludes 0, with no permutation test to agree"
    if p >= 0.05:
        return (
            f"cannot tell: the interval excludes 0, but the permutation test does not agree "
            f"(p = {p:.3f}{family})"
        )
    return "better" if low > 0 else "worse"


HEADLINE_KEYS = ("at2po_over_grpo", "at2po_over_grpo_sampled_em", "at2po_over_grpo_budget")
TABLE2_KEYS = ("ablation_step2", "ablation_step3", "ablation_step4")
TABLE3_KEYS = ("node_value_over_diff_parent", "entropy_weights_over_child_mean")
"""The claims (``claims.csv`` keys) each table's conclusion leads with where blocks pair them."""


def blocks_first(profile: str, keys: tuple[str, ...]) -> str:
    """The study's block readings of ``keys`` (the verdicts, read within their family), as the
    sentence a table's conclusion opens with; "" when no block pairs them. What follows it in
    a conclusion reads the committed runs, the earlier record, and says so."""
    claims = _read(_tables(profile) / "claims.csv")
    if claims is None or "p_corrected" not in claims:
        return ""
    rows = claims[claims["key"].isin(keys) & claims["seeds"].astype(str).str.endswith("blocks")]
    if rows.empty:
        return ""
    parts = [
        f"{r.short} {_ci(r.estimate, r.ci_low, r.ci_high, scale=1.0)} points ({r.reading}"
        + (", underpowered" if str(r.underpowered) == "True" else "")
        + f"; p {r.p_permutation:.3f}, {r.p_corrected:.3f} within its family)"
        for r in rows.itertuples()
    ]
    return (
        f"**In the study's blocks** ({rows['seeds'].iloc[0]}; the verdicts): "
        + "; ".join(parts)
        + ". The rest reads the committed runs (the earlier record). "
    )


def table1_conclusion(profile: str) -> str:
    """The headline's block readings (:func:`blocks_first`), then which methods have records,
    and each method's multi-hop difference to GRPO in the committed runs."""
    return blocks_first(profile, HEADLINE_KEYS) + _table1_earlier(profile)


def _table1_earlier(profile: str) -> str:
    summary = _read(_tables(profile) / "table1_summary.csv")
    if summary is None:
        return "No Table 1 records for this profile yet: only the published rows can be shown."
    ours = summary[(summary["source"] == "ours") & (summary["column"] == "Multi-hop avg")]
    methods = list(dict.fromkeys(ours["method"]))
    if not methods:
        return "No Table 1 run of ours is recorded yet: only the published rows are shown."
    seeds = {m: int(ours.loc[ours["method"] == m, "n_seeds"].max()) for m in methods}
    listed = ", ".join(
        f"{method_label(m)} ({seeds[m]} seed{'s' * (seeds[m] > 1)})" for m in methods
    )
    text = f"Recorded so far: {listed}, out of the paper's seven rows."
    diffs = _read(_tables(profile) / "table1_differences.csv")
    shown = _shown(profile, "table1_differences")
    if diffs is not None and len(diffs):
        sel = diffs[
            (diffs["baseline"] == "grpo")
            & (diffs["scope"] == "multihop")
            & (diffs["weighting"] == "sample")
        ]
        if "metric" in sel:
            sel = sel[sel["metric"] == "em"]
        parts = [
            f"{method_label(r.method)} "
            f"{_shown_cell(shown, method_label(r.method), 'Δ Multi-hop vs GRPO') or _ci(r.diff, r.ci_low, r.ci_high)}"
            f" points ({_reading(r.ci_low, r.ci_high, getattr(r, 'p_permutation', np.nan))})"
            for r in sel.itertuples()
        ]
        if parts:
            text += " Multi-hop EM minus GRPO's, 95% CI: " + "; ".join(parts) + "."
    if len(methods) < 3:
        text += (
            " With this few methods the toy table cannot rank the paper's methods; "
            "`at2po study --profile tiny --table 1` records the rest."
        )
    return text


PAPER_ADVANTAGE_MODES = ("node_value", "diff_parent")
"""Table 3's advantage modes in the paper (the authors' code has two more)."""


def _finite(*values) -> bool:
    return all(isinstance(v, Real) and math.isfinite(v) for v in values)


def _questions(table: "pd.DataFrame") -> str:
    counts = table["n_questions"].dropna().unique() if "n_questions" in table else []
    return f" ({int(counts[0])} test questions)" if len(counts) == 1 else ""


def table2_conclusion(profile: str) -> str:
    """The block readings (:func:`blocks_first`), then, in the committed runs: each ablation step's multi-hop change over the step before, with its interval, seeds and
    the published change."""
    return blocks_first(profile, TABLE2_KEYS) + _table2_earlier(profile)


STEP_CHANGE = ("delta", "delta_low", "delta_high", "published_delta", "n_seeds")
"""Table 2's columns of a step's change over the step before."""


def _table2_earlier(profile: str) -> str:
    table = _read(_tables(profile) / "table2.csv")
    if table is None:
        return "No Table 2 file for this profile yet."
    filled = table[table["em"].notna()] if "em" in table else table.iloc[:0]
    if filled.empty:
        return (
            f"None of the ablation's {len(table)} steps has a toy run yet, so the table shows "
            "the published column alone: the toy says nothing about Table 2 so far."
        )
    text = f"{len(filled)} of the ablation's {len(table)} steps have toy runs."
    # a table with one step run has no change columns (nothing before it to subtract)
    table = table.reindex(columns=[*table.columns, *(c for c in STEP_CHANGE if c not in table)])
    parts, readings, seeds_before = [], [], None
    for r in table.itertuples():
        if _finite(r.em, r.delta, r.delta_low, r.delta_high):
            published = (
                f" (published {100 * r.published_delta:+.2f})" if _finite(r.published_delta) else ""
            )
            seeds = f"{int(r.n_seeds)} vs {seeds_before}" if seeds_before else f"{int(r.n_seeds)}"
            readings.append(
                _reading(r.delta_low, r.delta_high, getattr(r, "p_permutation", np.nan))
            )
            parts.append(
                f"step {r.step}, {r.configuration.removeprefix('+ ')}: "
                f"{_ci(r.delta, r.delta_low, r.delta_high)} points, {seeds} seeds, "
                f"{readings[-1]}{published}"
            )
        seeds_before = int(r.n_seeds) if _finite(r.n_seeds) else None
    if parts:
        excludes = sum(reading != "not distinguishable" for reading in readings)
        reads = sum(reading in ("better", "worse") for reading in readings)
        questions = _questions(filled)
        text += (
            f" Multi-hop EM over the step before{questions}, 95% CI: "
            + "; ".join(parts)
            + ". "
            + (
                f"{excludes} of {len(parts)} steps' intervals exclude 0, {reads} with a "
                "permutation test that agrees."
                if excludes
                else "Every step's interval contains 0: the toy cannot tell whether any step adds."
            )
        )
    return text


def table3_conclusion(profile: str) -> str:
    """The block readings (:func:`blocks_first`), then, in the committed runs: how many credit cells have runs, and each one's multi-hop difference to AT2PO's default
    cell (entropy-weighted children, node value), read against the paper's finding that the default is
    best (a cell below it agrees)."""
    return blocks_first(profile, TABLE3_KEYS) + _table3_earlier(profile)


def _table3_earlier(profile: str) -> str:
    table = _read(_tables(profile) / "table3.csv")
    if table is None or table.empty:
        return (
            "No credit-variant (`credit_*`) runs are recorded, so Table 3 has no toy cells; "
            "the credit-accuracy study below is the toy's evidence on credit."
        )

    # only AT2PO's own cell run: no change columns (nothing to subtract it from)
    table = table.reindex(columns=[*table.columns, *(c for c in STEP_CHANGE if c not in table)])
    cells = table[table["em"].notna()]
    paper_grid = cells["advantage_mode"].isin(PAPER_ADVANTAGE_MODES)
    text = (
        f"{int(paper_grid.sum())} of the paper's {len(VALUE_MODES) * len(PAPER_ADVANTAGE_MODES)}"
        f" cells (values × {' or '.join(map(credit_words, PAPER_ADVANTAGE_MODES))} as the "
        "advantage) have toy runs"
        + (
            f", and {int((~paper_grid).sum())} of the authors' code's other advantage modes"
            if (~paper_grid).any()
            else ""
        )
        + "."
    )
    rows = [r for r in cells.itertuples() if _finite(r.delta, r.delta_low, r.delta_high)]
    if rows:
        parts = [
            f"{credit_cell_label(r.value_mode, r.advantage_mode)} "
            f"{_ci(r.delta, r.delta_low, r.delta_high)} "
            f"({int(r.n_seeds)} seeds)"
            for r in rows
        ]
        default = table[
            (table["value_mode"] == "entropy_softmax") & (table["advantage_mode"] == "node_value")
        ]
        default_seeds = (
            f", {int(default['n_seeds'].iloc[0])} seeds"
            if len(default) and _finite(default["n_seeds"].iloc[0])
            else ""
        )
        readings = [
            _reading(
                r.delta_low,
                r.delta_high,
                getattr(r, "p_holm", np.nan),
                f" after Holm's correction over the {len(rows)} cells",
            )
            for r in rows
        ]
        below = readings.count("worse")
        above = readings.count("better")
        outside = sum(r.delta_high < 0 or r.delta_low > 0 for r in rows)
        text += (
            " Each cell minus AT2PO's default "
            f"({credit_cell_label('entropy_softmax', 'node_value')}"
            f"{default_seeds}), multi-hop EM points{_questions(cells)}, 95% CI: "
            + "; ".join(parts)
            + ". "
        )
        if outside:
            unread = [
                f"{credit_cell_label(r.value_mode, r.advantage_mode)}: "
                f"{reading.removeprefix('cannot tell: ')}"
                for r, reading in zip(rows, readings)
                if reading not in ("better", "worse", "not distinguishable")
            ]
            text += (
                f"{below} cell{'s' * (below != 1)} read{'s' * (below == 1)} below the default "
                f"(the paper's finding) and {above} above it, where a reading needs the "
                "interval to exclude 0 and the permutation test, corrected over the cells, to "
                "agree at 0.05"
                + (f"; cannot tell for {'; '.join(unread)}" if unread else "")
                + "; the rest cannot be told apart."
            )
        else:
            text += (
                "Every interval contains 0: on the toy no cell can be told apart from the "
                "default, so it neither confirms nor contradicts the paper's ranking."
            )
    return text


def fig3_conclusion(profile: str) -> str:
    """The entropy change of each method over its run, with its interval."""
    table = _read(_tables(profile) / "fig3_entropy_change.csv")
    if table is None or table.empty:
        return "No training records: Figure 3 is empty."
    rows = table[table["metric"] == "entropy"]
    parts = []
    for r in rows.itertuples():
        change = (
            f"{r.change:+.3f} [{r.change_low:+.3f}, {r.change_high:+.3f}]"
            if r.seeds > 1
            else f"{r.change:+.3f} (one seed: no interval)"
        )
        verdict = (
            {"worse": "a clear fall", "better": "a clear rise"}.get(
                _side_of_zero(r.change_low, r.change_high), "no clear change"
            )
            if r.seeds > 1
            else "no evidence"
        )
        parts.append(f"{method_label(r.method)} {change} nats ({verdict}, {int(r.seeds)} seeds)")
    return (
        "Entropy change from the first to the last steps: "
        + "; ".join(parts)
        + ". The paper's claim (GRPO collapses, AT2PO stays stable) needs both methods; "
        + ("only one is recorded." if rows["method"].nunique() < 2 else "compare the rows.")
    )


def fig4_conclusion(turns: "pd.DataFrame | None") -> str:
    """Our mean turns (multi-hop) and one-call share (single-hop) beside the paper's."""
    if turns is None or turns.empty:
        return "Figure 4 needs per-question outcomes."
    t = turns.set_index(["group", "metric"])
    parts = []
    if ("multihop", "turns") in t.index:
        r = t.loc[("multihop", "turns")]
        parts.append(
            f"multi-hop samples take {r['value']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}] "
            f"turns (paper: {PAPER_MULTIHOP_MEAN_TURNS})"
        )
    if ("singlehop", "one_search") in t.index:
        r = t.loc[("singlehop", "one_search")]
        parts.append(
            f"{100 * r['value']:.1f}% [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}] "
            f"of single-hop samples make one call (paper: {100 * PAPER_SINGLEHOP_ONE_TURN_SHARE:.1f}%)"
        )
    method = method_label(str(turns["method"].iloc[0]))
    return (
        (
            f"{method}: " + "; ".join(parts) + ". TinyWorld's plans fix the hops, so these follow "
            "the datasets' hop counts more than any method."
        )
        if parts
        else "No turn counts."
    )


SUMMARY_ROWS = (
    # (label, credit_mode, value_mode, advantage_mode, rollout)
    (
        "AT2PO default (entropy-weighted children, node value)",
        "at2po",
        "entropy_softmax",
        "node_value",
        "entropy",
    ),
    ("AT2PO, child mean, node value", "at2po", "child_mean", "node_value", "entropy"),
    (
        "AT2PO, entropy-weighted children, difference to the parent",
        "at2po",
        "entropy_softmax",
        "diff_parent",
        "entropy",
    ),
    ("GRPO (leaf advantage on every turn)", "grpo", None, None, "entropy"),
    ("GiGPO-style step groups", "gigpo", None, None, "entropy"),
    ("Tree-GRPO, its own random trees", "tree_grpo", None, None, "random"),
)


def credit_accuracy_summary(frame: "pd.DataFrame | None") -> "pd.DataFrame":
    """The rows of the credit-accuracy table that matter (:data:`SUMMARY_ROWS`, at softmax
    temperature 1): AUC over all turns and over search turns with 95% CIs, and Δ vs GRPO."""
    if frame is None or frame.empty:
        return pd.DataFrame()
    base = frame[np.isclose(frame["softmax_temperature"].fillna(1.0), 1.0)]
    out = []
    for label, mode, vm, am, rollout in SUMMARY_ROWS:
        sel = base[(base["credit_mode"] == mode) & (base["rollout"] == rollout)]
        if vm is not None:
            sel = sel[(sel["value_mode"] == vm) & (sel["advantage_mode"] == am)]
        if sel.empty:
            continue
        row = {"credit": label}
        for turns in ("all", "search"):
            r = sel[sel["turns"] == turns]
            if len(r):
                r = r.iloc[0]
                row[f"AUC, {turns} turns"] = (
                    f"{r['auc']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
                )
                if turns == "all":
                    row["Δ vs GRPO (all)"] = (
                        "—"
                        if mode == "grpo" or not np.isfinite(r["delta_vs_grpo"])
                        else f"{r['delta_vs_grpo']:+.3f} [{r['delta_low']:+.3f}, "
                        f"{r['delta_high']:+.3f}]"
                    )
        out.append(row)
    return pd.DataFrame(out).set_index("credit")


def credit_accuracy_conclusion(
    frame: "pd.DataFrame | None", weights: "pd.DataFrame | None" = None
) -> str:
    """Does AT2PO's default credit single out useful turns better than GRPO's?

    ``weights`` (``credit_weights.csv``, optional) adds how far the default's softmax weights sit
    from uniform on the sampled-NLL estimator the rollout uses: ``n·max w`` is 1 for uniform
    weights and ``n`` when one child takes all."""
    if frame is None or frame.empty:
        return "The credit-accuracy study has not run for this profile."
    base = frame[
        np.isclose(frame["softmax_temperature"].fillna(1.0), 1.0) & (frame["turns"] == "all")
    ]
    at2po = base[
        (base["credit_mode"] == "at2po")
        & (base["value_mode"] == "entropy_softmax")
        & (base["advantage_mode"] == "node_value")
    ]
    if at2po.empty:
        return "The credit-accuracy table has no row for AT2PO's default credit."
    r = at2po.iloc[0]
    verdict = {"better": "better than", "worse": "worse than"}.get(
        _side_of_zero(r["delta_low"], r["delta_high"]), "indistinguishable from"
    )
    best = base.loc[base["auc"].idxmax()]
    best_name = {"gigpo": "GiGPO-style step groups"}.get(
        best["credit_mode"], method_label(best["credit_mode"])
    ) + (
        f" with {credit_words(best['value_mode'])} and {credit_words(best['advantage_mode'])}"
        if best["credit_mode"] == "at2po"
        else ""
    )
    if best["rollout"] != "entropy":
        best_name += f", on its own {best['rollout']} trees"
    return (
        f"On {int(r['n_prompts'])} prompts ({int(r['n_turns'])} turns, {int(r['n_useful'])} useful), "
        f"AT2PO's default credit separates useful from useless turns with AUC {r['auc']:.3f} "
        f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}], {verdict} GRPO's (Δ {r['delta_vs_grpo']:+.3f} "
        f"[{r['delta_low']:+.3f}, {r['delta_high']:+.3f}]); the highest AUC is that of "
        f"{best_name} ({best['auc']:.3f})." + _weights_sentence(weights)
    )


def _weights_sentence(weights: "pd.DataFrame | None") -> str:
    """One sentence on the softmax weights' distance from uniform, or nothing without the table."""
    if weights is None or weights.empty:
        return ""
    row = weights[
        (weights["estimator"] == "sampled_nll") & (weights["weighting"] == "entropy_softmax")
    ]
    if row.empty:
        return ""
    r = row.iloc[0]
    return (
        f" Over {int(r['branching_nodes'])} branching nodes ({r['mean_children']:.1f} children "
        f"on average) the softmax weights differ from uniform by {r['mean_abs_w_minus_uniform']:.3f} "
        f"per child and n·max w is {r['mean_n_times_max_w']:.2f} (1 is uniform); the node values "
        f"correlate {r['corr_value_with_child_mean']:.2f} with the plain child mean."
    )


def block_verdicts(profile: str) -> "pd.DataFrame":
    """The claims the study's blocks pair, one row each, with display names: the difference
    and its interval, the raw and the family-corrected p, the reading, the bound the interval
    rules out and the difference the blocks detect at 80% power. Empty without block claims."""
    claims = _read(_tables(profile) / "claims.csv")
    if claims is None or "p_corrected" not in claims:
        return pd.DataFrame()
    rows = claims[claims["seeds"].astype(str).str.endswith("blocks")]
    return pd.DataFrame(
        {
            "claim": rows["short"],
            "toy [95% CI], points": [
                _ci(r.estimate, r.ci_low, r.ci_high, scale=1.0) for r in rows.itertuples()
            ],
            "blocks": rows["seeds"],
            "p alone": rows["p_permutation"].map("{:.3f}".format),
            "p in its family": rows["p_corrected"].map("{:.3f}".format),
            "reading": [
                r.reading + (" (underpowered)" if str(r.underpowered) == "True" else "")
                for r in rows.itertuples()
            ],
            "rules out a gain above": rows["ruled_out"].map("{:+.1f}".format),
            "detects at 80% power": rows["detectable_80"].map("{:.1f}".format),
        }
    ).set_index("claim")
