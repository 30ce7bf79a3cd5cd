"""at2po_lib.reporting: Tables 1-3 and Figures 3-4 from run folders, with provenance and the
README's generated blocks. Run folders are written here by hand, in the trainer's format."""

from __future__ import annotations

import json
import shutil

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

from at2po_lib.config.profile import load_profile  # noqa: E402
from at2po_lib.evaluation import stats  # noqa: E402
from at2po_lib.reporting import labels, readme, report, table1, table2  # noqa: E402
from at2po_lib.record import reading as records
from at2po_lib.trainer.resolve import resolve_run  # noqa: E402

DATASETS = ("tiny_hotpotqa", "tiny_2wiki", "tiny_nq")
N_QUESTIONS = 12


def write_run(root, method: str, seed: int, em: np.ndarray, turns: int = 3, outcomes: bool = True):
    """A finished run folder (returned): outcomes, final_eval, metrics, eval, DONE."""
    run = root / "runs" / "smoke" / method / f"seed{seed}"
    run.mkdir(parents=True)
    rows = [
        {
            "dataset": d,
            "group": "singlehop" if d == "tiny_nq" else "multihop",
            "id": f"{d}-{i}",
            "prediction": "x",
            "em": float(em[j, i]),
            "f1": float(em[j, i]),
            "num_turns": turns if d != "tiny_nq" else 2,
            "num_tool_calls": turns - 1,
            "finish_reason": "answer",
        }
        for j, d in enumerate(DATASETS)
        for i in range(N_QUESTIONS)
    ]
    frame = pd.DataFrame(rows)
    if outcomes:
        frame.to_csv(run / "outcomes.csv", index=False)
    final = (
        frame.groupby(["dataset", "group"], sort=False)
        .agg(n=("em", "size"), em=("em", "mean"))
        .reset_index()
    )
    final.to_csv(run / "final_eval.csv", index=False)
    with open(run / "metrics.jsonl", "w") as fh:
        for step in range(1, 5):
            fh.write(json.dumps({"step": step, "entropy": 0.1 + 0.01 * seed + 0.001 * step}) + "\n")
    with open(run / "eval.jsonl", "w") as fh:
        for step in (0, 4):
            fh.write(
                json.dumps({"step": step, "dataset": "tiny_hotpotqa", "em": float(em[0].mean())})
                + "\n"
            )
    (run / "DONE.json").write_text("{}")
    return run


@pytest.fixture()
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    root = tmp_path / "results"
    rng = np.random.default_rng(0)
    base = (rng.random((len(DATASETS), N_QUESTIONS)) < 0.5).astype(float)
    write_run(root, "react", 0, base)
    for seed in (0, 1):
        # the seeds differ in the last NQ question (both methods alike: differences stay
        # paired), as independent runs do: identical outcomes would be a copied run
        ours = base.copy()
        ours[-1, -1] = float(seed == 1)
        write_run(root, "grpo", seed, ours)
        better = ours.copy()
        better[0, :3] = 1.0  # AT2PO gets the first 3 HotpotQA questions right as well
        write_run(root, "at2po", seed, better, turns=4)
    return root


def test_records_discover_and_outcomes(results):
    runs = records.discover_runs("smoke")
    assert list(runs["method"]) == ["at2po", "at2po", "grpo", "grpo", "react"]
    assert runs["finished"].all() and runs["has_outcomes"].all()
    outcomes = records.load_outcomes("smoke")
    assert {"question_id", "turns", "searches"} <= set(outcomes.columns)
    assert len(outcomes) == 5 * len(DATASETS) * N_QUESTIONS


def test_table1_cells_and_published_rows(results):
    outcomes, finals = records.load_outcomes("smoke"), records.load_final_evals("smoke")
    tidy, display = table1.table1("smoke", outcomes, finals)
    ours = tidy[(tidy["source"] == "ours") & (tidy["method"] == "at2po")].set_index("column")
    at2po = outcomes[outcomes["method"] == "at2po"]
    multihop = at2po[at2po["dataset"] != "tiny_nq"]["em"].mean()
    assert ours.loc["Multi-hop avg", "em"] == pytest.approx(multihop)
    unweighted = at2po[at2po["dataset"] != "tiny_nq"].groupby("dataset")["em"].mean().mean()
    assert ours.loc["Multi-hop avg (unweighted)", "em"] == pytest.approx(unweighted)
    assert ours.loc["Multi-hop avg", "ci_low"] <= multihop <= ours.loc["Multi-hop avg", "ci_high"]
    # the published Qwen3-4B row sits under ours, labelled
    assert ("AT2PO", "published (Qwen3-4B)") in display.index
    published = tidy[(tidy["source"] == "published (Qwen3-4B)") & (tidy["method"] == "at2po")]
    assert published.set_index("column").loc["Multi-hop avg", "em"] == pytest.approx(0.4881)


def test_table1_differences_are_paired_over_questions(results):
    outcomes = records.load_outcomes("smoke")
    tidy, display = table1.table1_differences("smoke", outcomes)
    row = tidy[
        (tidy["method"] == "at2po")
        & (tidy["baseline"] == "grpo")
        & (tidy["scope"] == "tiny_hotpotqa")
    ].iloc[0]
    base = outcomes[(outcomes["method"] == "grpo") & (outcomes["dataset"] == "tiny_hotpotqa")]
    expected = (3 - base["em"].iloc[:3].sum()) / N_QUESTIONS
    assert row["diff"] == pytest.approx(expected)
    assert row["p_improve"] == pytest.approx(1.0 if expected > 0 else 0.5)
    # each group's sample-weighted difference carries the permutation p a reading needs;
    # a per-dataset scope or the unweighted average carries none
    groups = tidy[(tidy["scope"].isin(["multihop", "singlehop"]))]
    sample = groups[groups["weighting"] == "sample"]
    assert sample["p_permutation"].notna().all() and np.isnan(row["p_permutation"])
    assert groups.loc[groups["weighting"] == "dataset", "p_permutation"].isna().all()
    multihop = sample[(sample["method"] == "at2po") & (sample["scope"] == "multihop")].iloc[0]
    members = sorted(d for d in outcomes["dataset"].unique() if d != "tiny_nq")
    expected_p = stats.difference_test(outcomes, "at2po", multihop["baseline"], members).p
    assert multihop["p_permutation"] == pytest.approx(expected_p)


def test_finals_fallback_has_no_interval(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    write_run(tmp_path, "grpo", 0, np.ones((len(DATASETS), N_QUESTIONS)), outcomes=False)
    tidy, display = table1.table1(
        "smoke", records.load_outcomes("smoke"), records.load_final_evals("smoke")
    )
    ours = tidy[tidy["source"] == "ours"]
    assert ours["ci_low"].isna().all() and (ours["em"] == 1.0).all()
    assert display.loc[("GRPO", "ours"), "Multi-hop avg"] == "100.0"


def record_settings(run, method: str, rollout: dict) -> None:
    """A ``config.yaml`` in ``run`` as the trainer writes it, for ``method`` on smoke with
    ``rollout`` settings over the profile's."""
    spec = resolve_run(load_profile("smoke", {"rollout": rollout}), method, 0, world_size=1)
    (run / "config.yaml").write_text(yaml.safe_dump(spec.record()))


EXACT = {"entropy_estimate": "exact", "tree_alpha": 0.001}


def test_table2_steps_and_step4_the_at2po_of_step3s_settings(results):
    tidy, display = table2.table2("smoke", records.load_outcomes("smoke"))
    assert list(display["published avg"]) == ["45.42", "47.75", "48.33", "48.81"]
    assert display.loc[1, "toy avg [95% CI]"] == "–"
    # step 4 is the AT2PO preset with the expansion settings step 3 recorded; without step 3's
    # records, the profile's: the fixture's at2po runs
    assert labels.profile_at2po("smoke") == "at2po"
    assert display.loc[4, "toy avg [95% CI]"] != "–"
    assert tidy.loc[tidy["step"] == 4, "method"].item() == "at2po"
    # step 3 recorded with the exact-entropy variant's settings: step 4 is the variant
    step3 = write_run(results, "ablation_entropy_tree", 0, np.ones((len(DATASETS), N_QUESTIONS)))
    record_settings(step3, "ablation_entropy_tree", EXACT)
    assert labels.profile_at2po("smoke") == "at2po_exact"
    assert labels.profile_at2po("smoke", labels.TABLE3_CELLS) == "at2po"  # no cells recorded
    tidy, display = table2.table2("smoke", records.load_outcomes("smoke"))
    assert display.loc[4, "toy avg [95% CI]"] == "–"  # no at2po_exact runs yet
    write_run(results, "at2po_exact", 0, np.ones((len(DATASETS), N_QUESTIONS)))
    tidy, display = table2.table2("smoke", records.load_outcomes("smoke"))
    assert display.loc[4, "toy avg [95% CI]"] != "–"
    assert tidy.loc[tidy["step"] == 4, "method"].item() == "at2po_exact"
    sentence = labels.table_configurations("smoke")
    assert (
        "Table 1's AT2PO row and Table 3's default cell are `at2po` (sampled-token NLL, "
        "α = 0.05: the profile's settings; 2 seeds)"
    ) in sentence
    assert (
        "Table 2's step 4 (= AT2PO) is `at2po_exact` (exact entropy, α = 0.001: the "
        "settings it fixes over the profile's; 1 seed)"
    ) in sentence


@pytest.mark.slow
def test_write_report_files_and_meta(results, tmp_path):
    written = report.write_report("smoke")
    for name in ("table1", "table1_summary", "table1_differences", "table2"):
        paths = written.paths[name]
        assert all(p.is_file() for p in paths.values())
        meta = json.loads(paths["csv"].with_name(paths["csv"].name + ".meta.json").read_text())
        assert meta["profile"] == "smoke" and "git_revision" in meta
    meta = json.loads((results / "smoke" / "tables" / "table1.csv.meta.json").read_text())
    assert {(s["method"], s["seed"]) for s in meta["sources"]} >= {("at2po", 0), ("grpo", 1)}
    # from the cell to its function: each table's meta names the function that computed it
    writers = {
        name: json.loads(
            written.paths[name]["csv"]
            .with_name(written.paths[name]["csv"].name + ".meta.json")
            .read_text()
        )["writer"]
        for name in ("table1", "table1_differences", "table2")
    }
    assert writers == {
        "table1": "at2po_lib.reporting.table1:table1",
        "table1_differences": "at2po_lib.reporting.table1:table1_differences",
        "table2": "at2po_lib.reporting.table2:table2",
    }
    assert meta["command"]
    for fig in ("fig3", "fig4"):
        assert all(p.stat().st_size > 0 for p in written.paths[fig].values())
    # entropy 0.1 + 0.01 seed + 0.001 step over 4 steps: window 1, change 0.003 in every run
    change = pd.read_csv(written.paths["fig3_entropy_change"]["csv"]).set_index(
        ["method", "metric"]
    )
    assert change.loc[("at2po", "entropy"), "change"] == pytest.approx(0.003)
    assert change.loc[("at2po", "entropy"), "vs_baseline"] == pytest.approx(0.0)
    assert change.loc[("at2po", "entropy"), "baseline"] == "grpo"
    # deterministic: a second report rewrites identical bytes
    first = {p: p.read_bytes() for paths in written.paths.values() for p in paths.values()}
    report.write_report("smoke")
    assert all(p.read_bytes() == data for p, data in first.items())


@pytest.mark.slow
def test_readme_blocks_are_checked_and_rewritten(results, tmp_path):
    report.write_report("smoke", figures=False)
    page = tmp_path / "README.md"
    page.write_text(
        "intro\n<!-- at2po-report: smoke/table1_summary -->\nold\n<!-- /at2po-report -->\noutro\n"
    )
    assert readme.stale_blocks(page) == ["smoke/table1_summary"]
    assert readme.update_readme(page) == ["smoke/table1_summary"]
    assert readme.stale_blocks(page) == []
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "| AT2PO |" in text


def test_table3_fills_the_default_cell_with_at2po_and_diffs_against_it(results):
    """The default cell is the AT2PO preset whose expansion settings the grid's cells recorded
    (at2po_exact on tiny until the study re-runs them): here a cell recorded with the variant's
    settings, and the fixture's at2po runs copied under the variant's name."""
    from at2po_lib.reporting import table3

    rng = np.random.default_rng(3)
    at2po = results / "runs" / "smoke" / "at2po"
    shutil.copytree(at2po, at2po.with_name("at2po_exact"))
    shutil.rmtree(at2po)
    cell = write_run(
        results,
        "credit_child_mean_diff_parent",
        0,
        (rng.random((len(DATASETS), N_QUESTIONS)) < 0.5).astype(float),
    )
    record_settings(cell, "credit_child_mean_diff_parent", EXACT)
    outcomes = records.load_outcomes("smoke")
    tidy, display = table3.table3("smoke", outcomes)
    assert set(tidy["method"]) == {"at2po_exact", "credit_child_mean_diff_parent"}
    # rows and columns in the reader's words (issue #63): values, then the advantage
    assert display.index.name == "values ↓ / advantage →"
    assert list(display.columns) == [
        "node value",
        "difference to the parent",
        "difference to the root",
        "differences to the root and the parent",
    ]
    assert display.loc["entropy-weighted children", "node value"].startswith(
        f"{100 * tidy.set_index('method').loc['at2po_exact', 'em']:.1f}"
    )
    other = tidy.set_index("method").loc["credit_child_mean_diff_parent"]
    cell = display.loc["child mean", "difference to the parent"]
    assert other["delta_against"] == "at2po_exact" and "Δ" in cell
    assert cell.endswith("(1 seed)")


def test_figure3_draws_the_headline_pair_apart_from_the_rest():
    """GRPO and AT2PO bold in fixed colours, the other methods thin: six lines stay readable."""
    from matplotlib.colors import to_rgba

    from at2po_lib.reporting import figure3

    rows = [
        {"method": m, "seed": s, "step": t, "entropy": 0.1 + 0.001 * t}
        for m in ("grpo", "dapo", "at2po")
        for s in (0, 1)
        for t in range(1, 5)
    ]
    fig, axes = figure3.figure3(
        pd.DataFrame(rows), pd.DataFrame(), "tiny_hotpotqa", ["grpo", "dapo", "at2po"], smooth=1
    )
    lines = {
        line.get_label(): line
        for line in axes[0].get_lines()
        if not line.get_label().startswith("_")
    }
    assert to_rgba(lines["GRPO"].get_color()) == to_rgba("black")
    assert to_rgba(lines["AT2PO"].get_color()) == to_rgba("tab:red")
    assert lines["GRPO"].get_linewidth() >= 2 * lines["DAPO"].get_linewidth()
    fig.clf()


def test_markdown_table_reads_back_as_its_display_frame():
    from at2po_lib.reporting.output import markdown_table

    shown = pd.DataFrame(
        {"EM [95% CI]": ["48.7 [47.0, 50.3]", "a | b"], "seeds": ["7", ""]},
        index=pd.Index(["AT2PO", "GRPO"], name="method"),
    )
    back = report.read_markdown_table(markdown_table(shown))
    pd.testing.assert_frame_equal(back, shown)


@pytest.mark.slow
def test_current_report_reads_the_stored_tables_only_while_they_match_the_runs(results):
    """Notebook 05's shortcut: the committed tables stand for a new report only when their
    metas name exactly the finished runs (and the claims' the finished blocks)."""
    from at2po_lib.reporting.output import markdown_table

    assert report.stale_reason("smoke") == "no stored Table 1 or claims table"
    written = report.write_report("smoke")
    assert report.stale_reason("smoke") is None
    read = report.current_report("smoke")
    assert "read back" in read.notes[-1]
    assert read.paths == written.paths
    for name in ("table1", "table1_differences", "table2", "claims"):
        # what is shown is the text of the computed frame, cell by cell
        assert markdown_table(read.tables[name]) == markdown_table(written.tables[name]), name
        assert len(read.tables[name]) == len(written.tables[name]) > 0
    pd.testing.assert_frame_equal(read.tables["turns"], written.tables["turns"])
    write_run(results, "grpo", 7, np.ones((len(DATASETS), N_QUESTIONS)))  # a new finished run
    assert "miss 1 finished run(s) [('grpo', 7)]" in report.stale_reason("smoke")
    assert "recomputed" in report.current_report("smoke").notes[-1]
