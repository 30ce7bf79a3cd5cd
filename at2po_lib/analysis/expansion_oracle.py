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
(:func:`at2po_lib.rollout.export.tree_arrays`): the turn's mean exact entropy, mean sampled NLL,
its largest and first sampled token's value of each, its depth, the authors' full score
H_nll − 0.05·b(n), and ``uniform`` (a seeded random number: the uniform picker).

**Summaries** (:func:`oracle_summary`), with 95% percentile bootstrap intervals over prompts:

- the Spearman correlation of each score with p_flip within a tree, averaged over trees (trees
  with < 3 candidates or a constant p_flip have none). R re-samples make p_flip noisy, which
  pulls every correlation toward 0 alike;
- the flips a picker expects with K picks, relative to uniform picks (K × the tree's mean
  p_flip): Σ_{top-K by score} p_flip / (K · mean p_flip), summed over prompts before dividing;
- the perfect picker's ceiling: the same ratio for the K candidates with the highest p_flip.
  Picking and scoring on the same R re-samples would favour it (the top of noisy estimates is
  biased upward), so it ranks by the first half of the re-samples and is scored on the second.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy import stats

from ..policy.model import load_policy
from ..prompts import get_template
from ..retrieval.indexes import build_retriever
from ..rollout.agent import (SearchEnv, init_state, make_trees, run_chains, score_trees,
                             start_chain, turn_stops)
from ..rollout.backends import make_backend
from ..rollout.export import tree_arrays, with_decisions
from ..rollout.structures import ROOT, RolloutTree
from ..util.paths import results_dir

AUTHORS_ALPHA = 0.05
"""The sibling penalty of the authors' score (their code's constant)."""
SCORES = ("entropy_exact", "entropy_nll", "entropy_exact_max", "entropy_nll_max",
          "entropy_exact_first", "entropy_nll_first", "depth", "authors_score", "uniform")
"""Every score the summaries rank candidates by (module docstring)."""
SHAPES = {"toy": (4, 4), "paper": (10, 6)}
"""Tree shapes as (M chains, K picks): the ``tiny`` profile's and the paper's first round."""


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


def resample_candidates(backend, env: SearchEnv, trees: list[RolloutTree], state,
                        resamples: int) -> dict[tuple[int, int], list[int]]:
    """Re-sample every candidate's turn ``resamples`` times (all trees in one batched round);
    returns (tree index, candidate) → the new chains' first nodes."""
    chains, owner = [], []
    for i, tree in enumerate(trees):
        for n in candidates(tree):
            for _ in range(resamples):
                chain = start_chain(tree, i, tree.nodes[n].parent, 1, state.box_for_context_of(i, n))
                chain.node.resampled_from = n
                chains.append(chain)
                owner.append((i, n, chain.node.id))
    run_chains(backend, env, chains, state)
    out: dict[tuple[int, int], list[int]] = {}
    for i, n, first in owner:
        out.setdefault((i, n), []).append(first)
    return out


def candidate_rows(tree: RolloutTree, row: dict[str, Any], firsts: dict[int, list[int]],
                   rng: np.random.Generator) -> list[dict[str, Any]]:
    """One record per candidate: its scores, decision label, original reward and the rewards
    of its re-samples (in the order they were drawn)."""
    arrays = with_decisions(tree_arrays(tree), row)
    nodes = arrays.node_arrays
    out = []
    for n, b in zip(sorted(firsts), sibling_counts_before(tree, firsts)):
        original = tree.nodes[chain_leaf(tree, n)].reward
        rewards = [tree.nodes[chain_leaf(tree, f)].reward for f in firsts[n]]
        out.append({
            "prompt": tree.prompt_index, "question_id": row.get("id"),
            "dataset": row.get("dataset"), "node": n, "depth": int(nodes["depth"][n]),
            "decision": arrays.records[n]["decision"], "siblings_before": int(b),
            **{name: float(nodes[name][n]) for name in SCORES[:6]},
            "authors_score": float(nodes["entropy_nll"][n]) - AUTHORS_ALPHA * b,
            "uniform": float(rng.random()),
            "original_reward": float(original),
            "resample_rewards": json.dumps([float(r) for r in rewards]),
        })
    return out


def sibling_counts_before(tree: RolloutTree, firsts: dict[int, list[int]]) -> list[int]:
    """b(n), the siblings n already has (docs/method.md §5), as the expansion saw it: before
    the re-samples were added as siblings; for ``sorted(firsts)``."""
    added: dict[int, int] = {}
    for n, new in firsts.items():
        parent = tree.nodes[n].parent
        added[parent] = added.get(parent, 0) + len(new)
    return [len(tree.nodes[tree.nodes[n].parent].children) - 1 - added[tree.nodes[n].parent]
            for n in sorted(firsts)]


def measure_chunk(model, tokenizer, template, retriever, rows: Sequence[dict[str, Any]],
                  rollout_cfg, *, chains: int, resamples: int, seed: int,
                  first_prompt: int, backend=None) -> list[dict[str, Any]]:
    """Grow ``chains`` chains for each row, re-sample every candidate ``resamples`` times,
    score all leaves and return one record per candidate. ``backend``: a turn backend to use
    instead of ``model``'s (tests script one)."""
    env = SearchEnv(tokenizer, template, retriever, rollout_cfg, None)
    backend = backend or make_backend(model, tokenizer, rollout_cfg, turn_stops(template),
                                      seed=seed)
    trees = make_trees(env, [r["question"] for r in rows], [list(r["golden_answers"]) for r in rows],
                       list(range(first_prompt, first_prompt + len(rows))))
    state = init_state(backend, trees, True)
    run_chains(backend, env, [start_chain(t, i, ROOT, 0, state.box_for_context_of(i, ROOT))
                              for i, t in enumerate(trees) for _ in range(chains)], state)
    firsts = resample_candidates(backend, env, trees, state, resamples)
    score_trees(env, trees)
    rng = np.random.default_rng([seed, first_prompt])
    out = []
    for i, (tree, row) in enumerate(zip(trees, rows)):
        mine = {n: f for (j, n), f in firsts.items() if j == i}
        out += candidate_rows(tree, row, mine, rng)
    return out


def chunks_to_do(done_prompts: set[int], num_prompts: int, chunk: int) -> list[int]:
    """The first prompt of every chunk with no prompt in ``done_prompts``. A chunk is done when
    any of its prompts is in the file: a prompt without a candidate writes no row, so asking
    for the chunk's first prompt alone re-measured (and appended again) every chunk whose first
    prompt had none."""
    finished = {prompt // chunk * chunk for prompt in done_prompts}
    return [first for first in range(0, num_prompts, chunk) if first not in finished]


def run_oracle(cfg, rows: Sequence[dict[str, Any]], policy: Path, out_csv: Path, *, chains: int,
               resamples: int, seed: int, chunk: int = 10, log: bool = True) -> pd.DataFrame:
    """:func:`measure_chunk` over ``rows`` in chunks of ``chunk`` prompts, each chunk appended
    to ``out_csv`` as it finishes: a rerun skips the prompts already there (resumable; chunk c
    samples with seed ``seed + c``, so a resumed file equals an uninterrupted one)."""
    done = set(pd.read_csv(out_csv)["prompt"]) if out_csv.is_file() else set()
    todo = chunks_to_do(done, len(rows), chunk)
    if todo:
        rollout_cfg = replace(cfg.rollout, keep_cache=True)
        torch.set_num_threads(max(rollout_cfg.num_threads, 1))
        model, tokenizer = load_policy(policy, cfg.policy.dtype)
        template = get_template(cfg.policy.template)
        retriever = build_retriever(cfg, build=False)
        start = time.perf_counter()
        for first in todo:
            part = rows[first:first + chunk]
            records = measure_chunk(model, tokenizer, template, retriever, part, rollout_cfg,
                                    chains=chains, resamples=resamples,
                                    seed=seed + first // chunk, first_prompt=first)
            frame = pd.DataFrame(records)
            frame.to_csv(out_csv, mode="a", header=not out_csv.is_file(), index=False)
            if log:
                print(f"  oracle: prompts {first}-{first + len(part) - 1} of {len(rows)}, "
                      f"{time.perf_counter() - start:.0f} s", flush=True)
    return load_oracle(out_csv)


def load_oracle(path: Path) -> pd.DataFrame:
    """An oracle CSV with ``flips`` (count), ``resamples`` and ``p_flip`` added."""
    frame = pd.read_csv(path)
    rewards = frame["resample_rewards"].map(json.loads)
    frame["resamples"] = rewards.map(len)
    frame["flips"] = [sum(r != o for r in rs) for rs, o in zip(rewards, frame["original_reward"])]
    frame["p_flip"] = frame["flips"] / frame["resamples"]
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


def per_prompt(frame: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per prompt: each score's Spearman with p_flip (NaN when undefined), and the flips each
    picker expects with ``k`` picks (``picked_<score>``, ``picked_oracle`` by the split halves),
    beside ``uniform_expected`` = k' × mean p_flip (k' = min(k, candidates))."""
    frame = frame.copy()
    frame["rank_half"], frame["eval_half"] = half_flip_rates(frame)
    rows = []
    for prompt, group in frame.groupby("prompt", sort=True):
        picks = min(k, len(group))
        row: dict[str, Any] = {"prompt": prompt, "candidates": len(group),
                               "uniform_expected": picks * group["p_flip"].mean(),
                               "uniform_expected_eval_half": picks * group["eval_half"].mean()}
        varied = len(group) >= 3 and group["p_flip"].nunique() > 1
        for score in SCORES:
            values = group[score].to_numpy()
            row[f"spearman_{score}"] = (stats.spearmanr(values, group["p_flip"]).statistic
                                        if varied and np.unique(values).size > 1 else np.nan)
            top = np.argsort(-values, kind="stable")[:picks]  # ties: creation (breadth) order
            row[f"picked_{score}"] = group["p_flip"].to_numpy()[top].sum()
        top = np.argsort(-group["rank_half"].to_numpy(), kind="stable")[:picks]
        row["picked_oracle"] = group["eval_half"].to_numpy()[top].sum()
        rows.append(row)
    return pd.DataFrame(rows)


def _bootstrap(prompts: pd.DataFrame, statistic, draws: int, seed: int) -> tuple[float, float, float]:
    values = statistic(prompts)
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(prompts), size=(draws, len(prompts)))
    boot = np.array([statistic(prompts.iloc[i]) for i in index])
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    return float(values), float(lo), float(hi)


def oracle_summary(frame: pd.DataFrame, k: int, draws: int = 2000, seed: int = 0) -> pd.DataFrame:
    """One row per score (and ``oracle``): mean within-tree Spearman with p_flip and the
    expected flips of its K picks relative to uniform picks, each with a 95% bootstrap
    interval over prompts, and the prompts and candidates it rests on."""
    prompts = per_prompt(frame, k)
    rows = []
    for score in (*SCORES, "oracle"):
        row: dict[str, Any] = {"score": score, "k": k, "prompts": len(prompts),
                               "candidates": int(prompts["candidates"].sum()),
                               "resamples": int(frame["resamples"].min())}
        if score != "oracle":
            column = f"spearman_{score}"
            row["trees_with_spearman"] = int(prompts[column].notna().sum())
            row["spearman"], row["spearman_lo"], row["spearman_hi"] = _bootstrap(
                prompts, lambda p, c=column: np.nanmean(p[c]) if p[c].notna().any() else np.nan,
                draws, seed)
        base = "uniform_expected_eval_half" if score == "oracle" else "uniform_expected"
        row["flips_vs_uniform"], row["flips_vs_uniform_lo"], row["flips_vs_uniform_hi"] = \
            _bootstrap(prompts, lambda p, s=score, b=base: p[f"picked_{s}"].sum() / p[b].sum(),
                       draws, seed)
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# Reading the committed summaries
# --------------------------------------------------------------------------------------------
ESTIMATE_SCORES = {"exact": "entropy_exact", "sampled_nll": "entropy_nll"}
"""``rollout.entropy_estimate`` → the oracle's score of the same turn entropy."""
SUMMARY_POLICIES = {"warmstart": "the warm start", "trained": "AT2PO seed 0 after training",
                    "trained_rerun": "AT2PO seed 0 retrained on another machine build"}
"""Oracle policy name (``--name`` of ``at2po dissect expansion``) -> what it is, as sentences and
legends show it (never the record's name)."""
SUMMARY_SHAPES = {"toy": "toy tree", "paper": "paper's tree"}
SCORE_WORDS = {"entropy_nll": "mean sampled-token NLL", "entropy_exact": "mean exact entropy",
               "entropy_nll_first": "first-token NLL", "authors_score": "authors' score",
               "depth": "depth", "oracle": "perfect picker's score"}
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
        raise ValueError(f"score {score!r} is not in the summaries; they hold "
                         f"{sorted(set(summaries['score']))}")
    clauses = []
    for (policy, shape), group in summaries.groupby(["policy", "shape"], sort=False):
        rows = group.set_index("score")
        s = rows.loc[score]
        text = (f"{SUMMARY_POLICIES.get(policy, policy)}, {SUMMARY_SHAPES.get(shape, shape)} "
                f"(K = {int(s['k'])}, {int(s['prompts'])} prompts, {int(s['resamples'])} re-samples "
                f"per candidate): {s['flips_vs_uniform']:.2f}× [{s['flips_vs_uniform_lo']:.2f}, "
                f"{s['flips_vs_uniform_hi']:.2f}]")
        if "oracle" in rows.index:
            o = rows.loc["oracle"]
            text += (f" (the perfect picker: {o['flips_vs_uniform']:.2f}× "
                     f"[{o['flips_vs_uniform_lo']:.2f}, {o['flips_vs_uniform_hi']:.2f}])")
        clauses.append(text)
    return (f"Flips of the outcome per re-sample when the K turns with the highest "
            f"{SCORE_WORDS.get(score, score)} are "
            "re-sampled, relative to K uniformly picked turns (1× = no better than uniform; 95% "
            "intervals over prompts): " + "; ".join(clauses) + ".")


def oracle_records(profile: str, fallback: str = "tiny") -> tuple[str, pd.DataFrame]:
    """(the profile whose records were read, :func:`read_summaries` of
    ``results/<profile>/dissection/``); ``fallback``'s records when ``profile`` has none (the
    smoke profile runs no oracle)."""
    for name in dict.fromkeys((profile, fallback)):
        frame = read_summaries(results_dir() / name / "dissection")
        if not frame.empty:
            return name, frame
    return profile, pd.DataFrame()
