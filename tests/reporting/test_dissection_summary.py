"""The dissection's summary rows (at2po_lib/reporting/dissection_summary.py) from hand-made records."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from at2po_lib.reporting.dissection_summary import dissection_summary, why_sentences
from at2po_lib.util.paths import repo_root

ORACLE = """score,k,prompts,candidates,resamples,trees_with_spearman,spearman,spearman_lo,spearman_hi,flips_vs_uniform,flips_vs_uniform_lo,flips_vs_uniform_hi
authors_score,4,10,70,8,9,0.1,0.0,0.2,0.97,0.90,1.04
uniform,4,10,70,8,9,0.0,-0.1,0.1,1.0,0.95,1.05
oracle,4,10,70,8,,,,,1.25,1.10,1.40
oracle_in_sample,4,10,70,8,,,,,1.60,1.50,1.70
"""
SPREAD = """estimate,c,c_lo,c_hi,sibling_sets,trees,mean_dev,mean_range,method,stage
nll,0.47,0.46,0.48,130,32,0.0328,0.1641,at2po,first
exact,0.49,0.48,0.50,130,32,0.0091,0.0369,at2po,first
nll,0.30,0.29,0.31,16,16,0.0112,0.2614,grpo_tree_budget,first
"""


def test_rows_come_from_the_records_and_the_claims(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    folder = tmp_path / "tiny" / "dissection"
    folder.mkdir(parents=True)
    (folder / "expansion_oracle_warmstart_toy_summary.csv").write_text(ORACLE)
    (folder / "credit_spread.csv").write_text(SPREAD)
    claims = pd.DataFrame(
        [
            {
                "key": "turn_ratio_clips_less",
                "claim": "turn clips fewer",
                "estimate": 4.8,
                "ci_low": 4.6,
                "ci_high": 5.0,
                "unit": "%",
                "seeds": "2",
                "n_questions": float("nan"),
                "reading": "opposite",
            },
            {
                "key": "at2po_over_grpo",
                "claim": "AT2PO beats GRPO",
                "estimate": -0.9,
                "ci_low": -2.7,
                "ci_high": 0.9,
                "unit": "EM points",
                "seeds": "12 vs 21",
                "n_questions": 725.0,
                "reading": "cannot tell",
            },
            {
                "key": "at2po_over_grpo_budget",
                "claim": "tree vs chains",
                "estimate": float("nan"),
                "ci_low": float("nan"),
                "ci_high": float("nan"),
                "unit": "EM points",
                "seeds": "",
                "n_questions": 725.0,
                "reading": "no runs",
            },
        ]
    )
    tidy, display = dissection_summary("tiny", claims)
    assert list(tidy["part"]) == ["expansion"] * 3 + ["credit", "loss", "whole"]
    authors, placebo = tidy.iloc[0], tidy.iloc[1]
    assert "authors' score" in authors["question"] and "the warm start" in authors["question"]
    assert (authors["estimate"], authors["ci_low"], authors["ci_high"]) == (0.97, 0.90, 1.04)
    # the placebo strays 0.00 from 1 here: the margin is 0, and [0.90, 1.04] holds 1
    assert display.iloc[0]["measured"] == "0.97× [0.90, 1.04]: no different (placebo margin ±0.00)"
    assert "placebo" in placebo["question"]
    assert display.iloc[2]["measured"] == (
        "at least 1.25× [1.10, 1.40] (held-out halves; in-sample upper bound 1.60× [1.50, 1.70])"
    )
    # credit: AT2PO's sampled-NLL fit only (not the exact estimate, not another method's)
    credit = tidy[tidy["part"] == "credit"].iloc[0]
    assert credit["estimate"] == pytest.approx(0.0328) and "first" in credit["question"]
    assert display.iloc[3]["basis"] == "130 sibling sets in 32 trees"
    assert display.iloc[4]["measured"] == "+4.8 [+4.6, +5.0] % (opposite)"
    assert display.iloc[5]["basis"] == "seeds 12 vs 21, 725 questions"
    # a claim without runs (nan) is left out, not shown as nan
    assert "tree vs chains" not in set(tidy["question"])


def test_no_records_no_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    tidy, display = dissection_summary("tiny", None)
    assert tidy.empty and display.empty


def test_why_sentences_read_each_number_from_the_records(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    folder = tmp_path / "tiny" / "dissection"
    folder.mkdir(parents=True)
    (folder / "expansion_oracle_warmstart_toy_summary.csv").write_text(ORACLE)
    (folder / "credit_spread.csv").write_text(
        SPREAD.replace(
            "nll,0.30,0.29,0.31,16,16,0.0112,0.2614,grpo_tree_budget,first",
            "nll,0.46,0.45,0.49,153,32,0.0198,0.0911,at2po,last",
        )
    )
    claims = pd.DataFrame(
        [
            {
                "key": "at2po_over_grpo",
                "claim": "AT2PO beats GRPO",
                "published": "+2.8",
                "estimate": -0.9,
                "ci_low": -2.7,
                "ci_high": 0.9,
                "unit": "EM points",
                "seeds": "12 vs 21",
                "n_questions": 725.0,
                "reading": "cannot tell",
                "note": "",
            },
            {
                "key": "turn_ratio_clips_less",
                "claim": "turn clips fewer",
                "published": "far fewer",
                "estimate": 4.8,
                "ci_low": 4.6,
                "ci_high": 5.0,
                "unit": "%",
                "seeds": "2",
                "n_questions": float("nan"),
                "reading": "opposite",
                "note": "turn 6.9% vs token 2.1% of model tokens",
            },
        ]
    )
    parts, _ = dissection_summary("tiny", claims)
    result, expansion, credit, clip, resolution = why_sentences(claims, parts)
    assert "-0.9 [-2.7, +0.9]" in result and "seeds 12 vs 21" in result
    assert "+2.8 lies above the interval" in result  # 0.9 < 2.8
    assert "0.97× [0.90, 1.04]" in expansion and "1.25× [1.10, 1.40]" in expansion
    assert "no different from a uniform pick" in expansion  # the interval holds 1
    assert "at least 1.25× [1.10, 1.40]" in expansion and "at most 1.60× [1.50, 1.70]" in expansion
    assert "the most any score could gain" not in expansion  # a held-out bound is a lower bound
    assert "0.033 from the child mean" in credit and "0.020 at the last" in credit
    assert "turn 6.9% vs token 2.1%" in clip and "opposite" in clip
    assert "Elsewhere" not in expansion  # one oracle cell only
    assert "±1.8 EM points at seeds 12 vs 21" in resolution  # (0.9 - -2.7) / 2
    # without records, no sentence
    assert why_sentences(None, parts.iloc[0:0]) == []


def test_why_sentences_name_every_oracle_cell_the_variant_and_what_the_toy_cannot_resolve(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    folder = tmp_path / "tiny" / "dissection"
    folder.mkdir(parents=True)
    (folder / "expansion_oracle_warmstart_toy_summary.csv").write_text(ORACLE)
    (folder / "expansion_oracle_trained_rerun_paper_summary.csv").write_text(
        ORACLE.replace("0.97,0.90,1.04", "1.12,1.05,1.19").replace("10,70", "12,90")
    )
    (folder / "credit_spread.csv").write_text(
        SPREAD + "nll,0.46,0.45,0.49,153,32,0.0198,0.0911,at2po,last\n"
    )

    def claim(key, estimate, low, high, published="+1", seeds="3 vs 3", reading="cannot tell"):
        return {
            "key": key,
            "claim": key,
            "published": published,
            "estimate": estimate,
            "ci_low": low,
            "ci_high": high,
            "unit": "EM points",
            "seeds": seeds,
            "n_questions": 725.0,
            "reading": reading,
            "note": "",
        }

    claims = pd.DataFrame(
        [
            claim("at2po_over_grpo", 1.0, -1.0, 3.0, "+2.8", "12 vs 21"),
            claim(
                "authors_over_exact_variant",
                2.0,
                0.1,
                3.9,
                "not in the paper",
                "12 vs 21",
                "above 0",
            ),
            claim(
                "entropy_weights_over_child_mean", -2.8, -5.0, -0.6, "best", "21 vs 3", "opposite"
            ),
            claim("ablation_step2", 1.1, -6.9, 9.2, "+2.33"),
            claim("ablation_step3", -1.6, -7.7, 4.6, "+0.58"),
            claim("ablation_step4", -0.3, -5.6, 5.0, "+0.48", "21 vs 3"),
        ]
    )
    parts, _ = dissection_summary("tiny", claims)
    sentences = why_sentences(claims, parts)
    variant = next(s for s in sentences if s.startswith("**The authors' settings"))
    assert "+2.0 [+0.1, +3.9] EM points (seeds 12 vs 21): above 0" in variant
    expansion = next(s for s in sentences if s.startswith("**What the expansion"))
    # the placebo strays 0.00 from 1 in both cells: [1.05, 1.19] clears the margin
    assert (
        "Elsewhere: AT2PO seed 0 retrained on another machine build, paper's tree (M = 10, K = 6): 1.12× "
        "[1.05, 1.19], better than a uniform pick, ceiling 1.25× [1.10, 1.40] to 1.60× "
        "[1.50, 1.70] (12 prompts)" in expansion
    )
    credit = next(s for s in sentences if s.startswith("**Why turn-wise credit"))
    assert "-2.8 [-5.0, -0.6] EM points (seeds 21 vs 3): opposite" in credit
    resolution = sentences[-1]
    assert "±2.0 EM points" in resolution  # (3.0 - -1.0) / 2
    assert "2 of the paper's 3 ablation steps (+0.48, +0.58, +2.33) are smaller" in resolution
    # the toy's own steps, as wide as measured: (5.0 - -5.6) / 2 to (9.2 - -6.9) / 2
    assert "Table 2 steps are ±5.3 to ±8.1 points wide (seeds 21 vs 3; seeds 3 vs 3)" in resolution
    # a headline read from the study's blocks says blocks, not seeds
    claims.loc[claims["key"] == "at2po_over_grpo", "seeds"] = "3 blocks"
    blocked = why_sentences(claims, dissection_summary("tiny", claims)[0])
    assert "(3 blocks, 725 questions)" in blocked[0] and "seeds 3 blocks" not in blocked[0]
    assert "±2.0 EM points at 3 blocks:" in blocked[-1]
    assert "would narrow it" not in blocked[-1]  # no projection given
    projected = why_sentences(claims, dissection_summary("tiny", claims)[0], blocks_needed=21)
    assert "about 21 blocks would narrow it to ±2 points" in projected[-1]
    assert "sign-flip" not in projected[-1]  # no ablation blocks given
    ablation = why_sentences(claims, dissection_summary("tiny", claims)[0], ablation=(1, 7))
    assert (
        "a Table 2 step can read a direction from 6 ablation blocks on and a Table 3 cell "
        "(Holm over its 7 cells) from 9; 1 is finished." in ablation[-1]
    )
    two = why_sentences(claims, dissection_summary("tiny", claims)[0], ablation=(5, 3))
    assert "(Holm over its 3 cells) from 7; 5 are finished." in two[-1]  # 3 · 2/2^7 < 0.05
    # issue #63: a set the looks rule closed is final; the sentence invites no more blocks
    parts = dissection_summary("tiny", claims)[0]
    closed = why_sentences(
        claims, parts, blocks_needed=21, ablation=(9, 7), closed={"headline": 15, "ablation": 9}
    )
    assert "would narrow it" not in closed[-1] and "21 blocks" not in closed[-1]
    assert "The headline set is closed at 15 blocks" in closed[-1]
    assert "its verdicts are final and no block is added" in closed[-1]
    assert "9 are finished, and the ablation set is closed there (9 blocks)." in closed[-1]
    # only the ablation closed: the open headline keeps its projection, fixed before a look
    open_head = why_sentences(claims, parts, blocks_needed=21, closed={"ablation": 9})
    assert "about 21 blocks would narrow it" in open_head[-1]
    assert "a count to fix before the next look" in open_head[-1]
    # seeds of the committed runs are not blocks: no block projection for them
    claims.loc[claims["key"] == "at2po_over_grpo", "seeds"] = "12 vs 21"
    unblocked = why_sentences(claims, dissection_summary("tiny", claims)[0], blocks_needed=21)
    assert "would narrow it" not in unblocked[-1]


def test_credit_against_the_truth_reads_the_default_cell_at_each_temperature(tmp_path, monkeypatch):
    from at2po_lib.reporting.dissection_summary import credit_truth_rows

    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    (tmp_path / "tiny").mkdir()
    head = (
        "credit_mode,value_mode,advantage_mode,softmax_temperature,rollout,turns,auc,ci_low,"
        "ci_high,delta_vs_grpo,delta_low,delta_high,n_trees,n_prompts,n_turns,n_useful\n"
    )
    rows = [
        "at2po,entropy_softmax,node_value,1.0,entropy,all,0.70,0.68,0.72,-0.002,-0.003,-0.001,300,300,5673,2950",
        "at2po,entropy_softmax,node_value,1.0,entropy,search,0.54,0.51,0.57,0.01,0.0,0.02,300,300,900,400",
        "at2po,child_mean,node_value,1.0,entropy,all,0.71,0.69,0.73,0.0,0.0,0.0,300,300,5673,2950",
        "at2po,entropy_softmax,node_value,0.01,entropy,all,0.69,0.67,0.71,-0.006,-0.010,-0.002,300,300,5673,2950",
    ]
    (tmp_path / "tiny" / "credit_accuracy.csv").write_text(head + "\n".join(rows) + "\n")
    got = credit_truth_rows("tiny")
    assert [r["estimate"] for r in got] == [-0.002, -0.006]  # all turns, τ = 1 then 0.01
    assert got[0]["measured"] == "-0.002 [-0.003, -0.001] (AUC 0.700)"
    assert "τ = 0.01" in got[1]["question"] and got[1]["basis"] == "300 prompts, 5673 turns"


def test_the_dissection_figure_draws_both_panels_from_records(tmp_path):
    """Left: one point per sibling set and the fitted line; right: one bar group per oracle
    summary, with the perfect picker's bar."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np

    from at2po_lib.method.tree import TreeArrays
    from at2po_lib.record.tree_files import save_trees
    from at2po_lib.reporting.dissection_figure import dissection_figure

    run = tmp_path / "at2po" / "seed0"
    (run / "trees").mkdir(parents=True)
    parent = np.array([-1, 0, 0, 0])
    tree = TreeArrays(
        parent,
        np.zeros(4),
        np.array([0.0, 1.0, 0.0, 1.0]),
        node_arrays={
            "entropy_nll": np.array([0.0, 0.1, 0.3, 0.2]),
            "entropy_exact": np.array([0.0, 0.1, 0.1, 0.1]),
        },
    )
    save_trees([tree], run / "trees" / "step0001.npz")
    save_trees([tree], run / "trees" / "step0096.npz")
    folder = tmp_path / "dissection"
    folder.mkdir()
    (folder / "expansion_oracle_warmstart_toy_summary.csv").write_text(ORACLE)
    fig, (credit, expansion) = dissection_figure([run], folder)
    assert len(credit.collections) == 2  # first and last step, one set each
    assert any("fit" in t.get_text() for t in credit.get_legend().get_texts())
    heights = sorted(round(1 + b.get_height(), 2) for b in expansion.patches)
    assert heights == [0.97, 1.25]  # the authors' score and the perfect picker
    fig.clf()


def test_missing_records_draw_no_warning_and_text_cells_read_as_missing(tmp_path, monkeypatch):
    """The smoke profile: no saved AT2PO trees, no oracle, claims whose cells are text."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    from at2po_lib.reporting.dissection_figure import dissection_figure

    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig, _ = dissection_figure([], tmp_path)
        fig.clf()
    claims = pd.DataFrame(
        [
            {
                "key": "at2po_over_grpo",
                "claim": "c",
                "published": "+2.8",
                "estimate": "–",
                "ci_low": None,
                "ci_high": None,
                "unit": "EM points",
                "seeds": "",
                "n_questions": "–",
                "reading": "not run yet",
            },
            {
                "key": "turn_ratio_clips_less",
                "claim": "t",
                "published": "far",
                "estimate": 4.8,
                "ci_low": 4.6,
                "ci_high": 5.0,
                "unit": "%",
                "seeds": "2",
                "n_questions": "–",
                "reading": "opposite",
                "note": "",
            },
        ]
    )
    tidy, _ = dissection_summary("tiny", claims)
    assert list(tidy["part"]) == ["loss"] and tidy["basis"].item() == "seeds 2"


CREDIT_HEAD = (
    "credit_mode,value_mode,advantage_mode,softmax_temperature,rollout,turns,auc,ci_low,"
    "ci_high,delta_vs_grpo,delta_low,delta_high,n_trees,n_prompts,n_turns,n_useful\n"
)


def test_credit_temperature_rows_read_the_default_and_every_named_record(tmp_path, monkeypatch):
    """Only AT2PO's default cell on its own trees over all turns, per τ, sorted; a named record
    (``dissection/credit_accuracy_<name>.csv``) is its own line."""
    from at2po_lib.reporting.dissection_figure import (
        credit_temperature_figure,
        credit_temperature_rows,
        credit_temperature_table,
    )

    import matplotlib

    matplotlib.use("Agg")
    default = [
        "at2po,entropy_softmax,node_value,1.0,entropy,all,0.70,0.68,0.72,-0.002,-0.003,-0.001,300,300,5673,2950",
        "at2po,entropy_softmax,node_value,0.01,entropy,all,0.69,0.67,0.71,-0.006,-0.010,-0.002,300,300,5673,2950",
        "at2po,entropy_softmax,node_value,1.0,entropy,search,0.54,0.51,0.57,0.01,0.0,0.02,300,300,900,400",
        "at2po,entropy_softmax,diff_parent,1.0,entropy,all,0.60,0.58,0.62,-0.1,-0.12,-0.08,300,300,5673,2950",
        "at2po,entropy_softmax,node_value,1.0,random,all,0.66,0.64,0.68,0.0,-0.01,0.01,300,300,5000,2500",
        "grpo,none,none,1.0,entropy,all,0.702,0.68,0.72,0.0,0.0,0.0,300,300,5673,2950",
    ]
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    (tmp_path / "tiny" / "dissection").mkdir(parents=True)
    (tmp_path / "tiny" / "credit_accuracy.csv").write_text(CREDIT_HEAD + "\n".join(default) + "\n")
    trained = [
        "at2po,entropy_softmax,node_value,1.0,entropy,all,0.75,0.73,0.77,0.004,0.001,0.007,200,200,4000,2000"
    ]
    (tmp_path / "tiny" / "dissection" / "credit_accuracy_trained.csv").write_text(
        CREDIT_HEAD + "\n".join(trained) + "\n"
    )
    rows = credit_temperature_rows("tiny")
    assert list(rows["record"]) == ["default", "default", "trained"]
    assert list(rows["softmax_temperature"]) == [0.01, 1.0, 1.0]
    assert list(rows["delta_vs_grpo"]) == [-0.006, -0.002, 0.004]
    fig, ax = credit_temperature_figure(rows)
    assert len(ax.get_lines()) >= 2 and len(ax.get_legend().get_texts()) == 2
    fig.clf()
    assert credit_temperature_rows("smoke").empty
    # what notebook 03 displays: the reader's columns, no record names (issue #63: delta_low)
    shown = credit_temperature_table(rows)
    assert list(shown.columns) == [
        "credit AUC, AT2PO",
        "AT2PO − GRPO [95% CI]",
        "prompts",
        "turns",
    ]
    assert shown.index.names == ["trees", "softmax temperature τ"]
    first = shown.iloc[0]
    assert first["AT2PO − GRPO [95% CI]"] == "-0.006 [-0.010, -0.002]"  # the τ = 0.01 row
    assert first["credit AUC, AT2PO"] == "0.690" and first["prompts"] == 300


def test_clip_levels_figure_draws_a_dot_per_run_and_level_and_the_means(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from at2po_lib.reporting.dissection_figure import clip_levels_figure

    clips = pd.DataFrame(
        {
            "method": ["at2po", "at2po", "grpo_tree_budget"],
            "seed": ["seed0", "seed1", "seed0"],
            "steps": [96, 96, 96],
            "token_level": [0.02, 0.03, 0.004],
            "turn_level": [0.07, 0.08, 0.004],
            "own": [0.07, 0.08, 0.004],
        }
    )
    fig, ax = clip_levels_figure(clips)
    dots = [
        len(c.get_offsets())
        for c in ax.collections
        if hasattr(c, "get_offsets") and c.__class__.__name__ == "PathCollection"
    ]
    assert sorted(dots) == [1, 1, 2, 2]  # per method, one dot per run at each level
    means = sorted(
        round(float(seg[0][1]), 3)
        for c in ax.collections
        if c.__class__.__name__ == "LineCollection"
        for seg in c.get_segments()
    )
    assert means == [0.4, 0.4, 2.5, 7.5]  # the mean line per method and level, in %
    assert [t.get_text() for t in ax.get_xticklabels()] == [  # display names (issue #49)
        "AT2PO\n(2 runs)",
        "GRPO (AT2PO's budget: M\n+ L·K chains)\n(1 runs)",
    ]
    fig.clf()


def test_credit_spread_figure_has_a_panel_per_estimate(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np

    from at2po_lib.method.tree import TreeArrays
    from at2po_lib.reporting.dissection_figure import credit_spread_figure
    from at2po_lib.record.tree_files import save_trees

    run = tmp_path / "at2po" / "seed0"
    (run / "trees").mkdir(parents=True)
    tree = TreeArrays(
        np.array([-1, 0, 0, 0]),
        np.zeros(4),
        np.array([0.0, 1.0, 0.0, 1.0]),
        node_arrays={
            "entropy_nll": np.array([0.0, 0.1, 0.3, 0.2]),
            "entropy_exact": np.array([0.0, 0.1, 0.1, 0.1]),
        },
    )
    save_trees([tree], run / "trees" / "step0001.npz")
    fig, (nll, exact) = credit_spread_figure([run])
    assert "NLL" in nll.get_title() and "exact" in exact.get_title()
    # the exact entropies of the three siblings are equal: its set sits at Δ = 0, weights 1/n
    x, y = exact.collections[0].get_offsets()[0]
    assert (float(x), float(y)) == (0.0, 0.0)
    x, y = nll.collections[0].get_offsets()[0]
    assert float(x) == pytest.approx(0.2 / 3) and float(y) > 0
    fig.clf()


def test_credit_truth_rows_name_each_record_its_trees_and_settings(tmp_path, monkeypatch):
    """One row per record and τ; the settings come from the record's meta, and the credit
    sentence quotes every τ = 1 cell with its own basis."""
    import json

    from at2po_lib.reporting.dissection_summary import credit_truth_rows

    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    (tmp_path / "tiny" / "dissection").mkdir(parents=True)
    cell = "at2po,entropy_softmax,node_value,1.0,entropy,all,{auc},0.6,0.8,{d},{lo},{hi},300,{p},5000,2500"
    default = tmp_path / "tiny" / "credit_accuracy.csv"
    default.write_text(
        CREDIT_HEAD + cell.format(auc=0.70, d=-0.002, lo=-0.003, hi=-0.001, p=300) + "\n"
    )
    (tmp_path / "tiny" / "credit_accuracy.csv.meta.json").write_text(
        json.dumps({"config": {"entropy_estimate": "exact", "tree_alpha": 0.001}})
    )
    named = tmp_path / "tiny" / "dissection" / "credit_accuracy_trained_authors.csv"
    named.write_text(CREDIT_HEAD + cell.format(auc=0.75, d=0.004, lo=0.001, hi=0.007, p=250) + "\n")
    (named.parent / (named.name + ".meta.json")).write_text(
        json.dumps({"config": {"entropy_estimate": "sampled_nll", "tree_alpha": 0.05}})
    )
    rows = credit_truth_rows("tiny")
    assert [r["estimate"] for r in rows] == [-0.002, 0.004]
    assert "the warm start's trees; exact entropy, α = 0.001;" in rows[0]["question"]
    assert "retrained on another machine build; sampled-token NLL, α = 0.05;" in rows[1]["question"]
    assert rows[1]["basis"] == "250 prompts, 5000 turns"
    parts = pd.DataFrame(
        rows
        + [
            {
                "part": "credit",
                "question": "mean |w − 1/n| of AT2PO's softmax weights, first rollout step",
                "measured": "0.030",
                "basis": "10 sibling sets in 4 trees",
                "estimate": 0.03,
            },
            {
                "part": "credit",
                "question": "mean |w − 1/n| of AT2PO's softmax weights, last rollout step",
                "measured": "0.010",
                "basis": "12 sibling sets in 4 trees",
                "estimate": 0.01,
            },
        ]
    )
    text = next(s for s in why_sentences(None, parts) if "child mean" in s)
    assert (
        "-0.002 [-0.003, -0.001] (AUC 0.700) (the warm start's trees, exact entropy, α = 0.001: 300 prompts"
        in text
    )
    assert "+0.004 [+0.001, +0.007] (AUC 0.750)" in text and "250 prompts, 5000 turns" in text


@pytest.mark.parametrize(
    "low, high, p, expected",
    [
        (
            -5.7,
            1.8,
            0.027,
            "lies above the interval, and the sign-flip test against it agrees "
            "(p = 0.027): the toy's AT2PO does not reach the paper's gain",
        ),
        (
            -5.7,
            1.8,
            0.081,
            "lies above the interval, but the sign-flip test against it does "
            "not agree (p = 0.081): cannot tell",
        ),
        (-5.7, 1.8, float("nan"), "lies above the interval (no permutation test against it"),
        (
            3.5,
            6.0,
            0.010,
            "lies below the interval, and the sign-flip test against it agrees "
            "(p = 0.010): the toy's AT2PO exceeds the paper's gain",
        ),
        (-2.0, 4.0, 0.600, "lies inside the interval: the toy cannot rule it out"),
    ],
)
def test_the_result_reads_against_the_papers_gain_only_where_the_test_agrees(
    low, high, p, expected
):
    """Issue #48's rule for readings against 0 holds against the paper's number too: outside
    the interval is not enough, the sign-flip test of the block differences against it must
    agree at 0.05."""
    from at2po_lib.reporting.dissection_summary import _result_sentence

    head = {
        "key": "at2po_over_grpo",
        "claim": "AT2PO beats GRPO",
        "published": "+2.8",
        "estimate": (low + high) / 2,
        "ci_low": low,
        "ci_high": high,
        "unit": "EM points",
        "seeds": "9 blocks",
        "n_questions": 725.0,
        "reading": "cannot tell",
        "note": "",
        "p_vs_published": p,
    }
    assert expected in _result_sentence(pd.DataFrame([head]))


def test_a_small_share_gap_keeps_its_hundredths():
    """Issue #63: 05 showed "+0.0 [-0.0, +0.0] %" beside a sentence giving +0.01 [-0.03, +0.05]."""
    from at2po_lib.reporting.dissection_summary import _ci_text

    gap = pd.Series({"estimate": 0.01, "ci_low": -0.03, "ci_high": 0.05, "unit": "%"})
    assert _ci_text(gap) == "+0.01 [-0.03, +0.05]"
    points = pd.Series({"estimate": -2.0, "ci_low": -4.45, "ci_high": 0.5, "unit": "EM points"})
    assert _ci_text(points) == "-2.0 [-4.5, +0.5]"


def test_picks_table_reads_the_authors_score_with_verdicts_and_entropy_beside():
    """Issue #63: notebook 02's §3b printed the entropy-only ratios without verdict words, not
    those of the authors' score H − α·b its AT2PO expands by."""
    from at2po_lib.reporting.dissection_summary import picks_table

    def row(score, value, low, high):
        return {
            "score": score,
            "flips_vs_uniform": value,
            "flips_vs_uniform_lo": low,
            "flips_vs_uniform_hi": high,
            "prompts": 600,
            "policy": "warmstart",
            "shape": "toy",
        }

    summaries = pd.DataFrame(
        [
            row("uniform", 1.02, 0.99, 1.05),  # the placebo strays 0.02 from 1: the margin
            row("authors_score", 1.08, 1.03, 1.12),  # 1.03 > 1 + 0.02: better
            row("entropy_nll", 1.01, 0.98, 1.04),  # contains 1: no different
        ]
    )
    table = picks_table(summaries, "entropy_nll")
    shown = table.loc[("the warm start", "toy tree")]
    assert shown["authors' score H − α·b"] == "1.08× [1.03, 1.12]"
    assert shown["authors' score H − α·b: verdict"] == "better"
    assert shown["entropy only: verdict"] == "no different"
    assert picks_table(pd.DataFrame(), "entropy_nll").empty
    source = "".join(
        "".join(c["source"])
        for c in json.loads((repo_root() / "notebooks" / "02_tree_rollout.ipynb").read_text())[
            "cells"
        ]
    )
    assert "picks_table(summaries" in source and "flip_ratio_sentence(" not in source
