r"""What each part of AT2PO does on the toy, one row per mechanism, read from the dissection's
records (``results/<profile>/dissection/``, written by ``at2po dissect``) and the study's
claims (``claims.csv``).

Rows, in the order a training step meets them:

- **expansion**: how often re-sampling the turns a score picks flips the outcome, against
  picking uniformly (:mod:`at2po_lib.analysis.expansion_oracle`); per policy and tree shape,
  for the authors' score (mean sampled-token NLL − α·b), its two parts alone (entropy only,
  α = 0; the sibling penalty only), the placebo (a random score) and the perfect picker
  (held-out: a lower bound on the ceiling, with the in-sample upper bound beside it);
  intervals over prompts. A score reads better or worse than a uniform pick only outside the
  placebo's margin (:func:`~at2po_lib.analysis.expansion_oracle.placebo_margin`);
- **credit**: how far AT2PO's softmax weights sit from the plain child mean, mean
  |w − 1/n| over sibling sets, at the first and the last rollout step
  (:func:`at2po_lib.analysis.dissection.credit_from_runs`), with the fitted c of
  |w − 1/n| ≈ c·Δ/n (Δ: the siblings' entropy range); the interval of c is over trees;
  beside it, the credit against TinyWorld's truth (AUC of the turn advantages for the turns the
  question's plan needs, minus GRPO's; ``credit_accuracy.csv``, with a sharper softmax τ as a
  what-if) and Table 3's claim that entropy weights beat the child mean;
- **loss**: the claim rows on the turn-level ratio: the share of model tokens it clips against a
  token-level ratio on the same AT2PO updates, and Table 2's step 2;
- **whole**: the claim rows that put the parts together (the tree against as many chains, AT2PO
  against GRPO, the authors' settings against the exact-entropy variant).

Claim rows are copied from ``claims.csv`` (:mod:`.claims`) with their seeds and reading.

Each row names the records it rests on. Nothing here is typed in: a missing record leaves its
row out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..analysis.expansion_oracle import (
    PLACEBO,
    SHAPES,
    SUMMARY_SHAPES,
    load_oracle,
    penalty_effect,
    placebo_margin,
    read_summaries,
    versus_uniform,
)
from ..evaluation.stats import PLANNING_HALF_WIDTH, fewest_pairs_for_direction
from ..study.block_records import ABLATION_SET, HEADLINE_SET
from ..util.paths import results_dir
from ..util.provenance import read_meta
from .claims import ALPHA

ORACLE_POLICIES = {
    "warmstart": "the warm start",
    "trained": "AT2PO seed 0 after training",
    "trained_rerun": "AT2PO seed 0 retrained on another machine build",
}
"""Oracle policy name (``--name`` of ``at2po dissect expansion``) -> what it is (the same names
as :data:`at2po_lib.analysis.expansion_oracle.SUMMARY_POLICIES`, which notebook 02's sentence
uses; a test checks they agree)."""
ORACLE_SHAPES = {"toy": "toy tree (M = 4, K = 4)", "paper": "paper's tree (M = 10, K = 6)"}
ORACLE_SCORES = {
    "authors_score": "the authors' score (NLL − α·b)",
    "entropy_nll": "entropy only (α = 0)",
    "sibling_penalty": "the sibling penalty only (−α·b)",
    PLACEBO: "the placebo (a random score)",
    "oracle": "the perfect picker",
}
"""The scores shown (every score's row is in the oracle's own summary files); the perfect
picker's row carries its in-sample upper bound (``oracle_in_sample``) beside it."""
UPPER_BOUND = "oracle_in_sample"
CREDIT_CLAIMS = ("entropy_weights_over_child_mean",)
LOSS_CLAIMS = ("turn_ratio_clips_less", "turn_ratio_clips_less_at_reference", "ablation_step2")
WHOLE_CLAIMS = ("at2po_over_grpo_budget", "at2po_over_grpo", "authors_over_exact_variant")


def _read(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path) if path.is_file() else None


def _number(value: Any) -> float:
    """A claim cell as a float; NaN for a missing or non-numeric one (``None``, ``"–"``)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _row(
    part: str, question: str, measured: str, basis: str, estimate: float, low: float, high: float
) -> dict:
    return {
        "part": part,
        "question": question,
        "measured": measured,
        "basis": basis,
        "estimate": estimate,
        "ci_low": low,
        "ci_high": high,
    }


def _ratio(s: pd.Series) -> str:
    return (
        f"{s['flips_vs_uniform']:.2f}× [{s['flips_vs_uniform_lo']:.2f}, "
        f"{s['flips_vs_uniform_hi']:.2f}]"
    )


def expansion_rows(folder: Path) -> list[dict]:
    """One row per (policy, shape) oracle summary and score of :data:`ORACLE_SCORES`: its
    flips against uniform picks and, for a score, its reading against the placebo's margin
    over every cell; the perfect picker's row gives its lower and upper bound."""
    margin = placebo_margin(read_summaries(folder))
    rows = []
    for policy, policy_label in ORACLE_POLICIES.items():
        for shape, shape_label in ORACLE_SHAPES.items():
            summary = _read(folder / f"expansion_oracle_{policy}_{shape}_summary.csv")
            if summary is None:
                continue
            summary = summary.set_index("score")
            for score, score_label in ORACLE_SCORES.items():
                if score not in summary.index:
                    continue
                s = summary.loc[score]
                if score == "oracle":
                    upper = (
                        f"; in-sample upper bound {_ratio(summary.loc[UPPER_BOUND])}"
                        if UPPER_BOUND in summary.index
                        else ""
                    )
                    measured = f"at least {_ratio(s)} (held-out halves{upper})"
                elif score == PLACEBO:
                    measured = f"{_ratio(s)} (true value 1: chance)"
                else:
                    reading = versus_uniform(
                        s["flips_vs_uniform_lo"], s["flips_vs_uniform_hi"], margin
                    )
                    measured = f"{_ratio(s)}: {reading} (placebo margin ±{margin:.2f})"
                rows.append(
                    _row(
                        "expansion",
                        f"{score_label}: flips per re-sample vs uniform picks, "
                        f"{policy_label}, {shape_label}",
                        measured,
                        f"{int(s['prompts'])} prompts, {int(s['candidates'])} candidates, "
                        f"{int(s['resamples'])} re-samples each, K = {int(s['k'])}",
                        s["flips_vs_uniform"],
                        s["flips_vs_uniform_lo"],
                        s["flips_vs_uniform_hi"],
                    )
                )
    return rows


def credit_rows(folder: Path, method: str = "at2po", estimate: str = "nll") -> list[dict]:
    """AT2PO's weights' distance from the child mean at the first and last rollout step."""
    fits = _read(folder / "credit_spread.csv")
    if fits is None or "method" not in fits:
        return []
    fits = fits[(fits["method"] == method) & (fits["estimate"] == estimate)]
    rows = []
    for fit in fits.itertuples():
        rows.append(
            _row(
                "credit",
                f"mean |w − 1/n| of AT2PO's softmax weights, {fit.stage} rollout step "
                f"(sampled-token NLL; siblings' range {fit.mean_range:.3f} nats)",
                f"{fit.mean_dev:.3f} (c = {fit.c:.2f} [{fit.c_lo:.2f}, {fit.c_hi:.2f}])",
                f"{fit.sibling_sets} sibling sets in {fit.trees} trees",
                fit.mean_dev,
                np.nan,
                np.nan,
            )
        )
    return rows


CREDIT_RECORDS = {
    "default": "the warm start's trees",
    "warmstart_authors": "the warm start's trees",
    "trained_authors": "the trees of AT2PO seed 0 retrained on another machine build",
}
"""Credit-accuracy record (``default`` = ``credit_accuracy.csv``, else the ``--name`` of
``at2po credit-accuracy``) -> whose trees it scored; the entropy estimate and α are read from
the record's ``.meta.json``."""
ESTIMATE_NAMES = {"exact": "exact entropy", "sampled_nll": "sampled-token NLL"}


def credit_records(profile: str) -> dict[str, Path]:
    """Every credit-accuracy record of ``profile`` by name: ``default`` for
    ``credit_accuracy.csv``, ``<name>`` for ``dissection/credit_accuracy_<name>.csv``; the
    records of :data:`CREDIT_RECORDS` first, in its order, then the others by name."""
    results = results_dir(profile)
    paths = {"default": results / "credit_accuracy.csv"}
    paths |= {
        p.stem.removeprefix("credit_accuracy_"): p
        for p in sorted((results / "dissection").glob("credit_accuracy_*.csv"))
    }
    known = [name for name in CREDIT_RECORDS if name in paths]  # warm start before trained
    ordered = known + [name for name in paths if name not in CREDIT_RECORDS]
    return {name: paths[name] for name in ordered if paths[name].is_file()}


def default_credit_cells(table: pd.DataFrame) -> pd.DataFrame:
    """AT2PO's default credit (``entropy_softmax`` / ``node_value``) on its own (entropy) trees
    over every scored turn, one row per softmax temperature."""
    keep = (
        (table["credit_mode"] == "at2po")
        & (table["value_mode"] == "entropy_softmax")
        & (table["advantage_mode"] == "node_value")
        & (table["turns"] == "all")
        & (table["rollout"] == "entropy")
    )
    return table[keep].sort_values("softmax_temperature")


def credit_record_label(name: str, path: Path) -> str:
    """Whose trees and which settings: from :data:`CREDIT_RECORDS` and the record's meta."""
    rollout = read_meta(path).get("config") or {}
    settings = ESTIMATE_NAMES.get(rollout.get("entropy_estimate"), rollout.get("entropy_estimate"))
    if settings and rollout.get("tree_alpha") is not None:
        settings += f", α = {rollout['tree_alpha']:g}"
    trees = CREDIT_RECORDS.get(name, f"the policy of record {name!r}")
    return f"{trees}; {settings}" if settings else trees


def credit_truth_rows(profile: str, temperatures: tuple[float, ...] = (1.0, 0.01)) -> list[dict]:
    """AT2PO's default credit against TinyWorld's ground truth (every turn labelled useful or
    not from the question's plan), per credit-accuracy record (:func:`credit_records`): its AUC
    minus GRPO's on the same turns, at the softmax temperatures ``temperatures`` (τ < 1
    sharpens the entropy weights)."""
    rows = []
    for name, path in credit_records(profile).items():
        mine = default_credit_cells(_read(path))
        label = credit_record_label(name, path)
        for tau in temperatures:
            found = mine[np.isclose(mine["softmax_temperature"], tau)]
            if not len(found):
                continue
            r = found.iloc[0]
            rows.append(
                _row(
                    "credit",
                    f"AUC of AT2PO's turn advantages for the useful turns minus GRPO's, "
                    f"softmax τ = {tau:g} ({label}; TinyWorld's plans label the turns)",
                    f"{r['delta_vs_grpo']:+.3f} [{r['delta_low']:+.3f}, {r['delta_high']:+.3f}] "
                    f"(AUC {r['auc']:.3f})",
                    f"{int(r['n_prompts'])} prompts, {int(r['n_turns'])} turns",
                    r["delta_vs_grpo"],
                    r["delta_low"],
                    r["delta_high"],
                )
            )
    return rows


def claim_rows(claims: pd.DataFrame | None, part: str, keys: tuple[str, ...]) -> list[dict]:
    """The claim rows ``keys`` of ``claims.csv`` under ``part``, as the claims table reads them
    (estimate and interval already in the claim's unit)."""
    if claims is None:
        return []
    rows = []
    for key in keys:
        c = _claim(claims, key)
        if c is None:
            continue
        unit = "EM points" if c["unit"] == "EM points" else c["unit"]
        rows.append(
            _row(
                part,
                c["claim"],
                f"{_ci_text(c)} {unit} ({c['reading']})",
                _rests_on(c)
                + (
                    f", {int(c['n_questions'])} questions"
                    if np.isfinite(_number(c["n_questions"]))
                    else ""
                ),
                c["estimate"],
                c["ci_low"],
                c["ci_high"],
            )
        )
    return rows


def dissection_summary(
    profile: str, claims: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)``: the rows of the module docstring that have records."""
    folder = results_dir(profile, "dissection")
    tidy = pd.DataFrame(
        expansion_rows(folder)
        + credit_rows(folder)
        + credit_truth_rows(profile)
        + claim_rows(claims, "credit", CREDIT_CLAIMS)
        + claim_rows(claims, "loss", LOSS_CLAIMS)
        + claim_rows(claims, "whole", WHOLE_CLAIMS),
        columns=["part", "question", "measured", "basis", "estimate", "ci_low", "ci_high"],
    )
    tidy.insert(0, "profile", profile)
    display = tidy[["part", "question", "measured", "basis"]].set_index("part")
    return tidy, display


def _rests_on(row: pd.Series) -> str:
    """What a claim row's number rests on, in words: ``seeds 12 vs 21`` for seeds of the
    committed runs, ``3 blocks`` where the study's blocks pair it."""
    seeds = str(row["seeds"])
    return seeds if seeds.endswith("blocks") else f"seeds {seeds}"


def _ci_text(row: pd.Series) -> str:
    """``+1.2 [-0.3, +2.7]``: a claim row's estimate and interval, in its unit; a share gap of a
    few hundredths of a point with two decimals (``+0.01 [-0.03, +0.05]``, never ``+0.0 [-0.0,
    +0.0]`` beside a sentence that gives the hundredths)."""
    small = row.get("unit") == "%" and max(abs(row["ci_low"]), abs(row["ci_high"])) < 0.5
    digits = 2 if small else 1
    return (
        f"{row['estimate']:+.{digits}f} [{row['ci_low']:+.{digits}f}, {row['ci_high']:+.{digits}f}]"
    )


def _claim(claims: pd.DataFrame, key: str) -> pd.Series | None:
    found = claims[claims["key"] == key] if claims is not None else ()
    if not len(found) or not np.isfinite(_number(found.iloc[0]["estimate"])):
        return None
    return found.iloc[0]


def _oracle(parts: pd.DataFrame, score: str, policy: str, shape: str) -> pd.Series | None:
    mask = (
        (parts["part"] == "expansion")
        & parts["question"].str.startswith(score)
        & parts["question"].str.contains(policy, regex=False)
        & parts["question"].str.contains(shape, regex=False)
    )
    return parts[mask].iloc[0] if mask.any() else None


def _versus_uniform(row: pd.Series) -> str:
    """The reading :func:`expansion_rows` wrote into a score's ``measured`` cell."""
    reading = str(row["measured"]).split(": ", 1)[1].split(" (", 1)[0]
    return {"better": "better than", "worse": "worse than", "no different": "no different from"}[
        reading
    ] + " a uniform pick"


def _bounds(row: pd.Series) -> tuple[str, str]:
    """(``1.16× [1.13, 1.19]``, ``1.35× [1.32, 1.38]``): the perfect picker's lower bound and
    in-sample upper bound ("" when the record has none), as :func:`expansion_rows` wrote them."""
    text = str(row["measured"]).removeprefix("at least ")
    lower, _, rest = text.partition(" (held-out halves")
    return lower, rest.partition("in-sample upper bound ")[2].rstrip(")")


def _span(row: pd.Series) -> str:
    lower, upper = _bounds(row)
    return f"{lower} to {upper}" if upper else lower


def _reading(row: pd.Series) -> str:
    """A claim's reading, with why an interval that excludes 0 still reads "cannot tell"."""
    held = row.get("held_back")
    return row["reading"] + (f" ({held})" if isinstance(held, str) and held else "")


def _result_sentence(claims: pd.DataFrame | None) -> str | None:
    head = _claim(claims, "at2po_over_grpo")
    if head is None:
        return None
    paper = float(str(head["published"]).replace("+", ""))
    if head["ci_low"] <= paper <= head["ci_high"]:
        where = "inside the interval: the toy cannot rule it out"
    else:
        where = (
            ("above" if head["ci_high"] < paper else "below")
            + " the interval"
            + _against(
                head,
                "the toy's AT2PO does not reach the paper's gain"
                if head["ci_high"] < paper
                else "the toy's AT2PO exceeds the paper's gain",
            )
        )
    bound = _number(head.get("ruled_out", np.nan))
    ruled_out = (
        f" The interval rules out any AT2PO gain over GRPO above {bound:+.1f} EM points (95%)."
        if np.isfinite(bound)
        else ""
    )
    return (
        f"**The result.** AT2PO minus GRPO on the multi-hop average is {_ci_text(head)} EM "
        f"points ({_rests_on(head)}, {int(head['n_questions'])} questions): "
        f"{_reading(head)}.{ruled_out} The paper's {paper:+.1f} lies {where}."
    )


def _against(head: pd.Series, verdict: str) -> str:
    """What a reading against the paper's number adds to "outside the interval": the verdict
    only where the sign-flip test of the block differences against that number agrees at
    0.05, as every reading against 0 needs."""
    p = float(head.get("p_vs_published", np.nan))
    if not np.isfinite(p):
        return " (no permutation test against it: the interval alone)"
    if p < ALPHA:
        return f", and the sign-flip test against it agrees (p = {p:.3f}): {verdict}"
    return f", but the sign-flip test against it does not agree (p = {p:.3f}): cannot tell"


def _budget_sentence(claims: pd.DataFrame | None) -> str | None:
    budget = _claim(claims, "at2po_over_grpo_budget")
    if budget is None:
        return None
    reading = (
        "one seed on a side, not read yet" if budget["reading"] == "one seed" else _reading(budget)
    )
    return (
        f"**The tree against as many chains.** AT2PO minus GRPO sampling as many chains as "
        f"the tree has leaves: {_ci_text(budget)} ({_rests_on(budget)}): {reading}."
    )


def _expansion_sentence(parts: pd.DataFrame) -> str | None:
    picks = _oracle(parts, "the authors' score", "the warm start", "toy tree")
    ceiling = _oracle(parts, "the perfect picker", "the warm start", "toy tree")
    if picks is None or ceiling is None:
        return None
    margin = str(picks["measured"]).split("placebo margin ", 1)[1].rstrip(")")
    text = (
        f"**What the expansion's picks find.** Re-sampling the turns the authors' score picks "
        f"flips the outcome {_ratio_text(picks)} as often as re-sampling uniform picks "
        f"({picks['basis']}): {_versus_uniform(picks)}, where better or worse must clear "
        f"the placebo's margin of {margin} (a random score's largest distance from 1 over "
        f"the cells). A perfect picker would reach at least {_bounds(ceiling)[0]} (ranked "
        "on half the re-samples and scored on the other half: a lower bound on what a "
        "score could reach)"
        + (
            f" and at most {_bounds(ceiling)[1]} (ranked and scored on all of them)"
            if _bounds(ceiling)[1]
            else ""
        )
        + "."
    )
    others = []
    for policy in ORACLE_POLICIES.values():
        for shape in ORACLE_SHAPES.values():
            other = _oracle(parts, "the authors' score", policy, shape)
            best = _oracle(parts, "the perfect picker", policy, shape)
            if other is None or best is None or other.name == picks.name:
                continue
            prompts = str(other["basis"]).split(",")[0]
            others.append(
                f"{policy}, {shape}: {_ratio_text(other)}, "
                f"{_versus_uniform(other)}, ceiling {_span(best)} ({prompts})"
            )
    if others:
        text += " Elsewhere: " + "; ".join(others) + "."
    alone = []
    for score in ("entropy only (α = 0)", "the sibling penalty only (−α·b)"):
        cells = [
            row
            for policy in ORACLE_POLICIES.values()
            for shape in ORACLE_SHAPES.values()
            if (row := _oracle(parts, score, policy, shape)) is not None
        ]
        if cells:
            readings = [str(c["measured"]).split(": ", 1)[1].split(" (", 1)[0] for c in cells]
            alone.append(
                f"{score}: {min(c['estimate'] for c in cells):.2f}× to "
                f"{max(c['estimate'] for c in cells):.2f}× over the {len(cells)} cells ("
                + ", ".join(f"{readings.count(r)} {r}" for r in dict.fromkeys(readings))
                + " than a uniform pick)"
            )
    if alone:
        text += " The score's parts alone: " + "; ".join(alone) + "."
    return text


def _ratio_text(row: pd.Series) -> str:
    """The ``1.03× [0.99, 1.07]`` part of a score's ``measured`` cell."""
    return str(row["measured"]).split(":", 1)[0]


def penalty_sentence(folder: Path) -> str | None:
    """What α·b does to the authors' pick, from every oracle record of ``folder``
    (:func:`~at2po_lib.analysis.expansion_oracle.penalty_effect`) and the summaries' rank
    correlations; None without records."""
    effects, spearman = [], []
    for policy in ORACLE_POLICIES:
        for shape in ORACLE_SHAPES:
            raw = folder / f"expansion_oracle_{policy}_{shape}.csv"
            summary = _read(folder / f"expansion_oracle_{policy}_{shape}_summary.csv")
            if not raw.is_file() or summary is None:
                continue
            effects.append({**penalty_effect(load_oracle(raw), SHAPES[shape][1]), "shape": shape})
            spearman.append(float(summary.set_index("score").loc["authors_score", "spearman"]))
    if not effects:
        return None
    e = pd.DataFrame(effects)

    def span(column: str, scale: float = 1.0, digits: int = 2) -> str:
        low, high = scale * e[column].min(), scale * e[column].max()
        return (
            f"{low:.{digits}f}"
            if round(low, digits) == round(high, digits)
            else f"{low:.{digits}f}–{high:.{digits}f}"
        )

    more = int((e["p_flip_first"] > e["p_flip_deeper"]).sum())
    penalties = e.groupby("shape", sort=False)["penalty_first"].mean()
    shown = ", ".join(f"{v:.2f} on the {SUMMARY_SHAPES.get(k, k)}" for k, v in penalties.items())
    return (
        f"**What α·b does to the pick.** Every first-turn candidate of a first-round tree has "
        f"b = M − 1 siblings, so α·b ({shown}) moves all first turns below the deeper "
        f"ones, whose b is 0: it exceeds the "
        f"turn's own entropy for {span('penalty_exceeds_entropy', 100, 0)}% of them, and first "
        f"turns make {span('first_in_picks', 100, 0)}% of the authors' picks against "
        f"{span('first_in_picks_alpha0', 100, 0)}% at α = 0, though they flip more often than "
        f"deeper turns in {more} of the {len(e)} cells ({span('p_flip_first')} against "
        f"{span('p_flip_deeper')}). The authors' score's within-tree rank correlation with "
        f"the flip probability lies between {min(spearman):+.3f} and {max(spearman):+.3f} "
        f"over the {len(spearman)} cells ({sum(v < 0 for v in spearman)} negative)."
    )


def _credit_sentence(parts: pd.DataFrame, claims: pd.DataFrame | None = None) -> str | None:
    credit = parts[parts["part"] == "credit"]
    first = credit[credit["question"].str.contains("first rollout")]
    last = credit[credit["question"].str.contains("last rollout")]
    if not (len(first) and len(last)):
        return None
    first, last = first.iloc[0], last.iloc[0]
    text = (
        f"**Why turn-wise credit is the child mean here.** A softmax ignores a common shift "
        f"of the siblings' entropies, so only their spread moves a weight; AT2PO's weights "
        f"sit {first['estimate']:.3f} from the child mean 1/n at the first rollout step and "
        f"{last['estimate']:.3f} at the last ({first['basis']}; {last['basis']})."
    )
    truth = credit[
        credit["question"].str.startswith("AUC")
        & credit["question"].str.contains("τ = 1 ", regex=False)
    ]
    if len(truth):
        cells = [
            f"{t['measured']} ({t['question'].split('τ = 1 (', 1)[1].split(';', 1)[0]}, "
            f"{t['question'].split('; ', 1)[1].split('; TinyWorld', 1)[0]}: {t['basis']})"
            for _, t in truth.iterrows()
        ]
        text += (
            " Against TinyWorld's truth (which turns a question's plan needs), the AUC of "
            "AT2PO's turn advantages for the useful turns differs from GRPO's by "
            + "; ".join(cells)
            + "."
        )
    cell = _claim(claims, "entropy_weights_over_child_mean")
    if cell is not None:
        text += (
            f" Table 3's entropy-weighted cell minus the plain child mean: {_ci_text(cell)} "
            f"EM points ({_rests_on(cell)}): {_reading(cell)}."
        )
    return text


def _clip_sentence(claims: pd.DataFrame | None) -> str | None:
    clip = _claim(claims, "turn_ratio_clips_less")
    if clip is None:
        return None
    own = str(clip["claim"]).split("updates at ", 1)[-1].split(",", 1)[0]
    text = (
        f"**The turn-level ratio.** On AT2PO's own updates at {own} it clips "
        f"{str(clip['note']).split(', ', 1)[0]} (turn − token {_ci_text(clip)} points, "
        f"{clip['seeds']} seeds): {_reading(clip)} of the paper's reading; a clipped turn "
        "takes all its tokens with it."
    )
    wide = _claim(claims, "turn_ratio_clips_less_at_reference")
    if wide is not None:
        share, _, whose = str(wide["note"]).partition(", ")
        text += (
            f" At ε = 0.2 ({whose.split(';', 1)[0]}): {share} (turn − token "
            f"{wide['estimate']:+.2f} [{wide['ci_low']:+.2f}, {wide['ci_high']:+.2f}] "
            f"points, {wide['seeds']} runs): {_reading(wide)}; the reading depends on ε."
        )
    return text


def _variant_sentence(claims: pd.DataFrame | None) -> str | None:
    variant = _claim(claims, "authors_over_exact_variant")
    if variant is None:
        return None
    return (
        f"**The authors' settings against the exact-entropy variant.** AT2PO as the authors' "
        f"code configures it minus the variant (exact entropy, α = 0.001): "
        f"{_ci_text(variant)} EM points ({_rests_on(variant)}): {_reading(variant)}."
    )


def _resolution_sentence(
    claims: pd.DataFrame | None,
    blocks_needed: int | None = None,
    ablation: tuple[int, int] | None = None,
    closed: Mapping[str, int] | None = None,
) -> str | None:
    """The headline's width, what it can resolve, and, given ``ablation`` = (finished ablation
    blocks, Table 3 cells tested), how many ablation blocks a Table 2 step and a Table 3 cell
    need before their tests can read a direction at all. ``closed``: {block set: the count it
    is closed at} (:func:`at2po_lib.reporting.block_pairs.closed_sets`, the looks rule). A
    closed headline set is said to be final, with no projection of further blocks; an open
    one (blocked, not in ``closed``) gets ``blocks_needed``, how many blocks would narrow it
    to ±PLANNING_HALF_WIDTH at the spread its block differences have so far, as a count to
    fix before its next look."""
    closed = dict(closed or {})
    head = _claim(claims, "at2po_over_grpo")
    if head is None:
        return None
    half = (head["ci_high"] - head["ci_low"]) / 2
    steps = [_claim(claims, f"ablation_step{i}") for i in (2, 3, 4)]
    published = sorted(
        _number(s["published"])
        for s in steps
        if s is not None and np.isfinite(_number(s["published"]))
    )
    text = (
        f"**What the toy cannot resolve.** The headline interval is ±{half:.1f} EM points "
        f"at {_rests_on(head)}: a difference smaller than that reads "
        '"cannot tell" whatever its sign.'
    )
    if published:
        smaller = sum(p < half for p in published)
        text += (
            f" {smaller} of the paper's {len(published)} ablation steps ("
            + ", ".join(f"{p:+.2f}" for p in published)
            + ") are smaller than that."
        )
    measured = [s for s in steps if s is not None and np.isfinite(_number(s["estimate"]))]
    if measured:  # the toy's own steps, as wide as they are (not assumed wider)
        halves = [(s["ci_high"] - s["ci_low"]) / 2 for s in measured]
        text += (
            f" The toy's Table 2 steps are ±{min(halves):.1f} to ±{max(halves):.1f} points wide "
            f"({'; '.join(sorted({_rests_on(s) for s in measured}))})."
        )
    text += _detectable_text(head, steps)
    blocked = str(head["seeds"]).endswith("blocks")
    if blocked and HEADLINE_SET in closed:
        text += (
            f" The headline set is closed at {closed[HEADLINE_SET]} blocks (the rule in force: "
            'docs/toy_study.md, "The looks the study took"): its verdicts are final and no '
            "block is added to narrow them; a narrower interval needs a new set, its block "
            "count fixed before its first block."
        )
    elif blocked and blocks_needed is not None:
        text += (
            f" At the spread of the headline's block differences so far, about {blocks_needed} "
            f"blocks would narrow it to ±{100 * PLANNING_HALF_WIDTH:.0f} points (a rough guide: "
            "the spread is measured on few blocks; a count to fix before the next look, not "
            "a reason to look again)."
        )
    if ablation is not None:
        finished, cells = ablation
        text += (
            f" A sign-flip test over n blocks gives no p below 2/2^n, so a Table 2 step can "
            f"read a direction from {fewest_pairs_for_direction(1, ALPHA)} ablation blocks on "
            f"and a Table 3 cell (Holm over its {cells} cells) from "
            f"{fewest_pairs_for_direction(cells, ALPHA)}; {finished} "
            f"{'is' if finished == 1 else 'are'} finished"
            + (
                f", and the ablation set is closed there ({closed[ABLATION_SET]} blocks)."
                if ABLATION_SET in closed
                else "."
            )
        )
    return text


def _span_of(values: list[float]) -> str:
    """``0.09`` when the values agree to two decimals, else ``0.05 to 0.09``."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low} to {high}"


def _detectable_text(head: pd.Series, steps: list[pd.Series | None]) -> str:
    """The smallest effects the headline's and Table 2's blocks detect at 80% power
    (``detectable_80``, :attr:`~at2po_lib.reporting.claims.Claim.detectable`), and which
    "cannot tell" is underpowered against the paper's number; "" without the columns."""
    detect = _number(head.get("detectable_80", np.nan))
    if not np.isfinite(detect):
        return ""
    text = (
        f" At its blocks' spread the headline detects a difference of {detect:.1f} points at "
        f"80% power (power {_number(head['power_at_published']):.2f} at the paper's "
        f"{head['published']})."
    )
    measured = [s for s in steps if s is not None and np.isfinite(_number(s["detectable_80"]))]
    if measured:
        weak = [s for s in measured if str(s["underpowered"]) == "True"]
        lows = [_number(s["detectable_80"]) for s in measured]
        text += (
            f" Table 2's steps detect {min(lows):.1f} to {max(lows):.1f} points"
            + (
                ': their "cannot tell" is underpowered against the paper\'s '
                + " and ".join(str(s["published"]) for s in weak)
                + f" (power {_span_of([_number(s['power_at_published']) for s in weak])})"
                if weak
                else ""
            )
            + "."
        )
    return text


def why_sentences(
    claims: pd.DataFrame | None,
    parts: pd.DataFrame,
    folder: Path | None = None,
    blocks_needed: int | None = None,
    ablation: tuple[int, int] | None = None,
    closed: Mapping[str, int] | None = None,
) -> list[str]:
    """The toy's result and the mechanisms behind it, one sentence each, every number read from
    ``claims`` (``claims.csv``) and ``parts`` (:func:`dissection_summary`'s tidy rows) with its
    seeds or prompts; ``blocks_needed``: the headline's projection from its blocks
    (:func:`at2po_lib.reporting.block_pairs.blocks_needed`); ``ablation``: the finished
    ablation blocks and Table 3's cells tested in them; ``closed``: the sets closed by the looks
    rule (:func:`at2po_lib.reporting.block_pairs.closed_sets`), for which no further block is
    projected. A sentence whose records are missing is left out."""
    sentences = (
        _result_sentence(claims),
        _budget_sentence(claims),
        _variant_sentence(claims),
        _expansion_sentence(parts),
        penalty_sentence(folder) if folder else None,
        _credit_sentence(parts, claims),
        _clip_sentence(claims),
        _resolution_sentence(claims, blocks_needed, ablation, closed),
    )
    return [s for s in sentences if s is not None]


def picks_table(summaries: pd.DataFrame, entropy_score: str) -> pd.DataFrame:
    """Notebook 02's §3b: per oracle record (policy and tree, in words), how often re-sampling
    the K turns the authors' score H − α·b picks flips the outcome relative to K uniform picks,
    with its 95% interval over prompts and its verdict by the placebo rule
    (:func:`~at2po_lib.analysis.expansion_oracle.versus_uniform`), and beside it the same for
    the turn entropy alone (α = 0, ``entropy_score``), named as such. Empty without records."""
    if summaries.empty:
        return pd.DataFrame()
    margin = placebo_margin(summaries)
    rows = []
    for (policy, shape), group in summaries.groupby(["policy", "shape"], sort=False):
        scores = group.set_index("score")
        row = {
            "policy": ORACLE_POLICIES.get(policy, policy),
            "tree": SUMMARY_SHAPES.get(shape, shape),
            "prompts": int(scores["prompts"].iloc[0]),
        }
        for name, score in (
            ("authors' score H − α·b", "authors_score"),
            ("entropy only", entropy_score),
        ):
            if score in scores.index:
                s = scores.loc[score]
                low, high = s["flips_vs_uniform_lo"], s["flips_vs_uniform_hi"]
                row[name] = f"{s['flips_vs_uniform']:.2f}× [{low:.2f}, {high:.2f}]"
                row[f"{name}: verdict"] = versus_uniform(low, high, margin)
        rows.append(row)
    return pd.DataFrame(rows).set_index(["policy", "tree"])
