r"""The paper's claims, one by one, as the toy's records measure them.

The paper makes a handful of claims beyond its tables' cells (docs/method.md §10): RL beats the
ReAct warm start; AT2PO beats GRPO (the toy study's headline pair, the comparison its seeds are
sized for) and the strongest baseline; its gain is larger on multi-hop than on
single-hop questions; each ablation step adds to the last; the node value is a better advantage
than the difference to the parent, the entropy-weighted value a better one than the plain
child mean, and AT2PO's cell the best of Table 3's grid; token-level GRPO's entropy collapses while AT2PO's stays stable (Figure 3);
multi-hop samples take 3.71 turns and 43.5% of single-hop samples make one call (Figure 4).

:func:`claims_table` turns each into one number with its 95% interval, the seeds and questions
it rests on, and a reading of the interval against the paper's direction:

- ``agrees``: the interval lies on the paper's side of 0;
- ``opposite``: it lies on the other side;
- ``cannot tell``: it contains 0, or it excludes 0 but the permutation test over seed (or block)
  labels does not agree at 0.05 (the interval and the test must both say so);
- ``above 0`` / ``below 0``: a comparison the paper does not make (``published`` is
  "not in the paper", the variant rows) whose interval excludes 0 and whose test agrees:
  there is no paper's side to agree with;
- ``not run yet``: no records;
- ``one seed``: a trained side rests on a single seed (or there is no interval), so its interval
  covers the questions but not the seeds, whose spread is the larger part here
  (``table1_seeds``); the number is shown and not read. The ReAct warm start is one fixed
  model, so its single "seed" is the whole of it.

EM differences are paired over questions and unpaired over seeds
(:func:`at2po_lib.evaluation.stats.difference_ci`); the multi-hop-vs-single-hop contrast is a difference of
differences (:func:`at2po_lib.evaluation.stats.gain_contrast_ci`); entropy changes are per-run values with
Student / Welch intervals over seeds (:func:`at2po_lib.reporting.curves.start_end_table`).
Every directional reading also needs a two-sided permutation test at 0.05
(:func:`at2po_lib.evaluation.stats.difference_test`: over seed labels, exact over every split where the
scores allow, else 20,000 fixed-seed random splits; a fixed side or paired runs flip signs).
Table 3's cells are one family: its two claims read the Holm-corrected p over every Table 3
cell compared with AT2PO's (:func:`at2po_lib.reporting.table3.cell_tests`).

**Blocks**: where the study's blocks hold a pair (``at2po study --block-set``,
:mod:`.block_pairs`), the claim is the difference paired within blocks, and the committed
runs' version of it stays beside it as ``<key>_earlier``, named by its revisions (the earlier
record). Every row says what it rests on (``rests_on``: revisions and machine builds, or
blocks).

Every rival is fixed before the data: "the strongest baseline" is AEPO, the
paper's strongest; Table 3's claims compare AT2PO's cell with the child mean (node value) and
with its own difference to the parent. (Picking the best rival on the scored questions made
"opposite" readings 12-28% of the time when nothing differs.) Table 2's step 4 and Table 3's
AT2PO cell are the AT2PO preset with the expansion settings those tables' other runs recorded
(:func:`~at2po_lib.reporting.labels.profile_at2po`: ``at2po_exact`` in ``tiny``'s committed
runs; the study's ablation blocks pair the authors' ``at2po``); the headline rows read the
authors' ``at2po``. The intervals are per claim: with ~20 claims read together,
about one may exclude 0 by chance.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..evaluation import stats
from ..method.loss import REFERENCE_CLIP
from ..method.presets import TABLE1_METHODS, TABLE2_METHODS, credit_method
from ..evaluation.paper_reference import published_table1, published_table2
from ..study.block_records import ABLATION_SET, HEADLINE_SET
from .block_pairs import BlockedDifference, blocked_difference, crosses_revisions, rests_on
from .figure4 import PAPER_MULTIHOP_MEAN_TURNS, PAPER_SINGLEHOP_ONE_TURN_SHARE, turn_summary
from .output import markdown_table
from .labels import TABLE3_CELLS, groups_of, method_label, profile_at2po, rows_with_outcomes
from .table3 import cell_tests

RL_BASELINES = tuple(m for m in TABLE1_METHODS if m not in ("react", "at2po"))
"""Table 1's RL baselines (AT2PO and the ReAct warm start excluded)."""

STRONGEST_BASELINE = "aepo"
"""The paper's strongest RL baseline (its Table 1), the rival of "AT2PO beats the strongest
baseline", fixed before the data."""

NOT_IN_PAPER = "not in the paper"
"""``published`` of a comparison the paper does not make (read ``above 0`` / ``below 0``)."""

READINGS = (
    "agrees",
    "opposite",
    "above 0",
    "below 0",
    "cannot tell",
    "one seed",
    "not run yet",
    "measured",
)
ALPHA = 0.05
"""The permutation test's level: a directional reading needs p (Holm-corrected in a family)
below it."""
EARLIER = "_earlier"
"""Key suffix of a claim's committed-runs version when blocks measure it too."""

SHORT_NAMES = {
    "rl_over_react": "RL over ReAct",
    "at2po_over_grpo": "AT2PO over GRPO",
    "at2po_over_grpo_sampled_em": "AT2PO over GRPO (sampled metric, secondary)",
    "at2po_over_strongest": "AT2PO over AEPO",
    "at2po_over_strongest_sampled_em": "AT2PO over AEPO (sampled metric, secondary)",
    "at2po_over_grpo_budget": "AT2PO over GRPO with as many chains",
    "exact_variant_over_grpo": "the exact-entropy variant over GRPO",
    "authors_over_exact_variant": "the authors' AT2PO over the exact-entropy variant",
    "turn_ratio_clips_less": "turn-level ratios clipping fewer tokens",
    "turn_ratio_clips_less_at_reference": "turn-level ratios clipping fewer tokens at ε = 0.2",
    "multihop_gain_larger": "a larger multi-hop than single-hop gain",
    "ablation_step2": "ablation step 2 (turn-level loss)",
    "ablation_step3": "ablation step 3 (entropy-guided expansion)",
    "ablation_step4": "ablation step 4 (turn-wise credit)",
    "node_value_over_diff_parent": "node value over difference to parent",
    "entropy_weights_over_child_mean": "entropy weights over the child mean",
    "grpo_entropy_falls": "GRPO's entropy change",
    "at2po_entropy_stabler": "AT2PO's steadier entropy",
}
"""The claims in a few words, for :func:`claims_summary`'s sentence."""


@dataclass(frozen=True)
class Claim:
    """One claim measured: ``estimate`` and its bounds in the claim's ``unit``."""

    key: str
    claim: str
    published: str
    estimate: float = float("nan")
    low: float = float("nan")
    high: float = float("nan")
    unit: str = "EM points"
    seeds: str = "–"
    questions: int | None = None
    direction: int = 1  # +1: the paper says the number is > 0; 0: a description
    note: str = ""
    one_seed: bool = False  # a trained side has one seed: the interval misses seed spread
    test: stats.PermutationTest | None = None
    """The permutation test over seed (or block) labels of the same difference."""
    p_family: float = float("nan")
    """Holm-corrected p over the claim's family (Table 3's cells); NaN: no family."""
    family: str = ""
    rests: str = ""
    """What the number rests on: revisions and machine builds of each side, or blocks."""
    test_published: stats.PermutationTest | None = None
    """The sign-flip test of the block differences against the paper's number instead of 0
    (blocked claims with a published number): what a reading against the paper needs."""
    differences: tuple[float, ...] = ()
    """A − B in each block (the claim's unit), where blocks pair it: what a joint family test
    over the same blocks reads."""
    blocks: tuple[int, ...] = ()
    standard_error: float = float("nan")
    """The difference's standard error over its runs or blocks (the claim's unit) and the
    degrees of freedom beside it: what :attr:`detectable` is computed from."""
    dof: float = float("nan")

    @property
    def detectable(self) -> float:
        """The smallest difference its runs or blocks detect at 80% power
        (:func:`~at2po_lib.evaluation.stats.minimum_detectable_effect`); NaN without one."""
        return stats.minimum_detectable_effect(self.standard_error, self.dof, ALPHA)

    @property
    def published_value(self) -> float:
        """The paper's number as a float (NaN when the paper gives none)."""
        try:
            return float(self.published.replace("%", ""))
        except ValueError:
            return float("nan")

    @property
    def power_at_published(self) -> float:
        """The chance its runs or blocks read the paper's number, were it the truth."""
        return stats.power_against(self.published_value, self.standard_error, self.dof, ALPHA)

    @property
    def ruled_out(self) -> float:
        """The bound the interval excludes in the paper's direction
        (:func:`~at2po_lib.evaluation.stats.excluded_beyond`)."""
        return stats.excluded_beyond(self.low, self.high, self.direction)

    @property
    def excludes_published(self) -> bool:
        """Does the interval leave the paper's number out?"""
        value = self.published_value
        return bool(np.isfinite(value) and not self.low <= value <= self.high)

    @property
    def underpowered(self) -> bool:
        """ "Cannot tell" where the paper's number lies inside the interval and below what the
        runs or blocks detect at 80% power: that reading says nothing about the paper's
        effect. (An interval that leaves the paper's number out does say something of it.)"""
        published = abs(self.published_value)
        return bool(
            self.reading == "cannot tell"
            and not self.excludes_published
            and published < self.detectable  # NaN compares False
        )

    def resolution(self) -> str:
        """What a "cannot tell" still says: ``rules out a gain above +0.5; detects ≥ 3.5 at
        80% power (power 0.62 at the paper's +2.8)``, and ``underpowered`` first where the
        paper's number lies below what it detects; "" for any other reading."""
        if self.reading != "cannot tell" or not np.isfinite(self.ruled_out):
            return ""
        side = "gain above" if self.direction > 0 else "drop below"
        digits = _digits(self)
        parts = [f"rules out a {side} {self.ruled_out:+.{digits}f}"]
        beyond = self.direction * (self.published_value - self.ruled_out)
        if beyond > 0:  # NaN compares False
            parts[0] += f", the paper's {self.published} among them"
        if np.isfinite(self.detectable):
            detects = f"detects ≥ {self.detectable:.{digits}f} at 80% power"
            if np.isfinite(self.published_value):
                detects += f" (power {self.power_at_published:.2f} at the paper's {self.published})"
            parts.append(f"underpowered: {detects}" if self.underpowered else detects)
        return "; ".join(parts)

    @property
    def p(self) -> float:
        """The p the reading uses: the family's corrected one, else the claim's own."""
        if np.isfinite(self.p_family):
            return self.p_family
        return self.test.p if self.test is not None else float("nan")

    @property
    def excludes_zero(self) -> bool:
        return bool(self.low > 0 or self.high < 0)

    @property
    def reading(self) -> str:
        if not np.isfinite(self.estimate):
            return "not run yet"
        if self.direction == 0:
            return "measured"
        if self.one_seed or not (np.isfinite(self.low) and np.isfinite(self.high)):
            return "one seed"
        if not self.excludes_zero or not self.p < ALPHA:
            return "cannot tell"
        if self.published == NOT_IN_PAPER:
            return "above 0" if self.low > 0 else "below 0"
        return "agrees" if (self.low > 0) == (self.direction > 0) else "opposite"

    @property
    def held_back(self) -> str:
        """Why an interval that excludes 0 still reads "cannot tell" ("" when it does not)."""
        if self.reading != "cannot tell" or not self.excludes_zero:
            return ""
        if self.test is None or not np.isfinite(self.test.p):
            return "the interval excludes 0, but there is no permutation test"
        if self.test.p < ALPHA:  # only the family's correction holds it back
            return (
                "the interval excludes 0 and the permutation test alone agrees, but not "
                f"corrected within its family: {self.p_text()}"
            )
        return f"the interval excludes 0, but the permutation test does not agree: {self.p_text()}"

    def p_text(self) -> str:
        """``p = 0.124, exact over 2,024 splits; Holm over the Table 3 cells (7): 0.865``, or
        ``–``."""
        if self.test is None or not np.isfinite(self.test.p):
            return "–"
        text = self.test.describe()
        if np.isfinite(self.p_family):
            text += f"; {self.family}: {self.p_family:.3f}"
        return text

    def as_row(self) -> dict:
        return {
            "key": self.key,
            "claim": self.claim,
            "short": SHORT_NAMES.get(self.key.removesuffix(EARLIER), self.claim)
            + (" (the earlier record)" if self.key.endswith(EARLIER) else ""),
            "published": self.published,
            "estimate": self.estimate,
            "ci_low": self.low,
            "ci_high": self.high,
            "unit": self.unit,
            "seeds": self.seeds,
            "n_questions": self.questions,
            "reading": self.reading,
            "held_back": self.held_back,
            "note": "; ".join(filter(None, (self.note, self.held_back, self.resolution()))),
            "p_permutation": self.test.p if self.test is not None else np.nan,
            "p_family": self.p_family,
            "family": self.family,
            "p_corrected": self.p,
            "ruled_out": self.ruled_out,
            "detectable_80": self.detectable,
            "power_at_published": self.power_at_published,
            "underpowered": self.underpowered,
            "p_text": self.p_text(),
            "rests_on": self.rests,
            "p_vs_published": (
                self.test_published.p if self.test_published is not None else np.nan
            ),
        }


@dataclass(frozen=True)
class _Records:
    """What the claims are read from: the committed runs' outcomes (and each run's revision
    and build), the study's blocks, and whether blocks of several revisions may be paired."""

    outcomes: pd.DataFrame
    groups: dict
    provenance: pd.DataFrame | None = None
    blocks: pd.DataFrame | None = None
    allow_revisions: bool = False


def published_avg(method: str, group: str, backbone: str = "Qwen3-4B") -> float:
    """The paper's Table 1 average of ``method`` over ``group`` (EM × 100; NaN when the paper
    has no such cell)."""
    table = published_table1()
    sel = table[
        (table["backbone"] == backbone)
        & (table["method"] == method_label(method))
        & (table["dataset"] == f"{group}_avg")
    ]
    return float(sel["em"].iloc[0]) if len(sel) else float("nan")


def _seeds(interval: stats.Interval) -> str:
    return (
        f"{interval.n_seeds_a} vs {interval.n_seeds_b}"
        if interval.n_seeds_b
        else str(interval.n_seeds_a)
    )


def _em_claim(
    key: str,
    claim: str,
    published: str,
    interval: stats.Interval | None,
    note: str = "",
    fixed_b: bool = False,
    test: stats.PermutationTest | None = None,
    rests: str = "",
) -> Claim:
    """``fixed_b``: side b is the untrained warm start, whose one seed is not a sample."""
    if interval is None:
        return Claim(key, claim, published, note=note)
    sides = (
        (interval.n_seeds_a,)
        if fixed_b or not interval.n_seeds_b
        else (interval.n_seeds_a, interval.n_seeds_b)
    )
    return Claim(
        key,
        claim,
        published,
        100 * interval.estimate,
        100 * interval.low,
        100 * interval.high,
        seeds=_seeds(interval),
        questions=interval.n_questions,
        note=note,
        one_seed=min(sides) < 2,
        test=test,
        rests=rests,
    )


def _difference(outcomes, a: str, b: str, members, metric: str = "em") -> stats.Interval | None:
    if not (members and rows_with_outcomes(outcomes, a) and rows_with_outcomes(outcomes, b)):
        return None
    return stats.difference_ci(outcomes, a, b, members, metric=metric)


def _compare(
    records: _Records,
    key: str,
    claim: str,
    published: str,
    a: str,
    b: str,
    *,
    metric: str = "em",
    note: str = "",
    fixed_b: bool = False,
    block_set: str | None = None,
    block_a: str | None = None,
) -> list[Claim]:
    """A − B on the multi-hop average: from the committed runs (interval, permutation test,
    their revisions and builds), and, where ``block_set``'s blocks hold the pair (``block_a``
    for A there, when the committed record calls it otherwise), paired within blocks; then
    the blocked claim takes ``key`` and the committed one ``key + EARLIER``."""
    members = records.groups.get("multihop")
    outcomes = _with_metric(records.outcomes, metric)
    interval = _difference(outcomes, a, b, members, metric)
    test = (
        stats.difference_test(outcomes, a, b, members, metric, fixed_b=fixed_b)
        if interval is not None
        else None
    )
    rests = rests_on(records.provenance, (a,) if fixed_b else (a, b))
    earlier = _em_claim(key, claim, published, interval, note, fixed_b, test, rests)
    if interval is not None:
        se, dof = _seed_error(outcomes, a, b, members, metric, fixed_b)
        earlier = replace(earlier, standard_error=se, dof=dof)
    blocked = (
        blocked_difference(
            records.blocks,
            block_set,
            block_a or a,
            b,
            members,
            metric,
            allow_revisions=records.allow_revisions,
        )
        if block_set and records.blocks is not None and len(records.blocks)
        else None
    )
    if blocked is None:
        if crosses_revisions(records.provenance, (a, b)) and interval is not None:
            earlier = replace(earlier, note="; ".join(filter(None, (note, "crosses revisions"))))
        return [earlier]
    paired = _em_claim(
        key, claim, published, blocked.interval, note, test=blocked.test, rests=blocked.rests_on()
    )
    differences = 100 * np.asarray(blocked.differences)
    paired = replace(
        paired,
        seeds=f"{len(blocked.blocks)} blocks",
        test_published=_against_published(blocked, published),
        differences=tuple(differences.tolist()),
        blocks=blocked.blocks,
        standard_error=float(differences.std(ddof=1) / np.sqrt(len(differences))),
        dof=len(differences) - 1.0,
    )
    if interval is None:  # no committed runs of the pair: no earlier record to keep
        return [paired]
    earlier = replace(earlier, key=key + EARLIER, claim=f"{claim}; the earlier record")
    return [paired, earlier]


def _seed_error(
    outcomes, a: str, b: str, members, metric: str, fixed_b: bool
) -> tuple[float, float]:
    """(standard error, Welch degrees of freedom) of A − B over the runs' scores (EM points): the
    seed terms of the crossed interval, which dominate it here; one side only when B is fixed."""
    run_a, run_b = stats.run_scores(outcomes, a, b, members, metric)
    sides = (
        [100 * run_a.to_numpy()] if fixed_b else [100 * run_a.to_numpy(), 100 * run_b.to_numpy()]
    )
    if min(len(x) for x in sides) < 2:
        return float("nan"), float("nan")
    terms = np.array([x.var(ddof=1) / len(x) for x in sides])
    dof = terms.sum() ** 2 / sum(t**2 / (len(x) - 1) for t, x in zip(terms, sides))
    return float(np.sqrt(terms.sum())), float(dof)


def _against_published(blocked: BlockedDifference, published: str) -> stats.PermutationTest | None:
    """The block differences tested against the paper's number (EM points), None when the
    paper gives none."""
    try:
        value = float(published)
    except ValueError:
        return None
    return blocked.against(value / 100) if np.isfinite(value) else None


def _rl_over_react(records: _Records) -> list[Claim]:
    outcomes, groups = records.outcomes, records.groups
    trained = [m for m in TABLE1_METHODS if m != "react" and rows_with_outcomes(outcomes, m)]
    gains = {m: _difference(outcomes, m, "react", groups.get("multihop")) for m in trained}
    gains = {m: g for m, g in gains.items() if g is not None}
    published = min(
        published_avg(m, "multihop")
        for m in (*RL_BASELINES, "at2po")
        if np.isfinite(published_avg(m, "multihop"))
    ) - published_avg("react", "multihop")
    claim = "RL beats the ReAct warm start (multi-hop; the smallest gain of any RL method)"
    if not gains:
        return [_em_claim("rl_over_react", claim, f"{published:+.1f}", None)]
    weakest = min(gains, key=lambda m: gains[m].estimate)
    return _compare(
        records,
        "rl_over_react",
        claim,
        f"{published:+.1f}",
        weakest,
        "react",
        note=f"weakest: {method_label(weakest)}, of {len(gains)} RL methods",
        fixed_b=True,
    )


def _with_metric(outcomes, metric: str):
    """The outcome rows that carry ``metric``: every row for greedy EM; for the sampled metric,
    the runs that drew its k samples (a run without them is left out, never read as greedy)."""
    if metric == "em":
        return outcomes
    return outcomes[outcomes[metric].notna()] if metric in outcomes else outcomes.iloc[:0]


def _metric_names(key: str, claim: str, metric: str) -> tuple[str, str]:
    """The claim's key and wording for ``metric`` (``claim`` ends before its closing bracket)."""
    if metric == "em":
        return key, claim + ")"
    return f"{key}_{metric}", claim + ", sampled metric: secondary)"


def _over_grpo(records: _Records, metric: str = "em") -> list[Claim]:
    """AT2PO minus GRPO on the multi-hop average: the study's headline pair (in the headline
    blocks where they exist)."""
    key, claim = _metric_names(
        "at2po_over_grpo", "AT2PO beats GRPO, the study's headline pair (multi-hop", metric
    )
    published = (
        f"{published_avg('at2po', 'multihop') - published_avg('grpo', 'multihop'):+.1f}"
        if metric == "em"
        else "–"
    )  # the paper reports greedy EM only
    return _compare(
        records, key, claim, published, "at2po", "grpo", metric=metric, block_set=HEADLINE_SET
    )


def _strongest_baseline(records: _Records, metric: str = "em") -> list[Claim]:
    """AT2PO minus AEPO, the paper's strongest baseline (fixed before the data), on the
    multi-hop average in ``metric`` (greedy EM, or the mean EM of k samples)."""
    published = (
        f"{published_avg('at2po', 'multihop') - published_avg(STRONGEST_BASELINE, 'multihop'):+.1f}"
        if metric == "em"
        else "–"
    )  # the paper reports greedy EM only
    key, claim = _metric_names(
        "at2po_over_strongest",
        "AT2PO beats the paper's strongest baseline, AEPO (multi-hop",
        metric,
    )
    return _compare(records, key, claim, published, "at2po", STRONGEST_BASELINE, metric=metric)


def _variant_claims(records: _Records) -> list[Claim]:
    """The comparisons the variants exist for (docs/method.md §8, "Variants")."""
    return [
        *_compare(
            records,
            "at2po_over_grpo_budget",
            "The tree beats sampling as many chains: AT2PO minus GRPO with M + L·K chains "
            "(multi-hop)",
            NOT_IN_PAPER,
            "at2po",
            "grpo_tree_budget",
            block_set=HEADLINE_SET,
        ),
        *_compare(
            records,
            "exact_variant_over_grpo",
            "AT2PO (exact entropy, α = 0.001) beats GRPO (multi-hop)",
            NOT_IN_PAPER,
            "at2po_exact",
            "grpo",
        ),
        *_compare(
            records,
            "authors_over_exact_variant",
            "The authors' AT2PO minus the exact-entropy variant (multi-hop)",
            NOT_IN_PAPER,
            "at2po",
            "at2po_exact",
        ),
    ]


def _multihop_gain_larger(records: _Records) -> Claim:
    outcomes, groups = records.outcomes, records.groups
    pub = (published_avg("at2po", "multihop") - published_avg("grpo", "multihop")) - (
        published_avg("at2po", "singlehop") - published_avg("grpo", "singlehop")
    )
    claim = "AT2PO's gain over GRPO is larger on multi-hop than on single-hop questions"
    if not (
        groups.get("multihop")
        and groups.get("singlehop")
        and rows_with_outcomes(outcomes, "at2po")
        and rows_with_outcomes(outcomes, "grpo")
    ):
        return _em_claim("multihop_gain_larger", claim, f"{pub:+.1f}", None)
    interval = stats.gain_contrast_ci(
        outcomes,
        "at2po",
        "grpo",
        groups["multihop"],
        groups["singlehop"],
    )
    # each run's contrast (multi-hop minus single-hop score), permuted over seed labels
    multi = stats.run_scores(outcomes, "at2po", "grpo", groups["multihop"])
    single = stats.run_scores(outcomes, "at2po", "grpo", groups["singlehop"])
    test = stats.permutation_test(
        (multi[0] - single[0]).to_numpy(), (multi[1] - single[1]).to_numpy()
    )
    return _em_claim(
        "multihop_gain_larger",
        claim,
        f"{pub:+.1f}",
        interval,
        note="multi-hop gain minus single-hop gain",
        test=test,
        rests=rests_on(records.provenance, ("at2po", "grpo")),
    )


def _ablation_steps(records: _Records, at2po: str = "at2po") -> list[Claim]:
    """Each step minus the one before; step 4 reads ``at2po`` (the profile's AT2PO, whose
    expansion settings steps 1-3 share; in the ablation blocks, the authors' AT2PO)."""
    published = published_table2().set_index("method")["multihop_avg"]
    out = []
    for number, (before, after) in enumerate(zip(TABLE2_METHODS, TABLE2_METHODS[1:]), start=2):
        runs_after = at2po if after == "at2po" else after
        configuration = (
            published_table2().set_index("method").loc[after, "configuration"]
            if after in published.index
            else after
        )
        pub = (
            f"{published[after] - published[before]:+.2f}"
            if after in published.index and before in published.index
            else "–"
        )
        out += _compare(
            records,
            f"ablation_step{number}",
            f"Table 2, step {number}: {configuration.removeprefix('+ ')} adds "
            "to the step before (multi-hop)",
            pub,
            runs_after,
            before,
            block_set=ABLATION_SET,
            block_a=after,
        )
    return out


TABLE3_FAMILY = "Holm over the Table 3 cells"

FAMILIES = {
    "the headline family": (
        "at2po_over_grpo",
        "at2po_over_grpo_sampled_em",
        "at2po_over_grpo_budget",
    ),
    "the strongest-baseline family": ("at2po_over_strongest", "at2po_over_strongest_sampled_em"),
    "Table 2's steps": ("ablation_step2", "ablation_step3", "ablation_step4"),
}
"""The families declared before reading, each read at its corrected level: the
headline pair on the greedy metric, on the sampled metric (secondary) and against GRPO at
AT2PO's budget; AT2PO against AEPO on both metrics; Table 2's three steps. Table 3's cells are
a family of their own (:data:`TABLE3_FAMILY`). Where a family's claims pair the same blocks, the
joint sign-flip test of the largest |t| corrects them
(:func:`~at2po_lib.evaluation.stats.max_t_sign_flip`: it keeps their correlation); elsewhere
(the earlier record's seeds) Holm's step-down correction (:func:`~at2po_lib.evaluation.stats.holm`)."""


def _apply_families(claims: list[Claim]) -> list[Claim]:
    """Each declared family's claims, the current ones and the earlier record's apart, with the
    family's corrected p (:data:`FAMILIES`)."""
    out = list(claims)
    for name, keys in FAMILIES.items():
        for suffix in ("", EARLIER):
            members = [
                i
                for i, c in enumerate(out)
                if c.key in {k + suffix for k in keys} and c.test is not None
            ]
            if len(members) < 2:
                continue
            family = [out[i] for i in members]
            if all(c.blocks and c.blocks == family[0].blocks for c in family):
                corrected = stats.max_t_sign_flip(np.array([c.differences for c in family]))
                label = f"joint sign-flip test of the largest t over {name} ({len(family)})"
            else:
                corrected = stats.holm([c.test.p for c in family])
                label = f"Holm over {name} ({len(family)})"
            for i, p in zip(members, corrected):
                out[i] = replace(out[i], p_family=float(p), family=label)
    return out


def _credit_claims(records: _Records, default: str = "at2po") -> list[Claim]:
    """AT2PO's cell (``default``: the profile's AT2PO, entropy_softmax / node_value) against
    the two rivals fixed in advance; each reads its Holm-corrected p over every Table 3 cell
    compared with AT2PO's (one family), in the committed runs and in the ablation blocks."""
    members = records.groups.get("multihop")
    specs = (
        (
            "node_value_over_diff_parent",
            "Table 3: the node value beats the difference to the parent as the advantage "
            "(entropy-weighted values, multi-hop)",
            credit_method("entropy_softmax", "diff_parent"),
        ),
        (
            "entropy_weights_over_child_mean",
            "Table 3: entropy-weighted children beat the plain child mean (node value, multi-hop)",
            credit_method("child_mean", "node_value"),
        ),
    )
    families = {
        "": cell_tests(records.outcomes, default, members) if members else {},
        "blocks": cell_tests(
            records.blocks, "at2po", members, blocked=True, allow_revisions=records.allow_revisions
        )
        if members and records.blocks is not None and len(records.blocks)
        else {},
    }
    out = []
    for key, claim, rival in specs:
        for c in _compare(
            records,
            key,
            claim,
            "best (no cells published)",
            default,
            rival,
            block_set=ABLATION_SET,
            block_a="at2po",
        ):
            family = families["blocks" if c.seeds.endswith("blocks") else ""]
            if rival in family:
                c = replace(
                    c, p_family=family[rival].p_holm, family=f"{TABLE3_FAMILY} ({len(family)})"
                )
            out.append(c)
    return out


def _entropy_claims(change: "pd.DataFrame | None") -> list[Claim]:
    """Figure 3 read as the paper means it, comparatively: GRPO's own change is described (every
    RL method loses entropy on the toy), and AT2PO's change is compared with GRPO's."""

    def row(method: str):
        if change is None or change.empty:
            return None
        sel = change[(change["method"] == method) & (change["metric"] == "entropy")]
        return sel.iloc[0] if len(sel) else None

    grpo, at2po = row("grpo"), row("at2po")
    out = []
    claim = "Figure 3: GRPO's policy entropy change (end − start of training)"
    if grpo is None:
        out.append(Claim("grpo_entropy_falls", claim, "falls early", unit="nats", direction=0))
    else:
        others = change[(change["metric"] == "entropy") & (change["method"] != "grpo")]
        span = (
            f"every method here changes by {others['change'].min():+.3f} to "
            f"{others['change'].max():+.3f} nats"
            if len(others)
            else ""
        )
        out.append(
            Claim(
                "grpo_entropy_falls",
                claim,
                "falls early",
                float(grpo["change"]),
                float(grpo["change_low"]),
                float(grpo["change_high"]),
                "nats",
                str(int(grpo["seeds"])),
                direction=0,
                note=span,
            )
        )
    claim = "Figure 3: AT2PO's entropy is more stable than GRPO's (its change minus GRPO's)"
    if at2po is None or grpo is None or not np.isfinite(at2po.get("vs_baseline", np.nan)):
        out.append(Claim("at2po_entropy_stabler", claim, "most stable", unit="nats"))
    else:
        test = (
            stats.PermutationTest(
                float(at2po["vs_baseline_p"]),
                int(at2po["vs_baseline_splits"]),
                bool(at2po["vs_baseline_exact"]),
            )
            if "vs_baseline_p" in at2po and np.isfinite(at2po["vs_baseline_p"])
            else None
        )
        out.append(
            Claim(
                "at2po_entropy_stabler",
                claim,
                "most stable",
                float(at2po["vs_baseline"]),
                float(at2po["vs_baseline_low"]),
                float(at2po["vs_baseline_high"]),
                "nats",
                f"{int(at2po['seeds'])} vs {int(grpo['seeds'])}",
                note="> 0: AT2PO lost less entropy than GRPO",
                one_seed=int(at2po["seeds"]) < 2,
                test=test,
            )
        )
    return out


def _clip_claims(
    clips: "pd.DataFrame | None", block_clips: "pd.DataFrame | None" = None
) -> list[Claim]:
    """The turn-level minus the token-level clipped share of model tokens on the same updates,
    one row per clip range (the reading depends on it): AT2PO's own (3e-3 / 4e-3)
    and GRPO's 0.2, each with Student's t over runs and a sign-flip test; the paper says a
    turn-level ratio clips far fewer tokens (< 0). At 0.2 the row reads AT2PO's own updates
    where its runs logged that range (``*_at_reference``), else the updates of the runs
    trained at 0.2 (GRPO at AT2PO's budget), named in the note."""
    claim = (
        "§3.3: a turn-level ratio clips fewer tokens than a token-level one (AT2PO's "
        "updates at its ε, turn − token share)"
    )
    runs = clips[clips["method"] == "at2po"] if clips is not None and len(clips) else None
    if runs is None or runs.empty:
        return [
            Claim("turn_ratio_clips_less", claim, "far fewer", unit="%", direction=-1),
            _clip_claim_at(clips, runs, block_clips),
        ]
    low, high = runs["epsilon"].iloc[0], runs["epsilon_high"].iloc[0]
    claim = claim.replace("at its ε", f"at its ε = {low:g} / {high:g}")
    return [
        _clip_gap(
            "turn_ratio_clips_less", claim, runs, "turn_level", "token_level", "AT2PO's own updates"
        ),
        _clip_claim_at(clips, runs, block_clips),
    ]


def _clip_claim_at(
    clips: "pd.DataFrame | None",
    at2po: "pd.DataFrame | None",
    block_clips: "pd.DataFrame | None" = None,
) -> Claim:
    """The same at ε = 0.2 (:data:`~at2po_lib.method.loss.REFERENCE_CLIP`): AT2PO's own
    updates where its runs logged that range beside their own (the study's block runs,
    ``block_clips``, or the committed ones), else the updates of the runs trained at 0.2."""
    claim = (
        f"§3.3 at ε = {REFERENCE_CLIP:g}: a turn-level ratio clips fewer tokens than a "
        "token-level one (turn − token share)"
    )
    logged = (
        block_clips[
            (block_clips["method"] == "at2po") & block_clips["turn_level_at_reference"].notna()
        ]
        if block_clips is not None and len(block_clips)
        else None
    )
    if logged is not None and len(logged) >= 2:
        return _clip_gap(
            "turn_ratio_clips_less_at_reference",
            claim,
            logged,
            "turn_level_at_reference",
            "token_level_at_reference",
            f"AT2PO's own updates in the study's {len(logged)} block runs, logged at 0.2 beside "
            "its own range",
        )
    if at2po is not None and len(at2po) and at2po["turn_level_at_reference"].notna().all():
        return _clip_gap(
            "turn_ratio_clips_less_at_reference",
            claim,
            at2po,
            "turn_level_at_reference",
            "token_level_at_reference",
            "AT2PO's own updates",
        )
    own = (
        clips[(clips["method"] == "grpo_tree_budget") & (clips["epsilon"] == REFERENCE_CLIP)]
        if clips is not None and len(clips)
        else None
    )
    if own is None or own.empty:
        return Claim(
            "turn_ratio_clips_less_at_reference", claim, "far fewer", unit="%", direction=-1
        )
    return _clip_gap(
        "turn_ratio_clips_less_at_reference",
        claim,
        own,
        "turn_level",
        "token_level",
        "the updates of GRPO at AT2PO's budget, trained at 0.2; "
        "AT2PO's runs did not log this range",
    )


def _clip_gap(
    key: str, claim: str, runs: "pd.DataFrame", turn: str, token: str, whose: str
) -> Claim:
    gaps = 100 * (runs[turn] - runs[token]).to_numpy()
    gap = stats.seed_mean_ci(gaps)
    return Claim(
        key,
        claim,
        "far fewer",
        gap.estimate,
        gap.low,
        gap.high,
        "%",
        str(len(runs)),
        direction=-1,
        one_seed=len(runs) < 2,
        test=stats.sign_flip_test(gaps),  # both levels on the same run's updates
        standard_error=float(gaps.std(ddof=1) / np.sqrt(len(gaps))) if len(gaps) > 1 else np.nan,
        dof=len(gaps) - 1.0,
        note=f"turn {_percent(runs[turn].mean())} vs token "
        f"{_percent(runs[token].mean())} of model tokens, {whose}",
    )


def _percent(share: float) -> str:
    """``7.0%``; a share below 1% with two decimals (``0.41%``)."""
    return f"{100 * share:.1f}%" if 100 * share >= 1 else f"{100 * share:.2f}%"


def _turn_claims(outcomes) -> list[Claim]:
    specs = (
        (
            "multihop_turns",
            "Figure 4: turns per multi-hop sample (AT2PO)",
            "multihop",
            "turns",
            f"{PAPER_MULTIHOP_MEAN_TURNS}",
            "turns",
            1.0,
        ),
        (
            "singlehop_one_call",
            "Figure 4: single-hop samples that make one call (AT2PO)",
            "singlehop",
            "one_search",
            f"{100 * PAPER_SINGLEHOP_ONE_TURN_SHARE:.1f}%",
            "%",
            100.0,
        ),
    )
    summary = turn_summary(outcomes, "at2po") if rows_with_outcomes(outcomes, "at2po") else None
    out = []
    for key, claim, group, metric, published, unit, scale in specs:
        sel = (
            summary[(summary["group"] == group) & (summary["metric"] == metric)]
            if summary is not None
            else []
        )
        if len(sel) == 0:
            out.append(Claim(key, claim, published, unit=unit, direction=0))
            continue
        r = sel.iloc[0]
        out.append(
            Claim(
                key,
                claim,
                published,
                scale * r["value"],
                scale * r["ci_low"],
                scale * r["ci_high"],
                unit,
                str(int(r["n_seeds"])),
                int(r["n_questions"]),
                direction=0,
                note="TinyWorld's plans fix the hop counts",
            )
        )
    return out


def claims_table(
    profile: str,
    outcomes: "pd.DataFrame",
    change: "pd.DataFrame | None" = None,
    clips: "pd.DataFrame | None" = None,
    provenance: "pd.DataFrame | None" = None,
    blocks: "pd.DataFrame | None" = None,
    allow_revisions: bool = False,
    block_clips: "pd.DataFrame | None" = None,
) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """``(tidy, display)``: one row per claim, in the order of the module doc. ``change`` is
    :func:`~at2po_lib.reporting.curves.start_end_table` with GRPO as the baseline; ``clips``
    :func:`at2po_lib.analysis.dissection.clip_levels` of the runs; ``provenance``
    :func:`.block_pairs.run_provenance` of the committed runs; ``blocks``
    :func:`.block_pairs.load_block_outcomes` (``allow_revisions``: pair blocks of several
    revisions); ``block_clips``: :func:`~at2po_lib.analysis.dissection.clip_levels` of the
    study's AT2PO block runs (the ε = 0.2 row reads them where they logged that range)."""
    datasets = {
        *(outcomes["dataset"] if len(outcomes) else ()),
        *(blocks["dataset"] if blocks is not None and len(blocks) else ()),
    }
    groups = groups_of(sorted(datasets)) if datasets else {}
    records = _Records(outcomes, groups, provenance, blocks, allow_revisions)
    at2po = profile_at2po(profile)
    claims = [
        *_rl_over_react(records),
        *_over_grpo(records),
        *_over_grpo(records, metric="sampled_em"),
        *_strongest_baseline(records),
        *_strongest_baseline(records, metric="sampled_em"),
        *_variant_claims(records),
        _multihop_gain_larger(records),
        *_ablation_steps(records, at2po),
        *_credit_claims(records, profile_at2po(profile, TABLE3_CELLS)),
        *_entropy_claims(change),
        *_clip_claims(clips, block_clips),
        *_turn_claims(outcomes),
    ]
    claims = _apply_families(claims)
    tidy = pd.DataFrame([c.as_row() for c in claims])
    tidy.insert(0, "profile", profile)
    display = pd.DataFrame(
        {
            "claim (the paper's)": [c.claim for c in claims],
            "published": [c.published for c in claims],
            "toy [95% CI]": [_toy_cell(c) for c in claims],
            "seeds": [c.seeds for c in claims],
            "questions": ["–" if c.questions is None else str(c.questions) for c in claims],
            "permutation test": [_p_cell(c) for c in claims],
            "rests on": [c.rests or "–" for c in claims],
            "the toy": [
                c.reading
                + (f" ({row['note']})" if row["note"] and c.reading != "not run yet" else "")
                for c, row in zip(claims, tidy.to_dict("records"))
            ],
        }
    ).set_index("claim (the paper's)")
    return tidy, display


def current_claims(tidy: "pd.DataFrame", display: "pd.DataFrame", full_table: str) -> str:
    """The claims table as docs/toy_study.md shows it: each claim's current reading only. A claim the
    study's blocks pair keeps its committed runs' reading as a second row, "the earlier
    record"; those rows are left to the full table (``full_table``, a repository-relative
    path), named in one line under this one, so that page stays one row per claim."""
    current = ~tidy["key"].str.endswith(EARLIER).to_numpy()
    text = markdown_table(display[current])
    earlier = int((~current).sum())
    if earlier:
        text += (
            f"\n{earlier} claim{'s' * (earlier != 1)} above read{'s' * (earlier == 1)} the "
            "study's blocks; the committed runs' reading of each (the earlier record) is its "
            f"own row in [`{full_table}`]({full_table}).\n"
        )
    return text


def _runs_sentence(finished: "pd.DataFrame", provenance: "pd.DataFrame | None") -> str:
    """Which committed runs (methods, seeds) the claims read, their revisions and builds."""
    seeds = finished.groupby("method")["seed"].nunique()
    revisions = set()
    for path in finished["path"]:
        meta = Path(path) / "meta.json"
        if meta.is_file():
            revisions.add(str(json.loads(meta.read_text()).get("git_revision", "?"))[:7])
    listed = "; ".join(
        f"{method_label(m)}: {seeds[m]}" for m in sorted(seeds.index, key=method_label)
    )
    text = (
        f"Read from {len(finished)} finished runs (seeds per method: {listed}), trained at "
        f"revision{'s' * (len(revisions) > 1)} {', '.join(sorted(revisions))}"
    )
    if provenance is not None and len(provenance):
        builds = provenance.groupby("commit")["build"].value_counts()
        text += " on machine builds " + "; ".join(
            f"{commit[:7]}: " + ", ".join(f"{b} ({n} runs)" for (_, b), n in group.items())
            for commit, group in builds.groupby(level=0)
        )
    return text + "."


def _blocks_sentence(blocks: "pd.DataFrame | None") -> str:
    """Which of the study's blocks have finished, at which revisions and builds, and whether
    they are paired yet (a set's claims read pairs within blocks from 2 finished blocks on:
    :func:`~at2po_lib.reporting.block_pairs.blocked_difference`)."""
    if blocks is None or blocks.empty:
        return (
            " No block of the study (`at2po study --block-set`) has finished yet: every "
            "claim rests on the committed runs, the earlier record."
        )
    parts = []
    for name, rows in blocks.groupby("block_set", sort=True):
        per_block = rows.drop_duplicates("block")
        count = len(per_block)
        builds = ", ".join(f"{b} ×{n}" for b, n in per_block["build"].value_counts().items())
        parts.append(
            f"{name}: {count} block{'s' * (count != 1)} at "
            f"{', '.join(sorted(c[:7] for c in per_block['commit'].unique()))} "
            f"(builds {builds})"
            + (", too few to pair: its claims rest on the earlier record" if count < 2 else "")
        )
    return (
        " Finished blocks of the study (a set's claims read pairs within its blocks from 2 "
        "blocks on): " + "; ".join(parts) + "."
    )


def _p_cell(c: Claim) -> str:
    """``0.051`` / ``0.124 (Holm 0.865)`` / ``0.027 (max-t 0.053)``: the claim's permutation
    p (and its family's corrected one, which the reading uses)."""
    if c.test is None or not np.isfinite(c.test.p):
        return "–"
    text = _p_format(c.test.p)
    if not np.isfinite(c.p_family):
        return text
    how = "max-t" if c.family.startswith("joint") else "Holm"
    return text + f" ({how} {_p_format(c.p_family)})"


def _p_format(p: float) -> str:
    """Three decimals; a p below 0.001 as ``< 0.001``."""
    return f"{p:.3f}" if p >= 0.001 else "< 0.001"


def _digits(c: Claim) -> int:
    """Decimals a claim's numbers are shown with, by unit."""
    if c.unit == "%" and max(abs(c.low), abs(c.high)) < 0.5:
        return 2  # a gap of a few hundredths of a point (clip shares at ε = 0.2)
    return 3 if c.unit == "nats" else 1 if c.unit in ("EM points", "%") else 2


def _toy_cell(c: Claim) -> str:
    if not np.isfinite(c.estimate):
        return "–"
    digits = _digits(c)
    sign = "+" if c.direction != 0 else ""
    suffix = {"nats": " nats", "%": "%", "turns": ""}.get(c.unit, "")
    value = f"{c.estimate:{sign}.{digits}f}"
    if not (np.isfinite(c.low) and np.isfinite(c.high)):
        return value + suffix
    return f"{value} [{c.low:{sign}.{digits}f}, {c.high:{sign}.{digits}f}]{suffix}"


def claims_summary(
    tidy: "pd.DataFrame",
    runs: "pd.DataFrame",
    per_seed: "pd.DataFrame | None" = None,
    provenance: "pd.DataFrame | None" = None,
    blocks: "pd.DataFrame | None" = None,
) -> str:
    """One generated paragraph over :func:`claims_table`'s tidy rows: which runs (methods,
    seeds, training revisions and machine builds: ``provenance``) the claims rest on, which of
    the study's blocks have finished (``blocks``), the reading rule, how far the seeds of the
    methods with 3 or more spread (``per_seed``: :func:`~at2po_lib.reporting.table1.table1_seeds`'
    tidy frame), and which claims the toy agrees with, cannot tell, contradicts or has not run.
    The Figure 4 descriptions are left to the table."""
    finished = runs[runs["finished"].astype(bool)] if len(runs) else runs
    if finished.empty and (blocks is None or blocks.empty):
        return "No finished runs are recorded for this profile: no claim is measured yet.\n"
    text = (
        "No committed run is recorded for this profile (no earlier record)."
        if finished.empty
        else _runs_sentence(finished, provenance)
    )
    text += _blocks_sentence(blocks)
    text += (
        ' A reading other than "cannot tell" needs the 95% interval to exclude 0 and a '
        "two-sided permutation test over seed (or block) labels to agree at 0.05, corrected "
        "within the claim's family, declared before the reading: the headline pair on the "
        "greedy metric, the sampled metric (secondary) and against GRPO at AT2PO's budget "
        "(a joint sign-flip test of the largest |t| over the blocks, Holm over the earlier "
        "record's seeds); AT2PO against AEPO on both metrics (Holm); Table 2's three steps "
        "(as the headline); Table 3's cells (Holm over every cell compared with AT2PO's)."
    )
    if per_seed is not None and len(per_seed):
        greedy = per_seed[per_seed["metric"] == "em"].groupby("method")["value"]
        spread = greedy.std(ddof=1)[greedy.size() >= 3].dropna()
        if len(spread):
            text += (
                " Standard deviation over seeds of a run's greedy multi-hop average: "
                + ", ".join(f"{method_label(m)} {100 * v:.1f}" for m, v in spread.items())
                + " points."
            )
    verdicts = tidy[tidy["reading"] != "measured"]
    for reading, words in (
        ("agrees", "The toy agrees with the paper on"),
        (
            "cannot tell",
            "It cannot tell (the 95% interval contains 0, or the "
            "permutation test does not agree) for",
        ),
        ("opposite", "It finds the opposite of"),
        ("above 0", "Outside the paper's claims, its interval lies above 0 for"),
        ("below 0", "Outside the paper's claims, its interval lies below 0 for"),
        ("one seed", "One seed on a side, so not read yet:"),
        ("not run yet", "Not run yet:"),
    ):
        names = verdicts.loc[verdicts["reading"] == reading, "short"].tolist()
        if names:
            text += f" {words} {'; '.join(names)}."
    return text + "\n"


FRONT_DOOR_WIDTH = 100
"""Characters a line of the README's generated summary wraps at (prose, never one long line)."""


def _front_line(tidy: "pd.DataFrame", key: str, text: str) -> str | None:
    """``text`` formatted with the row of ``key`` (None when the claim is not measured)."""
    rows = tidy[tidy["key"] == key]
    if rows.empty or not np.isfinite(rows["estimate"].iloc[0]):
        return None
    r = rows.iloc[0]
    try:
        among = float(r["published"]) > r["ruled_out"]  # a claimed gain the interval excludes
    except ValueError:
        among = False
    return text.format(
        among=f" (the paper's {r['published']} among them)" if among else "",
        ci=f"{r['estimate']:+.1f} [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]",
        reading=r["reading"],
        bound=f"{r['ruled_out']:+.1f}",
        detect=f"{r['detectable_80']:.1f}",
        seeds=r["seeds"],
        p=_p_format(r["p_permutation"]),
        corrected=_p_format(r["p_corrected"]),
    )


def toy_shows(tidy: "pd.DataFrame", page: str = "docs/toy_study.md") -> str:
    """What the toy shows, for the README (at most 12 lines, wrapped as prose): the headline
    with the bound it rules out and what its blocks detect, the secondary metric within its
    family, Table 2's steps against what they detect, and where the rest is (``page``)."""
    steps = tidy[tidy["key"].isin(["ablation_step2", "ablation_step3", "ablation_step4"])]
    weak = steps[steps["underpowered"].astype(str) == "True"]
    items = [
        _front_line(
            tidy,
            "at2po_over_grpo",
            "**AT2PO − GRPO**, multi-hop EM, {seeds}: {ci} points, {reading}; the interval rules "
            "out any gain above {bound}{among}, and the blocks "
            "detect {detect} points at 80% power.",
        ),
        _front_line(
            tidy,
            "at2po_over_grpo_sampled_em",
            "The sampled metric (secondary): {ci}, p {p} alone, {corrected} within the "
            "headline's family of three: {reading}.",
        ),
        (
            f"Table 2's steps: {', '.join(sorted(set(steps['reading'])))}; each detects "
            f"{steps['detectable_80'].min():.1f} to {steps['detectable_80'].max():.1f} points, "
            "so against the paper's "
            + " and ".join(weak["published"].astype(str))
            + " the toy is underpowered."
            if len(weak)
            else None
        ),
    ]
    lines = [
        textwrap.fill(item, FRONT_DOOR_WIDTH, initial_indent="- ", subsequent_indent="  ")
        for item in items
        if item
    ]
    lines.append(
        "\n"
        + textwrap.fill(
            f"Every claim, the looks the study took and the rule now in force: [`{page}`]({page}).",
            FRONT_DOOR_WIDTH,
        )
    )
    return "\n".join(lines) + "\n"
