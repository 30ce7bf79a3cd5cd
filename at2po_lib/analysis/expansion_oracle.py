r"""The expansion oracle: which turns does re-sampling change, and which score finds them?

Entropy-guided expansion (docs/method.md §5) re-samples the K candidate turns with the highest
score(n) = H(n) − α·b(n), betting that an uncertain turn is one whose re-sample changes the
outcome. This module measures the bet directly, per candidate, instead of through training.

**The oracle.** Grow M chains per prompt (the first-round state of an AT2PO tree). Every
candidate n (a non-root, non-leaf turn: what :func:`at2po_lib.method.expansion.select_entropy`
may pick, less the root, whose "re-sample" is a whole new chain) lies on exactly one chain, so
it has one original leaf ℓ(n). Re-sample n's turn R times from its context — R new children of
n's parent, each rolled out to a leaf, exactly what one expansion of n does — and call

    p_flip(n) = (1/R) Σ_r [ reward(leaf of re-sample r) ≠ reward(ℓ(n)) ]

the node's own flip probability: how likely one expansion of n yields a leaf whose outcome
differs from its sibling's, i.e. a group with signal.

**Scores** of a candidate, each read from the tree's node arrays
(:func:`at2po_lib.rollout.export.tree_arrays`): the turn's mean exact entropy, mean sampled NLL
(the authors' score at α = 0: "entropy only"), its largest and first sampled token's value of
each, its depth, the authors' full score H_nll − 0.05·b(n), the sibling penalty alone
−0.05·b(n) (``sibling_penalty``; derived from the recorded b(n) for records written before it
was a column), and ``uniform`` (a seeded random number: the uniform picker, the placebo).

**Summaries** (:func:`oracle_summary`), with 95% percentile bootstrap intervals over prompts:

- the Spearman correlation of each score with p_flip within a tree, averaged over trees (trees
  with < 3 candidates or a constant p_flip have none). R re-samples make p_flip noisy, which
  pulls every correlation toward 0 alike;
- the flips a picker expects with K picks, relative to uniform picks (K × the tree's mean
  p_flip): Σ_{top-K by score} p_flip / (K · mean p_flip), summed over prompts before dividing.
  **Ties** are broken uniformly at random, in expectation: when t candidates share the K-th
  score and j of the K picks fall among them, each counts j/t (:func:`tie_aware_flips`), so a
  score with many equal values (the sibling penalty; identical sibling turns) is not credited
  with the creation order of its ties;
- the perfect picker (``oracle``): the same ratio for the K candidates with the highest p_flip,
  ranked by the first half of the re-samples and scored on the second. Ranking and scoring on
  the same noisy estimates would favour it, so this is a *lower bound* on the best any score
  could do on that tree shape; beside it the in-sample ranking (``oracle_in_sample``: ranked and
  scored on all R re-samples), an *upper bound* (the top of noisy estimates is biased upward).

:func:`penalty_effect` reads what α·b does to the pick from the same rows: b(n) = M − 1 for
every first-turn candidate of an initial tree and 0 for the deeper ones, so the penalty moves
all first turns below the deeper turns by α(M − 1).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy import stats

from ..policy.model import load_policy
from ..protocol.prompts import get_template
from ..retrieval.indexes import build_retriever
from ..rollout.agent import Forest, Sampler, SearchEnv, score_trees
from ..rollout.trees import resample_turns
from ..rollout.export import tree_arrays, with_decisions
from ..rollout.structures import ROOT, RolloutTree
from ..util.errors import RecordError
from ..util.paths import results_dir
from ..util.provenance import read_meta, write_meta
from ..util.resumable import ResumableRecord
from ..util.storage import atomic_write
from .study_trees import policy_digest, questions_digest

AUTHORS_ALPHA = 0.05
"""The sibling penalty of the authors' score (their code's constant)."""
SCORES = (
    "entropy_exact",
    "entropy_nll",
    "entropy_exact_max",
    "entropy_nll_max",
    "entropy_exact_first",
    "entropy_nll_first",
    "depth",
    "authors_score",
    "sibling_penalty",
    "uniform",
)
"""Every score the summaries rank candidates by (module docstring)."""
PICKERS = ("oracle", "oracle_in_sample")
"""The perfect picker's two summary rows: held-out halves (a lower bound on the ceiling) and
in-sample (an upper bound)."""
SHAPES = {"toy": (4, 4), "paper": (10, 6)}
"""Tree shapes as (M chains, K picks): the ``tiny`` profile's and the paper's first round."""
DEFAULT_CHUNK = 10
"""Prompts per rollout batch (``--chunk``)."""


# --------------------------------------------------------------------------------------------
# Measuring: chains, then R re-samples of every candidate
# --------------------------------------------------------------------------------------------
def candidates(tree: RolloutTree) -> list[int]:
    """Non-root, non-leaf turns of the initial chains (module docstring)."""
    return [n.id for n in tree.nodes if n.id != ROOT and not n.is_leaf]


def chain_leaf(tree: RolloutTree, node: int) -> int:
    """The one leaf below ``node`` in a chain (every node of a chain has one child or none)."""
    while tree.nodes[node].children:
        node = tree.nodes[node].children[0]
    return node


def resample_candidates(forest: Forest, resamples: int) -> dict[tuple[int, int], list[int]]:
    """Re-sample every candidate's turn ``resamples`` times, as one expansion round of the
    rollout does (:func:`at2po_lib.rollout.trees.resample_turns`; all trees in one batched
    round); returns (tree index, candidate) → the new chains' first nodes."""
    picks = [[n for n in candidates(tree) for _ in range(resamples)] for tree in forest.trees]
    firsts = iter(resample_turns(forest, picks, 1))
    out: dict[tuple[int, int], list[int]] = {}
    for i, nodes in enumerate(picks):
        for n in nodes:
            out.setdefault((i, n), []).append(next(firsts))
    return out


def candidate_rows(
    tree: RolloutTree, row: dict[str, Any], firsts: dict[int, list[int]], rng: np.random.Generator
) -> list[dict[str, Any]]:
    """One record per candidate: its scores, decision label, original reward and the rewards
    of its re-samples (in the order they were drawn)."""
    arrays = with_decisions(tree_arrays(tree), row)
    nodes = arrays.node_arrays
    out = []
    for n, b in zip(sorted(firsts), sibling_counts_before(tree, firsts)):
        original = tree.nodes[chain_leaf(tree, n)].reward
        rewards = [tree.nodes[chain_leaf(tree, f)].reward for f in firsts[n]]
        out.append(
            {
                "prompt": tree.prompt_index,
                "question_id": row.get("id"),
                "dataset": row.get("dataset"),
                "node": n,
                "depth": int(nodes["depth"][n]),
                "decision": arrays.records[n]["decision"],
                "siblings_before": int(b),
                **{name: float(nodes[name][n]) for name in SCORES[:6]},
                "authors_score": float(nodes["entropy_nll"][n]) - AUTHORS_ALPHA * b,
                "sibling_penalty": -AUTHORS_ALPHA * b,
                "uniform": float(rng.random()),
                "original_reward": float(original),
                "resample_rewards": json.dumps([float(r) for r in rewards]),
            }
        )
    return out


def sibling_counts_before(tree: RolloutTree, firsts: dict[int, list[int]]) -> list[int]:
    """b(n), the siblings n already has (docs/method.md §5), as the expansion saw it: before
    the re-samples were added as siblings; for ``sorted(firsts)``."""
    added: dict[int, int] = {}
    for n, new in firsts.items():
        parent = tree.nodes[n].parent
        added[parent] = added.get(parent, 0) + len(new)
    return [
        len(tree.nodes[tree.nodes[n].parent].children) - 1 - added[tree.nodes[n].parent]
        for n in sorted(firsts)
    ]


def measure_chunk(
    sampler: Sampler,
    rows: Sequence[dict[str, Any]],
    *,
    chains: int,
    resamples: int,
    first_prompt: int,
) -> list[dict[str, Any]]:
    """Grow ``chains`` chains for each row (an AT2PO tree's first round), re-sample every
    candidate ``resamples`` times, score all leaves and return one record per candidate."""
    forest = Forest.plant(
        sampler,
        [r["question"] for r in rows],
        [list(r["golden_answers"]) for r in rows],
        list(range(first_prompt, first_prompt + len(rows))),
    )
    forest.grow(forest.from_roots(chains))
    firsts = resample_candidates(forest, resamples)
    score_trees(sampler.env, forest.trees)
    rng = np.random.default_rng([sampler.seed, first_prompt])
    out = []
    for i, (tree, row) in enumerate(zip(forest.trees, rows)):
        mine = {n: f for (j, n), f in firsts.items() if j == i}
        out += candidate_rows(tree, row, mine, rng)
    return out


def oracle_key(
    cfg,
    rows: Sequence[dict[str, Any]],
    policy: Path,
    *,
    chains: int,
    resamples: int,
    seed: int,
    chunk: int,
) -> dict[str, Any]:
    """Everything that determines an oracle record's rows (its resume key): the arguments, the
    questions drawn, the policy's weights (sha256 of its files) and the rollout settings."""
    return {
        "--prompts": len(rows),
        "--seed": seed,
        "--chunk": chunk,
        "--resamples": resamples,
        "chains": chains,
        "--datasets": sorted({r["dataset"] for r in rows}),
        "questions": questions_digest(rows),
        "policy_weights": policy_digest(policy),
        "rollout": asdict(cfg.rollout),
        "policy_dtype": cfg.policy.dtype,
        "template": cfg.policy.template,
    }


def _legacy_key(meta: dict[str, Any]) -> dict[str, Any]:
    """The arguments a record written before its key (``record_key``) was kept in its meta
    says it was measured with (``--chunk`` from its command; the default when absent)."""
    chunk = re.search(r"--chunk[ =](\d+)", str(meta.get("command", "")))
    shape = meta.get("shape") if isinstance(meta.get("shape"), dict) else {}
    found = {
        "--prompts": meta.get("prompts"),
        "--seed": meta.get("seed"),
        "--resamples": meta.get("resamples"),
        "chains": shape.get("chains"),
        "--datasets": sorted(meta["datasets"]) if isinstance(meta.get("datasets"), list) else None,
        "--chunk": int(chunk.group(1)) if chunk else DEFAULT_CHUNK,
    }
    return {k: v for k, v in found.items() if v is not None}


def oracle_record(out_csv: Path, key: dict[str, Any]) -> ResumableRecord:
    """The resumable record of one oracle measurement (:mod:`at2po_lib.util.resumable`)."""
    return ResumableRecord(out_csv, key, legacy_key=_legacy_key)


def run_oracle(
    cfg,
    rows: Sequence[dict[str, Any]],
    policy: Path,
    out_csv: Path,
    *,
    chains: int,
    resamples: int,
    seed: int,
    chunk: int = DEFAULT_CHUNK,
    meta: dict | None = None,
    log: bool = True,
    measure=None,
) -> pd.DataFrame:
    """:func:`measure_chunk` over ``rows`` in chunks of ``chunk`` prompts (chunk c samples with
    seed ``seed + c``), each kept whole as it finishes, then ``out_csv`` written at once with
    its ``.meta.json`` (``meta`` plus ``record_key``). A rerun with the same arguments resumes
    (a resumed record equals an uninterrupted one) or, when finished, only reads it; other
    arguments are refused, naming the ones it was measured with. ``measure(first, part)``: the
    records of one chunk instead of a rollout (tests)."""
    key = oracle_key(cfg, rows, policy, chains=chains, resamples=resamples, seed=seed, chunk=chunk)
    record = oracle_record(out_csv, key)
    if record.check_finished():
        return load_oracle(out_csv)
    record.start()
    todo = [c for c in range((len(rows) + chunk - 1) // chunk) if c not in record.done()]
    if todo and measure is None:
        measure = _rollout_measure(cfg, policy, chains, resamples, seed, chunk)
    start = time.perf_counter()
    for c in todo:
        first = c * chunk
        part = rows[first : first + chunk]
        record.add(c, measure(first, part))
        if log:
            print(
                f"  oracle: prompts {first}-{first + len(part) - 1} of {len(rows)}, "
                f"{time.perf_counter() - start:.0f} s",
                flush=True,
            )
    frame = pd.DataFrame(record.rows())
    if frame.empty:
        raise RecordError(f"{out_csv}: no prompt had a candidate turn; nothing to record")
    atomic_write(out_csv, frame.to_csv(index=False))
    write_meta(out_csv, {**(meta or {}), "record_key": key})
    record.close()
    return load_oracle(out_csv)


def _rollout_measure(cfg, policy: Path, chains: int, resamples: int, seed: int, chunk: int):
    """``measure(first, part)`` for :func:`run_oracle`: the policy rolled out, chunk ``c`` (its
    first prompt ``c * chunk``) with seed ``seed + c``."""
    rollout_cfg = replace(cfg.rollout, keep_cache=True)
    torch.set_num_threads(max(rollout_cfg.num_threads, 1))
    model, tokenizer = load_policy(policy, cfg.policy.dtype)
    template = get_template(cfg.policy.template)
    env = SearchEnv(tokenizer, template, build_retriever(cfg, build=False), rollout_cfg)

    def measure(first: int, part: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        sampler = Sampler.from_model(model, env, seed=seed + first // chunk)
        return measure_chunk(sampler, part, chains=chains, resamples=resamples, first_prompt=first)

    return measure


def load_oracle(path: Path) -> pd.DataFrame:
    """An oracle CSV with ``flips`` (count), ``resamples`` and ``p_flip`` added."""
    frame = pd.read_csv(path)
    rewards = frame["resample_rewards"].map(json.loads)
    frame["resamples"] = rewards.map(len)
    frame["flips"] = [sum(r != o for r in rs) for rs, o in zip(rewards, frame["original_reward"])]
    frame["p_flip"] = frame["flips"] / frame["resamples"]
    if "sibling_penalty" not in frame:  # records written before the score existed
        frame["sibling_penalty"] = -AUTHORS_ALPHA * frame["siblings_before"]
    return frame


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------
def half_flip_rates(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """p_flip from the first and from the second half of each candidate's re-samples."""
    rewards = frame["resample_rewards"].map(json.loads)
    first, second = [], []
    for rs, o in zip(rewards, frame["original_reward"]):
        h = len(rs) // 2
        first.append(np.mean([r != o for r in rs[:h]]) if h else np.nan)
        second.append(np.mean([r != o for r in rs[h:]]))
    return np.array(first), np.array(second)


def tie_aware_flips(score: np.ndarray, p_flip: np.ndarray, k: int) -> float:
    r"""Expected Σ p_flip of the top-``k`` candidates by ``score`` when ties are broken
    uniformly at random: every candidate above the k-th score counts whole; the t candidates
    tied at it share the j picks left, each counting j/t.

    .. math::  E = \sum_{s_n > s_{(k)}} p_n + \frac{k - \#\{s_n > s_{(k)}\}}{\#\{s_n = s_{(k)}\}}
               \sum_{s_n = s_{(k)}} p_n
    """
    score, p_flip = np.asarray(score, float), np.asarray(p_flip, float)
    k = min(k, len(score))
    if k == 0:
        return 0.0
    kth = np.sort(score)[::-1][k - 1]
    above, tied = score > kth, score == kth
    return float(p_flip[above].sum() + (k - above.sum()) * p_flip[tied].mean())


def per_prompt(frame: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per prompt: each score's Spearman with p_flip (NaN when undefined), and the flips each
    picker expects with ``k`` picks, ties broken at random in expectation
    (:func:`tie_aware_flips`): ``picked_<score>``, ``picked_oracle`` (ranked by one half of the
    re-samples, scored on the other) and ``picked_oracle_in_sample`` (ranked and scored on all),
    beside ``uniform_expected`` = k' × mean p_flip (k' = min(k, candidates))."""
    frame = frame.copy()
    frame["rank_half"], frame["eval_half"] = half_flip_rates(frame)
    rows = []
    for prompt, group in frame.groupby("prompt", sort=True):
        picks = min(k, len(group))
        row: dict[str, Any] = {
            "prompt": prompt,
            "candidates": len(group),
            "uniform_expected": picks * group["p_flip"].mean(),
            "uniform_expected_eval_half": picks * group["eval_half"].mean(),
        }
        varied = len(group) >= 3 and group["p_flip"].nunique() > 1
        p_flip = group["p_flip"].to_numpy()
        for score in SCORES:
            values = group[score].to_numpy()
            row[f"spearman_{score}"] = (
                stats.spearmanr(values, p_flip).statistic
                if varied and np.unique(values).size > 1
                else np.nan
            )
            row[f"picked_{score}"] = tie_aware_flips(values, p_flip, picks)
        row["picked_oracle"] = tie_aware_flips(
            group["rank_half"].to_numpy(), group["eval_half"].to_numpy(), picks
        )
        row["picked_oracle_in_sample"] = tie_aware_flips(p_flip, p_flip, picks)
        rows.append(row)
    return pd.DataFrame(rows)


def _bootstrap(
    prompts: pd.DataFrame, statistic, draws: int, seed: int
) -> tuple[float, float, float]:
    values = statistic(prompts)
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(prompts), size=(draws, len(prompts)))
    boot = np.array([statistic(prompts.iloc[i]) for i in index])
    if np.isnan(boot).all():  # a score constant within every tree has no rank correlation
        return float(values), np.nan, np.nan
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    return float(values), float(lo), float(hi)


def oracle_summary(frame: pd.DataFrame, k: int, draws: int = 2000, seed: int = 0) -> pd.DataFrame:
    """One row per score (and the perfect picker's two, :data:`PICKERS`): mean within-tree
    Spearman with p_flip and the expected flips of its K picks relative to uniform picks,
    each with a 95% bootstrap interval over prompts, and the prompts and candidates it rests
    on."""
    prompts = per_prompt(frame, k)
    rows = []
    for score in (*SCORES, *PICKERS):
        row: dict[str, Any] = {
            "score": score,
            "k": k,
            "prompts": len(prompts),
            "candidates": int(prompts["candidates"].sum()),
            "resamples": int(frame["resamples"].min()),
        }
        if score not in PICKERS:
            column = f"spearman_{score}"
            row["trees_with_spearman"] = int(prompts[column].notna().sum())
            row["spearman"], row["spearman_lo"], row["spearman_hi"] = _bootstrap(
                prompts,
                lambda p, c=column: np.nanmean(p[c]) if p[c].notna().any() else np.nan,
                draws,
                seed,
            )
        base = "uniform_expected_eval_half" if score == "oracle" else "uniform_expected"
        row["flips_vs_uniform"], row["flips_vs_uniform_lo"], row["flips_vs_uniform_hi"] = (
            _bootstrap(
                prompts, lambda p, s=score, b=base: p[f"picked_{s}"].sum() / p[b].sum(), draws, seed
            )
        )
        rows.append(row)
    return pd.DataFrame(rows)


def penalty_effect(frame: pd.DataFrame, k: int, alpha: float = AUTHORS_ALPHA) -> dict[str, float]:
    """What α·b does to the pick (module docstring), from one oracle record: the penalty of a
    first-turn candidate, the share of first-turn candidates whose penalty exceeds the turn's
    own entropy (mean sampled NLL), the mean p_flip of first-turn and of deeper candidates,
    and the share of first turns among the K picks of the authors' score and at α = 0 (ties
    counted in expectation, :func:`tie_aware_flips`)."""
    first = frame["depth"] == 1
    penalty = alpha * frame["siblings_before"]
    shares = {"authors_score": 0.0, "entropy_nll": 0.0}
    picks = 0
    for _, group in frame.groupby("prompt", sort=False):
        n = min(k, len(group))
        is_first = (group["depth"] == 1).to_numpy(float)
        for score in shares:
            shares[score] += tie_aware_flips(group[score].to_numpy(), is_first, n)
        picks += n
    return {
        "penalty_first": float(penalty[first].mean()),
        "penalty_exceeds_entropy": float((penalty[first] > frame.loc[first, "entropy_nll"]).mean()),
        "p_flip_first": float(frame.loc[first, "p_flip"].mean()),
        "p_flip_deeper": float(frame.loc[~first, "p_flip"].mean()),
        "first_in_picks": shares["authors_score"] / picks,
        "first_in_picks_alpha0": shares["entropy_nll"] / picks,
        "first_candidates": int(first.sum()),
        "candidates": len(frame),
    }


# --------------------------------------------------------------------------------------------
# Reading the committed summaries
# --------------------------------------------------------------------------------------------
PLACEBO = "uniform"
"""The placebo score: a random number per candidate, whose true ratio to uniform picks is 1."""


def placebo_margin(summaries: pd.DataFrame) -> float:
    """How far the placebo strays from 1 by chance: the largest |flips_vs_uniform − 1| of the
    ``uniform`` score over every (policy, shape) summary. A score reads better (worse) than a
    uniform pick only when its whole interval lies above 1 + margin (below 1 − margin)."""
    if summaries.empty:
        return 0.0
    placebo = summaries.loc[summaries["score"] == PLACEBO, "flips_vs_uniform"]
    return float((placebo - 1).abs().max()) if len(placebo) else 0.0


def versus_uniform(low: float, high: float, margin: float) -> str:
    """``better``, ``worse`` or ``no different`` than a uniform pick, outside the placebo's
    margin (:func:`placebo_margin`)."""
    if low > 1 + margin:
        return "better"
    return "worse" if high < 1 - margin else "no different"


def summarise_records(folder: Path) -> dict[Path, pd.DataFrame]:
    """Every ``expansion_oracle_<policy>_<shape>.csv`` of ``folder`` summarised again with
    today's :func:`oracle_summary` (nothing is re-measured; the bootstrap seed is the one its
    measurement recorded): record → summary."""
    out = {}
    for path in sorted(Path(folder).glob("expansion_oracle_*.csv")):
        if path.name.endswith("_summary.csv"):
            continue
        shape = path.stem.rpartition("_")[2]
        out[path] = oracle_summary(
            load_oracle(path), SHAPES[shape][1], seed=int(read_meta(path).get("seed") or 0)
        )
    return out


ESTIMATE_SCORES = {"exact": "entropy_exact", "sampled_nll": "entropy_nll"}
"""``rollout.entropy_estimate`` → the oracle's score of the same turn entropy."""
SUMMARY_POLICIES = {
    "warmstart": "the warm start",
    "trained": "AT2PO seed 0 after training",
    "trained_rerun": "AT2PO seed 0 retrained on another machine build",
}
"""Oracle policy name (``--name`` of ``at2po dissect expansion``) -> what it is, as sentences and
legends show it (never the record's name)."""
SUMMARY_SHAPES = {"toy": "toy tree", "paper": "paper's tree"}
SCORE_WORDS = {
    "entropy_nll": "mean sampled-token NLL",
    "entropy_exact": "mean exact entropy",
    "entropy_nll_first": "first-token NLL",
    "authors_score": "authors' score",
    "depth": "depth",
    "oracle": "perfect picker's score",
}
"""An oracle score's name as a sentence says it (the record's names are internal)."""


def read_summaries(folder: Path) -> pd.DataFrame:
    """Every ``expansion_oracle_<policy>_<shape>_summary.csv`` of ``folder`` (what ``at2po
    dissect expansion`` writes), stacked with ``policy`` and ``shape`` columns; empty when
    there is none."""
    parts = []
    for path in sorted(Path(folder).glob("expansion_oracle_*_summary.csv")):
        stem = path.name.removeprefix("expansion_oracle_").removesuffix("_summary.csv")
        policy, _, shape = stem.rpartition("_")
        if not policy:
            raise ValueError(f"{path}: expected expansion_oracle_<policy>_<shape>_summary.csv")
        parts.append(pd.read_csv(path).assign(policy=policy, shape=shape))
    order = {name: i for i, name in enumerate([*SUMMARY_POLICIES, *SUMMARY_SHAPES])}
    parts.sort(key=lambda f: (order.get(f["policy"].iat[0], 99), order.get(f["shape"].iat[0], 99)))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def flip_ratio_sentence(summaries: pd.DataFrame, score: str) -> str:
    """One clause per (policy, shape) summary: how often re-sampling the top-K turns by
    ``score`` flips the outcome relative to K uniform picks (1 = no better than uniform), with
    its 95% interval over prompts and what it rests on, and the perfect picker's ceiling."""
    if summaries.empty:
        return "No expansion oracle records (run `at2po dissect expansion`)."
    if score not in set(summaries["score"]):
        raise ValueError(
            f"score {score!r} is not in the summaries; they hold {sorted(set(summaries['score']))}"
        )
    clauses = []
    for (policy, shape), group in summaries.groupby(["policy", "shape"], sort=False):
        rows = group.set_index("score")
        s = rows.loc[score]
        text = (
            f"{SUMMARY_POLICIES.get(policy, policy)}, {SUMMARY_SHAPES.get(shape, shape)} "
            f"(K = {int(s['k'])}, {int(s['prompts'])} prompts, {int(s['resamples'])} re-samples "
            f"per candidate): {s['flips_vs_uniform']:.2f}× [{s['flips_vs_uniform_lo']:.2f}, "
            f"{s['flips_vs_uniform_hi']:.2f}]"
        )
        if "oracle" in rows.index:
            o = rows.loc["oracle"]
            text += (
                f" (the perfect picker: {o['flips_vs_uniform']:.2f}× "
                f"[{o['flips_vs_uniform_lo']:.2f}, {o['flips_vs_uniform_hi']:.2f}])"
            )
        clauses.append(text)
    return (
        f"Flips of the outcome per re-sample when the K turns with the highest "
        f"{SCORE_WORDS.get(score, score)} are "
        "re-sampled, relative to K uniformly picked turns (1× = no better than uniform; 95% "
        "intervals over prompts): " + "; ".join(clauses) + "."
    )


def oracle_records(profile: str, fallback: str = "tiny") -> tuple[str, pd.DataFrame]:
    """(the profile whose records were read, :func:`read_summaries` of
    ``results/<profile>/dissection/``); ``fallback``'s records when ``profile`` has none (the
    smoke profile runs no oracle)."""
    for name in dict.fromkeys((profile, fallback)):
        frame = read_summaries(results_dir() / name / "dissection")
        if not frame.empty:
            return name, frame
    return profile, pd.DataFrame()
