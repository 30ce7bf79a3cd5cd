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
- ``cannot tell``: it contains 0;
- ``above 0`` / ``below 0``: a comparison the paper does not make (``published`` is
  "not in the paper", the variant rows) whose interval excludes 0: there is no paper's side
  to agree with;
- ``not run yet``: no records;
- ``one seed``: a trained side rests on a single seed (or there is no interval), so its interval
  covers the questions but not the seeds, whose spread is the larger part here
  (``table1_seeds``); the number is shown and not read. The ReAct warm start is one fixed
  model, so its single "seed" is the whole of it.

EM differences are paired over questions and unpaired over seeds
(:func:`at2po_lib.stats.difference_ci`); the multi-hop-vs-single-hop contrast is a difference of
differences (:func:`at2po_lib.stats.gain_contrast_ci`); entropy changes are per-run values with
Student / Welch intervals over seeds (:func:`at2po_lib.reporting.curves.start_end_table`).
Every rival is fixed before the data (issue #35): "the strongest baseline" is AEPO, the
paper's strongest; Table 3's claims compare AT2PO's cell with the child mean (node value) and
with its own difference to the parent. (Picking the best rival on the scored questions made
"opposite" readings 12-28% of the time when nothing differs.) Table 2's step 4 and Table 3's
AT2PO cell are the AT2PO preset with the expansion settings those tables' other runs recorded
(:func:`~at2po_lib.reporting.labels.profile_at2po`: ``at2po_exact`` on ``tiny`` until the study
re-runs them with the profile's); the headline rows read the authors' ``at2po``. The intervals are per claim: with ~20 claims read together,
about one may exclude 0 by chance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .. import stats
from ..method.presets import TABLE1_METHODS, TABLE2_METHODS, credit_method
from ..paper_reference import published_table1, published_table2
from .figure4 import PAPER_MULTIHOP_MEAN_TURNS, PAPER_SINGLEHOP_ONE_TURN_SHARE, turn_summary
from .labels import TABLE3_CELLS, groups_of, method_label, profile_at2po, rows_with_outcomes

RL_BASELINES = tuple(m for m in TABLE1_METHODS if m not in ("react", "at2po"))
"""Table 1's RL baselines (AT2PO and the ReAct warm start excluded)."""

STRONGEST_BASELINE = "aepo"
"""The paper's strongest RL baseline (its Table 1), the rival of "AT2PO beats the strongest
baseline", fixed before the data."""

NOT_IN_PAPER = "not in the paper"
"""``published`` of a comparison the paper does not make (read ``above 0`` / ``below 0``)."""

READINGS = ("agrees", "opposite", "above 0", "below 0", "cannot tell", "one seed", "not run yet",
            "measured")

SHORT_NAMES = {
    "rl_over_react": "RL over ReAct",
    "at2po_over_grpo": "AT2PO over GRPO", "at2po_over_grpo_sampled_em": "AT2PO over GRPO (sampled metric)",
    "at2po_over_strongest": "AT2PO over AEPO",
    "at2po_over_strongest_sampled_em": "AT2PO over AEPO (sampled metric)",
    "at2po_over_grpo_budget": "AT2PO over GRPO with as many chains",
    "exact_variant_over_grpo": "the exact-entropy variant over GRPO",
    "authors_over_exact_variant": "the authors' AT2PO over the exact-entropy variant",
    "turn_ratio_clips_less": "turn-level ratios clipping fewer tokens",
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
    direction: int = 1          # +1: the paper says the number is > 0; 0: a description
    note: str = ""
    one_seed: bool = False      # a trained side has one seed: the interval misses seed spread

    @property
    def reading(self) -> str:
        if not np.isfinite(self.estimate):
            return "not run yet"
        if self.direction == 0:
            return "measured"
        if self.one_seed or not (np.isfinite(self.low) and np.isfinite(self.high)):
            return "one seed"
        if self.published == NOT_IN_PAPER and (self.low > 0 or self.high < 0):
            return "above 0" if self.low > 0 else "below 0"
        if self.low > 0:
            return "agrees" if self.direction > 0 else "opposite"
        if self.high < 0:
            return "opposite" if self.direction > 0 else "agrees"
        return "cannot tell"

    def as_row(self) -> dict:
        return {"key": self.key, "claim": self.claim, "short": SHORT_NAMES.get(self.key, self.claim),
                "published": self.published,
                "estimate": self.estimate, "ci_low": self.low, "ci_high": self.high,
                "unit": self.unit, "seeds": self.seeds, "n_questions": self.questions,
                "reading": self.reading, "note": self.note}


def _published_avg(method: str, group: str, backbone: str = "Qwen3-4B") -> float:
    table = published_table1()
    sel = table[(table["backbone"] == backbone) & (table["method"] == method_label(method))
                & (table["dataset"] == f"{group}_avg")]
    return float(sel["em"].iloc[0]) if len(sel) else float("nan")


def _seeds(interval: stats.Interval) -> str:
    return (f"{interval.n_seeds_a} vs {interval.n_seeds_b}" if interval.n_seeds_b
            else str(interval.n_seeds_a))


def _em_claim(key: str, claim: str, published: str, interval: stats.Interval | None,
              note: str = "", fixed_b: bool = False) -> Claim:
    """``fixed_b``: side b is the untrained warm start, whose one seed is not a sample."""
    if interval is None:
        return Claim(key, claim, published, note=note)
    sides = (interval.n_seeds_a,) if fixed_b or not interval.n_seeds_b else \
        (interval.n_seeds_a, interval.n_seeds_b)
    return Claim(key, claim, published, 100 * interval.estimate, 100 * interval.low,
                 100 * interval.high, seeds=_seeds(interval), questions=interval.n_questions,
                 note=note, one_seed=min(sides) < 2)


def _difference(outcomes, a: str, b: str, members, n_resamples: int,
                metric: str = "em") -> stats.Interval | None:
    if not (members and rows_with_outcomes(outcomes, a) and rows_with_outcomes(outcomes, b)):
        return None
    return stats.difference_ci(outcomes, a, b, members, metric=metric, n_resamples=n_resamples)


def _rl_over_react(outcomes, groups, n_resamples) -> Claim:
    trained = [m for m in TABLE1_METHODS if m != "react" and rows_with_outcomes(outcomes, m)]
    gains = {m: _difference(outcomes, m, "react", groups.get("multihop"), n_resamples)
             for m in trained}
    gains = {m: g for m, g in gains.items() if g is not None}
    published = min(_published_avg(m, "multihop") for m in (*RL_BASELINES, "at2po")
                    if np.isfinite(_published_avg(m, "multihop"))) - _published_avg("react", "multihop")
    claim = "RL beats the ReAct warm start (multi-hop; the smallest gain of any RL method)"
    if not gains:
        return _em_claim("rl_over_react", claim, f"{published:+.1f}", None)
    weakest = min(gains, key=lambda m: gains[m].estimate)
    return _em_claim("rl_over_react", claim, f"{published:+.1f}", gains[weakest],
                     note=f"weakest: {method_label(weakest)}, of {len(gains)} RL methods",
                     fixed_b=True)


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
    return f"{key}_{metric}", claim + ", sampled metric)"


def _over_grpo(outcomes, groups, n_resamples, metric: str = "em") -> Claim:
    """AT2PO minus GRPO on the multi-hop average: the study's headline pair, whose seeds the
    design sizes for a 95% half-width of 2 points (docs/toy_study.md)."""
    key, claim = _metric_names("at2po_over_grpo",
                               "AT2PO beats GRPO, the study's headline pair (multi-hop", metric)
    published = (f"{_published_avg('at2po', 'multihop') - _published_avg('grpo', 'multihop'):+.1f}"
                 if metric == "em" else "–")  # the paper reports greedy EM only
    return _em_claim(key, claim, published,
                     _difference(_with_metric(outcomes, metric), "at2po", "grpo",
                                 groups.get("multihop"), n_resamples, metric))


def _strongest_baseline(outcomes, groups, n_resamples, metric: str = "em") -> Claim:
    """AT2PO minus AEPO, the paper's strongest baseline (fixed before the data), on the
    multi-hop average in ``metric`` (greedy EM, or the mean EM of k samples)."""
    published = (f"{_published_avg('at2po', 'multihop') - _published_avg(STRONGEST_BASELINE, 'multihop'):+.1f}"
                 if metric == "em" else "–")  # the paper reports greedy EM only
    key, claim = _metric_names("at2po_over_strongest",
                               "AT2PO beats the paper's strongest baseline, AEPO (multi-hop",
                               metric)
    return _em_claim(key, claim, published,
                     _difference(_with_metric(outcomes, metric), "at2po", STRONGEST_BASELINE,
                                 groups.get("multihop"), n_resamples, metric))


def _variant_claims(outcomes, groups, n_resamples) -> list[Claim]:
    """The comparisons the variants exist for (docs/method.md §8, "Variants")."""
    members = groups.get("multihop")
    return [
        _em_claim("at2po_over_grpo_budget",
                  "The tree beats sampling as many chains: AT2PO minus GRPO with M + L·K chains "
                  "(multi-hop)", NOT_IN_PAPER,
                  _difference(outcomes, "at2po", "grpo_tree_budget", members, n_resamples)),
        _em_claim("exact_variant_over_grpo",
                  "AT2PO (exact entropy, α = 0.001) beats GRPO (multi-hop)", NOT_IN_PAPER,
                  _difference(outcomes, "at2po_exact", "grpo", members, n_resamples)),
        _em_claim("authors_over_exact_variant",
                  "The authors' AT2PO minus the exact-entropy variant (multi-hop)",
                  NOT_IN_PAPER,
                  _difference(outcomes, "at2po", "at2po_exact", members, n_resamples)),
    ]


def _multihop_gain_larger(outcomes, groups, n_resamples) -> Claim:
    pub = ((_published_avg("at2po", "multihop") - _published_avg("grpo", "multihop"))
           - (_published_avg("at2po", "singlehop") - _published_avg("grpo", "singlehop")))
    claim = "AT2PO's gain over GRPO is larger on multi-hop than on single-hop questions"
    if not (groups.get("multihop") and groups.get("singlehop")
            and rows_with_outcomes(outcomes, "at2po") and rows_with_outcomes(outcomes, "grpo")):
        return _em_claim("multihop_gain_larger", claim, f"{pub:+.1f}", None)
    interval = stats.gain_contrast_ci(outcomes, "at2po", "grpo", groups["multihop"],
                                      groups["singlehop"], n_resamples=n_resamples)
    return _em_claim("multihop_gain_larger", claim, f"{pub:+.1f}", interval,
                     note="multi-hop gain minus single-hop gain")


def _ablation_steps(outcomes, groups, n_resamples, at2po: str = "at2po") -> list[Claim]:
    """Each step minus the one before; step 4 reads ``at2po`` (the profile's AT2PO, whose
    expansion settings steps 1-3 share)."""
    published = published_table2().set_index("method")["multihop_avg"]
    out = []
    for number, (before, after) in enumerate(zip(TABLE2_METHODS, TABLE2_METHODS[1:]), start=2):
        runs_after = at2po if after == "at2po" else after
        configuration = published_table2().set_index("method").loc[after, "configuration"] \
            if after in published.index else after
        pub = (f"{published[after] - published[before]:+.2f}"
               if after in published.index and before in published.index else "–")
        out.append(_em_claim(f"ablation_step{number}",
                             f"Table 2, step {number}: {configuration.removeprefix('+ ')} adds "
                             "to the step before (multi-hop)", pub,
                             _difference(outcomes, runs_after, before, groups.get("multihop"),
                                         n_resamples)))
    return out


def _credit_claims(outcomes, groups, n_resamples, default: str = "at2po") -> list[Claim]:
    """AT2PO's cell (``default``: the profile's AT2PO, entropy_softmax / node_value) against
    the two rivals fixed in advance."""
    members = groups.get("multihop")
    return [
        _em_claim("node_value_over_diff_parent",
                  "Table 3: the node value beats the difference to the parent as the advantage "
                  "(entropy-weighted values, multi-hop)", "best (no cells published)",
                  _difference(outcomes, default, credit_method("entropy_softmax", "diff_parent"),
                              members, n_resamples)),
        _em_claim("entropy_weights_over_child_mean",
                  "Table 3: entropy-weighted children beat the plain child mean (node value, "
                  "multi-hop)", "best (no cells published)",
                  _difference(outcomes, default, credit_method("child_mean", "node_value"),
                              members, n_resamples)),
    ]


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
        span = (f"every method here changes by {others['change'].min():+.3f} to "
                f"{others['change'].max():+.3f} nats" if len(others) else "")
        out.append(Claim("grpo_entropy_falls", claim, "falls early", float(grpo["change"]),
                         float(grpo["change_low"]), float(grpo["change_high"]), "nats",
                         str(int(grpo["seeds"])), direction=0, note=span))
    claim = "Figure 3: AT2PO's entropy is more stable than GRPO's (its change minus GRPO's)"
    if at2po is None or grpo is None or not np.isfinite(at2po.get("vs_baseline", np.nan)):
        out.append(Claim("at2po_entropy_stabler", claim, "most stable", unit="nats"))
    else:
        out.append(Claim("at2po_entropy_stabler", claim, "most stable",
                         float(at2po["vs_baseline"]), float(at2po["vs_baseline_low"]),
                         float(at2po["vs_baseline_high"]), "nats",
                         f"{int(at2po['seeds'])} vs {int(grpo['seeds'])}",
                         note="> 0: AT2PO lost less entropy than GRPO",
                         one_seed=int(at2po["seeds"]) < 2))
    return out


def _clip_claim(clips: "pd.DataFrame | None") -> Claim:
    """The turn-level minus the token-level clipped share of model tokens, on the same updates of
    AT2PO's runs at its clip range (``clip_ratio/{turn,token}_level``), with Student's t over
    runs; the paper says a turn-level ratio clips far fewer tokens (< 0)."""
    claim = ("§3.3: a turn-level ratio clips fewer tokens than a token-level one (AT2PO's "
             "updates, turn − token share)")
    runs = clips[clips["method"] == "at2po"] if clips is not None and len(clips) else None
    if runs is None or runs.empty:
        return Claim("turn_ratio_clips_less", claim, "far fewer", unit="%", direction=-1)
    gap = stats.seed_mean_ci(100 * (runs["turn_level"] - runs["token_level"]).to_numpy())
    return Claim("turn_ratio_clips_less", claim, "far fewer", gap.estimate, gap.low, gap.high,
                 "%", str(len(runs)), direction=-1, one_seed=len(runs) < 2,
                 note=f"turn {100 * runs['turn_level'].mean():.1f}% vs token "
                      f"{100 * runs['token_level'].mean():.1f}% of model tokens")


def _turn_claims(outcomes, n_resamples) -> list[Claim]:
    specs = (("multihop_turns", "Figure 4: turns per multi-hop sample (AT2PO)", "multihop",
              "turns", f"{PAPER_MULTIHOP_MEAN_TURNS}", "turns", 1.0),
             ("singlehop_one_call", "Figure 4: single-hop samples that make one call (AT2PO)",
              "singlehop", "one_search", f"{100 * PAPER_SINGLEHOP_ONE_TURN_SHARE:.1f}%", "%",
              100.0))
    summary = (turn_summary(outcomes, "at2po", n_resamples=n_resamples)
               if rows_with_outcomes(outcomes, "at2po") else None)
    out = []
    for key, claim, group, metric, published, unit, scale in specs:
        sel = (summary[(summary["group"] == group) & (summary["metric"] == metric)]
               if summary is not None else [])
        if len(sel) == 0:
            out.append(Claim(key, claim, published, unit=unit, direction=0))
            continue
        r = sel.iloc[0]
        out.append(Claim(key, claim, published, scale * r["value"], scale * r["ci_low"],
                         scale * r["ci_high"], unit, str(int(r["n_seeds"])), int(r["n_questions"]),
                         direction=0, note="TinyWorld's plans fix the hop counts"))
    return out


def claims_table(profile: str, outcomes: "pd.DataFrame", change: "pd.DataFrame | None" = None,
                 n_resamples: int = stats.DEFAULT_RESAMPLES, clips: "pd.DataFrame | None" = None
                 ) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """``(tidy, display)``: one row per claim, in the order of the module doc. ``change`` is
    :func:`~at2po_lib.reporting.curves.start_end_table` with GRPO as the baseline; ``clips``
    :func:`at2po_lib.analysis.dissection.clip_levels` of the runs."""
    groups = groups_of(outcomes["dataset"].unique()) if len(outcomes) else {}
    claims = [_rl_over_react(outcomes, groups, n_resamples),
              _over_grpo(outcomes, groups, n_resamples),
              _over_grpo(outcomes, groups, n_resamples, metric="sampled_em"),
              _strongest_baseline(outcomes, groups, n_resamples),
              _strongest_baseline(outcomes, groups, n_resamples, metric="sampled_em"),
              *_variant_claims(outcomes, groups, n_resamples),
              _multihop_gain_larger(outcomes, groups, n_resamples),
              *_ablation_steps(outcomes, groups, n_resamples, profile_at2po(profile)),
              *_credit_claims(outcomes, groups, n_resamples,
                              profile_at2po(profile, TABLE3_CELLS)),
              *_entropy_claims(change),
              _clip_claim(clips),
              *_turn_claims(outcomes, n_resamples)]
    tidy = pd.DataFrame([c.as_row() for c in claims])
    tidy.insert(0, "profile", profile)
    display = pd.DataFrame({
        "claim (the paper's)": [c.claim for c in claims],
        "published": [c.published for c in claims],
        "toy [95% CI]": [_toy_cell(c) for c in claims],
        "seeds": [c.seeds for c in claims],
        "questions": ["–" if c.questions is None else str(c.questions) for c in claims],
        "the toy": [c.reading + (f" ({c.note})" if c.note and c.reading != "not run yet" else "")
                    for c in claims],
    }).set_index("claim (the paper's)")
    return tidy, display


def _toy_cell(c: Claim) -> str:
    if not np.isfinite(c.estimate):
        return "–"
    digits = 3 if c.unit == "nats" else 1 if c.unit in ("EM points", "%") else 2
    sign = "+" if c.direction != 0 else ""
    suffix = {"nats": " nats", "%": "%", "turns": ""}.get(c.unit, "")
    value = f"{c.estimate:{sign}.{digits}f}"
    if not (np.isfinite(c.low) and np.isfinite(c.high)):
        return value + suffix
    return f"{value} [{c.low:{sign}.{digits}f}, {c.high:{sign}.{digits}f}]{suffix}"


def claims_summary(tidy: "pd.DataFrame", runs: "pd.DataFrame",
                   per_seed: "pd.DataFrame | None" = None) -> str:
    """One generated paragraph over :func:`claims_table`'s tidy rows: which runs (methods,
    seeds, training revisions) the claims rest on, how far the seeds of the methods with 3 or
    more spread (``per_seed``: :func:`~at2po_lib.reporting.table1.table1_seeds`' tidy frame),
    and which claims the toy agrees with, cannot tell, contradicts or has not run. The Figure 4
    descriptions are left to the table."""
    finished = runs[runs["finished"].astype(bool)] if len(runs) else runs
    if finished.empty:
        return "No finished runs are recorded for this profile: no claim is measured yet.\n"
    seeds = finished.groupby("method")["seed"].nunique()
    revisions = set()
    for path in finished["path"]:
        meta = Path(path) / "meta.json"
        if meta.is_file():
            revisions.add(str(json.loads(meta.read_text()).get("git_revision", "?"))[:7])
    listed = "; ".join(f"{method_label(m)}: {seeds[m]}"
                       for m in sorted(seeds.index, key=method_label))
    text = (f"Read from {len(finished)} finished runs (seeds per method: {listed}), trained at "
            f"revision{'s' * (len(revisions) > 1)} {', '.join(sorted(revisions))}.")
    if per_seed is not None and len(per_seed):
        greedy = per_seed[per_seed["metric"] == "em"].groupby("method")["value"]
        spread = greedy.std(ddof=1)[greedy.size() >= 3].dropna()
        if len(spread):
            text += (" Standard deviation over seeds of a run's greedy multi-hop average: "
                     + ", ".join(f"{method_label(m)} {100 * v:.1f}" for m, v in spread.items())
                     + " points.")
    verdicts = tidy[tidy["reading"] != "measured"]
    for reading, words in (("agrees", "The toy agrees with the paper on"),
                           ("cannot tell", "Its 95% intervals contain 0 for"),
                           ("opposite", "It finds the opposite of"),
                           ("above 0", "Outside the paper's claims, its interval lies above 0 for"),
                           ("below 0", "Outside the paper's claims, its interval lies below 0 for"),
                           ("one seed", "One seed on a side, so not read yet:"),
                           ("not run yet", "Not run yet:")):
        names = verdicts.loc[verdicts["reading"] == reading, "short"].tolist()
        if names:
            text += f" {words} {'; '.join(names)}."
    return text + "\n"
