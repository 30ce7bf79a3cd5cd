r"""Demonstration strategies: where a scripted trajectory decides, and what it decides.

Why
---
A warm start trained on perfect demonstrations is near deterministic: its samples of a
group repeat one trajectory (no reward variance, nothing for GRPO to rank), its turns have
~0 entropy (nothing for entropy-guided expansion to find), and its failures are misreadings
that no choice of turn can fix. Noise in a small share of the demonstrations does not change
that (docs/toy_scale.md: greedy decoding follows the majority). So with ``sft.strategy_mix``
the demonstrations are drawn from several strategies **at the decision turns**, with rates
high enough that a worse strategy is sampled often and, for some relations, chosen greedily.
The policy then starts with genuinely mixed behaviour exactly where an agent decides: what to
search for next, and when to stop.

Decision points
---------------
A k-hop row (``metadata.hop_queries`` q_1 … q_k, ``hop_answers`` v_1 … v_k) has one decision
before each search i (0-based): the turn that either searches q_i (``follow``) or does
something else. The decision is keyed by the relation that hop i reads
(``metadata.hop_relations[i]``), which the question's wording shows the policy:

====================  =========================================================  ===========
failure mode          what the demonstration does instead of searching q_i        reward
====================  =========================================================  ===========
``stop``              answers at once with the last value read (v_{i-1}); before  0
                      the first search: the question's subject (a guess)
``repeat``            searches q_{i-1} again (the same query as before), reads    0
                      the same passages, then answers with v_{i-1}
====================  =========================================================  ===========

``repeat`` needs a previous query, so at i = 0 a repeat-prone relation always follows.
A decision follows with probability ``sft.follow_rate_hard`` for the relations of
:data:`HARD_RELATIONS` and ``sft.follow_rate_easy`` for every other relation; the first
decision that does not follow ends the plan. With the tiny profile's rates (0.35 / 0.85) a
hard decision's first differing token is the wrong one with probability 0.65, so the greedy
policy fails there and a sampled group of 6 is all-wrong at it with probability 0.65^6 ≈ 0.08.

Ground truth per turn
---------------------
Every model turn of a trajectory can be labelled from the row's plan alone
(:func:`label_turn`): ``search`` turns are ``follow`` (the next hop's query), ``repeat`` (a
query searched before) or ``off_plan``; ``answer`` turns are ``final`` (after the last hop's
observation), ``early`` (before it) — which is what ``analysis/credit_accuracy.py`` needs to
say whether a turn was useful.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FOLLOW, STOP, REPEAT = "follow", "stop", "repeat"
STRATEGIES = (FOLLOW, STOP, REPEAT)
"""Every strategy a demonstration can take at a decision."""

HARD_RELATIONS: dict[str, str] = {
    # relation read by the hop -> failure mode at the decision before that hop
    "person.born_in": STOP,
    "city.founded_year": STOP,
    "film.release_year": STOP,
    "person.studied_at": REPEAT,
    "company.founded_year": REPEAT,
}
"""Relations whose decision follows with ``sft.follow_rate_hard`` (the others with
``follow_rate_easy``), and how such a decision fails. Five of TinyWorld's 19 relations, chosen
(on the training splits' hop statistics) so that about half of the 2-hop questions hold a hard
decision at their second hop, 3-4-hop questions are not all hard, and the single-hop sets have
a few at their only decision (stop-prone relations there mean answering without a search)."""

EASY_FAILURE = STOP
"""How an easy relation's decision fails (rarely: 1 - follow_rate_easy)."""


@dataclass(frozen=True)
class Decision:
    """The decision before search ``hop`` (0-based) of a row."""

    hop: int
    relation: str
    hard: bool
    failure: str
    """``stop`` or ``repeat``: what not following does here."""
    follow_rate: float


@dataclass(frozen=True)
class StrategyPlan:
    """What one demonstration does: the queries it searches, in order, and its answer."""

    strategy: str
    """``follow`` (the whole plan), ``stop`` or ``repeat`` (at decision ``at_hop``)."""
    at_hop: int | None
    queries: tuple[str, ...]
    hops_read: tuple[int, ...]
    """For each search, the hop whose passages it retrieves (a repeat reads hop i-1 again)."""
    answer: str

    @property
    def correct(self) -> bool:
        return self.strategy == FOLLOW


def _meta(row: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = row.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError(f"row {row.get('id', '?')!r}: no metadata mapping")
    return meta


def decisions(
    row: Mapping[str, Any], follow_rate_hard: float, follow_rate_easy: float
) -> list[Decision]:
    """The decisions of a row, one per hop, with their follow rates."""
    for name, rate in (
        ("follow_rate_hard", follow_rate_hard),
        ("follow_rate_easy", follow_rate_easy),
    ):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"sft.{name}={rate} must lie in [0, 1]")
    meta = _meta(row)
    relations = list(meta.get("hop_relations") or [])
    queries = list(meta.get("hop_queries") or [])
    if len(relations) != len(queries) or not queries:
        raise ValueError(
            f"row {row.get('id', '?')!r}: {len(queries)} hop_queries but "
            f"{len(relations)} hop_relations"
        )
    out = []
    for hop, relation in enumerate(relations):
        failure = HARD_RELATIONS.get(relation, EASY_FAILURE)
        hard = relation in HARD_RELATIONS
        if failure == REPEAT and hop == 0:  # nothing to repeat before the first search
            out.append(Decision(hop, relation, False, STOP, 1.0))
            continue
        out.append(
            Decision(hop, relation, hard, failure, follow_rate_hard if hard else follow_rate_easy)
        )
    return out


def plan_for(
    row: Mapping[str, Any], follow_rate_hard: float, follow_rate_easy: float, rng: random.Random
) -> StrategyPlan:
    """Draw one demonstration's plan: walk the decisions, the first one that does not follow
    (drawn with its rate) ends the plan in its failure mode."""
    meta = _meta(row)
    queries = [str(q) for q in meta["hop_queries"]]
    answers = [str(a) for a in meta["hop_answers"]]
    golden = row["golden_answers"][0]
    for d in decisions(row, follow_rate_hard, follow_rate_easy):
        if rng.random() < d.follow_rate:
            continue
        i = d.hop
        if d.failure == STOP:
            guess = answers[i - 1] if i > 0 else str(meta["hop_entities"][0])
            return StrategyPlan(STOP, i, tuple(queries[:i]), tuple(range(i)), guess)
        return StrategyPlan(
            REPEAT,
            i,
            tuple(queries[:i]) + (queries[i - 1],),
            tuple(range(i)) + (i - 1,),
            answers[i - 1],
        )
    return StrategyPlan(FOLLOW, None, tuple(queries), tuple(range(len(queries))), str(golden))


def plans_for(
    rows: Sequence[Mapping[str, Any]], follow_rate_hard: float, follow_rate_easy: float, seed: int
) -> list[StrategyPlan]:
    """One plan per row from one seeded stream (the same rows and seed give the same plans)."""
    rng = random.Random(seed)
    return [plan_for(row, follow_rate_hard, follow_rate_easy, rng) for row in rows]


def follow_plan(row: Mapping[str, Any]) -> StrategyPlan:
    """The plan of a perfect demonstration (every decision follows)."""
    meta = _meta(row)
    queries = tuple(str(q) for q in meta["hop_queries"])
    return StrategyPlan(
        FOLLOW, None, queries, tuple(range(len(queries))), str(row["golden_answers"][0])
    )


def plan_summary(plans: Sequence[StrategyPlan]) -> dict[str, Any]:
    """Counts and shares of each strategy (recorded with the warm start)."""
    n = len(plans)
    counts = {s: sum(p.strategy == s for p in plans) for s in STRATEGIES}
    return {
        "plans": n,
        "counts": counts,
        "shares": {s: (c / n if n else 0.0) for s, c in counts.items()},
    }


# ----------------------------------------------------------------------------- labels


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def label_turn(
    row: Mapping[str, Any],
    kind: str,
    query: str | None,
    searched_before: Sequence[str],
    hops_done: int,
) -> str:
    """The ground-truth label of one model turn, from the row's plan.

    Args:
        kind: ``search`` or ``answer`` (anything else is ``invalid``).
        query: the turn's search query (search turns).
        searched_before: the queries of the earlier search turns of the trajectory.
        hops_done: how many hops of the plan the trajectory has already searched for (the
            number of distinct plan queries among ``searched_before``).

    Returns ``follow`` (searches the plan's next query), ``repeat`` (a query searched before),
    ``off_plan`` (any other search), ``final`` (an answer after the last hop was searched),
    ``early`` (an answer before that) or ``invalid``.
    """
    queries = [_norm(q) for q in _meta(row)["hop_queries"]]
    if kind == "answer":
        return "final" if hops_done >= len(queries) else "early"
    if kind != "search":
        return "invalid"
    q = _norm(query or "")
    if q in {_norm(s) for s in searched_before}:
        return "repeat"
    if hops_done < len(queries) and q == queries[hops_done]:
        return "follow"
    return "off_plan"


TURN_LABELS = ("follow", "repeat", "off_plan", "final", "early", "invalid")
"""What :func:`label_turn` says of a turn, from the question's plan."""
DECISION_LABELS = (*TURN_LABELS, "search", "answer", "root")
"""What :func:`label_tree_turns` says of a node: a plan label, the action kind where the
question has no plan, ``root`` for the prompt."""


def label_tree_turns(
    row: Mapping[str, Any],
    parent: Sequence[int],
    actions: Sequence[str | None],
    queries: Sequence[str | None],
) -> list[str]:
    """:func:`label_turn` for every node of a rollout tree (node 0 = the root, ``parent[0] =
    -1``, parents before children), each read on its own root→node path: ``root`` for the root.
    A row without a plan (``metadata.hop_queries``, e.g. wiki-18 questions) gets the action kind
    (``search``, ``answer``, ``invalid``) instead of a plan label."""
    meta = row.get("metadata")
    planned = isinstance(meta, Mapping) and bool(meta.get("hop_queries"))
    plan = [_norm(q) for q in meta["hop_queries"]] if planned else []
    labels: list[str] = []
    searched: list[list[str]] = []  # per node: the search queries on its path, its own included
    done: list[int] = []  # per node: plan hops searched on its path, its own turn included
    for node, up in enumerate(parent):
        if up < 0:
            labels.append("root")
            searched.append([])
            done.append(0)
            continue
        kind, query = str(actions[node] or "invalid"), queries[node]
        before, hops = searched[up], done[up]
        labels.append(
            label_turn(row, kind, query, before, hops)
            if planned
            else (kind if kind in ("search", "answer") else "invalid")
        )
        is_search = kind == "search" and bool(query)  # an empty query searched nothing
        follows = is_search and hops < len(plan) and _norm(query) == plan[hops]
        searched.append(before + [query] if is_search else before)
        done.append(hops + 1 if follows else hops)
    return labels
