"""Notebook 05's generated sentences (at2po_lib.reporting.conclusions): they follow the
numbers, and say so plainly when a table has few or no methods."""

from __future__ import annotations

import pandas as pd

from at2po_lib.reporting import conclusions as c


def _write(root, name, rows):
    folder = root / "tiny" / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / f"{name}.csv", index=False)


def test_no_records_are_said_and_nothing_is_compared(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    assert "No Table 1 records" in c.table1_conclusion("tiny")
    assert "No Table 2 file" in c.table2_conclusion("tiny")
    assert "No credit-variant" in c.table3_conclusion("tiny")
    assert "not run" in c.credit_accuracy_conclusion(None)
    assert c.credit_accuracy_summary(None).empty


def test_differences_are_read_from_their_intervals(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    summary = [
        {"source": "ours", "method": m, "column": "Multi-hop avg", "n_seeds": s}
        for m, s in (("react", 1), ("grpo", 2), ("at2po", 3))
    ]
    _write(tmp_path, "table1_summary", summary)
    diffs = [
        {
            "method": "react",
            "baseline": "grpo",
            "scope": "multihop",
            "weighting": "sample",
            "metric": "em",
            "diff": -0.06,
            "ci_low": -0.09,
            "ci_high": -0.03,
            "p_permutation": 0.001,
        },
        {
            "method": "at2po",
            "baseline": "grpo",
            "scope": "multihop",
            "weighting": "sample",
            "metric": "em",
            "diff": 0.01,
            "ci_low": -0.02,
            "ci_high": 0.04,
            "p_permutation": 0.6,
        },
        {
            "method": "dapo",
            "baseline": "grpo",
            "scope": "multihop",
            "weighting": "sample",
            "metric": "em",
            "diff": 0.03,
            "ci_low": 0.01,
            "ci_high": 0.05,
            "p_permutation": 0.3,
        },
        {
            "method": "at2po",
            "baseline": "grpo",
            "scope": "multihop",
            "weighting": "sample",
            "metric": "sampled_em",
            "diff": 0.5,
            "ci_low": 0.4,
            "ci_high": 0.6,
        },
    ]
    _write(tmp_path, "table1_differences", diffs)
    text = c.table1_conclusion("tiny")
    assert "ReAct -6.0 [-9.0, -3.0] points (worse)" in text
    # an interval off 0 reads only with a permutation test that agrees (issue #48)
    assert (
        "DAPO +3.0 [+1.0, +5.0] points (cannot tell: the interval excludes 0, but the "
        "permutation test does not agree (p = 0.300))" in text
    )
    assert "(not distinguishable)" in text and "cannot rank" not in text
    assert "+50.0" not in text  # the sampled metric's row is not the EM difference


def test_credit_accuracy_rows_that_matter():
    rows = []
    for mode, vm, am, rollout, auc, delta in (
        ("at2po", "entropy_softmax", "node_value", "entropy", 0.66, -0.001),
        ("at2po", "entropy_softmax", "diff_parent", "entropy", 0.54, -0.12),
        ("grpo", None, None, "entropy", 0.661, 0.0),
    ):
        for turns in ("all", "search", "answer"):
            rows.append(
                {
                    "credit_mode": mode,
                    "value_mode": vm,
                    "advantage_mode": am,
                    "softmax_temperature": 1.0,
                    "rollout": rollout,
                    "turns": turns,
                    "auc": auc,
                    "ci_low": auc - 0.02,
                    "ci_high": auc + 0.02,
                    "delta_vs_grpo": delta,
                    "delta_low": delta - 0.002,
                    "delta_high": delta + 0.002,
                    "n_prompts": 300,
                    "n_turns": 5000,
                    "n_useful": 2000,
                }
            )
    frame = pd.DataFrame(rows)
    summary = c.credit_accuracy_summary(frame)
    assert list(summary.index) == [
        "AT2PO default (entropy-weighted children, node value)",
        "AT2PO, entropy-weighted children, difference to the parent",
        "GRPO (leaf advantage on every turn)",
    ]
    assert summary.loc["GRPO (leaf advantage on every turn)", "Δ vs GRPO (all)"] == "—"
    text = c.credit_accuracy_conclusion(frame)
    # display names, never the records' (issue #63: "tree_grpo (on its own random trees)'s")
    assert "indistinguishable from GRPO" in text and "highest AUC is that of GRPO" in text
    assert "_" not in text


def test_credit_accuracy_conclusion_reads_the_weights_table():
    """The weights sentence comes from credit_weights.csv's sampled-NLL softmax row, not from
    prose; without the table the conclusion says nothing about the weights."""
    rows = [
        {
            "credit_mode": mode,
            "value_mode": vm,
            "advantage_mode": "node_value" if vm else None,
            "softmax_temperature": 1.0,
            "rollout": "entropy",
            "turns": "all",
            "auc": auc,
            "ci_low": auc - 0.02,
            "ci_high": auc + 0.02,
            "delta_vs_grpo": d,
            "delta_low": d - 0.01,
            "delta_high": d + 0.01,
            "n_prompts": 10,
            "n_turns": 50,
            "n_useful": 20,
        }
        for mode, vm, auc, d in (("at2po", "entropy_softmax", 0.7, 0.0), ("grpo", None, 0.7, 0.0))
    ]
    frame = pd.DataFrame(rows)
    weights = pd.DataFrame(
        [
            {
                "estimator": "exact",
                "weighting": "entropy_softmax",
                "branching_nodes": 9,
                "mean_children": 2.0,
                "mean_abs_w_minus_uniform": 0.001,
                "mean_n_times_max_w": 1.01,
                "corr_value_with_child_mean": 0.999,
            },
            {
                "estimator": "sampled_nll",
                "weighting": "entropy_softmax",
                "branching_nodes": 40,
                "mean_children": 2.5,
                "mean_abs_w_minus_uniform": 0.25,
                "mean_n_times_max_w": 1.8,
                "corr_value_with_child_mean": 0.61,
            },
        ]
    )
    plain = c.credit_accuracy_conclusion(frame)
    assert "uniform" not in plain
    text = c.credit_accuracy_conclusion(frame, weights)
    assert "40 branching nodes" in text and "by 0.250 per child" in text
    assert "n·max w is 1.80" in text and "correlate 0.61" in text
    assert c.credit_accuracy_conclusion(frame, weights.iloc[:1]) == plain


def test_table2_conclusion_gives_each_step_with_its_interval(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    nan = float("nan")
    _write(
        tmp_path,
        "table2",
        [
            {
                "step": 1,
                "method": "a",
                "configuration": "GRPO with random tree rollout",
                "em": 0.45,
                "n_seeds": 3,
                "delta": nan,
                "delta_low": nan,
                "delta_high": nan,
                "published_delta": nan,
            },
            {
                "step": 2,
                "method": "b",
                "configuration": "+ ATPO turn-level loss",
                "em": 0.50,
                "n_seeds": 3,
                "delta": 0.05,
                "delta_low": 0.01,
                "delta_high": 0.09,
                "p_permutation": 0.04,
                "published_delta": 0.0233,
            },
            {
                "step": 3,
                "method": "c",
                "configuration": "+ entropy-guided tree expansion",
                "em": 0.49,
                "n_seeds": 2,
                "delta": -0.01,
                "delta_low": -0.05,
                "delta_high": 0.03,
                "p_permutation": 0.7,
                "published_delta": 0.0058,
            },
            {
                "step": 4,
                "method": "at2po",
                "configuration": "+ turn-wise credit",
                "em": nan,
                "n_seeds": nan,
                "delta": nan,
                "delta_low": nan,
                "delta_high": nan,
                "published_delta": 0.0048,
            },
        ],
    )
    text = c.table2_conclusion("tiny")
    assert text.startswith("3 of the ablation's 4 steps have toy runs.")
    assert (
        "step 2, ATPO turn-level loss: +5.0 [+1.0, +9.0] points, 3 vs 3 seeds, better "
        "(published +2.33)" in text
    )
    assert (
        "step 3, entropy-guided tree expansion: -1.0 [-5.0, +3.0] points, 2 vs 3 seeds, "
        "not distinguishable" in text
    )
    assert "1 of 2 steps' intervals exclude 0, 1 with a permutation test that agrees." in text


def test_table3_conclusion_reads_each_cell_against_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    nan = float("nan")
    rows = [
        ("entropy_softmax", "node_value", 0.47, nan, nan, nan, 5, nan),
        ("child_mean", "node_value", 0.49, 0.02, -0.02, 0.06, 3, 0.9),
        ("leaf_mean", "diff_parent", 0.40, -0.07, -0.11, -0.03, 3, 0.01),
        ("leaf_mean", "diff_global", 0.41, -0.06, -0.10, -0.02, 3, 0.2),
    ]
    _write(
        tmp_path,
        "table3",
        [
            {
                "value_mode": v,
                "advantage_mode": a,
                "method": f"credit_{v}_{a}",
                "em": em,
                "delta": d,
                "delta_low": lo,
                "delta_high": hi,
                "n_seeds": n,
                "p_holm": holm,
            }
            for v, a, em, d, lo, hi, n, holm in rows
        ],
    )
    text = c.table3_conclusion("tiny")
    assert text.startswith(
        "3 of the paper's 8 cells (values × node value or difference to the parent as the "
        "advantage) have toy runs, and 1 of the authors' code's other advantage modes."
    )
    # the cells in the reader's words (issue #63), values first, then the advantage
    assert "default (entropy-weighted children, node value, 5 seeds)" in text
    assert "child mean, node value +2.0 [-2.0, +6.0] (3 seeds)" in text
    assert "child_mean" not in text and "diff_" not in text
    # below the default only where Holm's p agrees; the other cell off 0 cannot tell
    assert "1 cell reads below the default (the paper's finding) and 0 above it" in text
    assert (
        "cannot tell for leaf mean, difference to the root: the interval excludes 0, but the "
        "permutation "
        "test does not agree (p = 0.200 after Holm's correction over the 3 cells)" in text
    )
    # without any cell outside 0 the sentence says the toy cannot rank them
    _write(
        tmp_path,
        "table3",
        [
            {
                "value_mode": v,
                "advantage_mode": a,
                "method": f"credit_{v}_{a}",
                "em": em,
                "delta": d,
                "delta_low": lo,
                "delta_high": hi,
                "n_seeds": n,
                "p_holm": holm,
            }
            for v, a, em, d, lo, hi, n, holm in rows[:2]
        ],
    )
    assert "Every interval contains 0" in c.table3_conclusion("tiny")


def test_table2_conclusion_with_one_step_run_has_no_change_to_read(tmp_path, monkeypatch):
    """Notebook 04 trains AT2PO beside GRPO (issue #63), so under ``smoke`` Table 2's step 4
    alone has a run and its file no change columns; the conclusion raised AttributeError."""
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    _write(
        tmp_path,
        "table2",
        [
            {"step": 1, "method": "a", "configuration": "GRPO with random tree rollout"},
            {"step": 4, "method": "at2po", "configuration": "+ credit", "em": 0.4},
        ],
    )
    text = c.table2_conclusion("tiny")
    assert text.startswith("1 of the ablation's 2 steps have toy runs.")
    assert "95% CI" not in text  # no change to read


def test_table3_conclusion_with_only_the_default_cell_has_no_change_to_read(tmp_path, monkeypatch):
    """The same under ``smoke`` for Table 3: AT2PO's own cell alone, no change columns."""
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    _write(
        tmp_path,
        "table3",
        [{"value_mode": "entropy_softmax", "advantage_mode": "node_value", "em": 0.4}],
    )
    text = c.table3_conclusion("tiny")
    assert text.startswith("1 of the paper's 8 cells")
    assert "95% CI" not in text
