r"""Credit you can check against the truth: do turn advantages single out the useful turns?

TinyWorld knows each question's plan (row ``metadata``: ``hops``, ``supporting_ids``,
``hop_queries``, ``hop_answers``), so every turn of a real rollout tree can be labelled, and
every credit rule (docs/method.md §6 for AT2PO's, §8 for the baselines') scored by how well
its turn advantages separate useful from useless turns: the AUC, the probability that a useful
turn gets a higher advantage than a useless one (ties count half). It is the toy's noise-free
analogue of the paper's Table 3, which can only compare credit rules by EM after training.

**Useful turn** (:func:`turn_labels`). Let S be the question's supporting passages, R(n) the
passages turn n's search put in the context, and B(n) the union of R over n's ancestors (what
the path had retrieved before n). A non-root turn n is *useful* when

- it is a search whose observation entered the context and R(n) ∩ (S \ B(n)) ≠ ∅: it brought
  a supporting passage the path did not have yet, i.e. the passage of a hop still to be done
  (bridge questions need their hops in order, comparison questions in any order, so "the next
  hop" is read as "a hop not yet covered"); or
- it is an answer turn (a leaf) whose reward is positive (the tiny reward is exact match, in
  {0, 1}).

Everything else is useless: a search that brought no new supporting passage (a repeat, a wrong
entity), a search over the tool limit or whose observation did not fit (no passage shown), a
wrong answer, an invalid or truncated turn. Duplicate leaves (copies made to reach the leaf
budget, docs/method.md §5) are not sampled turns and are not scored; the root has no tokens.

**What the turn decided** (``TurnLabels.decision``, :func:`at2po_lib.analysis.decisions.
tree_decision_labels`): each turn against the plan's queries on its path — ``follow`` (the
next hop's query), ``repeat`` (a query searched before), ``off_plan``, ``early`` (an answer
before the last hop was searched), ``final``, ``invalid`` — the decisions the regime's
demonstrations mix (``at2po_lib.policy.strategies``).

**A turn's advantage.** AT2PO's modes give each node one advantage A_n
(:mod:`at2po_lib.method.credit`). The outcome baselines give one advantage per row (root→leaf path) and
a node lies on every row below it; its tokens are trained once per row, so its *effective*
advantage is the mean over those rows (the sum up to the row count): that mean is scored.

Credit modes (one CSV row each, per set of turns: all, search, answer):

- ``at2po``: every value mode × advantage mode of docs/method.md §6, on AT2PO's entropy trees;
- ``grpo`` (``vanilla``): GRPO over the prompt's rows, the leaf's advantage on every turn;
- ``tree_grpo``: Tree-GRPO's prompt-level + tree-level sum (§8) on its own random trees
  (``rollout.tree_grpo_trees`` per prompt; its credit is not defined on AT2PO's single tree);
- ``gigpo``: a GiGPO-style step grouping (Feng et al., 2025, "Group-in-Group Policy Optimization
  for LLM Agent Training"), written here (:func:`gigpo_row_advantages`): the episode-level
  GRPO advantage plus a step-level advantage, normalised within groups of steps that share an
  *anchor state*. The anchor state of a turn is (prompt, the set of passages the path has
  retrieved before it): the environment's state in this task (GiGPO groups identical
  environment observations; here siblings share one, and so do branches that reached the
  same passages). The step return is γ^k·r with k the turns after it on the row (γ = 0.95,
  GiGPO's default), ω = 1. A step group of one, or whose returns are all equal, gives 0.
- ``grpo`` and ``gigpo`` are also scored on the random trees, beside ``tree_grpo``;
- what-if rows (column ``softmax_temperature`` < 1): ``entropy_softmax`` with weights
  softmax(H/τ), to see whether sharper entropy weights would single out useful turns (the
  credit has no such knob; docs/method.md §6 weighs by softmax(H)).

Every row also carries ``delta_vs_grpo``: its AUC minus GRPO's on the same turns, with a paired
CI (the same prompts drawn for both).

**CI**: 95% percentile bootstrap over prompts (a prompt's trees resampled together), by
:func:`scipy.stats.bootstrap` through :func:`at2po_lib.evaluation.stats._bootstrap_indices`; the AUC of one
replicate is a quadratic form in the prompts' draw counts (:class:`ClusteredAUC`), so 4,000
replicates take milliseconds.

Command: ``at2po credit-accuracy --profile tiny --prompts 300 --seed 0`` writes
``results/<profile>/credit_accuracy.csv`` and ``credit_weights.csv`` (how far the entropy
weights are from uniform, :func:`at2po_lib.analysis.expansion_stats.credit_weight_stats`), each with
its ``.meta.json``; :func:`at2po_lib.reporting.table3.load_credit_accuracy` reads the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..config.profile import load_profile
from ..method.credit import ADVANTAGE_MODES, VALUE_MODES, forest_node_advantages, forest_node_values
from ..method.outcome import OUTCOME_ADVANTAGES, grpo_advantages
from ..method.tree import Forest, TreeArrays, leaf_paths, node_depths
from ..evaluation.stats import _bootstrap_indices, _counts
from ..util.paths import recorded_path, results_dir
from ..util.provenance import run_metadata, write_csv_tables
from .decisions import tree_decision_labels
from .expansion_stats import credit_weight_stats
from .study_trees import cached_trees, policy_folder, searched_nodes, study_rows

GIGPO_GAMMA = 0.95
GIGPO_OMEGA = 1.0
TURN_SETS = ("all", "search", "answer")


# --------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TurnLabels:
    """Every node of many trees as flat arrays (global ids, Forest order)."""

    forest: Forest
    prompt: np.ndarray  # (N,) prompt id of the node's tree
    kind: np.ndarray  # (N,) "root" / "search" / "answer" / "other"
    useful: np.ndarray  # (N,) bool (module docstring)
    scored: np.ndarray  # (N,) bool: a sampled turn (not the root, not a duplicate leaf)
    state: np.ndarray  # (N,) int: anchor-state id (prompt, passages retrieved before)
    decision: np.ndarray  # (N,) what the turn decided against the plan: follow / repeat /
    # off_plan / early / final / invalid / root (decisions.tree_decision_labels)


def _passage_matrices(
    trees: Sequence[TreeArrays], parent: np.ndarray, depth: np.ndarray, tree_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """own (N, P): passages each node's search showed; before (N, P): passages its ancestors'
    searches showed; support (T, P): each tree's supporting passages. P: every passage id
    met, as one integer index."""
    records = [r for t in trees for r in t.records]
    shown = [(g, str(pid)) for g, r in enumerate(records) for pid in r.get("retrieved") or ()]
    support = [(i, str(pid)) for i, t in enumerate(trees) for pid in t.info["supporting_ids"]]
    names, index = np.unique([p for _, p in shown] + [p for _, p in support], return_inverse=True)
    own = np.zeros((len(parent), len(names)), dtype=bool)
    own[[g for g, _ in shown], index[: len(shown)]] = True
    sup = np.zeros((len(trees), len(names)), dtype=bool)
    sup[[i for i, _ in support], index[len(shown) :]] = True
    before = np.zeros_like(own)
    for d in range(1, int(depth.max()) + 1):  # one vectorised step per tree level
        level = np.flatnonzero(depth == d)
        before[level] = before[parent[level]] | own[parent[level]]
    return own, before, sup


def turn_labels(trees: Sequence[TreeArrays]) -> TurnLabels:
    """Useful-turn labels and anchor states of every node (module docstring). Trees need
    ``info["supporting_ids"]`` and node ``records`` with ``action`` (and ``retrieved`` on
    searches): :func:`at2po_lib.analysis.study_trees.grow_trees` makes them."""
    for i, t in enumerate(trees):
        if "supporting_ids" not in t.info:
            raise ValueError(
                f"tree {i} (prompt {t.prompt_id}): info has no supporting_ids "
                "(grow trees with at2po_lib.analysis.study_trees.grow_trees)"
            )
        if len(t.records) != t.num_nodes:
            raise ValueError(
                f"tree {i} (prompt {t.prompt_id}): {len(t.records)} records for "
                f"{t.num_nodes} nodes; the labels need every node's action"
            )
    forest = Forest.from_trees(trees, dtype=torch.float64)
    parent, tree_of = forest.parent.numpy(), forest.tree_index.numpy()
    depth = node_depths(forest.parent).numpy()
    own, before, sup = _passage_matrices(trees, parent, depth, tree_of)
    action = np.array([r.get("action") or "other" for t in trees for r in t.records], dtype=object)
    kind = np.where(
        parent < 0, "root", np.where(np.isin(action, ["search", "answer"]), action, "other")
    )
    searched = np.concatenate([searched_nodes(t) for t in trees])
    new_support = (own & sup[tree_of] & ~before).any(axis=1)
    reward = forest.leaf_reward.numpy()
    useful = (searched & (kind == "search") & new_support) | (
        (kind == "answer") & (np.nan_to_num(reward, nan=0.0) > 0)
    )
    duplicate = (
        np.concatenate(
            [np.asarray(t.node_arrays.get("duplicate_of", np.full(t.num_nodes, -1))) for t in trees]
        )
        >= 0
    )
    prompt = np.array([t.prompt_id for t in trees], dtype=np.int64)[tree_of]
    packed = np.packbits(before, axis=1)
    _, state = np.unique(np.column_stack([prompt[:, None], packed]), axis=0, return_inverse=True)
    # trees saved before the plan carried its queries get "unknown" (their useful labels stand)
    decision = np.concatenate(
        [
            tree_decision_labels(t)
            if t.info.get("hop_queries")
            else np.full(t.num_nodes, "unknown", dtype=object)
            for t in trees
        ]
    )
    return TurnLabels(
        forest=forest,
        prompt=prompt,
        kind=kind,
        useful=useful,
        scored=(parent >= 0) & ~duplicate,
        state=state.ravel(),
        decision=decision,
    )


# --------------------------------------------------------------------------------------------
# Advantages per node, for every credit mode
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rows:
    """Root→leaf rows of a forest as (row, node) pairs."""

    leaf: np.ndarray  # (R,) global leaf id per row
    pair_row: np.ndarray  # (P,) row of each pair
    pair_node: np.ndarray  # (P,) node of each pair (roots excluded)
    turns_after: np.ndarray  # (P,) turns after the node on its row (0 for the leaf)


def forest_rows(forest: Forest) -> Rows:
    """Every root→leaf path of every tree (vectorised over all trees at once)."""
    leaves, paths = leaf_paths(forest.parent)
    nodes = paths[:, 1:].numpy()  # drop the roots
    row, col = np.nonzero(nodes >= 0)
    depth = node_depths(forest.parent).numpy()
    leaf = leaves.numpy()
    node = nodes[row, col]
    return Rows(leaf=leaf, pair_row=row, pair_node=node, turns_after=depth[leaf][row] - depth[node])


def mean_over_rows(rows: Rows, pair_adv: np.ndarray, num_nodes: int) -> np.ndarray:
    """A node's effective advantage (N,): the mean of its pairs' advantages (NaN at roots)."""
    total = np.bincount(rows.pair_node, weights=pair_adv, minlength=num_nodes)
    count = np.bincount(rows.pair_node, minlength=num_nodes)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def group_normalise(values: np.ndarray, group: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """(v − mean_g) / (std_g + eps) with the unbiased std; a group of one or of equal values
    gives exactly 0 (GiGPO's step-level rule)."""
    _, g = np.unique(group, return_inverse=True)
    count = np.bincount(g).astype(float)
    mean = np.bincount(g, weights=values) / count
    centred = values - mean[g]
    var = np.bincount(g, weights=centred**2) / np.maximum(count - 1, 1)
    spread = np.bincount(g, weights=np.abs(centred)) > 1e-12
    return np.where(spread[g], centred / (np.sqrt(var)[g] + eps), 0.0)


def gigpo_row_advantages(
    labels: TurnLabels, rows: Rows, gamma: float = GIGPO_GAMMA, omega: float = GIGPO_OMEGA
) -> np.ndarray:
    r"""GiGPO-style advantage of every (row, node) pair (P,)::

        A = GRPO(r_row | rows of the prompt) + omega * norm_{anchor state}(gamma^k r_row)

    k = turns after the node on its row; the anchor state is ``labels.state`` (prompt, passages
    retrieved before the turn); norm = :func:`group_normalise` over all pairs of one state.
    """
    reward = labels.forest.leaf_reward.numpy()[rows.leaf]
    episode = grpo_advantages(
        torch.as_tensor(reward), torch.as_tensor(labels.prompt[rows.leaf])
    ).numpy()
    step_return = gamma**rows.turns_after * reward[rows.pair_row]
    step = group_normalise(step_return, labels.state[rows.pair_node])
    return episode[rows.pair_row] + omega * step


def baseline_node_advantages(labels: TurnLabels, rows: Rows, mode: str) -> np.ndarray:
    """Effective node advantages (N,) of an outcome baseline: ``grpo``, ``tree_grpo`` or
    ``gigpo`` (module docstring)."""
    forest = labels.forest
    reward = torch.as_tensor(forest.leaf_reward.numpy()[rows.leaf])
    prompt = torch.as_tensor(labels.prompt[rows.leaf])
    if mode in ("grpo", "tree_grpo"):  # the trainer's credit_advantage vanilla / tree_grpo
        tree = forest.tree_index[torch.as_tensor(rows.leaf)]
        outcome = OUTCOME_ADVANTAGES["vanilla" if mode == "grpo" else mode]
        per_row = outcome(reward, tree, prompt).numpy()[rows.pair_row]
    elif mode == "gigpo":
        per_row = gigpo_row_advantages(labels, rows)
    else:
        raise ValueError(f"unknown baseline credit mode {mode!r}; choose grpo, tree_grpo, gigpo")
    return mean_over_rows(rows, per_row, forest.num_nodes)


def at2po_node_advantages(labels: TurnLabels, value_mode: str, advantage_mode: str) -> np.ndarray:
    """AT2PO's node advantages (N,) (docs/method.md §6, :mod:`at2po_lib.method.credit`)."""
    values = forest_node_values(labels.forest, value_mode)
    return forest_node_advantages(labels.forest, values, advantage_mode).numpy()


# --------------------------------------------------------------------------------------------
# AUC with a bootstrap over prompts
# --------------------------------------------------------------------------------------------
class ClusteredAUC:
    r"""AUC of scores for binary labels, and its value when whole clusters are redrawn.

    With cluster draw counts c (C,), a turn of cluster j weighs c_j, and

    .. math::  \mathrm{AUC}(c) = \frac{c^\top G\, c}{(c\cdot n^+)(c\cdot n^-)},\qquad
               G_{jk} = \sum_{i \in \mathrm{pos}(j)} \big(\#\{\text{neg of } k < s_i\}
               + \tfrac12 \#\{\text{neg of } k = s_i\}\big)

    (the Mann–Whitney count with ties half), so a batch of replicates is two matrix products.
    """

    def __init__(self, scores: np.ndarray, labels: np.ndarray, cluster: np.ndarray):
        scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
        if np.isnan(scores).any():
            raise ValueError(f"{int(np.isnan(scores).sum())} scores are NaN")
        _, cl = np.unique(cluster, return_inverse=True)
        self.num_clusters = int(cl.max()) + 1
        _, level = np.unique(scores, return_inverse=True)
        neg_at = np.zeros((level.max() + 1, self.num_clusters))
        np.add.at(neg_at, (level[~labels], cl[~labels]), 1.0)
        below = np.cumsum(neg_at, axis=0) - neg_at  # strictly lower levels
        per_pos = below[level[labels]] + 0.5 * neg_at[level[labels]]  # (n_pos, C)
        self.gram = np.zeros((self.num_clusters, self.num_clusters))
        np.add.at(self.gram, cl[labels], per_pos)
        self.n_pos = np.bincount(cl[labels], minlength=self.num_clusters).astype(float)
        self.n_neg = np.bincount(cl[~labels], minlength=self.num_clusters).astype(float)

    def __call__(self, counts: np.ndarray) -> np.ndarray:
        """AUC for cluster weights ``counts`` (..., C) → (...)."""
        num = ((counts @ self.gram) * counts).sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return num / ((counts @ self.n_pos) * (counts @ self.n_neg))

    def estimate(self) -> float:
        return float(self(np.ones(self.num_clusters)))

    def interval(
        self, n_resamples: int, seed: int, confidence: float = 0.95
    ) -> tuple[float, float]:
        return _bootstrap_indices(
            [self.num_clusters],
            lambda idx: self(_counts(idx, self.num_clusters)),
            confidence,
            n_resamples,
            seed,
        )


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann–Whitney AUC (ties count half) of ``scores`` for binary ``labels``."""
    return ClusteredAUC(scores, labels, np.zeros(len(scores), dtype=int)).estimate()


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------
def credit_modes(rollout: str) -> list[tuple[str, str, str]]:
    """(credit mode, value mode, advantage mode) scored on trees of ``rollout``."""
    baselines = [("grpo", "none", "vanilla"), ("gigpo", "none", "step_group")]
    if rollout == "entropy":
        return [("at2po", v, a) for v in VALUE_MODES for a in ADVANTAGE_MODES] + baselines
    if rollout == "random":
        return [("tree_grpo", "none", "tree_grpo")] + baselines
    raise ValueError(f"no credit modes for rollout {rollout!r}; expected entropy or random")


def node_advantages_for(labels: TurnLabels, rows: Rows, mode: tuple[str, str, str]) -> np.ndarray:
    credit, value, advantage = mode
    if credit == "at2po":
        return at2po_node_advantages(labels, value, advantage)
    return baseline_node_advantages(labels, rows, credit)


def tempered_softmax_advantages(labels: TurnLabels, temperature: float) -> np.ndarray:
    """What-if (no such knob in :mod:`at2po_lib.method.credit`): ``entropy_softmax`` node values with
    weights softmax(H / temperature), i.e. the entropies scaled by 1 / temperature."""
    f = labels.forest
    scaled = Forest(f.parent, f.entropy / temperature, f.leaf_reward, f.tree_index, f.offsets)
    return forest_node_values(scaled, "entropy_softmax").numpy()


def accuracy_table(
    trees: Sequence[TreeArrays],
    rollout: str,
    n_resamples: int = 4000,
    seed: int = 0,
    softmax_temperatures: Sequence[float] = (),
):
    """One tidy row per (credit mode, set of turns): AUC and its 95% CI over prompts, the paired
    difference to GRPO on the same turns (``delta_vs_grpo`` and its CI), counts.
    ``softmax_temperatures``: extra what-if rows (``softmax_temperature`` column; 1 = as
    defined) of :func:`tempered_softmax_advantages`, entropy trees only."""
    labels = turn_labels(trees)
    rows = forest_rows(labels.forest)
    sets = {
        "all": labels.scored,
        "search": labels.scored & (labels.kind == "search"),
        "answer": labels.scored & (labels.kind == "answer"),
    }
    modes = [(m, 1.0, node_advantages_for(labels, rows, m)) for m in credit_modes(rollout)]
    if rollout == "entropy":
        modes += [
            (("at2po", "entropy_softmax", "node_value"), t, tempered_softmax_advantages(labels, t))
            for t in softmax_temperatures
        ]
    grpo = next(adv for m, _, adv in modes if m[0] == "grpo")
    out = []
    for name, mask in sets.items():
        reference = ClusteredAUC(grpo[mask], labels.useful[mask], labels.prompt[mask])
        for mode, temperature, adv in modes:
            scorer = ClusteredAUC(adv[mask], labels.useful[mask], labels.prompt[mask])
            low, high = scorer.interval(n_resamples, seed)
            d_low, d_high = _difference_interval(scorer, reference, n_resamples, seed)
            out.append(
                {
                    "credit_mode": mode[0],
                    "value_mode": mode[1],
                    "advantage_mode": mode[2],
                    "softmax_temperature": temperature,
                    "rollout": rollout,
                    "turns": name,
                    "auc": scorer.estimate(),
                    "ci_low": low,
                    "ci_high": high,
                    "delta_vs_grpo": scorer.estimate() - reference.estimate(),
                    "delta_low": d_low,
                    "delta_high": d_high,
                    "n_trees": len(trees),
                    "n_prompts": int(np.unique(labels.prompt).size),
                    "n_turns": int(mask.sum()),
                    "n_useful": int(labels.useful[mask].sum()),
                }
            )
    return pd.DataFrame(out)


def _difference_interval(
    a: ClusteredAUC, b: ClusteredAUC, n_resamples: int, seed: int
) -> tuple[float, float]:
    """CI of AUC_a − AUC_b, paired: both scored on the same drawn prompts."""
    return _bootstrap_indices(
        [a.num_clusters],
        lambda idx: a(_counts(idx, a.num_clusters)) - b(_counts(idx, b.num_clusters)),
        0.95,
        n_resamples,
        seed,
    )


def run_credit_accuracy(
    profile: str = "tiny",
    num_prompts: int = 300,
    seed: int = 0,
    datasets: Sequence[str] | None = None,
    policy: str | None = None,
    overrides: dict | None = None,
    n_resamples: int = 4000,
    softmax_temperatures: Sequence[float] = (0.1, 0.03, 0.01),
    trees_dir: str | None = None,
    command: str = "",
    name: str | None = None,
) -> dict[str, object]:
    """Grow AT2PO's entropy trees and Tree-GRPO's random trees for the same prompts with the
    warm start, score every credit mode, write ``credit_accuracy.csv`` and
    ``credit_weights.csv`` under ``results/<profile>/`` with their ``.meta.json``.
    ``softmax_temperatures``: what-if rows with sharper entropy weights (τ < 1).
    ``trees_dir``: a scratch folder caching the trees (``entropy.npz``, ``random.npz``).
    ``name``: write ``results/<profile>/dissection/credit_accuracy_<name>.csv`` (and
    ``credit_weights_<name>.csv``) instead, for another policy or entropy estimate."""
    cfg = load_profile(profile, overrides or None)
    datasets = list(datasets or cfg.train.train_datasets)
    folder = policy_folder(cfg.name, policy)
    rows = study_rows(cfg.name, datasets, num_prompts, seed)
    tables, trees_by = [], {}
    for rollout in ("entropy", "random"):
        cache = f"{trees_dir}/{rollout}.npz" if trees_dir else None
        trees_by[rollout] = cached_trees(cache, cfg, rows, rollout, seed, folder)
        tables.append(
            accuracy_table(trees_by[rollout], rollout, n_resamples, seed, softmax_temperatures)
        )
    table = pd.concat(tables, ignore_index=True)
    weights = credit_weight_stats(trees_by["entropy"])
    out = results_dir(cfg.name, "dissection") if name else results_dir(cfg.name)
    suffix = f"_{name}" if name else ""
    labels = turn_labels(trees_by["entropy"])
    meta = run_metadata(
        cfg.name,
        seed,
        config=cfg.rollout,
        command=command,
        policy=recorded_path(folder),
        datasets=datasets,
        prompts=num_prompts,
        n_resamples=n_resamples,
        gigpo={"gamma": GIGPO_GAMMA, "omega": GIGPO_OMEGA},
        useful_share={
            k: float(labels.useful[labels.scored & (labels.kind == k)].mean())
            for k in ("search", "answer")
        },
        trees="grown by the command (not stored): entropy = AT2PO's tree, "
        "random = Tree-GRPO's, same prompts and seed",
    )
    paths = write_csv_tables(
        out, {f"credit_accuracy{suffix}.csv": table, f"credit_weights{suffix}.csv": weights}, meta
    )
    return {"accuracy": table, "weights": weights, "paths": paths}
