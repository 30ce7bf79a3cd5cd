r"""The notebooks' running example: one turn where AT2PO's mechanisms visibly act.

Notebooks 02, 03 and the inspector follow one example through rollout, credit and the loss.
It is never a hard-coded node or question id (the warm start can be replaced): it is chosen at
run time, from the trees in hand, by a stated rule (:data:`RULE`, :func:`choose_running_example`).

What the example must show. Entropy-guided expansion (docs/method.md §5) re-samples the turns
where the policy was unsure; that is worth its budget when the turn was a *decision* (what to
search next, or whether to stop: :mod:`at2po_lib.policy.strategies`) and the re-sampled branch
ends differently. So the example is a pair (n, x): a picked turn n and the branch x that
re-sampled it (``node_arrays["resampled_from"][x] == n``), where

1. n is a search decision: its label against the question's plan
   (:func:`at2po_lib.analysis.decisions.tree_decision_labels`) is ``follow``, ``repeat`` or
   ``off_plan`` (trees without a plan: n is a search);
2. n was uncertain: H(n) ≥ :data:`MIN_ENTROPY` nats per token (picks among near-deterministic
   turns are tie-breaks, not guidance);
3. the re-sample changed the outcome: the mean reward of the leaves under x differs from that
   under n (:func:`at2po_lib.analysis.decisions.subtree_leaf_means`).

Among the pairs that qualify: the largest change of outcome, then an *untied* pick (no other
candidate of its round had its entropy to within :data:`TIE_TOL`: entropy singled it out, not a
tie-break), then a re-sample that decided differently (another label), then the highest H(n),
then the first tree and lowest id. The sentence says when the chosen pick is a tie, and
:func:`pick_odds` gives the chance a uniform pick of K of the round's candidates would have
picked the same turn.

Why leaves are never the example. Only nodes with children are expansion candidates (the
authors' code scores the root and the subtree's inner nodes; :func:`at2po_lib.method.expansion.
select_entropy`): a leaf is a finished branch, typically the answer turn. An uncertain answer
therefore is never re-sampled itself; the tree explores it only by re-sampling a search turn
above it, whose new branch writes a new answer too.

:func:`teaching_tree` is a hand-made tree (with text) where every mechanism is obvious: the
notebooks draw it before the real trees, and the same rule picks its decision turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..method.expansion import expansion_scores, sibling_counts
from ..method.tree import TreeArrays
from .decisions import subtree_leaf_means, tree_decision_labels

TIE_TOL = 5e-4
"""Nats per token: two candidates' entropies closer than this are a tie (the round's order among
them is a tie-break, not guidance; identical turns in two chains have identical entropies)."""
MIN_ENTROPY = 0.05
"""Nats per token; docs/regime.md: candidate turns' 5th percentile on the warm start."""
SEARCH_DECISIONS = ("follow", "repeat", "off_plan")
RULE = (
    "a turn n that entropy-guided expansion picked and re-sampled as branch x, where n is a "
    f"search decision (label follow / repeat / off_plan against the plan), n was uncertain "
    f"(H(n) >= {MIN_ENTROPY} nats per token), and the re-sample changed the outcome (mean "
    "leaf reward under x != under n); the largest change first, then a re-sample that "
    "is no entropy tie, then one that decided differently, then the highest H(n), then the "
    "first tree"
)


@dataclass(frozen=True)
class RunningExample:
    """The chosen pair, or ``found=False`` with the reason in ``why``."""

    found: bool
    tree_index: int
    node: int
    """The picked, re-sampled turn n (-1 when not found)."""
    resample: int
    """The first node x of the branch that re-sampled n (-1 when not found)."""
    why: str
    candidates: int = 0
    """How many (n, x) pairs qualified."""
    tied_with: tuple[int, ...] = ()
    """The candidates of n's round with n's entropy (within :data:`TIE_TOL`): empty when
    entropy singled n out."""

    def highlight(self) -> dict[int, str]:
        """Node → role, for drawings."""
        if not self.found:
            return {}
        return {self.node: "picked turn n", self.resample: "its re-sample x"}


def _labels(tree: TreeArrays) -> np.ndarray:
    if tree.info.get("hop_queries"):
        return tree_decision_labels(tree)
    actions = [str(r.get("action")) for r in tree.records] if len(tree.records) else []
    if len(actions) != tree.num_nodes:
        return np.full(tree.num_nodes, "unknown", dtype=object)
    return np.array(
        ["root"] + [("follow" if a == "search" else a) for a in actions[1:]], dtype=object
    )


def qualifying_pairs(tree: TreeArrays) -> list[dict]:
    """Every (n, x) pair of one tree and which of the rule's conditions it meets."""
    source = np.asarray(tree.node_arrays.get("resampled_from", []), dtype=np.int64)
    if source.size != tree.num_nodes:
        return []
    means = subtree_leaf_means(np.asarray(tree.parent), np.asarray(tree.leaf_reward, float))
    labels = _labels(tree)
    pairs = []
    for x in np.flatnonzero(source > 0):  # picks of the root have no outcome of their own
        n = int(source[x])
        pairs.append(
            {
                "node": n,
                "resample": int(x),
                "entropy": float(tree.entropy[n]),
                "decision": str(labels[n]),
                "resample_decision": str(labels[x]),
                "change": float(means[x] - means[n]),
                "is_decision": str(labels[n]) in SEARCH_DECISIONS,
                "uncertain": float(tree.entropy[n]) >= MIN_ENTROPY,
                "flips": abs(float(means[x] - means[n])) > 1e-9,
                "tied_with": pick_odds(tree, n, int(x))["tied_with"],
            }
        )
    return pairs


def tie_words(tied_with: Sequence[int]) -> str:
    """'no entropy tie' or the sentence naming the tied candidates."""
    if not tied_with:
        return "no other candidate of its round had its entropy (no tie)"
    names = ", ".join(str(t) for t in tied_with)
    return (
        f"an entropy tie: candidate(s) {names} had the same entropy (within {TIE_TOL:g}), "
        "so entropy did not single it out"
    )


def pick_odds(tree: TreeArrays, node: int, resample: int) -> dict:
    """How special the pick of ``node`` was in the round that grew ``resample``: the round's
    candidates C (nodes with children before it, root included), its picks K, the chance
    K / C that a uniform pick of K of the C candidates includes ``node``, the candidates tied
    with it on entropy (``tied_with``, within :data:`TIE_TOL`) and whether the tie straddled
    the cut (``tie_break``: a tied candidate was left unpicked)."""
    rounds = np.asarray(tree.node_arrays.get("expansion_round", np.zeros(tree.num_nodes)))
    source = np.asarray(tree.node_arrays.get("resampled_from", np.full(tree.num_nodes, -1)))
    if not 0 <= resample < tree.num_nodes or source[resample] != node:
        raise ValueError(f"node {resample} is not a re-sample of node {node} in this tree")
    r = int(rounds[resample])
    sub, ids = tree_before_round(tree, r)
    candidates = ids[~sub.is_leaf]
    picks = source[(rounds == r) & (source >= 0)]
    h = np.asarray(tree.entropy, dtype=float)
    tied = [int(c) for c in candidates if c != node and abs(h[c] - h[node]) <= TIE_TOL]
    k, c = len(picks), len(candidates)
    return {
        "round": r,
        "candidates": c,
        "picks": k,
        "uniform_chance": min(k, c) / c if c else float("nan"),
        "tied_with": tied,
        "tie_break": any(t not in set(picks.tolist()) for t in tied),
    }


def choose_running_example(trees: Sequence[TreeArrays]) -> RunningExample:
    """The running example by :data:`RULE` among ``trees`` (entropy-grown, with
    ``resampled_from``); ``found=False`` and a sentence naming the unmet condition otherwise."""
    best, best_key, count, untied = None, None, 0, 0
    seen = {"pairs": 0, "is_decision": 0, "uncertain": 0, "flips": 0}
    for i, tree in enumerate(trees):
        for p in qualifying_pairs(tree):
            seen["pairs"] += 1
            for cond in ("is_decision", "uncertain", "flips"):
                seen[cond] += int(p[cond])
            if not (p["is_decision"] and p["uncertain"] and p["flips"]):
                continue
            count += 1
            untied += int(not p["tied_with"])
            key = (
                -abs(p["change"]),
                bool(p["tied_with"]),
                p["resample_decision"] == p["decision"],
                -p["entropy"],
                i,
                p["node"],
            )
            if best_key is None or key < best_key:
                best, best_key = (i, p), key
    if best is None:
        if not seen["pairs"]:
            why = (
                "no tree holds a re-sampled turn (grow them with expansion='entropy'; "
                "picks of the root do not count)"
            )
        else:
            why = (
                f"no turn qualifies: of {seen['pairs']} re-sampled turns, "
                f"{seen['is_decision']} were search decisions, {seen['uncertain']} had "
                f"H >= {MIN_ENTROPY}, {seen['flips']} changed the outcome, none all three"
            )
        return RunningExample(False, 0, -1, -1, why, 0)
    i, p = best
    verb = "raised" if p["change"] > 0 else "lowered"
    why = (
        f"tree {i}, turn {p['node']} ({p['decision']}, H = {p['entropy']:.3f}) re-sampled as "
        f"node {p['resample']} ({p['resample_decision']}): the re-sample {verb} the mean leaf "
        f"reward by {abs(p['change']):.2f}; {tie_words(p['tied_with'])}; {count} turn(s) qualified "
        f"({untied} without a tie)"
    )
    return RunningExample(True, i, p["node"], p["resample"], why, count, tuple(p["tied_with"]))


def teaching_tree() -> TreeArrays:
    """A hand-made 2-hop tree with text, where each mechanism obviously matters.

    ::

        0  Q: Where was the founder of Neko Labs born?  (gold: Varno)
        ├── 1  S: founder of Neko Labs        H=0.02 ── 2  S: Ada Brisk birthplace  H=0.60 ── 3  A: Varno       r=1
        ├── 4  S: founder of Neko Labs        H=0.03 ── 5  A: Ada Brisk (stops early) H=0.70, r=0
        ├── 6  S: Neko Labs                   H=0.25 ── 7  S: founder of Neko Labs H=0.04 ── 8  S: Ada Brisk birthplace H=0.55 ── 9 A: Varno r=1
        └── round 1: 10 re-samples turn 2 under node 1: A: Ada Brisk (stops early) r=0

    Expansion (K = 1, α small) scores the inner nodes: turn 2 (H = 0.60, the decision to
    search the second hop) wins; the more uncertain turn 5 is a leaf and cannot be picked.
    Its re-sample 10 stops early and fails: the outcome under node 1 now depends on that
    decision, which is what turn-wise credit then tells apart (node 2's value > node 10's).
    """
    parent = np.array([-1, 0, 1, 2, 0, 4, 0, 6, 7, 8, 1])
    entropy = np.array([0.0, 0.02, 0.60, 0.08, 0.03, 0.70, 0.25, 0.04, 0.55, 0.06, 0.65])
    nan = np.nan
    reward = np.array([nan, nan, nan, 1.0, nan, 0.0, nan, nan, nan, 1.0, 0.0])
    q1, q2 = "founder of Neko Labs", "Ada Brisk birthplace"
    actions = [
        ("root", None),
        ("search", q1),
        ("search", q2),
        ("answer", "Varno"),
        ("search", q1),
        ("answer", "Ada Brisk"),
        ("search", "Neko Labs"),
        ("search", q1),
        ("search", q2),
        ("answer", "Varno"),
        ("answer", "Ada Brisk"),
    ]
    records = []
    for kind, text in actions:
        if kind == "root":
            records.append({"action": None, "text": "Where was the founder of Neko Labs born?"})
        elif kind == "search":
            records.append({"action": "search", "query": text, "text": f"<search>{text}</search>"})
        else:
            records.append(
                {"action": "answer", "answer": text, "text": f"<answer>\\boxed{{{text}}}</answer>"}
            )
    n = len(parent)
    rounds = np.zeros(n, dtype=np.int64)
    rounds[10] = 1
    resampled = np.full(n, -1, dtype=np.int64)
    resampled[10] = 2
    depth = np.array([0, 1, 2, 3, 1, 2, 1, 2, 3, 4, 2])
    return TreeArrays(
        parent,
        entropy,
        reward,
        prompt_id=0,
        node_arrays={
            "expansion_round": rounds,
            "resampled_from": resampled,
            "depth": depth,
            "duplicate_of": np.full(n, -1, dtype=np.int64),
        },
        records=records,
        info={
            "question": "Where was the founder of Neko Labs born?",
            "golden_answers": ["Varno"],
            "hop_queries": [q1, q2],
            "hand_made": True,
        },
    )


def teaching_tree_before_expansion() -> TreeArrays:
    """:func:`teaching_tree` as it stood after its initial chains (round 0: nodes 0-9)."""
    full = teaching_tree()
    keep = slice(0, 10)
    return TreeArrays(
        full.parent[keep],
        full.entropy[keep],
        full.leaf_reward[keep],
        prompt_id=full.prompt_id,
        node_arrays={k: v[keep] for k, v in full.node_arrays.items()},
        records=list(full.records[keep]),
        info=dict(full.info),
    )


def tree_before_round(tree: TreeArrays, expansion_round: int) -> tuple[TreeArrays, np.ndarray]:
    """(the tree as the expansion round ``expansion_round`` scored it, ids): the nodes grown in
    earlier rounds (``expansion_round`` < r), renumbered in order; ``ids[j]`` is the full tree's
    id of node j. Scores of :func:`at2po_lib.method.expansion.expansion_scores` on it are the
    scores that round ranked."""
    rounds = np.asarray(tree.node_arrays.get("expansion_round", np.zeros(tree.num_nodes)))
    ids = np.flatnonzero((rounds < expansion_round) | (np.arange(tree.num_nodes) == 0))
    new_id = np.full(tree.num_nodes, -1, dtype=np.int64)
    new_id[ids] = np.arange(len(ids))
    parent = np.where(tree.parent[ids] >= 0, new_id[np.maximum(tree.parent[ids], 0)], -1)
    if (parent[1:] < 0).any():
        raise ValueError("a node of an earlier round has a parent grown later")
    records = [tree.records[i] for i in ids] if len(tree.records) else []
    sub = TreeArrays(
        parent,
        tree.entropy[ids],
        tree.leaf_reward[ids],
        prompt_id=tree.prompt_id,
        node_arrays={k: np.asarray(v)[ids] for k, v in tree.node_arrays.items()},
        records=records,
        info=dict(tree.info),
    )
    return sub, ids


def round_scores(tree: TreeArrays, expansion_round: int, alpha: float) -> "pd.DataFrame":
    """The score table of one expansion round, in the full tree's ids: entropy, siblings b(n),
    score H − α·b, whether the node was a candidate (leaves never are), ``entropy ties`` (the
    other candidates with its entropy within :data:`TIE_TOL`: the round's order among them
    is a tie-break) and whether the round re-sampled it (``resampled_from`` of the nodes it
    grew); best candidates first."""
    sub, ids = tree_before_round(tree, expansion_round)
    rounds = np.asarray(tree.node_arrays.get("expansion_round", np.zeros(tree.num_nodes)))
    source = np.asarray(tree.node_arrays.get("resampled_from", np.full(tree.num_nodes, -1)))
    picked = set(source[(rounds == expansion_round) & (source >= 0)].tolist())
    labels = _labels(sub)
    frame = pd.DataFrame(
        {
            "node": ids,
            "decision": labels,
            "entropy": sub.entropy,
            "siblings b(n)": sibling_counts(sub.parent),
            "score": expansion_scores(sub.entropy, sub.parent, alpha),
            "candidate": ~sub.is_leaf,
            "re-sampled": [int(i) in picked for i in ids],
        }
    )
    cand_h = sub.entropy[~sub.is_leaf]
    frame["entropy ties"] = [
        int((np.abs(cand_h - h) <= TIE_TOL).sum()) - 1 if c else 0
        for h, c in zip(sub.entropy, frame["candidate"])
    ]
    frame.loc[~frame["candidate"], "score"] = np.nan  # a leaf is never scored for a pick
    return frame.sort_values(["candidate", "score"], ascending=[False, False]).set_index("node")
