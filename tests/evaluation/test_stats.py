"""at2po_lib.evaluation.stats: crossed (seeds × questions) bootstrap CIs on hand-checkable outcomes."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from at2po_lib.evaluation import stats


def outcomes(table: dict[tuple[str, int], dict[str, list[float]]]) -> pd.DataFrame:
    """{(method, seed): {dataset: [score per question]}} → the long outcome frame."""
    rows = [
        {"method": m, "seed": s, "dataset": d, "question_id": f"q{i}", "em": v}
        for (m, s), by_dataset in table.items()
        for d, scores in by_dataset.items()
        for i, v in enumerate(scores)
    ]
    return pd.DataFrame(rows)


def test_identical_methods_have_zero_difference_and_zero_width():
    scores = {"x": [1, 0, 1, 1], "y": [0, 0, 1]}
    df = outcomes({("a", 0): scores, ("a", 1): scores, ("b", 0): scores, ("b", 1): scores})
    ci = stats.difference_ci(df, "a", "b")
    assert (ci.estimate, ci.low, ci.high) == (0.0, 0.0, 0.0)
    assert (ci.n_seeds_a, ci.n_seeds_b, ci.n_questions) == (2, 2, 7)


def test_sample_and_dataset_weighting_by_hand():
    # A wins both questions of x, ties the one question of y.
    df = outcomes({("a", 0): {"x": [1, 1], "y": [0]}, ("b", 0): {"x": [0, 0], "y": [0]}})
    sample = stats.difference_ci(df, "a", "b", weighting="sample")
    dataset = stats.difference_ci(df, "a", "b", weighting="dataset")
    assert sample.estimate == pytest.approx(2 / 3)  # micro average: 2 of 3 questions
    assert dataset.estimate == pytest.approx(0.5)  # mean of dataset means: (1 + 0) / 2


def test_interval_brackets_the_estimate_and_narrows_with_more_questions():
    rng = np.random.default_rng(1)

    def frame(n: int) -> pd.DataFrame:
        return outcomes(
            {
                (m, s): {"x": list((rng.random(n) < p).astype(float))}
                for m, p in (("a", 0.6), ("b", 0.4))
                for s in range(3)
            }
        )

    small = stats.difference_ci(frame(40), "a", "b")
    large = stats.difference_ci(frame(640), "a", "b")
    for ci in (small, large):
        assert ci.low <= ci.estimate <= ci.high
    assert (large.high - large.low) < 0.5 * (small.high - small.low)
    assert large.low > 0  # a 20-point gap over 640 questions × 3 seeds is resolved


def test_single_run_baseline_is_held_fixed():
    # The warm start is evaluated once: only questions (and A's seeds) are resampled.
    df = outcomes(
        {
            ("a", 0): {"x": [1, 1, 0, 1]},
            ("a", 1): {"x": [1, 0, 0, 1]},
            ("ws", 0): {"x": [0, 1, 0, 1]},
        }
    )
    ci = stats.difference_ci(df, "a", "ws")
    assert ci.estimate == pytest.approx((3 / 4 + 2 / 4) / 2 - 2 / 4)  # 0.125
    assert ci.n_seeds_b == 1 and ci.low <= ci.estimate <= ci.high


def test_probability_of_improvement_by_hand():
    # Run scores: A = {0.5, 1.0}, B = {0.5, 0.5}: A wins 2 of 4 pairs, ties 2 → 0.75.
    df = outcomes(
        {
            ("a", 0): {"x": [1, 0]},
            ("a", 1): {"x": [1, 1]},
            ("b", 0): {"x": [0, 1]},
            ("b", 1): {"x": [1, 0]},
        }
    )
    assert stats.probability_of_improvement(df, "a", "b") == pytest.approx(0.75)
    # with question weights: dataset weighting of A = {x: 1, y: 0} vs B = {x: 0, y: 0}
    two = outcomes({("a", 0): {"x": [1], "y": [0, 0, 0]}, ("b", 0): {"x": [0], "y": [0, 0, 0]}})
    assert stats.probability_of_improvement(two, "a", "b", weighting="dataset") == 1.0


def test_comparison_table_gives_the_share_of_run_pairs_without_a_seed_bootstrap():
    """P(better) over 2 runs a side is a description of 4 pairs: the table carries no interval
    for it (a bootstrap over so few seeds would be too narrow, issue #48)."""
    df = outcomes(
        {
            ("a", 0): {"x": [1, 0]},
            ("a", 1): {"x": [1, 1]},
            ("b", 0): {"x": [0, 1]},
            ("b", 1): {"x": [1, 0]},
        }
    )
    table = stats.comparison_table(df, baselines=["b"], groups={"all": ["x"]})
    assert set(table["p_improve"]) == {0.75}
    assert not [c for c in table.columns if c.startswith("p_improve_")]


def test_missing_outcome_is_an_error_naming_the_method():
    df = outcomes({("a", 0): {"x": [1, 0, 1]}, ("a", 1): {"x": [1, 0]}, ("b", 0): {"x": [0, 0, 0]}})
    with pytest.raises(ValueError, match="'a'.*seeds \\[1\\]"):
        stats.difference_ci(df, "a", "b")


def test_counts_match_bincount_per_replicate():
    idx = np.array([[0, 0, 2], [1, 2, 2]])
    assert stats._counts(idx, 3).tolist() == [[2, 0, 1], [0, 1, 2]]


def test_comparison_table_covers_groups_datasets_and_weightings():
    scores = {"x": [1, 0, 1], "y": [0, 1]}
    df = outcomes({("a", 0): scores, ("b", 0): {"x": [0, 0, 1], "y": [0, 0]}})
    table = stats.comparison_table(df, baselines=["b"], groups={"all": ["x", "y"]})
    assert set(zip(table["scope"], table["weighting"])) == {
        ("all", "sample"),
        ("all", "dataset"),
        ("x", "sample"),
        ("y", "sample"),
    }
    row = table[(table["scope"] == "all") & (table["weighting"] == "sample")].iloc[0]
    assert row["diff"] == pytest.approx(2 / 5)
    assert row["n_questions"] == 5


def test_seed_mean_ci_is_students_t_by_hand():
    # mean 2, sd 1, n 3: half-width t(0.975, 2) / sqrt(3) = 4.3027 / 1.7321 = 2.4841
    ci = stats.seed_mean_ci([1.0, 2.0, 3.0])
    assert ci.estimate == pytest.approx(2.0)
    assert (ci.low, ci.high) == pytest.approx((2.0 - 2.4841, 2.0 + 2.4841), abs=1e-4)
    assert ci.n_seeds_a == 3
    one = stats.seed_mean_ci([0.7])
    assert one.estimate == 0.7 and np.isnan(one.low) and np.isnan(one.high)
    with pytest.raises(ValueError, match="no finite values"):
        stats.seed_mean_ci([float("nan")])


def test_bounds_over_seeds_leave_out_an_interval_of_one_seed():
    one = stats.Interval(0.5, 0.45, 0.55, n_seeds_a=1, n_seeds_b=0, n_questions=100)
    assert all(np.isnan(b) for b in one.bounds_over_seeds())
    two = stats.Interval(0.5, 0.4, 0.6, n_seeds_a=2, n_seeds_b=0, n_questions=100)
    assert two.bounds_over_seeds() == (0.4, 0.6)
    against_one = stats.Interval(0.1, 0.0, 0.2, n_seeds_a=3, n_seeds_b=1, n_questions=100)
    assert all(np.isnan(b) for b in against_one.bounds_over_seeds())


def test_fewest_pairs_for_direction_matches_the_smallest_sign_flip_p():
    assert stats.fewest_pairs_for_direction() == 6
    assert stats.fewest_pairs_for_direction(7) == 9
    for n in (5, 6, 8, 9):  # the smallest p n pairs can give: every difference one sign
        smallest = stats.sign_flip_test(np.full(n, 0.01) + np.arange(n) * 1e-4).p
        assert smallest == pytest.approx(2 / 2**n)
        assert (smallest < 0.05) == (n >= stats.fewest_pairs_for_direction())
        assert (7 * smallest < 0.05) == (n >= stats.fewest_pairs_for_direction(7))
    with pytest.raises(ValueError, match="family_size"):
        stats.fewest_pairs_for_direction(0)


def test_seed_difference_ci_is_welchs_interval():
    from scipy import stats as scipy_stats

    a, b = [0.10, 0.14, 0.12, 0.15], [0.05, 0.11, 0.02]
    ci = stats.seed_difference_ci(a, b)
    reference = scipy_stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert ci.estimate == pytest.approx(np.mean(a) - np.mean(b))
    assert (ci.low, ci.high) == pytest.approx((reference.low, reference.high))
    assert (ci.n_seeds_a, ci.n_seeds_b) == (4, 3)
    # by hand: equal spreads of 1 on both sides, n = 2 each: se = 1, dof = 2, t = 4.3027
    same = stats.seed_difference_ci([0.0, 2.0**0.5], [1.0, 1.0 + 2.0**0.5])
    assert (same.low, same.high) == pytest.approx((-1 - 4.3027, -1 + 4.3027), abs=1e-3)
    assert np.isnan(stats.seed_difference_ci([1.0], [0.0, 1.0]).low)


# ------------------------------------------------------------------ the crossed t interval
def _simulated_study(rng, n_a: int, n_b: int, questions: int = 200, shift: float = 0.0):
    """Two methods on one drawn question set: logit difficulty per question, a method ×
    question effect, a seed effect per run, Bernoulli outcomes (greedy EM is 0/1)."""
    base = rng.normal(0.0, 1.5, questions)
    inter = rng.normal(0.0, 0.15, questions)
    seed_a, seed_b = rng.normal(0.0, 0.15, n_a), rng.normal(0.0, 0.15, n_b)
    p_a = 1 / (1 + np.exp(-(base + inter + seed_a[:, None] + shift)))
    p_b = 1 / (1 + np.exp(-(base - inter + seed_b[:, None])))
    return (
        (rng.random(p_a.shape) < p_a).astype(float),
        (rng.random(p_b.shape) < p_b).astype(float),
    )


def _true_difference(shift: float, draws: int = 1_000_000) -> float:
    rng = np.random.default_rng(123)
    base, inter = rng.normal(0, 1.5, draws), rng.normal(0, 0.15, draws)
    u_a, u_b = rng.normal(0, 0.15, draws), rng.normal(0, 0.15, draws)
    return float(
        np.mean(1 / (1 + np.exp(-(base + inter + u_a + shift))))
        - np.mean(1 / (1 + np.exp(-(base - inter + u_b))))
    )


@pytest.mark.parametrize("seeds", [3, 5, 21])
def test_crossed_t_interval_covers_95_percent_at_few_and_many_seeds(seeds):
    """Seeds and questions drawn afresh each time (the population the interval speaks of):
    the 95% interval holds the true difference 93-97% of the time, at 3 seeds as at 21."""
    from at2po_lib.evaluation.stats import paired_difference_interval

    rng = np.random.default_rng(seeds)
    truth = _true_difference(0.2)
    reps, hits = 600, 0
    for _ in range(reps):
        a, b = _simulated_study(rng, seeds, seeds, shift=0.2)
        _, low, high = paired_difference_interval(a, b, np.full(a.shape[1], 1 / a.shape[1]))
        hits += low <= truth <= high
    # 600 draws: the binomial sd of a 95% rate is 0.9 points
    assert 0.93 <= hits / reps <= 0.97


def test_crossed_t_interval_is_wider_at_three_seeds_than_a_seed_bootstrap_would_be():
    """At 3 seeds a side the t quantile (Welch df ~4) is well above z: the interval's half-width
    over its standard error is > 2.3."""
    from at2po_lib.evaluation.stats import _side, _question_term, crossed_t_interval

    a, b = _simulated_study(np.random.default_rng(0), 3, 3, questions=725)
    w = np.full(725, 1 / 725)
    sides = (_side(a, w), _side(b, w))
    term = _question_term(a.mean(0) - b.mean(0), w, sides)
    est = sides[0].mean - sides[1].mean
    low, high = crossed_t_interval(est, sides, term, 725, 0.95)
    se = np.sqrt(sides[0].seed_term + sides[1].seed_term + max(term, 0))
    assert (high - est) / se > 2.3


def test_a_fixed_policy_has_no_seed_term():
    from at2po_lib.evaluation.stats import _side

    one = _side(np.array([[1.0, 0.0, 1.0, 1.0]]), np.full(4, 0.25))
    assert (one.mean, one.seed_term, one.residual, one.n) == (0.75, 0.0, 0.0, 1)
    # two seeds: s^2 of the run scores (0.75, 0.25) / 2 = 0.125 / 2
    two = _side(np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]]), np.full(4, 0.25))
    assert two.seed_term == pytest.approx(0.125 / 2)


# ------------------------------------------------------------- blocks: the paired interval
def _simulated_blocks(
    rng, blocks: int, questions: int = 200, shift: float = 0.2, block_sd: float = 0.5
):
    """Two methods trained in the same blocks: a block effect both methods share (a machine
    build, a revision), a run effect of each, a question difficulty and a method × question
    effect, Bernoulli outcomes. Rows align block by block."""
    base = rng.normal(0.0, 1.5, questions)
    inter = rng.normal(0.0, 0.15, questions)
    block = rng.normal(0.0, block_sd, blocks)[:, None]
    u_a, u_b = rng.normal(0.0, 0.15, (2, blocks, 1))
    p_a = 1 / (1 + np.exp(-(base + inter + block + u_a + shift)))
    p_b = 1 / (1 + np.exp(-(base - inter + block + u_b)))
    return (
        (rng.random(p_a.shape) < p_a).astype(float),
        (rng.random(p_b.shape) < p_b).astype(float),
    )


def _true_blocked_difference(shift: float, block_sd: float = 0.5, draws: int = 1_000_000) -> float:
    rng = np.random.default_rng(321)
    base, inter = rng.normal(0, 1.5, draws), rng.normal(0, 0.15, draws)
    block = rng.normal(0, block_sd, draws)
    u_a, u_b = rng.normal(0, 0.15, (2, draws))
    return float(
        np.mean(1 / (1 + np.exp(-(base + inter + block + u_a + shift))))
        - np.mean(1 / (1 + np.exp(-(base - inter + block + u_b))))
    )


@pytest.mark.parametrize("blocks", [3, 5, 12])
def test_the_blocked_interval_covers_95_percent(blocks):
    """Blocks, block effects and questions drawn afresh each time: the paired interval over
    block differences, crossed with the question term, holds the true difference 93-97% of
    the time (600 draws: the binomial sd of a 95% rate is 0.9 points)."""
    rng = np.random.default_rng(100 + blocks)
    truth = _true_blocked_difference(0.2)
    reps, hits = 600, 0
    for _ in range(reps):
        a, b = _simulated_blocks(rng, blocks)
        _, low, high = stats.blocked_difference_interval(a, b, np.full(a.shape[1], 1 / a.shape[1]))
        hits += low <= truth <= high
    assert 0.93 <= hits / reps <= 0.97


def test_pairing_in_blocks_takes_out_the_block_effect():
    """With a large shared block effect the paired interval is narrower than the unpaired
    crossed interval over the same runs (which counts the block effect as seed noise)."""
    a, b = _simulated_blocks(np.random.default_rng(7), 12, questions=725, block_sd=1.0)
    w = np.full(725, 1 / 725)
    _, low, high = stats.blocked_difference_interval(a, b, w)
    _, ulow, uhigh = stats.paired_difference_interval(a, b, w)
    assert high - low < 0.6 * (uhigh - ulow)
    with pytest.raises(ValueError, match="block by block"):
        stats.blocked_difference_interval(a[:3], b, w)


# ---------------------------------------------------------------------- permutation tests
def test_permutation_test_by_hand():
    # 3 vs 3 runs: 20 splits; only {1,2,3} | {4,5,6} and its mirror reach |diff| = 3
    test = stats.permutation_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert (test.p, test.splits, test.exact) == (pytest.approx(2 / 20), 20, True)
    # one run a side: 2 splits, both as extreme
    assert stats.permutation_test([0.0], [1.0]).p == 1.0
    assert np.isnan(stats.permutation_test([], [1.0]).p)


def test_sign_flip_test_by_hand():
    # 3 paired differences, all positive: 8 sign patterns, 2 as extreme (all + / all -)
    assert stats.sign_flip_test([1.0, 2.0, 3.0]).p == pytest.approx(2 / 8)
    # 1, 1, -1: |mean| 1/3; patterns with |mean| >= 1/3: all 8
    assert stats.sign_flip_test([1.0, 1.0, -1.0]).p == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lattice_counting_is_the_exact_enumeration(seed):
    """Scores on a 1/Q lattice (EM over Q questions): counting splits by their integer sum
    gives the enumeration's p to the last digit; the random draws come close."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 60, 7) / 60, rng.integers(10, 60, 6) / 60
    enumerated = stats.permutation_test(a, b)
    counted = stats.permutation_test(a, b, lattice=60, exact_splits=10)
    drawn = stats.permutation_test(a, b, exact_splits=10, draws=20_000)
    assert counted.exact and counted.splits == enumerated.splits == 1716
    assert counted.p == pytest.approx(enumerated.p, abs=1e-12)
    assert not drawn.exact and drawn.p == pytest.approx(enumerated.p, abs=0.01)
    d = rng.integers(-40, 40, 11) / 60
    assert stats.sign_flip_test(d, lattice=60, exact_splits=10).p == pytest.approx(
        stats.sign_flip_test(d).p, abs=1e-12
    )
    assert stats.score_lattice(a, 60) == 60 and stats.score_lattice(a + 1e-3, 60) is None
    assert stats.score_lattice([1 / 240, 0.5], 60, samples=4) == 240


def test_permutation_draws_are_fixed_by_their_seed():
    a, b = np.arange(12) / 10, np.arange(20) / 13
    one = stats.permutation_test(a, b, exact_splits=10)
    assert one == stats.permutation_test(a, b, exact_splits=10)
    assert one.splits == stats.PERMUTATION_DRAWS and one.p >= 1 / (stats.PERMUTATION_DRAWS + 1)


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 of m = 3: 3 x 0.01, 2 x 0.03, 1 x 0.04 -> 0.03, 0.06, max(0.06, 0.04)
    got = stats.holm([0.01, 0.04, 0.03, np.nan])
    assert got[:3] == pytest.approx([0.03, 0.06, 0.06]) and np.isnan(got[3])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_blocks_for_half_width_by_hand():
    # sd 4.4 points, ±2: t_20 · 4.4 / √21 = 2.086 · 0.960 = 2.003 > 2; t_21 · 4.4 / √22 = 1.951
    assert stats.blocks_for_half_width(0.044, 0.02) == 22
    # a tiny spread: two blocks already suffice (t_1 = 12.71: 12.71 · 0.1 / √2 = 0.90 ≤ 2)
    assert stats.blocks_for_half_width(0.001, 0.02) == 2
    assert stats.blocks_for_half_width(float("nan")) is None


def test_minimum_detectable_effect_by_hand():
    # SE 1, ν = 8: t_0.975 = 2.306004, t_0.80 = 0.888890 -> 3.194894
    assert stats.minimum_detectable_effect(1.0, 8) == pytest.approx(3.194894, abs=1e-5)
    # the headline's 15 blocks at sd 4.46: (2.144787 + 0.868055) · 4.46 / √15 = 3.4695
    assert stats.minimum_detectable_effect(4.46 / np.sqrt(15), 14) == pytest.approx(
        3.4695, abs=1e-3
    )
    assert np.isnan(stats.minimum_detectable_effect(0.0, 8))
    assert np.isnan(stats.minimum_detectable_effect(1.0, float("nan")))


def test_power_against_by_hand():
    # ν → ∞ is the normal test: Φ(2.8 − 1.96) + Φ(−2.8 − 1.96) = 0.79955 + 0.000001
    assert stats.power_against(2.8, 1.0, 1e7) == pytest.approx(0.79955, abs=1e-4)
    assert stats.power_against(0.0, 1.0, 1e7) == pytest.approx(0.05, abs=1e-4)  # the level
    # at its own minimum detectable effect a test has about 80% power (the approximation)
    se, dof = 4.46 / np.sqrt(15), 14
    mde = stats.minimum_detectable_effect(se, dof)
    assert stats.power_against(mde, se, dof) == pytest.approx(0.80, abs=0.01)


def test_excluded_beyond_is_the_bound_on_the_paper_side():
    assert stats.excluded_beyond(-4.5, 0.5, 1) == 0.5  # no gain above +0.5
    assert stats.excluded_beyond(-1.0, 2.0, -1) == -1.0  # no drop below −1
    assert np.isnan(stats.excluded_beyond(-1.0, 2.0, 0))
    assert np.isnan(stats.excluded_beyond(float("nan"), 2.0, 1))


def test_max_t_sign_flip_by_hand():
    # d = (1, 2, 3): t = 2 / (1 / √3) = 3.46; of the 8 sign patterns only (+,+,+) and (−,−,−)
    # reach it (flipping one block gives |t| ≤ 1.11), so p = 2 / 8
    assert stats.max_t_sign_flip(np.array([[1.0, 2.0, 3.0]]))[0] == pytest.approx(0.25)
    # a family of two identical comparisons costs nothing: the maximum is the same statistic
    twice = stats.max_t_sign_flip(np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]))
    assert twice == pytest.approx([0.25, 0.25])


def test_max_t_sign_flip_matches_a_naive_loop_and_lies_between_raw_and_bonferroni():
    rng = np.random.default_rng(3)
    d = rng.normal(0.5, 1.0, (3, 7))
    d[1] = d[0] + rng.normal(0, 0.2, 7)  # two comparisons that move together
    t = lambda x: abs(x.mean()) / (x.std(ddof=1) / np.sqrt(len(x)))  # noqa: E731
    patterns = list(itertools.product((1, -1), repeat=7))
    null_max = [max(t(np.array(s) * row) for row in d) for s in patterns]
    naive = [np.mean([m >= t(row) - 1e-9 for m in null_max]) for row in d]
    adjusted = stats.max_t_sign_flip(d)
    assert adjusted == pytest.approx(naive)
    raw = [np.mean([t(np.array(s) * row) >= t(row) - 1e-9 for s in patterns]) for row in d]
    assert np.all(adjusted >= np.array(raw) - 1e-12)
    assert np.all(adjusted <= np.minimum(1, 3 * np.array(raw)) + 1e-12)


def test_max_t_sign_flip_refuses_what_breaks_its_equal_budget():
    """One critical |t| for every comparison shares the error budget equally only when each
    pairs the same complete blocks: a missing block (NaN) or rows of unequal length are refused
    (a NaN once read as p = 0)."""
    with pytest.raises(ValueError, match="lacks a block"):
        stats.max_t_sign_flip(np.array([[np.nan, 1.0, 2.0], [1.0, 2.0, 3.0]]))
    with pytest.raises(ValueError, match="same n blocks"):
        stats.max_t_sign_flip([[1.0, 2.0], [1.0, 2.0, 3.0]])


def test_max_t_sign_flip_a_comparison_with_no_difference_reads_p_one():
    # all differences 0: t = 0, and every sign pattern's maximum reaches it (it read 0 before)
    p = stats.max_t_sign_flip(np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]))
    assert p[0] == 1.0
    assert p[1] == pytest.approx(0.25)  # (1, 2, 3) as by hand above: the zero row adds nothing
