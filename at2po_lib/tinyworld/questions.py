"""TinyWorld questions: relation chains and comparisons turned into FlashRAG rows.

A **chain** starts at an entity and follows relation keys: ``The Silent Harbor
--film.directed_by--> Belavo Karin --person.born_in--> Port Sanolo``. Hop *i* searches for
entity *i* and reads relation *i* from its canonical passage. A **comparison** runs two chains
(one per compared entity) and compares their last answers (earlier/later year, same/different).

Every row carries the plan a scripted demonstration needs (``metadata``, all lists in hop
order; comparisons list side A's hops, then side B's)::

    hops            int   number of searches a minimal solution makes (= len(supporting_ids))
    type            str   single | bridge | compositional | comparison
    supporting_ids  list  canonical passage id per hop
    hop_queries     list  natural search query per hop: "<entity name> <relation keyword>"
    hop_answers     list  what each hop reads (name, year or word), exactly as in the passage
    hop_entities    list  the entity each hop searches for
    hop_relations   list  relation key per hop ("film.directed_by")
    sub_questions   list  each hop as a plain single-hop question
    answer_type     str   year | person | city | country | … | yesno
    comparison      dict  {"op": earlier|later|same, "entities": [a, b], "values": [va, vb]}
                          (comparisons only; the answer is the earlier/later entity or yes/no)
    subject_mentions int  passages of other entities naming the subject (single-hop only)
    pool, split     str   the entity pool and split the row was drawn from

Golden answers carry aliases where natural: a year also as "in <year>", a country also as
"the <Republic|Kingdom|…> of <Country>", "film director" also as "director".
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from . import templates as T
from .entities import RELATIONS, Entity, World

# Relations a multi-hop question may end with (occupation is guessable from the bridge role).
_MULTIHOP_FINALS = tuple(k for k in RELATIONS if k != "person.occupation")
# Chains that come straight back (capital of a country → that city's country) are useless.
_DEAD_ENDS = {("country.capital", "city.country")}


@dataclass
class Row:
    question: str
    golden_answers: list[str]
    metadata: dict
    key: tuple
    """What makes two rows the same question (chain or compared pair), for de-duplication."""


def relation_paths(start: str, hops: int) -> list[tuple[str, ...]]:
    """All relation-key sequences of length ``hops`` from entity type ``start``."""
    if hops == 1:
        return [(k,) for k, r in RELATIONS.items() if r.subject == start]
    out = []
    for key, rel in RELATIONS.items():
        if rel.subject != start or not rel.entity_valued:
            continue
        for rest in relation_paths(rel.obj, hops - 1):
            if (key, rest[0]) not in _DEAD_ENDS:
                out.append((key, *rest))
    return [p for p in out if p[-1] in _MULTIHOP_FINALS]


def walk(world: World, start: Entity, path: tuple[str, ...]) -> list[Entity]:
    """The entity searched at each hop of ``path`` from ``start``."""
    entities = [start]
    for key in path[:-1]:
        entities.append(world.obj(entities[-1], key))
    return entities


def aliases(world: World, entity: Entity, key: str) -> list[str]:
    """Golden answers for relation ``key`` of ``entity``: the value and its natural aliases."""
    rel, value = RELATIONS[key], world.value_text(entity, key)
    if rel.obj == "year":
        return [value, f"in {value}"]
    if rel.entity_valued:
        return entity_aliases(world.obj(entity, key))
    if value == "film director":
        return [value, "director"]
    if value == "business executive":
        return [value, "executive"]
    return [value]


def entity_aliases(entity: Entity) -> list[str]:
    """An entity's name, plus "the <Republic|Kingdom|…> of <Country>" for a country."""
    if entity.type == "country":
        return [entity.name, f"the {entity.extra['government']} of {entity.name}"]
    return [entity.name]


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def mention(entity: Entity, style: str) -> str:
    return T.MENTION.get(style, {}).get(entity.type, "{name}").format(name=entity.name)


def _hop_plan(world: World, canonical: dict, entities: list[Entity], path: tuple[str, ...]) -> dict:
    plain = lambda e, k: _cap(T.final_templates("plain", k)[0].format(x=e.name))  # noqa: E731
    return {
        "supporting_ids": [canonical[(e.id, k)] for e, k in zip(entities, path)],
        "hop_queries": [f"{e.name} {RELATIONS[k].keyword}" for e, k in zip(entities, path)],
        "hop_answers": [world.value_text(e, k) for e, k in zip(entities, path)],
        "hop_entities": [e.name for e in entities],
        "hop_relations": list(path),
        "sub_questions": [plain(e, k) for e, k in zip(entities, path)],
    }


def _chain_text(
    entities: list[Entity], path: tuple[str, ...], style: str, rng: random.Random
) -> str:
    """Compose the question: noun phrases for bridge hops, a final question for the last."""
    phrase, i, last = mention(entities[0], style), 0, len(path) - 1
    while i < last:
        pair = (path[i], path[i + 1])
        if i + 1 == last and pair in T.MERGED_FINAL and rng.random() < 0.5:
            return _cap(rng.choice(T.MERGED_FINAL[pair]).format(x=phrase))
        if i + 1 < last and pair in T.MERGED_NOUN_PHRASE and rng.random() < 0.6:
            phrase, i = rng.choice(T.MERGED_NOUN_PHRASE[pair]).format(x=phrase), i + 2
        else:
            phrase, i = rng.choice(T.noun_phrases(style, path[i])).format(x=phrase), i + 1
    text = rng.choice(T.final_templates(style, path[last])).format(x=phrase)
    return text if style == "nq" else _cap(text)


def chain_row(
    world: World,
    canonical: dict,
    start: Entity,
    path: tuple[str, ...],
    style: str,
    qtype: str,
    rng: random.Random,
) -> Row:
    entities = walk(world, start, path)
    meta = {
        "hops": len(path),
        "type": qtype,
        **_hop_plan(world, canonical, entities, path),
        "answer_type": RELATIONS[path[-1]].obj,
    }
    return Row(
        _chain_text(entities, path, style, rng),
        aliases(world, entities[-1], path[-1]),
        meta,
        ("chain", start.id, path),
    )


def comparison_row(
    world: World,
    canonical: dict,
    a: Entity,
    b: Entity,
    path: tuple[str, ...],
    op: str,
    style: str,
    rng: random.Random,
) -> Row:
    """``op``: ``earlier`` / ``later`` (answer: the entity whose year is lower / higher) or
    ``same`` (answer: yes/no, whether both chains end at the same value)."""
    side_a, side_b = walk(world, a, path), walk(world, b, path)
    plan_a = _hop_plan(world, canonical, side_a, path)
    plan_b = _hop_plan(world, canonical, side_b, path)
    va, vb = plan_a["hop_answers"][-1], plan_b["hop_answers"][-1]
    if op == "same":
        answer = "yes" if va == vb else "no"
    else:
        if va == vb:
            raise ValueError(f"comparison {a.id}/{b.id} on {path}: equal values {va}")
        first = a if int(va) < int(vb) else b
        answer = first if op == "earlier" else (b if first is a else a)
    meta = {
        "hops": 2 * len(path),
        "type": "comparison",
        **{k: plan_a[k] + plan_b[k] for k in plan_a},
        "answer_type": "yesno" if op == "same" else a.type,
        "comparison": {"op": op, "entities": [a.name, b.name], "values": [va, vb]},
    }
    text = rng.choice(T.compare_templates(style, op, path)).format(a=a.name, b=b.name)
    golden = [answer] if op == "same" else entity_aliases(answer)
    return Row(text, golden, meta, ("compare", op, path, tuple(sorted((a.id, b.id)))))


# --------------------------------------------------------------------------- samplers


def _round_robin(groups: dict, n: int, rng: random.Random) -> list:
    """Take up to ``n`` items, cycling over groups in random order (diversity of kinds)."""
    order = sorted(groups)
    rng.shuffle(order)
    queues = {g: list(groups[g]) for g in order}
    for q in queues.values():
        rng.shuffle(q)
    picked = []
    while len(picked) < n and any(queues.values()):
        for g in order:
            if queues[g] and len(picked) < n:
                picked.append(queues[g].pop())
    return picked


def chain_candidates(world: World, pool: str, hops: int) -> dict[tuple[str, ...], list[Entity]]:
    """Relation path → start entities of ``pool`` (every path of ``hops`` relations)."""
    groups = {}
    for etype in {r.subject for r in RELATIONS.values()}:
        starts = world.of(etype, pool)
        for path in relation_paths(etype, hops):
            if starts:
                groups[path] = starts
    return groups


def sample_chains(world, canonical, pool, hops, n, style, qtype, rng, subjects=None) -> list[Row]:
    groups = chain_candidates(world, pool, hops)
    if subjects is not None:  # restrict start entities (PopQA's long tail)
        groups = {p: [e for e in es if e.id in subjects] for p, es in groups.items()}
    items = {p: [(e, p) for e in es] for p, es in groups.items() if es}
    return [
        chain_row(world, canonical, e, p, style, qtype, rng) for e, p in _round_robin(items, n, rng)
    ]


def long_tail_subjects(world: World, pool: str, mentions: dict[str, int], n_facts: int) -> set[str]:
    """The least-mentioned entities of ``pool`` whose facts number at least ``n_facts``: raise
    the mention threshold from 0 until enough single-hop facts qualify (PopQA's long tail)."""
    entities = [e for e in world.entities if e.pool == pool]
    for threshold in range(0, max(mentions.values(), default=0) + 1):
        chosen = {e.id for e in entities if mentions[e.id] <= threshold}
        if sum(len(world.by_id[i].attrs) for i in chosen) >= n_facts:
            return chosen
    return {e.id for e in entities}


def sample_comparisons(world, canonical, pool, side_hops, n, style, rng) -> list[Row]:
    """``n`` comparisons with sides of ``side_hops`` relations; yes/no balanced for ``same``."""
    specs = [(p, "earlier") for p in T.COMPARE_EARLIER if len(p) == side_hops]
    specs += [(p, "later") for p in T.COMPARE_LATER if len(p) == side_hops]
    specs += [(p, "same") for p in T.COMPARE_SAME if len(p) == side_hops]
    rows: dict[tuple, Row] = {}
    for attempt in range(60 * n + 100):
        if len(rows) >= n:
            break
        path, op = specs[attempt % len(specs)] if attempt < len(specs) else rng.choice(specs)
        pair = _pick_pair(world, pool, path, op, rng)
        if pair is not None:
            row = comparison_row(world, canonical, *pair, path, op, style, rng)
            rows.setdefault(row.key, row)
    return list(rows.values())


def _pick_pair(world: World, pool: str, path: tuple[str, ...], op: str, rng: random.Random):
    starts = world.of(RELATIONS[path[0]].subject, pool)
    if len(starts) < 2:
        return None
    end = lambda e: world.value_text(walk(world, e, path)[-1], path[-1])  # noqa: E731
    if op == "same" and rng.random() < 0.5:  # a "yes": two entities sharing the final value
        by_value: dict[str, list[Entity]] = {}
        for e in starts:
            by_value.setdefault(end(e), []).append(e)
        shared = [g for _, g in sorted(by_value.items()) if len(g) >= 2]
        if not shared:
            return None
        a, b = rng.sample(rng.choice(shared), 2)
        return a, b
    a, b = rng.sample(starts, 2)
    return (a, b) if end(a) != end(b) else None
