"""The paper's claims at toy scale (at2po_lib.reporting.claims) and the multi-hop vs single-hop
contrast behind one of them (at2po_lib.evaluation.stats.gain_contrast_ci), on hand-checkable outcomes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from at2po_lib.evaluation import stats
from at2po_lib.reporting.claims import (
    FAMILIES,
    NOT_IN_PAPER,
    Claim,
    _apply_families,
    claims_summary,
    claims_table,
    toy_shows,
)
from at2po_lib.util.paths import repo_root

MH, SH = "tiny_hotpotqa", "tiny_nq"


def outcomes(table: dict[tuple[str, int], dict[str, list[float]]]) -> pd.DataFrame:
    """{(method, seed): {dataset: [EM per question]}} → the long outcome frame (with the turn
    counts Figure 4's claims read: two searches on multi-hop, one on single-hop)."""
    rows = [
        {
            "method": m,
            "seed": s,
            "dataset": d,
            "question_id": f"q{i}",
            "em": float(v),
            "turns": 3 if d == MH else 2,
            "searches": 2 if d == MH else 1,
        }
        for (m, s), by_dataset in table.items()
        for d, scores in by_dataset.items()
        for i, v in enumerate(scores)
    ]
    return pd.DataFrame(rows)


def test_gain_contrast_by_hand():
    # multi-hop: A 2/4, B 1/4 -> gain 0.25; single-hop: A 1/2, B 1/2 -> gain 0
    df = outcomes(
        {("a", 0): {MH: [1, 1, 0, 0], SH: [1, 0]}, ("b", 0): {MH: [0, 1, 0, 0], SH: [1, 0]}}
    )
    ci = stats.gain_contrast_ci(df, "a", "b", [MH], [SH])
    assert ci.estimate == pytest.approx(0.25)
    assert ci.low <= ci.estimate <= ci.high
    assert (ci.n_seeds_a, ci.n_seeds_b, ci.n_questions) == (1, 1, 6)


def test_gain_contrast_is_zero_when_the_gain_is_the_same_in_both_groups():
    df = outcomes(
        {
            ("a", 0): {MH: [1, 0], SH: [1, 0]},
            ("a", 1): {MH: [1, 1], SH: [1, 1]},
            ("b", 0): {MH: [0, 0], SH: [0, 0]},
            ("b", 1): {MH: [0, 1], SH: [0, 1]},
        }
    )
    ci = stats.gain_contrast_ci(df, "a", "b", [MH], [SH])
    assert ci.estimate == pytest.approx(0.0)


def test_gain_contrast_refuses_a_seed_that_answered_one_group_only():
    df = outcomes(
        {
            ("a", 0): {MH: [1, 0], SH: [1, 0]},
            ("a", 1): {MH: [1, 1]},
            ("b", 0): {MH: [0, 0], SH: [0, 0]},
        }
    )
    with pytest.raises(ValueError, match=r"seeds \[1\] did not answer"):
        stats.gain_contrast_ci(df, "a", "b", [MH], [SH])


@pytest.mark.parametrize(
    "low, high, direction, reading",
    [
        (0.5, 2.0, 1, "agrees"),
        (-2.0, -0.5, 1, "opposite"),
        (-0.5, 2.0, 1, "cannot tell"),
        (-2.0, -0.5, -1, "agrees"),
        (0.5, 2.0, -1, "opposite"),
        (float("nan"), float("nan"), 1, "one seed"),
        (1.0, 2.0, 0, "measured"),
    ],
)
def test_a_claim_is_read_from_its_interval_against_the_paper_direction(
    low, high, direction, reading
):
    claim = Claim(
        "k", "c", "+1", estimate=1.0, low=low, high=high, direction=direction, test=AGREES
    )
    assert claim.reading == reading
    assert Claim("k", "c", "+1").reading == "not run yet"


AGREES = stats.PermutationTest(0.01, 252, True)
DISAGREES = stats.PermutationTest(0.051, 354_817_320, True)


@pytest.mark.parametrize("published", ["+1", NOT_IN_PAPER])
def test_a_direction_needs_the_permutation_test_too(published):
    """An interval that excludes 0 reads a direction only where the permutation test over seed
    labels agrees at 0.05 (issue #48), and in a family, only where the corrected p does."""
    above = "agrees" if published == "+1" else "above 0"
    claim = Claim("k", "c", published, estimate=2.0, low=0.1, high=3.9, test=AGREES)
    assert claim.reading == above
    held = Claim("k", "c", published, estimate=2.0, low=0.1, high=3.9, test=DISAGREES)
    assert held.reading == "cannot tell"
    assert "p = 0.051, exact over 354,817,320 splits" in held.as_row()["note"]
    assert Claim("k", "c", published, estimate=2.0, low=0.1, high=3.9).reading == "cannot tell"
    family = Claim(
        "k",
        "c",
        published,
        estimate=2.0,
        low=0.1,
        high=3.9,
        test=AGREES,
        p_family=0.07,
        family="Holm over the Table 3 cells (7)",
    )
    assert family.reading == "cannot tell"
    assert family.as_row()["p_text"].endswith("; Holm over the Table 3 cells (7): 0.070")
    # a test that agrees cannot make an interval that contains 0 read a direction
    assert (
        Claim("k", "c", published, estimate=1.0, low=-0.5, high=2.0, test=AGREES).reading
        == "cannot tell"
    )


@pytest.mark.parametrize(
    "low, high, reading",
    [(0.5, 2.0, "above 0"), (-2.0, -0.5, "below 0"), (-0.5, 2.0, "cannot tell")],
)
def test_a_comparison_the_paper_does_not_make_is_read_against_0_not_against_the_paper(
    low, high, reading
):
    claim = Claim("k", "c", NOT_IN_PAPER, estimate=1.0, low=low, high=high, test=AGREES)
    assert claim.reading == reading
    text = claims_summary(
        pd.DataFrame([{**claim.as_row(), "short": "the variant"}]),
        pd.DataFrame([{"method": "at2po", "seed": 0, "finished": True, "path": "/nonexistent"}]),
    )
    assert "agrees" not in text
    if reading != "cannot tell":
        assert f"its interval lies {reading} for the variant." in text


def _study() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n_mh, n_sh = 300, 200

    def run(p_mh: float, p_sh: float) -> dict[str, list[float]]:
        return {MH: list(rng.random(n_mh) < p_mh), SH: list(rng.random(n_sh) < p_sh)}

    table = {("react", 0): run(0.2, 0.6)}
    # 6 seeds: the smallest p of a sign-flip test against the fixed warm start is 2/64, of a
    # split of 6 vs 6 runs 2/924 (3 seeds could never read a direction: 2/8, 2/20)
    for seed in range(6):
        table[("grpo", seed)] = run(0.45, 0.7)
        table[("dapo", seed)] = run(0.35, 0.7)
        table[("aepo", seed)] = run(0.45, 0.7)
        table[("at2po", seed)] = run(0.45, 0.7)
    return outcomes(table)


def test_claims_table_names_the_weakest_method_and_waits_for_the_rest():
    tidy, display = claims_table("tiny", _study())
    rows = tidy.set_index("key")
    assert len(display) == len(tidy) == 20
    # the smallest RL gain over ReAct is DAPO's (35 vs 20 points), resolved over 300 questions
    assert "DAPO" in rows.loc["rl_over_react", "note"]
    assert rows.loc["rl_over_react", "reading"] == "agrees"
    assert rows.loc["rl_over_react", "estimate"] == pytest.approx(
        100 * stats.difference_ci(_study(), "dapo", "react", [MH]).estimate
    )
    # the headline pair: AT2PO minus GRPO itself
    assert rows.loc["at2po_over_grpo", "estimate"] == pytest.approx(
        100 * stats.difference_ci(_study(), "at2po", "grpo", [MH]).estimate
    )
    assert rows.loc["at2po_over_grpo", "seeds"] == "6 vs 6"
    assert rows.loc["at2po_over_grpo", "published"] == "+2.8"  # 48.8 - 46.0, Qwen3-4B
    assert rows.loc["at2po_over_grpo_sampled_em", "reading"] == "not run yet"
    # the strongest baseline is AEPO, the paper's, fixed before the data
    assert rows.loc["at2po_over_strongest", "estimate"] == pytest.approx(
        100 * stats.difference_ci(_study(), "at2po", "aepo", [MH]).estimate
    )
    assert rows.loc["at2po_over_strongest", "seeds"] == "6 vs 6"
    # these outcomes have no sampled metric: its row waits rather than reading greedy EM
    assert rows.loc["at2po_over_strongest_sampled_em", "reading"] == "not run yet"
    # no variant, ablation, credit-variant or training-curve records: said, not filled in
    for key in (
        "at2po_over_grpo_budget",
        "exact_variant_over_grpo",
        "ablation_step2",
        "ablation_step3",
        "ablation_step4",
        "node_value_over_diff_parent",
        "grpo_entropy_falls",
        "at2po_entropy_stabler",
        "turn_ratio_clips_less",
        "turn_ratio_clips_less_at_reference",
    ):
        assert rows.loc[key, "reading"] == "not run yet", key
    step2 = int(np.flatnonzero(tidy["key"] == "ablation_step2")[0])
    assert display["toy [95% CI]"].iloc[step2] == "–"
    # Figure 4's rows describe the toy: AT2PO makes exactly one call on every single-hop question
    assert rows.loc["singlehop_one_call", "estimate"] == pytest.approx(100.0)
    assert rows.loc["multihop_turns", "reading"] == "measured"


def _runs(
    rng_seed: int, n_seeds: int, multihop_em: dict[str, float]
) -> dict[tuple[str, int], dict[str, list[float]]]:
    """Seeds of each method answering 400 multi-hop questions with its given EM rate (and 100
    single-hop ones at 0.7), for :func:`outcomes`."""
    rng = np.random.default_rng(rng_seed)
    return {
        (method, seed): {MH: list(rng.random(400) < p), SH: list(rng.random(100) < 0.7)}
        for seed in range(n_seeds)
        for method, p in multihop_em.items()
    }


def test_table_2_and_3_claims_read_the_at2po_with_their_expansion_settings():
    # on tiny, Table 2's step 3 and Table 3's cells take the profile's exact entropy and
    # alpha 0.001: their AT2PO is the at2po_exact variant, not the authors' at2po
    table = _runs(
        1,
        2,
        {
            "at2po": 0.10,
            "at2po_exact": 0.40,
            "credit_child_mean_node_value": 0.30,
            "ablation_entropy_tree": 0.40,
        },
    )
    tidy, _ = claims_table("tiny", outcomes(table))
    rows = tidy.set_index("key")
    assert rows.loc["entropy_weights_over_child_mean", "estimate"] == pytest.approx(
        100
        * stats.difference_ci(
            outcomes(table), "at2po_exact", "credit_child_mean_node_value", [MH]
        ).estimate
    )
    assert rows.loc["ablation_step4", "estimate"] == pytest.approx(
        100
        * stats.difference_ci(
            outcomes(table), "at2po_exact", "ablation_entropy_tree", [MH]
        ).estimate
    )
    # the variant's own row: the authors' AT2PO ~30 points below it
    assert rows.loc["authors_over_exact_variant", "estimate"] < -20


@pytest.mark.slow  # 40 simulated studies: ~12 s of CPU
def test_the_rivals_are_fixed_so_equal_methods_read_cannot_tell():
    """All methods equal: the rival rows (AEPO, the child-mean cell, the diff-parent cell)
    read "cannot tell" at least 95% of the time. Picking the best of five baselines on the
    scored questions read "opposite" 12-20% of the time."""
    from at2po_lib.method.presets import credit_method

    rivals = {
        "at2po_over_strongest": "aepo",
        "entropy_weights_over_child_mean": credit_method("child_mean", "node_value"),
        "node_value_over_diff_parent": credit_method("entropy_softmax", "diff_parent"),
    }
    methods = ["at2po", "at2po_exact", "grpo", "dapo", "gspo", "tree_grpo", *rivals.values()]
    studies, calm = 40, {k: 0 for k in rivals}
    rng = np.random.default_rng(5)
    for _ in range(studies):
        difficulty = rng.random(150)  # the same questions for every method: all equal
        table = {}
        for method in methods:
            for seed in range(3):
                shift = rng.normal(0.0, 0.03)  # seed-to-seed spread, the same for everyone
                p = np.clip(difficulty + shift, 0, 1)
                table[(method, seed)] = {MH: list(rng.random(150) < p)}
        rows = claims_table("tiny", outcomes(table))[0].set_index("key")
        for key in rivals:
            calm[key] += rows.loc[key, "reading"] == "cannot tell"
    assert sum(calm.values()) / (studies * len(rivals)) >= 0.95, calm


def test_the_headline_pair_row_compares_with_grpo_even_when_another_baseline_is_stronger():
    table = _runs(2, 5, {"grpo": 0.30, "dapo": 0.60, "aepo": 0.60, "at2po": 0.45})
    tidy, _ = claims_table("tiny", outcomes(table))
    rows = tidy.set_index("key")
    assert rows.loc["at2po_over_grpo", "estimate"] == pytest.approx(
        100 * stats.difference_ci(outcomes(table), "at2po", "grpo", [MH]).estimate
    )
    assert rows.loc["at2po_over_grpo", "reading"] == "agrees"  # ~15 points above GRPO
    assert rows.loc["at2po_over_strongest", "reading"] == "opposite"  # ~15 points below AEPO


def test_entropy_claims_read_the_start_end_table():
    change = pd.DataFrame(
        [
            {
                "method": "grpo",
                "metric": "entropy",
                "seeds": 3,
                "change": -0.05,
                "change_low": -0.08,
                "change_high": -0.02,
            },
            {
                "method": "at2po",
                "metric": "entropy",
                "seeds": 3,
                "change": -0.01,
                "change_low": -0.03,
                "change_high": 0.01,
                "vs_baseline": 0.04,
                "vs_baseline_low": 0.01,
                "vs_baseline_high": 0.07,
                "baseline": "grpo",
                "vs_baseline_p": 0.01,
                "vs_baseline_splits": 20,
                "vs_baseline_exact": True,
            },
        ]
    )
    tidy, _ = claims_table("tiny", _study(), change)
    rows = tidy.set_index("key")
    # GRPO's own change is described (every method loses entropy); the claim is comparative
    assert rows.loc["grpo_entropy_falls", "reading"] == "measured"
    assert "-0.010 to -0.010 nats" in rows.loc["grpo_entropy_falls", "note"]
    assert rows.loc["at2po_entropy_stabler", "reading"] == "agrees"
    assert rows.loc["at2po_entropy_stabler", "seeds"] == "3 vs 3"


def test_the_summary_names_the_runs_their_revision_and_every_verdict(tmp_path):
    import json

    rows = []
    for method, seeds in (("react", 1), ("grpo", 3), ("dapo", 3), ("at2po", 3)):
        for seed in range(seeds):
            folder = tmp_path / method / f"seed{seed}"
            folder.mkdir(parents=True)
            (folder / "meta.json").write_text(json.dumps({"git_revision": "0c35b88" + "0" * 33}))
            rows.append({"method": method, "seed": seed, "path": folder, "finished": True})
    rows.append({"method": "gspo", "seed": 0, "path": tmp_path / "gspo", "finished": False})
    tidy, _ = claims_table("tiny", _study())
    per_seed = pd.DataFrame(
        {
            "method": ["grpo"] * 3 + ["react"],
            "seed": [0, 1, 2, 0],
            "metric": "em",
            "value": [0.40, 0.42, 0.44, 0.2],
        }
    )
    text = claims_summary(tidy, pd.DataFrame(rows), per_seed)
    assert text.startswith("Read from 10 finished runs") and "revision 0c35b88." in text
    assert "GRPO: 3" in text and "GSPO" not in text  # an unfinished run is not counted
    assert "greedy multi-hop average: GRPO 2.0 points." in text  # ReAct's one run: no spread
    assert "The toy agrees with the paper on RL over ReAct" in text
    assert "ablation step 2 (turn-level loss)" in text.split("Not run yet:")[1]
    assert "turns per multi-hop" not in text  # descriptions stay in the table
    assert "No finished runs" in claims_summary(tidy, pd.DataFrame(rows[-1:]))


def test_the_sampled_metric_row_compares_the_sampled_scores():
    frame = _study()
    frame["sampled_em"] = np.where(frame["method"] == "at2po", 1.0, 0.5)  # AT2PO +50 points
    tidy, _ = claims_table("tiny", frame)
    for key in ("at2po_over_strongest_sampled_em", "at2po_over_grpo_sampled_em"):
        row = tidy.set_index("key").loc[key]
        assert row["estimate"] == pytest.approx(50.0) and row["reading"] == "agrees", key
        assert row["published"] == "–"  # the paper reports greedy EM only
        assert row["claim"].endswith(", sampled metric: secondary)")


def test_the_seed_table_shows_each_run_and_projects_the_seeds_a_difference_needs():
    from at2po_lib.reporting.table1 import table1_seeds

    # multi-hop EM per run (five questions each): GRPO 0.5 / 0.6, AT2PO 0.4 / 0.8
    frame = outcomes(
        {
            ("grpo", 0): {MH: [1, 0, 1, 0, 0.5], SH: [1]},
            ("grpo", 1): {MH: [1, 1, 0, 1, 0], SH: [0]},
            ("at2po", 0): {MH: [1, 0, 0, 0, 1], SH: [1]},
            ("at2po", 1): {MH: [1, 1, 1, 1, 0], SH: [1]},
        }
    )
    tidy, display = table1_seeds("tiny", frame)
    assert display.loc["AT2PO", "greedy: per seed"] == "40.0 / 80.0"
    assert display.loc["GRPO", "greedy: per seed"] == "50.0 / 60.0"
    assert (
        display.loc["AT2PO", "greedy: sd over seeds"] == f"{100 * np.std([0.4, 0.8], ddof=1):.1f}"
    )
    # n >= 1.96^2 (0.283^2 + 0.0707^2) / 0.02^2 = 1.96^2 * 0.085 / 0.0004 = 816.3 -> 817
    assert display.loc["AT2PO", "greedy: seeds for ±2 vs GRPO"] == "817"
    assert display.loc["GRPO", "greedy: seeds for ±2 vs GRPO"] == "–"
    assert "sampled: seeds for ±2 vs GRPO" not in display  # no sampled metric measured
    assert set(tidy["metric"]) == {"em"} and len(tidy) == 4
    # the sampled metric gets its own projection: AT2PO 0.40 / 0.44, GRPO 0.40 / 0.40 ->
    # n >= 1.96^2 (0.0283^2 + 0) / 0.02^2 = 7.7 -> 8
    sampled = frame.copy()
    sampled["sampled_em"] = 0.4
    sampled.loc[
        (sampled["method"] == "at2po") & (sampled["seed"] == 1) & (sampled["dataset"] == MH),
        "sampled_em",
    ] = 0.44
    display = table1_seeds("tiny", sampled)[1]
    assert display.loc["AT2PO", "sampled: seeds for ±2 vs GRPO"] == "8"
    assert display.loc["AT2PO", "greedy: seeds for ±2 vs GRPO"] == "817"
    frame.loc[
        (frame["method"] == "at2po")
        & (frame["seed"] == 1)
        & (frame["dataset"] == MH)
        & (frame["question_id"] == "q0"),
        "searches",
    ] = 7  # one deep search: mean 3.00
    display = table1_seeds("tiny", frame)[1]
    assert display.loc["AT2PO", "calls per question: per seed"] == "2.00 / 3.00"
    assert display.loc["GRPO", "calls per question: per seed"] == "2.00 / 2.00"


def test_a_step_resting_on_one_trained_seed_is_shown_but_not_read():
    """1 vs 1: the interval covers questions only, so a clear question-level difference is not a
    verdict; with two seeds a side it is read. ReAct's one seed is the fixed warm start."""
    rng = np.random.default_rng(1)

    def run(p: float) -> dict[str, list[float]]:
        return {MH: list(rng.random(400) < p), SH: list(rng.random(50) < 0.5)}

    one = {
        ("react", 0): run(0.1),
        ("grpo", 0): run(0.5),
        ("ablation_random_tree_grpo", 0): run(0.2),
        ("ablation_atpo_loss", 0): run(0.6),
    }
    rows = claims_table("tiny", outcomes(one))[0].set_index("key")
    step2 = rows.loc["ablation_step2"]
    assert step2["ci_low"] > 0 and step2["seeds"] == "1 vs 1"  # clear over the questions ...
    assert step2["reading"] == "one seed"  # ... yet one seed a side
    assert rows.loc["rl_over_react", "reading"] == "one seed"  # GRPO has one seed
    two = {
        **one,
        ("ablation_random_tree_grpo", 1): run(0.2),
        ("ablation_atpo_loss", 1): run(0.6),
        ("grpo", 1): run(0.5),
    }
    rows = claims_table("tiny", outcomes(two))[0].set_index("key")
    # two seeds a side: read, but 2 vs 2 runs split 6 ways (p >= 1/3) and 2 runs against the
    # warm start flip signs 4 ways (p >= 1/2): the interval alone cannot make a direction
    assert rows.loc["ablation_step2", "ci_low"] > 0
    assert rows.loc["ablation_step2", "reading"] == "cannot tell"
    assert rows.loc["rl_over_react", "reading"] == "cannot tell"
    assert "the permutation test does not agree" in rows.loc["ablation_step2", "note"]
    six = {
        **two,
        **{
            (m, seed): run(p)
            for seed in range(2, 6)
            for m, p in (
                ("ablation_random_tree_grpo", 0.2),
                ("ablation_atpo_loss", 0.6),
                ("grpo", 0.5),
            )
        },
    }
    rows = claims_table("tiny", outcomes(six))[0].set_index("key")
    assert rows.loc["ablation_step2", "reading"] == "agrees"
    assert rows.loc["rl_over_react", "reading"] == "agrees"  # 6 GRPO seeds vs the warm start


def test_study_presets_read_as_their_place_in_the_paper():
    from at2po_lib.reporting.labels import method_label

    assert method_label("at2po") == "AT2PO"
    assert method_label("ablation_random_tree_grpo") == "Table 2 step 1"
    # a Table 3 cell by its values and its advantage in words, not the records' names (#63)
    assert method_label("credit_leaf_mean_diff_parent") == (
        "Table 3: leaf mean, difference to the parent"
    )
    assert method_label("credit_entropy_linear_diff_localglobal") == (
        "Table 3: linear entropy weights, differences to the root and the parent"
    )
    assert method_label("not_a_preset") == "not_a_preset"


def test_the_two_fragile_verdicts_of_the_committed_record_now_read_cannot_tell():
    """Issue #48: "the authors' AT2PO minus the exact-entropy variant: above 0" (+2.0 [+0.1,
    +3.9]) and "Table 3: entropy weights vs the child mean: opposite" (-2.8 [-5.0, -0.6]) rest
    on intervals whose permutation tests over seed labels give p = 0.051 (12 vs 21 runs, exact
    over all C(33, 12) splits) and p = 0.12 (exact over the C(24, 3) = 2,024 splits; Holm over
    the 7 Table 3 cells 0.86): both read "cannot tell" now, from the records in git."""
    from math import comb

    from at2po_lib.method.presets import TABLE3_METHODS
    from at2po_lib.reporting import claims
    from at2po_lib.reporting.labels import groups_of
    from at2po_lib.record.reading import load_outcomes

    frame = load_outcomes("tiny", ["at2po", "at2po_exact", *TABLE3_METHODS])
    groups = groups_of(frame["dataset"].unique())
    records = claims._Records(frame, groups)
    variant = next(
        c for c in claims._variant_claims(records) if c.key == "authors_over_exact_variant"
    )
    assert (round(variant.estimate, 1), round(variant.low, 1), round(variant.high, 1)) == (
        2.0,
        0.1,
        3.9,
    )
    assert variant.test.exact and variant.test.splits == comb(33, 12)
    assert variant.test.p == pytest.approx(0.051, abs=0.001)
    assert variant.reading == "cannot tell"
    # Table 3's cell on the committed record: the exact-entropy AT2PO is its default cell
    cell = next(
        c
        for c in claims._credit_claims(records, "at2po_exact")
        if c.key == "entropy_weights_over_child_mean"
    )
    assert (round(cell.estimate, 1), round(cell.low, 1), round(cell.high, 1)) == (-2.8, -5.0, -0.6)
    assert cell.test.exact and cell.test.splits == 2024
    assert cell.test.p == pytest.approx(0.12, abs=0.005)
    assert cell.family.endswith("(7)") and cell.p_family > cell.test.p
    assert cell.reading == "cannot tell"


def test_clip_levels_are_read_at_both_clip_ranges():
    """One row at AT2PO's own range and one at 0.2 (issue #48): at 0.2 AT2PO's own updates where
    its runs logged that range, else the runs trained at 0.2, named in the note."""
    clips = pd.DataFrame(
        {
            "method": ["at2po"] * 6 + ["grpo_tree_budget"] * 6,
            "seed": [f"seed{i}" for i in range(12)],
            "epsilon": [0.003] * 6 + [0.2] * 6,
            "epsilon_high": [0.004] * 6 + [0.2] * 6,
            "token_level": [0.02] * 6 + [0.004] * 6,
            "turn_level": [0.07, 0.071, 0.069, 0.072, 0.068, 0.07] + [0.0041] * 6,
            "token_level_at_reference": [np.nan] * 6 + [0.004] * 6,
            "turn_level_at_reference": [np.nan] * 6 + [0.0041] * 6,
        }
    )
    tidy, _ = claims_table("tiny", _study(), clips=clips)
    rows = tidy.set_index("key")
    own, wide = rows.loc["turn_ratio_clips_less"], rows.loc["turn_ratio_clips_less_at_reference"]
    assert own["estimate"] == pytest.approx(5.0) and own["reading"] == "opposite"
    assert "ε = 0.003 / 0.004" in own["claim"] and own["p_permutation"] == pytest.approx(2 / 64)
    assert wide["estimate"] == pytest.approx(0.01) and wide["seeds"] == "6"
    assert "GRPO at AT2PO's budget" in wide["note"] and "turn 0.41% vs token 0.40%" in wide["note"]
    clips.loc[
        clips["method"] == "at2po", ["token_level_at_reference", "turn_level_at_reference"]
    ] = [0.003, 0.002]
    rows = claims_table("tiny", _study(), clips=clips)[0].set_index("key")
    wide = rows.loc["turn_ratio_clips_less_at_reference"]
    assert wide["estimate"] == pytest.approx(-0.1) and "AT2PO's own updates" in wide["note"]


def test_the_blocks_sentence_says_when_a_set_is_too_small_to_pair():
    """One finished block is recorded but pairs nothing (a set's claims read pairs within blocks
    from 2 blocks on): the sentence says its claims still rest on the earlier record."""
    import pandas as pd

    from at2po_lib.reporting.claims import _blocks_sentence

    def blocks(n: int) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "block_set": "headline",
                    "block": b,
                    "build": "fc-v1",
                    "commit": "dc4fe56" + "0" * 33,
                }
                for b in range(n)
                for _ in ("at2po", "grpo")
            ]
        )

    one, two = _blocks_sentence(blocks(1)), _blocks_sentence(blocks(2))
    assert "headline: 1 block at dc4fe56 (builds fc-v1 ×1), too few to pair" in one
    assert "headline: 2 blocks at dc4fe56 (builds fc-v1 ×2)." in two and "too few" not in two
    assert "has finished yet" in _blocks_sentence(None)


def test_the_readme_view_keeps_each_claims_current_reading_and_names_the_full_table():
    from at2po_lib.reporting.claims import EARLIER, current_claims

    keys = ["headline", "headline" + EARLIER, "variant", "chains", "chains" + EARLIER]
    tidy = pd.DataFrame({"key": keys})
    display = pd.DataFrame(
        {"claim (the paper's)": keys, "toy [95% CI]": ["+3", "+1", "-1", "+2", "-0"]}
    ).set_index("claim (the paper's)")
    text = current_claims(tidy, display, "results/tiny/tables/claims.md")
    rows = [line for line in text.splitlines() if line.startswith("| ")][2:]
    assert [row.split(" | ")[0].lstrip("| ") for row in rows] == ["headline", "variant", "chains"]
    assert "2 claims above read the study's blocks" in text
    assert "[`results/tiny/tables/claims.md`](results/tiny/tables/claims.md)" in text
    # No block reading yet: the table is the full one, with no line under it.
    alone = current_claims(tidy.iloc[[2]], display.iloc[[2]], "claims.md")
    assert alone.count("\n") == 3 and "earlier record" not in alone


DIRECTIONS = {"agrees", "opposite", "above 0", "below 0"}


def test_the_committed_claims_read_a_direction_only_where_the_corrected_p_is_below_005():
    """Issue #63: a verdict reads within its family. The committed claims carry the raw and the
    corrected p, and no row reads a direction at a corrected p of 0.05 or more (the sampled
    metric's -2.4 [-4.4, -0.4], raw p 0.027, is one of the headline family of three)."""
    tidy = pd.read_csv(repo_root() / "results" / "tiny" / "tables" / "claims.csv")
    directional = tidy[tidy["reading"].isin(DIRECTIONS)]
    assert (directional["p_corrected"] < 0.05).all(), directional[["key", "p_corrected"]]
    tested = tidy[tidy["p_corrected"].notna() & ~tidy["reading"].isin(["measured", "one seed"])]
    assert (tested.loc[tested["p_corrected"] >= 0.05, "reading"] == "cannot tell").all()
    sampled = tidy.set_index("key").loc["at2po_over_grpo_sampled_em"]
    assert sampled["p_permutation"] < 0.05 <= sampled["p_corrected"]
    assert sampled["reading"] == "cannot tell" and "secondary" in sampled["claim"]
    assert "largest t over the headline family (3)" in sampled["family"]


def _blocked(key: str, differences: list[float], p: float, published: str = "+1") -> Claim:
    d = np.asarray(differences)
    return Claim(
        key,
        "c",
        published,
        estimate=float(d.mean()),
        low=-1.0,
        high=1.0,
        test=stats.PermutationTest(p, 2 ** len(d), True),
        differences=tuple(d),
        blocks=tuple(range(len(d))),
        standard_error=float(d.std(ddof=1) / np.sqrt(len(d))),
        dof=len(d) - 1.0,
    )


def test_a_declared_family_reads_its_joint_test_on_shared_blocks_and_holm_on_seeds():
    keys = FAMILIES["the headline family"]
    rows = [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [3.0, -1.0, 1.0]]
    joint = _apply_families([_blocked(k, d, 0.25) for k, d in zip(keys, rows)])
    expected = stats.max_t_sign_flip(np.array(rows))
    assert [c.p_family for c in joint] == pytest.approx(expected)
    assert joint[0].p_family == pytest.approx(0.25)  # (1, 2, 3): 2 of 8 patterns, as alone
    assert all("largest t" in c.family for c in joint)
    # the earlier record's seeds: Holm; p 0.01, 0.04, 0.03 -> 0.03, max(0.06, 0.04), 0.06
    seeds = [
        Claim(k + "_earlier", "c", "+1", 1.0, 0.5, 1.5, test=stats.PermutationTest(p, 20, True))
        for k, p in zip(keys, (0.01, 0.04, 0.03))
    ]
    holm = _apply_families(seeds)
    assert [c.p_family for c in holm] == pytest.approx([0.03, 0.06, 0.06])
    assert [c.reading for c in holm] == ["agrees", "cannot tell", "cannot tell"]
    assert holm[1].as_row()["p_corrected"] == pytest.approx(0.06)
    # a claim outside every family keeps its own p
    alone = _apply_families([Claim("other", "c", "+1", test=seeds[0].test)])
    assert np.isnan(alone[0].p_family)


def test_cannot_tell_says_what_it_rules_out_and_what_it_could_detect():
    # 9 blocks, differences of sd 3 (points; the base pattern's squares sum to 7, 7 / 8 =
    # 0.875): SE 3 / √9 = 1, ν 8, so it detects ≥ (2.306004 + 0.888890) · 1 at 80% power
    d = 3.0 * np.array([-1.5, -1, -0.5, 0, 0, 0, 0.5, 1, 1.5]) / np.sqrt(0.875)
    small = replace(_blocked("k", list(d), 0.9, published="+0.58"), low=-2.3, high=2.3)
    assert small.standard_error == pytest.approx(1.0)
    assert small.detectable == pytest.approx(3.194894, abs=1e-5)
    assert small.underpowered and small.ruled_out == pytest.approx(2.3)
    assert small.resolution().startswith("rules out a gain above +2.3; underpowered: detects ≥ 3.2")
    # an interval that leaves the paper's number out does say something of it: not underpowered
    head = replace(small, published="+2.8", low=-4.5, high=0.5)
    assert not head.underpowered
    assert head.resolution().startswith("rules out a gain above +0.5, the paper's +2.8 among them")
    # a direction read is not "cannot tell": no resolution sentence
    read = replace(small, low=0.5, high=2.0, test=AGREES)
    assert read.reading == "agrees" and read.resolution() == ""


def test_toy_shows_is_short_prose_with_the_bound_and_the_family_reading():
    tidy = pd.read_csv(repo_root() / "results" / "tiny" / "tables" / "claims.csv")
    text = toy_shows(tidy)
    assert len(text.splitlines()) <= 12 and max(map(len, text.splitlines())) <= 100
    head = tidy.set_index("key").loc["at2po_over_grpo"]
    assert f"rules out any gain above {head['ruled_out']:+.1f}" in " ".join(text.split())
    # "the paper's number among them" only where the interval leaves it above the bound
    inside = tidy.copy()
    inside.loc[inside["key"] == "at2po_over_grpo", "published"] = "+0.3"
    assert "among them" not in toy_shows(inside).split("\n- ")[0]
