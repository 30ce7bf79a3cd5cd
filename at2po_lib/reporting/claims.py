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
- ``not run yet``: no records;
- ``one seed``: a trained side rests on a single seed (or there is no interval), so its interval
  covers the questions but not the seeds, whose spread is the larger part here
  (``table1_seeds``); the number is shown and not read. The ReAct warm start is one fixed
  model, so its single "seed" is the whole of it.

EM differences are paired over questions and unpaired over seeds
(:func:`at2po_lib.stats.difference_ci`); the multi-hop-vs-single-hop contrast is a difference of
differences (:func:`at2po_lib.stats.gain_contrast_ci`); entropy changes are per-run values with
Student / Welch intervals over seeds (:func:`at2po_lib.reporting.curves.start_end_table`).
The "strongest baseline" is the RL baseline with the highest multi-hop point estimate on these
records, chosen on the same questions: that choice favours the baseline, so the comparison is
conservative for AT2PO. Table 3's "best other cell" is chosen the same way among the grid's
other seven cells (value mode × ``node_value`` / ``diff_parent``, the paper's grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .. import stats
from ..method.credit import VALUE_MODES
from ..method.presets import TABLE1_METHODS, TABLE2_METHODS, credit_method
from ..paper_reference import published_table1, published_table2
from .labels import groups_of, method_label, rows_with_outcomes

if TYPE_CHECKING:
    import pandas as pd

RL_BASELINES = tuple(m for m in TABLE1_METHODS if m not in ("react", "at2po"))
"""Table 1's RL baselines (AT2PO and the ReAct warm start excluded)."""

TABLE3_GRID_RIVALS = tuple(credit_method(value, adv) for value in VALUE_MODES
                           for adv in ("node_value", "diff_parent")
                           if (value, adv) != ("entropy_softmax", "node_value"))
"""The paper's Table 3 grid less its default cell, which is AT2PO itself (the authors' code's
two other advantage modes are not in the paper's table)."""

READINGS = ("agrees", "opposite", "cannot tell", "one seed", "not run yet", "measured")

SHORT_NAMES = {
    "rl_over_react": "RL over ReAct",
    "at2po_over_grpo": "AT2PO over GRPO", "at2po_over_grpo_sampled_em": "AT2PO over GRPO (sampled metric)",
    "at2po_over_strongest": "AT2PO over the strongest baseline",
    "at2po_over_strongest_sampled_em": "AT2PO over the strongest baseline (sampled metric)",
    "multihop_gain_larger": "a larger multi-hop than single-hop gain",
    "ablation_step2": "ablation step 2 (turn-level loss)",
    "ablation_step3": "ablation step 3 (entropy-guided expansion)",
    "ablation_step4": "ablation step 4 (turn-wise credit)",
    "node_value_over_diff_parent": "node value over difference to parent",
    "entropy_weights_over_child_mean": "entropy weights over the child mean",
    "credit_cell_best": "AT2PO's credit cell over the best other cell",
    "grpo_entropy_falls": "GRPO's entropy collapse",
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


def _strongest(outcomes, rivals, members, metric: str = "em") -> str | None:
    """The rival with the highest mean ``metric`` over ``members``, among those with records."""
    present = [m for m in rivals if rows_with_outcomes(outcomes, m)]
    if not present or not members:
        return None
    means = {m: stats.mean_ci(outcomes, m, members, metric=metric, n_resamples=200).estimate
             for m in present}
    return max(means, key=means.get)


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
    """AT2PO minus the RL baseline with the highest multi-hop mean in ``metric`` (greedy EM, or
    the sampled metric: the mean EM of k samples at the training temperature)."""
    members = groups.get("multihop")
    pub = {m: _published_avg(m, "multihop") for m in RL_BASELINES}
    pub = {m: v for m, v in pub.items() if np.isfinite(v)}
    best_pub = max(pub, key=pub.get)
    published = f"{_published_avg('at2po', 'multihop') - pub[best_pub]:+.1f} (vs {method_label(best_pub)})"
    key, claim = _metric_names("at2po_over_strongest",
                               "AT2PO beats the strongest RL baseline (multi-hop", metric)
    if metric != "em":
        published = "–"  # the paper reports greedy EM only
    outcomes = _with_metric(outcomes, metric)
    strongest = _strongest(outcomes, RL_BASELINES, members, metric)
    if strongest is None or not rows_with_outcomes(outcomes, "at2po"):
        return _em_claim(key, claim, published, None)
    present = sum(bool(rows_with_outcomes(outcomes, m)) for m in RL_BASELINES)
    return _em_claim(key, claim, published,
                     _difference(outcomes, "at2po", strongest, members, n_resamples, metric),
                     note=f"strongest here: {method_label(strongest)}, of {present} baseline{'s' * (present > 1)}")


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


def _ablation_steps(outcomes, groups, n_resamples) -> list[Claim]:
    published = published_table2().set_index("method")["multihop_avg"]
    out = []
    for number, (before, after) in enumerate(zip(TABLE2_METHODS, TABLE2_METHODS[1:]), start=2):
        configuration = published_table2().set_index("method").loc[after, "configuration"] \
            if after in published.index else after
        pub = (f"{published[after] - published[before]:+.2f}"
               if after in published.index and before in published.index else "–")
        out.append(_em_claim(f"ablation_step{number}",
                             f"Table 2, step {number}: {configuration.removeprefix('+ ')} adds "
                             "to the step before (multi-hop)", pub,
                             _difference(outcomes, after, before, groups.get("multihop"),
                                         n_resamples)))
    return out


def _credit_claims(outcomes, groups, n_resamples) -> list[Claim]:
    default = "at2po"  # the entropy_softmax / node_value cell is AT2PO itself
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
        _best_cell_claim(outcomes, members, n_resamples),
    ]


def _best_cell_claim(outcomes, members, n_resamples) -> Claim:
    """AT2PO (the entropy_softmax / node_value cell) minus the grid's best other cell."""
    claim = ("Table 3: the entropy-weighted node value (AT2PO's cell) is the grid's best "
             "(vs the best other cell, multi-hop)")
    strongest = _strongest(outcomes, TABLE3_GRID_RIVALS, members)
    if strongest is None or not rows_with_outcomes(outcomes, "at2po"):
        return _em_claim("credit_cell_best", claim, "best (no cells published)", None)
    present = sum(bool(rows_with_outcomes(outcomes, m)) for m in TABLE3_GRID_RIVALS)
    return _em_claim("credit_cell_best", claim, "best (no cells published)",
                     _difference(outcomes, "at2po", strongest, members, n_resamples),
                     note=f"best other here: {method_label(strongest)}, of "
                          + (f"all {present}" if present == len(TABLE3_GRID_RIVALS) else
                             f"{present} of {len(TABLE3_GRID_RIVALS)}") + " other cells")


def _entropy_claims(change: "pd.DataFrame | None") -> list[Claim]:
    def row(method: str):
        if change is None or change.empty:
            return None
        sel = change[(change["method"] == method) & (change["metric"] == "entropy")]
        return sel.iloc[0] if len(sel) else None

    grpo, at2po = row("grpo"), row("at2po")
    out = []
    claim = "Figure 3: GRPO's policy entropy collapses (end − start of training)"
    out.append(Claim("grpo_entropy_falls", claim, "falls early", unit="nats") if grpo is None else
               Claim("grpo_entropy_falls", claim, "falls early", float(grpo["change"]),
                     float(grpo["change_low"]), float(grpo["change_high"]), "nats",
                     str(int(grpo["seeds"])), direction=-1))
    claim = "Figure 3: AT2PO's entropy is more stable than GRPO's (its change minus GRPO's)"
    if at2po is None or not np.isfinite(at2po.get("vs_baseline", np.nan)):
        out.append(Claim("at2po_entropy_stabler", claim, "most stable", unit="nats"))
    else:
        out.append(Claim("at2po_entropy_stabler", claim, "most stable",
                         float(at2po["vs_baseline"]), float(at2po["vs_baseline_low"]),
                         float(at2po["vs_baseline_high"]), "nats",
                         f"{int(at2po['seeds'])} vs {int(grpo['seeds'])}",
                         note="> 0: AT2PO lost less entropy than GRPO"))
    return out


def _turn_claims(outcomes, n_resamples) -> list[Claim]:
    from .figure4 import PAPER_MULTIHOP_MEAN_TURNS, PAPER_SINGLEHOP_ONE_TURN_SHARE, turn_summary

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
                 n_resamples: int = stats.DEFAULT_RESAMPLES
                 ) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """``(tidy, display)``: one row per claim, in the order of the module doc. ``change`` is
    :func:`~at2po_lib.reporting.curves.start_end_table` with GRPO as the baseline."""
    import pandas as pd

    groups = groups_of(outcomes["dataset"].unique()) if len(outcomes) else {}
    claims = [_rl_over_react(outcomes, groups, n_resamples),
              _over_grpo(outcomes, groups, n_resamples),
              _over_grpo(outcomes, groups, n_resamples, metric="sampled_em"),
              _strongest_baseline(outcomes, groups, n_resamples),
              _strongest_baseline(outcomes, groups, n_resamples, metric="sampled_em"),
              _multihop_gain_larger(outcomes, groups, n_resamples),
              *_ablation_steps(outcomes, groups, n_resamples),
              *_credit_claims(outcomes, groups, n_resamples),
              *_entropy_claims(change),
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
    import json
    from pathlib import Path

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
                           ("one seed", "One seed on a side, so not read yet:"),
                           ("not run yet", "Not run yet:")):
        names = verdicts.loc[verdicts["reading"] == reading, "short"].tolist()
        if names:
            text += f" {words} {'; '.join(names)}."
    return text + "\n"
