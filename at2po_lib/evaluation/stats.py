r"""Statistics for comparing methods on per-question outcomes: intervals right for the seeds they rest on.

Every comparison in the companion (README, notebooks, tables) rests on the *per-question
outcomes* of each run: one row per (method, seed, dataset, question) with a score in [0, 1]
(greedy EM, or the sampled metric: the mean reward of k samples at the training temperature).

Design of the resampling (docs/method.md §10 says what the tables are):

- A difference "method A − method B" is **paired over questions** (both answered the same test
  questions) and **unpaired over seeds** (seed ``s`` of A and seed ``s`` of B are different
  training runs that share nothing but a number). Its interval is a **crossed t interval**
 : seeds and questions are both random draws, so with r_s = Σ_q w_q y_{s,q} the
  run score of seed s, d_q = ȳ_{A,q} − ȳ_{B,q} the seed-averaged paired question difference
  and MS_e the residual mean square of a method's (seed × question) table,

  .. math::  \widehat{\mathrm{Var}}(\hat\Delta) = \frac{s^2_{r_A}}{n_A} + \frac{s^2_{r_B}}{n_B}
             + \Big(\sum_q w_q^2\Big)\Big[\tfrac{1}{Q-1}\sum_q (d_q - \bar d)^2
             - \tfrac{MS_{e,A}}{n_A} - \tfrac{MS_{e,B}}{n_B}\Big]_+

  (the seed terms already carry the seed × question noise that also sits in var(d_q), so it
  is taken out once), and :math:`\hat\Delta \pm t_{0.975,\nu}\sqrt{\widehat{\mathrm{Var}}}`
  with Welch–Satterthwaite degrees of freedom ν over the three terms (n_A − 1, n_B − 1,
  Q − 1). At 3 seeds a side ν is ~4, so t ≈ 2.8, where a percentile bootstrap over 3 seeds
  behaves like z = 1.96 and is too narrow; a simulation test checks 95% coverage at 3, 5 and
  21 seeds (``tests/evaluation/test_stats.py``). A method evaluated once (the warm start: greedy
  decoding is deterministic) has no seed term: its one run is fixed.
- Group averages come in the paper's form, **sample-weighted** (micro average over every
  question of the group; the paper's "Avg" columns, checked in ``paper_reference``), and
  **unweighted** (mean of the dataset means), side by side.
- **In blocks** (:mod:`at2po_lib.study.blocks`: one seed of every method per block, on one
  machine at one revision) the difference is **paired over blocks** too: with
  d_{b,q} = y_{A,b,q} − y_{B,b,q} the (block × question) table of differences, it is the
  crossed t interval of one side on d (:func:`blocked_difference_interval`):

  .. math::  \widehat{\mathrm{Var}}(\hat\Delta) = \frac{s^2_{D}}{n}
             + \Big(\sum_q w_q^2\Big)\Big[\tfrac{1}{Q-1}\sum_q (\bar d_q - \hat\Delta)^2
             - \tfrac{MS_{e,d}}{n}\Big]_+, \qquad D_b = \sum_q w_q d_{b,q}

  with Welch–Satterthwaite ν over (n − 1, Q − 1): a block's own effect (its machine build,
  revision, load) cancels in D_b. A simulation test checks its coverage.
- **Permutation tests** back every directional reading: the difference of the
  run scores' means, against its distribution over every split of the pooled runs into the
  two sizes (:func:`permutation_test`; exact when there are at most :data:`EXACT_SPLITS`
  splits, else :data:`PERMUTATION_DRAWS` fixed-seed random splits, p = (1 + hits) / (1 +
  draws)); paired runs (blocks) and a side fixed at one value flip the signs of the
  differences instead (:func:`sign_flip_test`). Two-sided. A family of cells read together
  (Table 3) gets Holm's step-down correction (:func:`holm`).
- **Probability of improvement** (Agarwal et al., 2021, "Deep RL at the edge of the statistical
  precipice"): the share of (run of A, run of B) pairs in which A's run scores higher on the
  group score, ties counted half. It describes the runs and carries no interval: over 3 to 21
  seeds a percentile bootstrap behaves like z = 1.96 and is too narrow (above), so a reading
  rests on the crossed t interval and the permutation test, never on this share.
- A **percentile bootstrap** (:func:`_bootstrap_indices`) is used where the units are many:
  prompts or trees (the credit-accuracy AUCs, :mod:`at2po_lib.analysis.credit_accuracy`).

Everything is vectorised: a run score is a product of a (seed, question) score matrix with the
question weights.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats
from scipy.stats import bootstrap

OUTCOME_KEYS = ("method", "seed", "dataset", "question_id")
"""Columns that identify one per-question outcome row."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided confidence interval (the crossed t interval, module doc)."""

    estimate: float
    low: float
    high: float
    n_seeds_a: int
    n_seeds_b: int
    n_questions: int
    confidence: float = 0.95

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:  # "+0.021 [-0.010, +0.052]"
        return f"{self.estimate:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"

    def bounds_over_seeds(self) -> tuple[float, float]:
        """``(low, high)``, or NaNs when one side rests on a single seed: that interval has no
        seed term (only the question one), too narrow to be read as a claim about seeds."""
        if min(self.n_seeds_a, self.n_seeds_b or self.n_seeds_a) < 2:
            return float("nan"), float("nan")
        return self.low, self.high


def score_matrix(
    outcomes: pd.DataFrame, method: str, questions: pd.Index, metric: str = "em", unit: str = "seed"
) -> np.ndarray:
    """(n_seeds, n_questions) scores of one method over the given question keys, rows in the
    order of ``unit`` (``seed``; ``block`` for runs trained in blocks).

    ``questions`` holds ``(dataset, question_id)`` pairs; every seed of the method must have
    answered every one of them (a missing answer is an error naming the seed, not a silent 0).
    """
    rows = outcomes[outcomes["method"] == method]
    if rows.empty:
        raise KeyError(f"no outcomes for method {method!r}")
    # the mean of each (unit, question) cell by scatter-adding into a dense table: a pivot
    # table's work without its cost (a report builds hundreds of these)
    values = rows[metric].to_numpy(dtype=float, na_value=np.nan)
    keys = pd.MultiIndex.from_arrays([rows["dataset"], rows["question_id"]])
    column = questions.get_indexer(keys)  # -1: a question outside the comparison
    units, row = np.unique(rows[unit].to_numpy(), return_inverse=True)
    kept = (column >= 0) & ~np.isnan(values)
    sums = np.zeros((len(units), len(questions)))
    counts = np.zeros_like(sums)
    np.add.at(sums, (row[kept], column[kept]), values[kept])
    np.add.at(counts, (row[kept], column[kept]), 1.0)
    missing = questions[counts.sum(axis=0) == 0]
    if len(missing):
        raise ValueError(
            f"method {method!r}: {len(missing)} questions have no outcome "
            f"(e.g. {list(missing[:3])}); seeds present: {units.tolist()}"
        )
    unanswered = (counts == 0).any(axis=1)
    if unanswered.any():
        seeds = units[unanswered].tolist()
        raise ValueError(f"method {method!r}: seeds {seeds} did not answer every question")
    return sums / counts


def _question_keys(
    outcomes: pd.DataFrame, methods: Sequence[str], datasets: Sequence[str] | None
) -> pd.Index:
    """The (dataset, question_id) pairs every method answered (the comparison's questions)."""
    keys = None
    for method in methods:
        rows = outcomes[outcomes["method"] == method]
        if datasets is not None:
            rows = rows[rows["dataset"].isin(datasets)]
        these = pd.MultiIndex.from_frame(rows[["dataset", "question_id"]].drop_duplicates())
        keys = these if keys is None else keys.intersection(these)
    if keys is None or len(keys) == 0:
        raise ValueError(
            f"methods {list(methods)} share no question"
            + (f" in datasets {list(datasets)}" if datasets else "")
        )
    return keys.sort_values()


def _weights(questions: pd.Index, weighting: str) -> np.ndarray:
    """Per-question weights: 'sample' (each question counts once: the paper's Avg) or
    'dataset' (each dataset counts once: the unweighted mean of dataset means)."""
    datasets = np.asarray(questions.get_level_values("dataset"))
    if weighting == "sample":
        return np.full(len(datasets), 1.0 / len(datasets))
    if weighting == "dataset":
        names, inverse, counts = np.unique(datasets, return_inverse=True, return_counts=True)
        return 1.0 / (len(names) * counts[inverse])
    raise ValueError(f"weighting must be 'sample' or 'dataset', got {weighting!r}")


def _counts(idx: np.ndarray, size: int) -> np.ndarray:
    """How often each of ``size`` items was drawn, per replicate: (..., n) indices → (..., size)."""
    idx = np.asarray(idx, dtype=np.intp)
    batch = idx.reshape(-1, idx.shape[-1])  # (B, n)
    offsets = (np.arange(batch.shape[0]) * size)[:, None]  # (B, 1)
    counts = np.bincount((batch + offsets).ravel(), minlength=batch.shape[0] * size)
    return counts.reshape(*idx.shape[:-1], size).astype(float)  # (..., size)


def _bootstrap_indices(
    sizes: Sequence[int],
    statistic,
    confidence: float,
    n_resamples: int,
    seed: int,
    method: str = "percentile",
) -> tuple[float, float]:
    """CI of ``statistic(*index_vectors)`` when each index vector is drawn with replacement
    from ``range(size)`` independently (a crossed bootstrap), by :func:`scipy.stats.bootstrap`.

    A factor of size 1 (a method evaluated once) cannot be resampled: it stays fixed.
    """
    free = [i for i, n in enumerate(sizes) if n > 1]
    if not free:
        value = float(statistic(*[np.zeros(1, np.intp) for _ in sizes]))
        return value, value

    def on_free(*drawn, axis=-1):
        batch = drawn[0].shape[:-1]
        full, it = [], iter(drawn)
        for n in sizes:
            full.append(next(it) if n > 1 else np.zeros((*batch, 1), np.intp))
        return statistic(*full)

    result = bootstrap(
        tuple(np.arange(sizes[i]) for i in free),
        on_free,
        paired=False,
        vectorized=True,
        n_resamples=n_resamples,
        batch=500,
        confidence_level=confidence,
        method=method,
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


@dataclass(frozen=True)
class _Side:
    """One method's (seeds × questions) scores reduced to what the crossed t interval needs."""

    mean: float  # Σ_q w_q ȳ_q
    seed_term: float  # s²(r_s) / n  (0 with one seed)
    residual: float  # MS_e / n    (0 with one seed)
    n: int


def _side(scores: np.ndarray, w: np.ndarray) -> _Side:
    """scores (n, Q), weights (Q,) summing to 1."""
    n, q = scores.shape
    runs = scores @ w  # (n,)
    if n < 2:
        return _Side(float(runs.mean()), 0.0, 0.0, n)
    resid = scores - scores.mean(1, keepdims=True) - scores.mean(0, keepdims=True) + scores.mean()
    mse = float((resid**2).sum() / ((n - 1) * max(q - 1, 1)))
    return _Side(float(runs.mean()), float(runs.var(ddof=1) / n), mse / n, n)


def crossed_t_interval(
    estimate: float,
    sides: Sequence[_Side],
    question_term: float,
    n_questions: int,
    confidence: float,
) -> tuple[float, float]:
    """estimate ± t_ν · sqrt(Σ seed terms + question term), ν by Welch–Satterthwaite over the
    seed terms (n − 1 each) and the question term (Q − 1); see the module docstring."""
    parts = [(s.seed_term, s.n - 1) for s in sides if s.n > 1]
    parts.append((max(question_term, 0.0), max(n_questions - 1, 1)))
    variance = sum(v for v, _ in parts)
    if variance <= 0:
        return estimate, estimate
    dof = variance**2 / sum(v**2 / d for v, d in parts if v > 0)
    half = float(scipy_stats.t.ppf((1 + confidence) / 2, dof) * np.sqrt(variance))
    return estimate - half, estimate + half


def _question_term(diff_q: np.ndarray, w: np.ndarray, sides: Sequence[_Side]) -> float:
    """(Σ w²)[var_q(d) − Σ MS_e / n]: the question-sampling variance of a weighted mean of
    paired question differences, less the seed × question noise the seed terms carry."""
    centred = diff_q - diff_q @ w
    var_q = float((centred**2).sum() / max(len(diff_q) - 1, 1))
    return float((w**2).sum()) * (var_q - sum(s.residual for s in sides))


def difference_ci(
    outcomes: pd.DataFrame,
    method_a: str,
    method_b: str,
    datasets: Sequence[str] | None = None,
    metric: str = "em",
    weighting: str = "sample",
    confidence: float = 0.95,
) -> Interval:
    """Crossed t interval of mean(A) − mean(B) over the questions both answered (module doc).

    Args:
        outcomes: long frame with columns ``method, seed, dataset, question_id, <metric>``.
        datasets: restrict to these datasets (a group); None: every shared question.
        weighting: 'sample' (micro average, the paper's Avg) or 'dataset' (unweighted).
    """
    questions, a, b = _pair_scores(outcomes, method_a, method_b, datasets, metric)
    w = _weights(questions, weighting)  # (Q,)
    estimate, low, high = paired_difference_interval(a, b, w, confidence)
    return Interval(estimate, low, high, a.shape[0], b.shape[0], len(questions), confidence)


def _pair_scores(
    outcomes: pd.DataFrame,
    method_a: str,
    method_b: str,
    datasets: Sequence[str] | None,
    metric: str,
    unit: str = "seed",
) -> tuple[pd.Index, np.ndarray, np.ndarray]:
    """The questions both methods answered (in ``datasets``) and each one's (runs × questions)
    scores over them, rows by ``unit`` (``seed``, or ``block``)."""
    questions = _question_keys(outcomes, [method_a, method_b], datasets)
    a = score_matrix(outcomes, method_a, questions, metric, unit=unit)  # (Sa, Q)
    b = score_matrix(outcomes, method_b, questions, metric, unit=unit)  # (Sb, Q)
    return questions, a, b


def paired_difference_interval(
    a: np.ndarray, b: np.ndarray, w: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(estimate, low, high) of Σ_q w_q (ȳ_A,q − ȳ_B,q) for score tables a (n_A, Q) and
    b (n_B, Q) over the same questions: the crossed t interval of the module docstring."""
    sides = (_side(a, w), _side(b, w))
    estimate = sides[0].mean - sides[1].mean
    term = _question_term(a.mean(0) - b.mean(0), w, sides)
    low, high = crossed_t_interval(estimate, sides, term, a.shape[1], confidence)
    return estimate, low, high


def gain_contrast_ci(
    outcomes: pd.DataFrame,
    method_a: str,
    method_b: str,
    datasets_1: Sequence[str],
    datasets_2: Sequence[str],
    metric: str = "em",
    weighting: str = "sample",
    confidence: float = 0.95,
) -> Interval:
    r"""Is A's gain over B larger on one group of datasets than on another? The difference of
    differences, each paired over its group's questions,

    .. math::  \hat\Delta\Delta = [\bar y_A(Q_1) - \bar y_B(Q_1)] - [\bar y_A(Q_2) - \bar y_B(Q_2)],

    with the crossed t interval of the module docstring: a run answers both groups, so its seed
    term is the variance of its contrast c_s = r_s(Q_1) − r_s(Q_2) over seeds, and each group's
    questions add their own question term (the groups' questions are different draws).

    ``n_questions`` of the result counts both groups' questions.
    """
    parts = []
    for datasets in (datasets_1, datasets_2):
        questions, a, b = _pair_scores(outcomes, method_a, method_b, datasets, metric)
        parts.append((a, b, _weights(questions, weighting)))
    (a1, b1, w1), (a2, b2, w2) = parts
    # score_matrix refuses a seed that missed a question, so a1/a2 and b1/b2 share their seeds.
    # A run's contrast (group-1 score − group-2 score) is one number per seed: the seed terms
    # come from those; each group's questions add their own question term.
    sides = []
    for m1, m2 in ((a1, a2), (b1, b2)):
        contrast = m1 @ w1 - m2 @ w2  # (n,)
        one, two = _side(m1, w1), _side(m2, w2)
        seed_term = float(contrast.var(ddof=1) / len(contrast)) if len(contrast) > 1 else 0.0
        sides.append((_Side(float(contrast.mean()), seed_term, 0.0, len(contrast)), one, two))
    (ca, a_1, a_2), (cb, b_1, b_2) = sides
    term = _question_term(a1.mean(0) - b1.mean(0), w1, (a_1, b_1)) + _question_term(
        a2.mean(0) - b2.mean(0), w2, (a_2, b_2)
    )
    estimate = ca.mean - cb.mean
    sizes = (a1.shape[0], b1.shape[0], a1.shape[1], a2.shape[1])
    low, high = crossed_t_interval(estimate, (ca, cb), term, sizes[2] + sizes[3], confidence)
    return Interval(estimate, low, high, sizes[0], sizes[1], sizes[2] + sizes[3], confidence)


def probability_of_improvement(
    outcomes: pd.DataFrame,
    method_a: str,
    method_b: str,
    datasets: Sequence[str] | None = None,
    metric: str = "em",
    weighting: str = "sample",
) -> float:
    """The share of (run of A, run of B) pairs in which A's run scores higher on the group
    score, ties half (the Mann–Whitney form of P(run of A > run of B)). A description of the
    runs, with no interval (module doc); with one run a side it is 0, ½ or 1."""
    questions, a, b = _pair_scores(outcomes, method_a, method_b, datasets, metric)
    w = _weights(questions, weighting)
    return _share_better(a @ w, b @ w)


def _share_better(run_a: np.ndarray, run_b: np.ndarray) -> float:
    """The share of (a, b) pairs of run scores with a > b, ties half."""
    wins = (run_a[:, None] > run_b[None, :]) + 0.5 * (run_a[:, None] == run_b[None, :])
    return float(wins.mean())


def comparison_table(
    outcomes: pd.DataFrame,
    baselines: Sequence[str],
    groups: dict[str, Sequence[str]],
    metric: str = "em",
    methods: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Every method minus every baseline, per dataset and per group, both weightings.

    ``groups`` maps a group name (e.g. 'multihop') to its datasets; each dataset is also its
    own one-dataset group. Returns one tidy row per (method, baseline, scope, weighting) with
    the difference, its CI, the probability of improvement (a share of run pairs, no interval)
    and the counts the interval rests on.
    """
    methods = list(methods or sorted(outcomes["method"].unique()))
    scopes = {name: list(ds) for name, ds in groups.items()}
    for dataset in sorted(outcomes["dataset"].unique()):
        scopes.setdefault(dataset, [dataset])
    # each pair's score tables once per scope, for both weightings and both statistics (the
    # same numbers as difference_ci and probability_of_improvement, a fraction of the work)
    by_method = dict(tuple(outcomes.groupby("method", sort=False)))
    rows = []
    for baseline in baselines:
        for method in methods:
            if method == baseline:
                continue
            pair = pd.concat(
                [by_method.get(m, outcomes.iloc[:0]) for m in (method, baseline)],
                ignore_index=True,
            )
            for scope, datasets in scopes.items():
                questions, a, b = _pair_scores(pair, method, baseline, datasets, metric)
                weightings = ("sample", "dataset") if len(datasets) > 1 else ("sample",)
                for weighting in weightings:
                    w = _weights(questions, weighting)
                    estimate, low, high = paired_difference_interval(a, b, w)
                    rows.append(
                        {
                            "method": method,
                            "baseline": baseline,
                            "scope": scope,
                            "weighting": weighting,
                            "metric": metric,
                            "diff": estimate,
                            "ci_low": low,
                            "ci_high": high,
                            "p_improve": _share_better(a @ w, b @ w),
                            "n_seeds": a.shape[0],
                            "n_seeds_baseline": b.shape[0],
                            "n_questions": len(questions),
                        }
                    )
    return pd.DataFrame.from_records(rows)


def mean_ci(
    outcomes: pd.DataFrame,
    method: str,
    datasets: Sequence[str] | None = None,
    metric: str = "em",
    weighting: str = "sample",
    confidence: float = 0.95,
) -> Interval:
    """A method's own mean score with the crossed t interval (module doc; the question term
    of one method's seed-averaged scores)."""
    questions = _question_keys(outcomes, [method], datasets)
    scores = score_matrix(outcomes, method, questions, metric)  # (S, Q)
    estimate, low, high = one_side_interval(scores, _weights(questions, weighting), confidence)
    return Interval(estimate, low, high, scores.shape[0], 0, len(questions), confidence)


def one_side_interval(
    scores: np.ndarray, w: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(estimate, low, high) of Σ_q w_q ȳ_q for a (runs × questions) table: the crossed t
    interval with one side (its seed term and its question term less MS_e / n)."""
    side = _side(scores, w)
    term = _question_term(scores.mean(0), w, (side,))
    low, high = crossed_t_interval(side.mean, (side,), term, scores.shape[1], confidence)
    return side.mean, low, high


def blocked_difference_interval(
    a: np.ndarray, b: np.ndarray, w: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(estimate, low, high) of Σ_q w_q (ȳ_A,q − ȳ_B,q) when row i of ``a`` and of ``b`` were
    trained in the same block i (module docstring: the crossed t interval of the differences
    d = a − b, paired over blocks and over questions)."""
    if a.shape != b.shape:
        raise ValueError(f"blocked scores must align block by block: {a.shape} vs {b.shape}")
    return one_side_interval(a - b, w, confidence)


def blocked_difference_ci(
    outcomes: pd.DataFrame,
    method_a: str,
    method_b: str,
    datasets: Sequence[str] | None = None,
    metric: str = "em",
    weighting: str = "sample",
    confidence: float = 0.95,
) -> tuple[Interval, PermutationTest, np.ndarray]:
    """A − B over the blocks both trained in (``outcomes`` has a ``block`` column and one run
    of each method per block): :func:`blocked_difference_interval` and the sign-flip test of
    the block differences (exact on the scores' lattice, :func:`score_lattice`), and those
    differences D_b = Σ_q w_q (y_A,b,q − y_B,b,q), one per block in block order."""
    questions, a, b = _pair_scores(outcomes, method_a, method_b, datasets, metric, unit="block")
    w = _weights(questions, weighting)
    estimate, low, high = blocked_difference_interval(a, b, w, confidence)
    lattice = (
        score_lattice(np.concatenate([a @ w, b @ w]), len(questions), samples=16)
        if weighting == "sample"
        else None
    )
    differences = a @ w - b @ w
    test = sign_flip_test(differences, lattice=lattice)
    interval = Interval(estimate, low, high, a.shape[0], b.shape[0], len(questions), confidence)
    return interval, test, differences


def run_scores(
    outcomes: pd.DataFrame,
    method_a: str,
    method_b: str,
    datasets: Sequence[str] | None = None,
    metric: str = "em",
    weighting: str = "sample",
    unit: str = "seed",
) -> tuple[pd.Series, pd.Series]:
    """Each run's weighted score over the questions both methods answered, by ``unit``
    (``seed``, or ``block``): what the permutation tests permute."""
    questions = _question_keys(outcomes, [method_a, method_b], datasets)
    w = _weights(questions, weighting)
    out = []
    for method in (method_a, method_b):
        units = np.sort(outcomes.loc[outcomes["method"] == method, unit].unique())
        scores = score_matrix(outcomes, method, questions, metric, unit)
        out.append(pd.Series(scores @ w, index=units))
    return out[0], out[1]


def difference_test(
    outcomes: pd.DataFrame,
    method_a: str,
    method_b: str,
    datasets: Sequence[str] | None = None,
    metric: str = "em",
    weighting: str = "sample",
    fixed_b: bool = False,
) -> PermutationTest:
    """The permutation test of :func:`difference_ci`'s difference over seed labels
    (:func:`permutation_test`); ``fixed_b``: B is one fixed model (the untrained warm start),
    so A's runs' differences to it are sign-flipped (:func:`sign_flip_test`). Exact on the
    scores' lattice where they lie on one (sample-weighted means of 0/1 or k-sample scores)."""
    a, b = run_scores(outcomes, method_a, method_b, datasets, metric, weighting)
    questions = len(_question_keys(outcomes, [method_a, method_b], datasets))
    lattice = (
        score_lattice(np.concatenate([a, b]), questions, samples=16)
        if weighting == "sample"
        else None
    )
    if fixed_b:
        return sign_flip_test(a.to_numpy() - b.mean(), lattice=lattice)
    return permutation_test(a.to_numpy(), b.to_numpy(), lattice=lattice)


# ------------------------------------------------------------------------ permutation tests
EXACT_SPLITS = 50_000
"""Up to this many splits (or sign patterns) a permutation test enumerates them all."""
PERMUTATION_DRAWS = 20_000
"""Random splits otherwise (Monte Carlo standard error of p ≤ 0.0016 near 0.05)."""
PERMUTATION_SEED = 0


@dataclass(frozen=True)
class PermutationTest:
    """A two-sided permutation p-value and what it was computed over."""

    p: float
    splits: int
    """Splits (or sign patterns) enumerated, or random ones drawn."""
    exact: bool

    def describe(self) -> str:
        how = (
            f"exact over {self.splits:,} splits"
            if self.exact
            else f"Monte Carlo, {self.splits:,} draws"
        )
        shown = f"= {self.p:.3f}" if self.p >= 0.001 else "< 0.001"
        return f"p {shown}, {how}"


def _p_value(observed: float, null: np.ndarray, exact: bool) -> float:
    """Two-sided: the share of the null at least as extreme as ``observed`` (a 1e-12 slack
    keeps float ties in); Monte Carlo counts the observed split once (p ≥ 1 / (draws + 1))."""
    hits = int(np.sum(np.abs(null) >= abs(observed) - 1e-12))
    return hits / len(null) if exact else (hits + 1) / (len(null) + 1)


def score_lattice(values: Sequence[float], questions: int, samples: int = 1) -> int | None:
    """The L with every value × L an integer, when there is one among ``questions`` ×
    1..``samples`` (a run's sample-weighted EM over Q questions is a multiple of 1/Q; the mean
    of k samples, of 1/(kQ)); None otherwise (dataset-weighted means, other numbers)."""
    v = np.asarray(values, dtype=float)
    for k in range(1, samples + 1):
        scaled = v * questions * k
        if np.all(np.abs(scaled - np.round(scaled)) < 1e-6):
            return questions * k
    return None


def _subset_sum_counts(x: np.ndarray, size: int | None) -> np.ndarray:
    """counts[s]: subsets of the non-negative integers ``x`` (of ``size`` members, or of any
    size) summing to s: the exact null of a split when the scores lie on a lattice."""
    total = int(x.sum())
    rows = (size if size is not None else 0) + 1
    counts = np.zeros((rows, total + 1), dtype=np.int64)
    counts[0, 0] = 1
    for value in x.astype(np.int64):
        before = counts.copy()
        if size is None:
            counts[0, value:] += before[0, : total + 1 - value]
        else:
            counts[1:, value:] += before[:-1, : total + 1 - value]
    return counts[-1]


def permutation_test(
    a: Sequence[float],
    b: Sequence[float],
    *,
    lattice: int | None = None,
    exact_splits: int = EXACT_SPLITS,
    draws: int = PERMUTATION_DRAWS,
    seed: int = PERMUTATION_SEED,
) -> PermutationTest:
    r"""mean(a) − mean(b) against its distribution over every way of splitting the pooled
    n_a + n_b runs into groups of n_a and n_b (labels exchangeable under "no difference"):
    exact over the C(n_a + n_b, n_a) splits when there are at most ``exact_splits``, or at
    any count when every score × ``lattice`` is an integer (:func:`score_lattice`: the
    splits are counted by their sum), else over ``draws`` random splits with a fixed seed.
    NaN with fewer than one run a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 1 or len(b) < 1:
        return PermutationTest(float("nan"), 0, True)
    pooled, n_a, total = np.concatenate([a, b]), len(a), a.sum() + b.sum()
    n = len(pooled)
    observed = a.mean() - b.mean()
    count = math.comb(n, n_a)
    if lattice and count > exact_splits:
        x = np.round(pooled * lattice)
        counts = _subset_sum_counts(x - x.min(), n_a)  # (S,)
        sums = (np.arange(len(counts)) + n_a * x.min()) / lattice
        null = sums / n_a - (total - sums) / len(b)
        extreme = np.abs(null) >= abs(observed) - 1e-12
        return PermutationTest(float(counts[extreme].sum() / count), count, True)
    if count <= exact_splits:
        picks = np.fromiter(
            itertools.chain.from_iterable(itertools.combinations(range(n), n_a)),
            dtype=np.intp,
            count=count * n_a,
        ).reshape(count, n_a)
        exact = True
    else:
        rng = np.random.default_rng(seed)
        picks = np.argsort(rng.random((draws, n)), axis=1)[:, :n_a]
        exact = False
    sums = pooled[picks].sum(axis=1)  # (S,)
    null = sums / n_a - (total - sums) / len(b)
    return PermutationTest(_p_value(observed, null, exact), len(null), exact)


def sign_flip_test(
    differences: Sequence[float],
    *,
    lattice: int | None = None,
    exact_splits: int = EXACT_SPLITS,
    draws: int = PERMUTATION_DRAWS,
    seed: int = PERMUTATION_SEED,
) -> PermutationTest:
    """mean(d) against its distribution over every sign pattern of the paired differences d
    (a block's two runs swap labels): exact over the 2^n patterns when there are at most
    ``exact_splits`` or every d × ``lattice`` is an integer (patterns counted by the sum of
    the positive |d|), else ``draws`` random ones with a fixed seed. With n runs the smallest
    p is 2 / 2^n (3 runs: 0.25; 5: 0.0625; 6: 0.03125)."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 1:
        return PermutationTest(float("nan"), 0, True)
    if lattice and 2 ** len(d) > exact_splits:
        x = np.abs(np.round(d * lattice))
        counts = _subset_sum_counts(x, None)  # Σ s_i |d_i| = 2 Σ_plus |d_i| − Σ |d_i|
        null = (2 * np.arange(len(counts)) - x.sum()) / lattice / len(d)
        extreme = np.abs(null) >= abs(d.mean()) - 1e-12
        return PermutationTest(float(counts[extreme].sum() / 2 ** len(d)), 2 ** len(d), True)
    if 2 ** len(d) <= exact_splits:
        signs = 1 - 2 * ((np.arange(2 ** len(d))[:, None] >> np.arange(len(d))) & 1)
        exact = True
    else:
        signs = np.where(np.random.default_rng(seed).random((draws, len(d))) < 0.5, -1, 1)
        exact = False
    null = (signs * d).mean(axis=1)
    return PermutationTest(_p_value(d.mean(), null, exact), len(null), exact)


def fewest_pairs_for_direction(family_size: int = 1, alpha: float = 0.05) -> int:
    """The fewest paired differences (blocks) with which a two-sided sign-flip test can read a
    direction at ``alpha`` after Holm's correction over ``family_size`` tests: n blocks give no
    p below 2 / 2^n (:func:`sign_flip_test`), and Holm multiplies a family's smallest p by its
    size m, so n is the least with m · 2 / 2^n < alpha (one test: 6; seven: 9). Fewer blocks
    read "cannot tell" whatever their differences."""
    if family_size < 1 or not 0 < alpha < 1:
        raise ValueError(
            f"family_size must be >= 1 and alpha in (0, 1); got {family_size}, {alpha}"
        )
    n = 1
    while family_size * 2.0 / 2**n >= alpha:
        n += 1
    return n


def holm(p_values: Sequence[float]) -> np.ndarray:
    r"""Holm's step-down adjusted p-values of a family of m tests (NaN entries are left out
    of the family and stay NaN): sorted ascending, p̃_(i) = max_{j ≤ i} min(1, (m − j + 1)
    p_(j)). Rejecting where p̃ < 0.05 keeps the chance of any false reading in the family
    at 5%."""
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    valid = np.flatnonzero(np.isfinite(p))
    order = valid[np.argsort(p[valid], kind="stable")]
    m = len(order)
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


PLANNING_HALF_WIDTH = 0.02
"""The half-width (EM, a fraction: ±2 points) the seed and block projections plan for."""


def blocks_for_half_width(
    sd: float, half_width: float = PLANNING_HALF_WIDTH, confidence: float = 0.95
) -> int | None:
    r"""The fewest blocks n whose paired t interval over block differences of standard deviation
    ``sd`` is no wider than ``half_width`` (None when ``sd`` is not finite):

    .. math::  n = \min\{n \ge 2 : t_{(1+c)/2,\,n-1}\; sd / \sqrt{n} \le h\}

    A planning guide: ``sd`` is itself estimated from the blocks so far, and the blocked interval
    adds a small question term on top."""
    if not np.isfinite(sd):
        return None
    q = (1 + confidence) / 2
    n = max(2, int(np.ceil((scipy_stats.norm.ppf(q) * sd / half_width) ** 2)))  # t > z: from below
    while scipy_stats.t.ppf(q, n - 1) * sd / np.sqrt(n) > half_width:
        n += 1
    return n


def seed_mean_ci(values: Sequence[float], confidence: float = 0.95) -> Interval:
    r"""Mean over runs (seeds) with Student's t interval, for a quantity that has one value per
    run and no questions to resample (a training-curve statistic such as the entropy over the
    last steps). With one run the interval is undefined (NaN bounds): one seed is no evidence.

    .. math::  \bar x \pm t_{(1+c)/2,\,n-1}\; s / \sqrt{n}
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        raise ValueError("seed_mean_ci: no finite values")
    mean = float(x.mean())
    if len(x) < 2:
        return Interval(mean, float("nan"), float("nan"), 1, 0, 0, confidence)
    half = float(
        scipy_stats.t.ppf((1 + confidence) / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    )
    return Interval(mean, mean - half, mean + half, len(x), 0, 0, confidence)


def seed_difference_ci(
    values_a: Sequence[float], values_b: Sequence[float], confidence: float = 0.95
) -> Interval:
    r"""mean(A) − mean(B) over two sets of independent runs, with Welch's t interval (unequal
    variances, Welch–Satterthwaite degrees of freedom): the unpaired counterpart of
    :func:`seed_mean_ci` for per-run quantities. NaN bounds unless both sides have 2+ runs.

    .. math::  \bar a - \bar b \pm t_{(1+c)/2,\,\nu}\sqrt{s_a^2/n_a + s_b^2/n_b}
    """
    a = np.asarray(values_a, dtype=float)
    b = np.asarray(values_b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) == 0 or len(b) == 0:
        raise ValueError("seed_difference_ci: a side has no finite values")
    diff = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return Interval(diff, float("nan"), float("nan"), len(a), len(b), 0, confidence)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = float(np.sqrt(va + vb))
    if se == 0:
        return Interval(diff, diff, diff, len(a), len(b), 0, confidence)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(scipy_stats.t.ppf((1 + confidence) / 2, dof) * se)
    return Interval(diff, diff - half, diff + half, len(a), len(b), 0, confidence)


# --------------------------------------------------------------- families and what is ruled out
def max_t_sign_flip(
    differences: np.ndarray,
    *,
    exact_splits: int = EXACT_SPLITS,
    draws: int = PERMUTATION_DRAWS,
    seed: int = PERMUTATION_SEED,
) -> np.ndarray:
    r"""Family-adjusted p of m comparisons paired over the same n blocks (``differences``: (m, n),
    row j comparison j's block differences): the joint sign-flip test of the largest |t|
    (Westfall & Young's single step). One sign pattern flips a block's differences in every
    comparison at once, so the null keeps their correlation (the greedy and the sampled metric
    of one pair move together), and

    .. math::  \tilde p_j = \Pr_s\big[\max_k |t_k(s)| \ge |t_j|\big], \qquad
               t_k(s) = \frac{\bar{(s d_k)}}{\mathrm{sd}(s d_k) / \sqrt n}

    exact over the 2^n patterns when there are at most ``exact_splits``, else ``draws`` random
    ones with a fixed seed. It holds the chance of any false reading in the family at the
    level, like Holm, and is less conservative when the comparisons correlate.

    **Equal budget.** Every comparison is held to one critical |t|, so the family's error
    budget is shared equally among them only when their t statistics share one null
    distribution: the same n blocks in every comparison (the same ν = n − 1), none missing. A
    comparison on fewer blocks would have heavier tails and take more than its share. So every
    row must hold one finite difference per block of the same blocks: rows of unequal length or
    a missing (NaN) block are refused (ValueError); a family over different blocks is
    corrected with :func:`holm` instead. A comparison whose differences are all 0 has t = 0
    and p = 1."""
    try:
        d = np.atleast_2d(np.asarray(differences, dtype=float))
    except ValueError as err:  # ragged rows: comparisons over different numbers of blocks
        raise ValueError(
            "max_t_sign_flip: every comparison must pair the same n blocks (equal budget); "
            "the rows differ in length: use holm for such a family"
        ) from err
    if d.ndim != 2:
        raise ValueError(f"max_t_sign_flip: differences must be (m, n), not {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError(
            "max_t_sign_flip: a comparison lacks a block (NaN or inf): the joint test needs "
            "every comparison on the same complete blocks (equal budget); use holm instead"
        )
    m, n = d.shape
    if n < 2:
        return np.full(m, np.nan)
    if 2**n <= exact_splits:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # (S, n)
    else:
        signs = np.where(np.random.default_rng(seed).random((draws, n)) < 0.5, -1, 1)
    means = signs @ d.T / n  # (S, m): a flip changes the mean, never the sum of squares
    squares = (d**2).sum(axis=1)  # (m,)
    variances = np.maximum(squares - n * means**2, 0) / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_null = np.abs(means) / np.sqrt(variances / n)
        t_observed = np.abs(d.mean(axis=1)) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    t_observed = np.nan_to_num(t_observed, nan=0.0)  # all differences 0: t = 0, p = 1
    null_max = np.nan_to_num(t_null, nan=0.0, posinf=np.inf).max(axis=1)  # (S,)
    return (null_max[:, None] >= t_observed[None, :] - 1e-9).mean(axis=0)


POWER = 0.8
"""The power at which a minimum detectable effect is stated."""


def minimum_detectable_effect(
    standard_error: float, dof: float, alpha: float = 0.05, power: float = POWER
) -> float:
    r"""The smallest true difference a two-sided t test at ``alpha`` detects with ``power``
    (the usual planning approximation; blocks: SE = sd / √n, ν = n − 1):

    .. math::  \mathrm{MDE} = (t_{1-\alpha/2,\,\nu} + t_{\mathrm{power},\,\nu})\;\mathrm{SE}

    NaN when the standard error or the degrees of freedom are not finite and positive."""
    if not (np.isfinite(standard_error) and np.isfinite(dof) and standard_error > 0 and dof > 0):
        return float("nan")
    return float(
        (scipy_stats.t.ppf(1 - alpha / 2, dof) + scipy_stats.t.ppf(power, dof)) * standard_error
    )


def power_against(effect: float, standard_error: float, dof: float, alpha: float = 0.05) -> float:
    r"""The chance a two-sided t test at ``alpha`` reads a true difference ``effect`` (same unit
    as ``standard_error``): T is noncentral t with ν = ``dof`` and δ = effect / SE,

    .. math::  \Pr[|T| > t_{1-\alpha/2,\,\nu}]"""
    if not (np.isfinite(standard_error) and np.isfinite(dof) and standard_error > 0 and dof > 0):
        return float("nan")
    critical = scipy_stats.t.ppf(1 - alpha / 2, dof)
    shift = effect / standard_error
    return float(
        scipy_stats.nct.sf(critical, dof, shift) + scipy_stats.nct.cdf(-critical, dof, shift)
    )


def excluded_beyond(low: float, high: float, direction: int) -> float:
    """The bound a two-sided interval [low, high] rules out in the claimed ``direction``: for a
    claimed gain (direction > 0) every gain above ``high`` is excluded, for a claimed drop
    (direction < 0) every drop below ``low``; NaN for a description (direction 0)."""
    if direction == 0 or not (np.isfinite(low) and np.isfinite(high)):
        return float("nan")
    return float(high if direction > 0 else low)
