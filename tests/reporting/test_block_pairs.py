"""Methods paired within the study's blocks (at2po_lib/reporting/block_pairs.py): block records
read back, the paired interval and its sign-flip test, blocks of two revisions not paired
silently, and the claims that read them beside the earlier record."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from at2po_lib.evaluation import stats
from at2po_lib.reporting.block_pairs import (
    block_scores,
    blocks_needed,
    block_sources,
    block_times,
    blocked_difference,
    blocks_overview,
    load_block_outcomes,
    provenance_table,
    rests_on,
    run_provenance,
)
from at2po_lib.reporting.claims import claims_table
from at2po_lib.study.block_records import SET_SEED_BASE, blocks_root, set_methods
from at2po_lib.util.errors import RecordError

MH = "tiny_hotpotqa"
CELLS_READ = ("at2po", "credit_child_mean_node_value", "credit_leaf_mean_diff_parent")
REV_A, REV_B = "a" * 40, "b" * 40


def _write_block(
    root: Path,
    block: int,
    commit: str,
    rates: dict[str, float],
    rng: np.random.Generator,
    questions: int = 300,
    build: str = "fc-v669",
) -> None:
    """A finished block as ``at2po study --block-set headline`` leaves it: BLOCK.json and one
    run folder per method with DONE.json, meta.json and outcomes.csv (a shared block effect
    moves every method's rate alike)."""
    folder = root / f"block{block:02d}"
    seed = SET_SEED_BASE[root.name] + block
    shift = rng.normal(0, 0.08)
    runs = {}
    for method, rate in rates.items():
        run = folder / method / f"seed{seed}"
        run.mkdir(parents=True)
        em = (rng.random(questions) < np.clip(rate + shift, 0, 1)).astype(float)
        pd.DataFrame(
            {
                "dataset": MH,
                "group": "multihop",
                "id": [f"q{i}" for i in range(questions)],
                "prediction": "x",
                "em": em,
                "f1": em,
                "num_turns": 3,
                "num_tool_calls": 2,
                "finish_reason": "answer",
            }
        ).to_csv(run / "outcomes.csv", index=False)
        (run / "DONE.json").write_text(json.dumps({"config_hash": f"h-{method}"}))
        own = {"block": block, "block_set": root.name}  # what a run records of its block
        meta = {"git_revision": commit, "seed": seed, "method": method, "block": own}
        (run / "meta.json").write_text(json.dumps(meta))
        runs[method] = {"config_hash": f"h-{method}", "status": "trained", "wall_time": 1.0}
    (folder / "BLOCK.json").write_text(
        json.dumps(
            {
                "block": block,
                "block_set": root.name,
                "seed": seed,
                "commit": commit,
                "git_revision": commit,
                "clean": True,
                "build": build,
                "torch_threads": 1,
                "overrides": {},
                "runs": runs,
                "status": "finished",
            }
        )
    )


@pytest.fixture()
def headline(isolated_outputs) -> Path:
    root = blocks_root("tiny", "headline")
    rng = np.random.default_rng(0)
    for block in range(6):
        _write_block(
            root, block, REV_A, {"at2po": 0.55, "grpo": 0.40, "grpo_tree_budget": 0.50}, rng
        )
    return root


def test_blocks_are_read_with_their_record(headline):
    frame = load_block_outcomes("tiny")
    assert sorted(frame["block"].unique()) == list(range(6))
    assert set(frame["method"]) == {"at2po", "grpo", "grpo_tree_budget"}
    assert (frame["commit"] == REV_A).all() and (frame["build"] == "fc-v669").all()
    assert sorted(frame["seed"].unique()) == list(range(100, 106))


def test_a_run_of_another_revision_inside_a_block_is_refused(headline):
    meta = headline / "block02" / "grpo" / "seed102" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "git_revision": REV_B}))
    with pytest.raises(RecordError, match="another process in this block"):
        load_block_outcomes("tiny")


def test_the_pair_is_the_blocked_interval_with_a_sign_flip_test(headline):
    frame = load_block_outcomes("tiny")
    found = blocked_difference(frame, "headline", "at2po", "grpo", [MH])
    questions = pd.MultiIndex.from_product(
        [[MH], sorted(f"q{i}" for i in range(300))], names=["dataset", "question_id"]
    )
    a = stats.score_matrix(frame, "at2po", questions, unit="block")
    b = stats.score_matrix(frame, "grpo", questions, unit="block")
    estimate, low, high = stats.blocked_difference_interval(a, b, np.full(300, 1 / 300))
    assert (found.interval.estimate, found.interval.low, found.interval.high) == pytest.approx(
        (estimate, low, high)
    )
    # six block differences, all positive: the exact sign-flip p is 2 / 64
    assert found.test.exact and found.test.splits == 64
    assert found.test.p == pytest.approx(2 / 64)
    assert found.rests_on() == "6 blocks at aaaaaaa (build fc-v669 ×6; 1 thread)"
    assert blocked_difference(frame, "ablation", "at2po", "grpo", [MH]) is None


def test_blocks_of_two_revisions_are_paired_only_when_asked(headline):
    _write_block(
        headline,
        6,
        REV_B,
        {"at2po": 0.55, "grpo": 0.40, "grpo_tree_budget": 0.5},
        np.random.default_rng(1),
    )
    frame = load_block_outcomes("tiny")
    with pytest.raises(RecordError, match=r"block 5: aaaaaaa.*block 6: bbbbbbb"):
        blocked_difference(frame, "headline", "at2po", "grpo", [MH])
    asked = blocked_difference(frame, "headline", "at2po", "grpo", [MH], allow_revisions=True)
    assert len(asked.blocks) == 7 and asked.commits == (REV_A, REV_B)


def test_claims_read_the_blocks_and_keep_the_earlier_record_beside_them(headline):
    rng = np.random.default_rng(3)
    earlier = pd.DataFrame(
        [
            {
                "method": m,
                "seed": s,
                "dataset": MH,
                "question_id": f"q{i}",
                "em": float(rng.random() < 0.45),
                "turns": 3,
                "searches": 2,
            }
            for m in ("at2po", "grpo")
            for s in range(3)
            for i in range(300)
        ]
    )
    blocks = load_block_outcomes("tiny")
    tidy, display = claims_table("tiny", earlier, blocks=blocks)
    rows = tidy.set_index("key")
    paired = rows.loc["at2po_over_grpo"]
    assert paired["seeds"] == "6 blocks" and paired["reading"] == "agrees"
    assert paired["rests_on"].startswith("6 blocks at aaaaaaa")
    assert rows.loc["at2po_over_grpo_earlier", "seeds"] == "3 vs 3"
    assert rows.loc["at2po_over_grpo_earlier", "claim"].endswith("; the earlier record")
    assert rows.loc["at2po_over_grpo_budget", "seeds"] == "6 blocks"
    assert "rests on" in display.columns


def test_the_earlier_record_names_its_revisions_and_builds(tmp_path):
    paths = []
    for method, seed, revision, platform in (
        ("at2po", 0, "f2386ba" + "0" * 33, "Linux-6.18.44-fc-v1045-x86_64-with-glibc2.36"),
        ("grpo", 0, "0c35b88" + "0" * 33, "Linux-6.18.44-fc-v973-x86_64-with-glibc2.36"),
        ("grpo", 1, "0c35b88" + "0" * 33, "Linux-6.18.44-fc-v973-x86_64-with-glibc2.36"),
        ("grpo", 2, "0c35b88" + "0" * 33, "Linux-6.18.44-fc-v669-x86_64-with-glibc2.36"),
    ):
        folder = tmp_path / method / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(
            json.dumps(
                {"git_revision": revision, "platform": platform, "hardware": {"torch_threads": 1}}
            )
        )
        paths.append(folder)
    provenance = run_provenance(paths)
    assert (
        rests_on(provenance, ("at2po", "grpo"))
        == "f2386ba (fc-v1045) vs 0c35b88 (fc-v973 ×2, fc-v669 ×1)"
    )

    # the table of what each method rests on: the earlier record and the blocks
    blocks = pd.DataFrame(
        {
            "method": ["at2po", "at2po", "grpo"],
            "block_set": "headline",
            "block": [0, 1, 0],
            "commit": REV_A,
            "build": "fc-v669",
        }
    )
    table = provenance_table(provenance, blocks).set_index("method")
    assert table.loc["grpo", "earlier record: runs"] == 3
    assert table.loc["at2po", "blocks: headline"] == "2 at aaaaaaa (fc-v669 ×2)"
    assert table.loc["grpo", "blocks: headline"] == "1 at aaaaaaa (fc-v669 ×1)"


def test_the_blocks_overview_lists_finished_blocks_only(headline):
    from at2po_lib.util.staging import staging_path

    staging_path(headline / "block07").mkdir()  # a killed block is not listed
    overview = blocks_overview("tiny")
    assert list(overview["block"]) == list(range(6)) and set(overview["revision"]) == {"aaaaaaa"}
    assert block_sources("tiny")[0] == "headline/block00@aaaaaaa"
    assert set(overview["kept across restarts"]) == {"–"}
    record_path = headline / "block02" / "BLOCK.json"
    record = json.loads(record_path.read_text())
    record["resumed"] = [{"at": "2026-12-05T10:00:00+0000", "kept": ["at2po", "grpo"]}]
    record_path.write_text(json.dumps(record))
    overview = blocks_overview("tiny").set_index("block")
    assert overview.loc[2, "kept across restarts"] == "AT2PO; GRPO"  # labels, not record names


def test_blocks_alone_make_the_claims_without_an_earlier_twin(headline):
    from at2po_lib.reporting.claims import claims_summary

    empty = pd.DataFrame(columns=["method", "seed", "dataset", "question_id", "em"])
    tidy, _ = claims_table("tiny", empty, blocks=load_block_outcomes("tiny"))
    rows = tidy.set_index("key")
    assert rows.loc["at2po_over_grpo", "seeds"] == "6 blocks"
    assert "at2po_over_grpo_earlier" not in rows.index
    text = claims_summary(
        tidy,
        pd.DataFrame(columns=["method", "seed", "path", "finished"]),
        blocks=load_block_outcomes("tiny"),
    )
    assert text.startswith("No committed run is recorded for this profile (no earlier record).")
    assert "headline: 6 blocks at aaaaaaa (builds fc-v669 ×6)" in text


@pytest.fixture()
def ablation(isolated_outputs) -> Path:
    """Five ablation blocks: Table 2's steps, two Table 3 cells and AT2PO, beside six headline
    blocks whose AT2PO scores far higher (it must not leak into the ablation's tables)."""
    rng = np.random.default_rng(5)
    for block in range(6):
        headline = {"at2po": 0.9, "grpo": 0.75, "grpo_tree_budget": 0.8}
        _write_block(blocks_root("tiny", "headline"), block, REV_A, headline, rng)
    root = blocks_root("tiny", "ablation")
    rates = {
        "at2po": 0.55,
        "ablation_random_tree_grpo": 0.35,
        "ablation_atpo_loss": 0.45,
        "ablation_entropy_tree": 0.50,
        "credit_child_mean_node_value": 0.40,
        "credit_leaf_mean_diff_parent": 0.55,
    }
    # a block holds every method of its set; the tables' tests read the six above
    rates = {m: rates.get(m, 0.5) for m in set_methods("ablation")}
    for block in range(5):
        _write_block(root, block, REV_A, rates, rng)
    return root


def test_table2_in_blocks_pairs_each_step_with_the_one_before(ablation):
    from at2po_lib.reporting.table2 import table2_in_blocks

    frame = load_block_outcomes("tiny")
    tidy, display = table2_in_blocks("tiny", frame)
    rows = tidy.set_index("method")
    ablation_only = frame[frame["block_set"] == "ablation"]
    assert rows.loc["at2po", "em"] == pytest.approx(
        ablation_only.loc[ablation_only["method"] == "at2po", "em"].mean()
    )
    steps = ["ablation_random_tree_grpo", "ablation_atpo_loss", "ablation_entropy_tree", "at2po"]
    for before, step in zip(steps, steps[1:]):
        found = blocked_difference(frame, "ablation", step, before, [MH])
        assert rows.loc[step, "delta"] == pytest.approx(found.interval.estimate)
        assert rows.loc[step, "p_permutation"] == pytest.approx(found.test.p)
        assert rows.loc[step, "rests_on"] == "5 blocks at aaaaaaa (build fc-v669 ×5; 1 thread)"
    assert list(display["blocks"]) == [5, 5, 5, 5]
    assert display.loc[1, "toy Δ step, paired in blocks [95% CI]"] == "–"


def test_table2_in_blocks_leaves_a_missing_step_and_its_change_empty(ablation):
    from at2po_lib.reporting.table2 import table2_in_blocks

    frame = load_block_outcomes("tiny")
    frame = frame[frame["method"] != "ablation_atpo_loss"]
    tidy, display = table2_in_blocks("tiny", frame)
    assert display.loc[2, "toy avg [95% CI]"] == "–" and display.loc[2, "blocks"] == "–"
    # step 3's change would be to step 2, which no block trained: no change, not one to step 1
    assert display.loc[3, "toy Δ step, paired in blocks [95% CI]"] == "–"
    assert display.loc[4, "toy Δ step, paired in blocks [95% CI]"] != "–"
    empty = table2_in_blocks("tiny", frame.iloc[:0])[1]
    assert (empty["toy avg [95% CI]"] == "–").all() and len(empty) == 4


def test_table3_in_blocks_tests_each_cell_against_the_blocks_at2po_with_holm(ablation):
    from at2po_lib.reporting.table3 import table3_in_blocks

    frame = load_block_outcomes("tiny")
    frame = frame[frame["method"].isin(CELLS_READ)]  # two cells and AT2PO
    tidy, display = table3_in_blocks("tiny", frame)
    rows = tidy.set_index("method")
    assert set(rows.index) == {
        "at2po",
        "credit_child_mean_node_value",
        "credit_leaf_mean_diff_parent",
    }
    ps = []
    for cell in ("credit_child_mean_node_value", "credit_leaf_mean_diff_parent"):
        found = blocked_difference(frame, "ablation", cell, "at2po", [MH])
        assert rows.loc[cell, "delta"] == pytest.approx(found.interval.estimate)
        ps.append(found.test.p)
    assert list(
        rows.loc[["credit_child_mean_node_value", "credit_leaf_mean_diff_parent"], "p_holm"]
    ) == pytest.approx(list(stats.holm(ps)))
    assert (rows["family_size"].dropna() == 2).all()
    assert display.loc["entropy-weighted children", "node value"].endswith("(5 blocks)")
    assert "Δ" not in display.loc["entropy-weighted children", "node value"]
    assert display.loc["linear entropy weights", "node value"] == "–"
    empty = table3_in_blocks("tiny", frame.iloc[:0])[1]
    assert empty.shape == (4, 4) and (empty == "–").all().all()


def test_one_ablation_block_gives_averages_but_no_paired_change(ablation):
    from at2po_lib.reporting.table2 import table2_in_blocks
    from at2po_lib.reporting.table3 import table3_in_blocks

    frame = load_block_outcomes("tiny")
    one = frame[(frame["block_set"] != "ablation") | (frame["block"] == 0)]
    _, steps = table2_in_blocks("tiny", one)
    assert (steps["toy avg [95% CI]"] != "–").all() and list(steps["blocks"]) == [1, 1, 1, 1]
    assert (steps["toy Δ step, paired in blocks [95% CI]"] == "–").all()
    # one block is one seed: an interval there would hold the question term only
    assert not steps["toy avg [95% CI]"].str.contains(r"\[").any()
    _, cells = table3_in_blocks("tiny", one)
    assert cells.loc["child mean", "node value"].endswith("(1 block)")
    assert "[" not in cells.loc["child mean", "node value"]
    assert "[" in table3_in_blocks("tiny", frame)[1].loc["entropy-weighted children", "node value"]
    assert "Δ" not in cells.loc["child mean", "node value"]


def _outcome_rows(block: int, method: str, hits: dict[str, list[int]]) -> pd.DataFrame:
    """One run's rows as load_block_outcomes gives them: dataset → its questions' EM."""
    return pd.DataFrame(
        [
            {
                "method": method,
                "seed": 100 + block,
                "block_set": "headline",
                "block": block,
                "commit": REV_A,
                "build": "fc-v669",
                "torch_threads": 1,
                "overrides": "{}",
                "dataset": dataset,
                "question_id": f"q{i}",
                "em": float(em),
            }
            for dataset, ems in hits.items()
            for i, em in enumerate(ems)
        ]
    )


def test_block_scores_read_each_block_on_its_own_by_hand():
    # multi-hop: hotpotqa (4 questions) and 2wiki (1): each question counts once; nq is
    # single-hop and left out. Block 0: AT2PO 3/5, GRPO 1/5; block 1: AT2PO 2/5, GRPO 3/5.
    frame = pd.concat(
        [
            _outcome_rows(0, "at2po", {MH: [1, 1, 0, 0], "tiny_2wiki": [1], "tiny_nq": [0]}),
            _outcome_rows(0, "grpo", {MH: [0, 0, 0, 1], "tiny_2wiki": [0], "tiny_nq": [1]}),
            _outcome_rows(1, "at2po", {MH: [1, 0, 0, 0], "tiny_2wiki": [1], "tiny_nq": [1]}),
            _outcome_rows(1, "grpo", {MH: [1, 1, 0, 0], "tiny_2wiki": [1], "tiny_nq": [0]}),
        ],
        ignore_index=True,
    )
    tidy, display = block_scores("tiny", frame, "headline")
    per_run = tidy.set_index(["block", "method"])["multihop"]
    assert per_run.to_dict() == pytest.approx(
        {(0, "at2po"): 0.6, (0, "grpo"): 0.2, (1, "at2po"): 0.4, (1, "grpo"): 0.6}
    )
    assert list(display.index) == [0, 1, "mean", "sd over 2 blocks", "blocks for ±2 at this sd"]
    assert list(display["AT2PO − GRPO"])[:4] == ["+40.0", "-20.0", "+10.0", "42.4"]  # sd: 60/√2
    assert list(display["AT2PO"]) == ["60.0", "40.0", "50.0", "14.1", "–"]
    # an sd of 42.4 points needs (1.96 · 42.4 / 2)² ≈ 1,728 blocks and a few more for t
    planned = display.loc["blocks for ±2 at this sd", "AT2PO − GRPO"]
    assert planned == str(stats.blocks_for_half_width(0.6 / 2**0.5, 0.02))
    assert 1728 < int(planned) < 1740
    assert display.loc[0, "revision"] == REV_A[:7] and display.loc[1, "seed"] == 101
    # the mean of the block differences is the blocked difference's estimate
    found = blocked_difference(frame, "headline", "at2po", "grpo", [MH, "tiny_2wiki"])
    assert found.interval.estimate == pytest.approx(0.10)
    # the projection the README's sentence quotes is the table's
    assert str(blocks_needed(frame, "headline", "at2po", "grpo")) == planned
    assert blocks_needed(frame, "headline", "at2po", "dapo") is None
    assert blocks_needed(frame[frame["block"] == 0], "headline", "at2po", "grpo") is None
    # a set with no finished block: nothing to show
    assert all(f.empty for f in block_scores("tiny", frame, "ablation"))


def test_a_closed_set_projects_no_further_blocks():
    """Issue #63: the headline set is closed at 15 blocks (the looks rule). Its block table
    then has no "blocks for ±2" row and blocks_needed offers no count; at 14 blocks it is open."""
    from at2po_lib.reporting.block_pairs import CLOSED_AT, closed_at, closed_sets

    assert CLOSED_AT == {"headline": 15, "ablation": 9}  # docs/toy_study.md, the rule in force
    rng = np.random.default_rng(0)
    frame = pd.concat(
        [
            _outcome_rows(block, method, {MH: list(rng.integers(0, 2, 6))})
            for block in range(15)
            for method in ("at2po", "grpo")
        ],
        ignore_index=True,
    )
    assert closed_at(frame, "headline") == 15 and closed_sets(frame) == {"headline": 15}
    _, display = block_scores("tiny", frame, "headline")
    assert list(display.index)[-2:] == ["mean", "sd over 15 blocks"]
    assert blocks_needed(frame, "headline", "at2po", "grpo") is None
    fourteen = frame[frame["block"] < 14]
    assert closed_at(fourteen, "headline") is None and closed_sets(fourteen) == {}
    assert list(block_scores("tiny", fourteen, "headline")[1].index)[-1] == (
        "blocks for ±2 at this sd"
    )
    assert blocks_needed(fourteen, "headline", "at2po", "grpo") is not None


def test_the_headline_figure_draws_the_block_differences_and_the_growing_interval(headline):
    """The figure's numbers: each block's AT2PO minus each baseline (by hand from the outcomes),
    and the interval on the first n blocks, whose last is the claims' (all six blocks)."""
    import matplotlib.pyplot as plt

    from at2po_lib.reporting.blocks_figure import (
        accumulating_intervals,
        headline_blocks_figure,
        per_block_differences,
    )

    frame = load_block_outcomes("tiny")
    differences = per_block_differences("tiny", frame)
    assert list(differences.columns) == ["grpo", "grpo_tree_budget"]
    run = frame[frame["block"] == 3].groupby("method")["em"].mean()
    assert differences.loc[3, "grpo"] == pytest.approx(run["at2po"] - run["grpo"])
    assert differences.loc[3, "grpo_tree_budget"] == pytest.approx(
        run["at2po"] - run["grpo_tree_budget"]
    )

    growing = accumulating_intervals(frame)
    assert list(growing["blocks"]) == [2, 3, 4, 5, 6]
    for n in (2, 6):
        first = frame[frame["block"] < n]
        found = blocked_difference(first, "headline", "at2po", "grpo", [MH]).interval
        row = growing.set_index("blocks").loc[n]
        assert (row["estimate"], row["low"], row["high"]) == pytest.approx(
            (found.estimate, found.low, found.high)
        )
    assert (growing["low"] <= growing["estimate"]).all()
    assert (growing["estimate"] <= growing["high"]).all()

    fig = headline_blocks_figure("tiny", frame)
    assert fig is not None and len(fig.axes) == 2
    plt.close(fig)
    # one block: no pair to draw
    assert headline_blocks_figure("tiny", frame[frame["block"] == 0]) is None
    assert accumulating_intervals(frame[frame["block"] == 0]).empty


def test_the_headline_claim_tests_its_block_differences_against_the_papers_gain(headline):
    """The blocked headline row carries the sign-flip test of its block differences less the
    paper's +2.8 points (what a reading against the paper's number needs), by hand."""
    frame = load_block_outcomes("tiny")
    found = blocked_difference(frame, "headline", "at2po", "grpo", [MH])
    by_block = frame[frame["method"].isin(["at2po", "grpo"])].groupby(["block", "method"])["em"]
    means = by_block.mean().unstack()
    assert found.differences == pytest.approx(tuple(means["at2po"] - means["grpo"]))
    shifted = np.asarray(found.differences) - 0.028
    expected = stats.sign_flip_test(shifted)
    assert found.against(0.028).p == pytest.approx(expected.p)
    tidy, _ = claims_table("tiny", load_block_outcomes("tiny").iloc[:0], blocks=frame)
    row = tidy.set_index("key").loc["at2po_over_grpo"]
    assert row["p_vs_published"] == pytest.approx(expected.p)
    # six blocks ~15 points above GRPO: far above +2.8 as well, all six signs agree
    assert expected.p == pytest.approx(2 / 64)


def test_block_times_read_each_finished_blocks_record(headline):
    """Hand-computed: runs of 600, 900 and 2,000 s; started 10:00:00, swapped 11:05:30."""
    record_path = headline / "block01" / "BLOCK.json"
    record = json.loads(record_path.read_text())
    for method, seconds in {"at2po": 900.0, "grpo": 600.0, "grpo_tree_budget": 2000.0}.items():
        record["runs"][method]["wall_time"] = seconds
    record |= {
        "started": "2026-12-05T10:00:00+0000",
        "finished": "2026-12-05T11:05:30+0000",
        "shared": True,
        "joined": [{"at": "2026-12-05T10:00:00+0000", "pid": 1}] * 3,
    }
    record_path.write_text(json.dumps(record))
    tidy, display = block_times("tiny")
    assert len(tidy) == 6  # every finished block, once
    row = tidy.set_index("block").loc[1]
    assert (row["run_min_s"], row["run_median_s"], row["run_max_s"]) == (600, 900, 2000)
    assert row["at2po_s"] == 900 and row["start_to_swap_s"] == 3930 and row["joins"] == 3
    shown = display.loc[("headline", 1)]
    assert shown["a run, min: fewest / median / most"] == "10 / 15 / 33"
    assert shown["start to swap"] == "1 h 06 min" and shown["processes joined"] == "3"
    # a record without its start says so instead of failing the report
    other = display.loc[("headline", 0)]
    assert other["start to swap"] == "–" and other["processes joined"] == "1 (not shared)"


def test_block_times_are_empty_without_a_finished_block(isolated_outputs):
    tidy, display = block_times("tiny")
    assert tidy.empty and display.empty


# --------------------------------------- issue #66: a block set is checked before it is read
def _edit_record(folder: Path, **changes) -> None:
    path = folder / "BLOCK.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _renumbered_copy(headline: Path, fix_runs: bool) -> None:
    """block03 copied as block06 (seed 106); with ``fix_runs`` its runs' own records too."""
    import shutil

    copy = headline / "block06"
    shutil.copytree(headline / "block03", copy)
    for method in ("at2po", "grpo", "grpo_tree_budget"):
        (copy / method / "seed103").rename(copy / method / "seed106")
        meta = copy / method / "seed106" / "meta.json"
        if fix_runs:
            own = {**json.loads(meta.read_text()), "seed": 106}
            own["block"] = {**own["block"], "block": 6}
            meta.write_text(json.dumps(own))
    _edit_record(copy, block=6, seed=106)


def _damage(headline: Path, case: str) -> None:
    import shutil

    block05 = headline / "block05"
    if case == "a run folder deleted":
        shutil.rmtree(block05 / "grpo_tree_budget")
    elif case == "a run left out of the record":
        runs = json.loads((block05 / "BLOCK.json").read_text())["runs"]
        _edit_record(block05, runs={m: r for m, r in runs.items() if m != "grpo_tree_budget"})
    elif case == "no runs":
        _edit_record(block05, runs={})
    elif case == "another block's number":
        _edit_record(block05, block=4)
    elif case == "a forged seed":
        _edit_record(block05, seed=305)
    elif case == "a run name outside the block":
        planted = headline.parent / "planted" / "seed105"
        shutil.copytree(block05 / "grpo" / "seed105", planted)
        runs = json.loads((block05 / "BLOCK.json").read_text())["runs"]
        _edit_record(block05, runs={**runs, "../../../../tiny/planted": runs["grpo"]})
    elif case == "a block number of another type":
        _edit_record(block05, block="5")
    elif case == "a plain copy":
        shutil.copytree(headline / "block03", headline / "block03 copy")
    elif case == "a renumbered copy":
        _renumbered_copy(headline, fix_runs=False)
    elif case == "a renumbered copy, runs edited":
        _renumbered_copy(headline, fix_runs=True)
    elif case == "a block folder that is a link":
        shutil.move(block05, headline.parent / "elsewhere")
        block05.symlink_to(headline.parent / "elsewhere")


DAMAGE = {
    "a run folder deleted": "block 5 of headline: grpo_tree_budget/seed105 is not a finished run",
    "a run left out of the record": "block 5 of headline: no run of grpo_tree_budget",
    "no runs": "block 5 of headline: no run of at2po, grpo, grpo_tree_budget",
    "another block's number": "block 5 of headline: it says block 4, its folder is block05",
    "a forged seed": "block 5 of headline: it says seed 305, block 5 of headline trains seed 105",
    "a run name outside the block": "runs ['../../../../tiny/planted'] are not methods of headline",
    "a block number of another type": "block05/BLOCK.json: block is '5', not int",
    "a plain copy": "block03 copy: not a block folder of block set headline",
    "a renumbered copy": "seed106/meta.json: seed 103 (the block: 106)",
    "a renumbered copy, runs edited": "the same outcomes.csv as",
    "a block folder that is a link": "block05: not a block folder of block set headline",
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_block_set_is_refused_naming_file_and_block(headline, case):
    _damage(headline, case)
    with pytest.raises(RecordError) as refused:
        load_block_outcomes("tiny")
    assert DAMAGE[case] in str(refused.value) and "\n" not in str(refused.value)


def test_the_report_refuses_a_damaged_block_set_in_one_line_and_writes_nothing(headline, capsys):
    from at2po_lib.cli.report import main as report_main

    _damage(headline, "a run folder deleted")
    results = headline.parent.parent.parent
    before = sorted(p for p in results.rglob("*") if p.is_file())
    assert report_main(["--profile", "tiny", "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "block 5 of headline" in err and "Errno" not in err
    assert sorted(p for p in results.rglob("*") if p.is_file()) == before
