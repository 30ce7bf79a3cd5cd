"""TinyWorld passages: each entity's facts written as short encyclopedia paragraphs.

A passage is what the wiki-18 corpus holds: ``{"id": "17", "contents": "\"Title\"\ntext"}``,
the title being the entity's name and the text naming the entity again (retrievers index
``contents`` as a whole, so a search for the name finds both). Passages have about 25-50 words
(mean ~36 for the tiny profile) and never exceed ``max_passage_words`` (at most 100), so three
observations of three passages fit a ~1,000-token trajectory.

How a passage is made:

1. an *intro* sentence that states two or three facts at once ("Belavo Karin (born 1962 in
   Port Sanolo) is a film director."), picked from paraphrased templates;
2. one sentence per remaining fact, again from paraphrases;
3. *back-references*: facts of other entities seen from this one ("Karin directed The Silent
   Harbor.", "Notable people born in Sanolo include …"), which mention other entities and make
   searches for them return this passage as a distractor;
4. filler sentences without facts, until the passage has about ``filler_words`` words (35 by
   default; the tiny profile writes none).

Sentences are packed into one passage, or two when they exceed the word budget or, for variety,
for a third of the entities with four or more sentences (both passages carry the entity's name,
as consecutive wiki-18 passages of one article carry its title). Each fact
``(entity, relation)`` has exactly one *canonical* passage: the one whose sentence states it.
Questions cite canonical passages as ``supporting_ids``; back-references may repeat a fact in
another passage, as Wikipedia does.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from .entities import World, Entity

# A sentence template covers some relation keys ("" = none). {s}/{S}: the subject (full name
# at a passage's start, else its short reference; {S} capitalised); other fields: objects.
_TEMPLATES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "person.intro": [
        ("{name} (born {birth_year}) is {occupation_a}.", ("occupation", "birth_year")),
        ("{name} is {occupation_a} who was born in {birth_year}.", ("occupation", "birth_year")),
        (
            "{name} (born {birth_year} in {born_in}) is {occupation_a}.",
            ("occupation", "birth_year", "born_in"),
        ),
        (
            "Born in {born_in} in {birth_year}, {name} is {occupation_a}.",
            ("occupation", "birth_year", "born_in"),
        ),
    ],
    "person.born_in": [
        ("{S} was born in {born_in}.", ("born_in",)),
        ("{S} is a native of {born_in}.", ("born_in",)),
        ("{S} was born and raised in {born_in}.", ("born_in",)),
    ],
    "person.studied_at": [
        ("{S} studied at {studied_at}.", ("studied_at",)),
        ("{S} graduated from {studied_at}.", ("studied_at",)),
        ("{S} attended {studied_at}.", ("studied_at",)),
    ],
    "person.filler": [
        ("{S} is known for a careful and patient style.", ()),
        ("{S} has received several awards.", ()),
        ("{S} often speaks at public events.", ()),
        ("Early in life, {s} showed a strong interest in books and music.", ()),
        ("Colleagues describe {s} as generous and hard working.", ()),
        ("{S} has written many articles about a long career.", ()),
    ],
    "city.intro": [
        ("{name} is a city in {country}.", ("country",)),
        ("{name} is a city in the country of {country}.", ("country",)),
        ("{name} is a city located in {country}.", ("country",)),
        ("{name} is a city in {country}, founded in {founded_year}.", ("country", "founded_year")),
        ("Founded in {founded_year}, {name} is a city in {country}.", ("country", "founded_year")),
    ],
    "city.founded_year": [
        ("{S} was founded in {founded_year}.", ("founded_year",)),
        ("{S} dates back to {founded_year}, when it was founded.", ("founded_year",)),
    ],
    "city.filler": [
        ("{S} is known for its old market.", ()),
        ("{S} is known for its parks and bridges.", ()),
        ("{S} has a busy harbor and a small airport.", ()),
        ("Many visitors come to {s} every summer.", ()),
        ("The old town of {s} has narrow streets and stone houses.", ()),
    ],
    "country.intro": [
        ("{name} is a country whose capital is {capital}.", ("capital",)),
        ("{name} is a country. The capital of {name} is {capital}.", ("capital",)),
        (
            "{name}, officially the {government} of {name}, is a country with its capital at {capital}.",
            ("capital",),
        ),
    ],
    "country.independence_year": [
        ("{S} became independent in {independence_year}.", ("independence_year",)),
        ("{S} gained its independence in {independence_year}.", ("independence_year",)),
    ],
    "country.filler": [
        ("Its official name is the {government} of {name}.", ()),
        ("{S} has a mild climate.", ()),
        ("{S} is known for its mountains and long rivers.", ()),
        ("Farming and trade are important to the economy of {s}.", ()),
        ("The people of {s} celebrate a national day every spring.", ()),
    ],
    "university.intro": [
        ("{name} is a university in {city}.", ("city",)),
        (
            "{name} is a university located in {city}, founded in {founded_year}.",
            ("city", "founded_year"),
        ),
        ("{name}, founded in {founded_year}, is a university in {city}.", ("city", "founded_year")),
    ],
    "university.founded_year": [
        ("{S} was founded in {founded_year}.", ("founded_year",)),
        ("{S} was established in {founded_year}.", ("founded_year",)),
    ],
    "university.filler": [
        ("{S} is known for its library.", ()),
        ("{S} has about ten thousand students.", ()),
        ("{S} offers courses in science, law and the arts.", ()),
        ("The main building of {s} stands near a large park.", ()),
    ],
    "company.intro": [
        (
            "{name} is {industry_a} founded in {founded_year} by {founded_by}.",
            ("founded_year", "founded_by"),
        ),
        ("{name} is {industry_a} based in {headquarters}.", ("headquarters",)),
        ("{name} is {industry_a}.", ()),
    ],
    "company.founded_by": [
        ("{S} was founded by {founded_by}.", ("founded_by",)),
        ("{founded_by} founded {s}.", ("founded_by",)),
    ],
    "company.founded_year": [
        ("{S} was founded in {founded_year}.", ("founded_year",)),
        ("{S} was established in {founded_year}.", ("founded_year",)),
    ],
    "company.headquarters": [
        ("{S} is headquartered in {headquarters}.", ("headquarters",)),
        ("{S} has its headquarters in {headquarters}.", ("headquarters",)),
    ],
    "company.ceo": [
        ("The CEO of {s} is {ceo}.", ("ceo",)),
        ("{ceo} serves as chief executive of {s}.", ("ceo",)),
        ("{S} is led by its CEO {ceo}.", ("ceo",)),
    ],
    "company.filler": [
        ("{S} employs several hundred people.", ()),
        ("{S} is one of the larger firms in the region.", ()),
        ("{S} sells its products in many countries.", ()),
        ("The company has grown quickly in recent years.", ()),
        ("{S} is known for the quality of its products.", ()),
        ("Many young engineers start their careers at {s}.", ()),
    ],
    "film.intro": [
        (
            "{name} is a {release_year} {genre} film directed by {directed_by}.",
            ("release_year", "genre", "directed_by"),
        ),
        ("{name} is a {genre} film released in {release_year}.", ("release_year", "genre")),
        ("{name} is a {release_year} {genre} film.", ("release_year", "genre")),
    ],
    "film.directed_by": [
        ("{S} was directed by {directed_by}.", ("directed_by",)),
        ("{directed_by} directed {s}.", ("directed_by",)),
    ],
    "film.starring": [
        ("{S} stars {starring}.", ("starring",)),
        ("{starring} plays the lead role in {s}.", ("starring",)),
    ],
    "film.produced_by": [
        ("{S} was produced by {produced_by}.", ("produced_by",)),
        ("{produced_by} produced {s}.", ("produced_by",)),
    ],
    "film.filler": [
        ("{S} received mixed reviews.", ()),
        ("{S} was a success at the box office.", ()),
        ("Critics praised the music of {s}.", ()),
        ("The story of {s} follows a family over many years.", ()),
        ("{S} was shown at several festivals.", ()),
    ],
}
# Back-references: (subject type, relation pointing at it, templates with {s}/{S} and {items}).
_BACKREFS: dict[str, list[tuple[str, list[str]]]] = {
    "person": [
        ("film.directed_by", ["{S} directed {items}.", "{S} is best known for directing {items}."]),
        ("film.starring", ["{S} starred in {items}.", "{S} played the lead in {items}."]),
        ("company.founded_by", ["{S} founded {items}."]),
        (
            "company.ceo",
            ["{S} is the chief executive of {items}.", "{S} serves as CEO of {items}."],
        ),
    ],
    "city": [
        ("country.capital", ["{S} is the capital of {items}."]),
        ("person.born_in", ["Notable people born in {s} include {items}."]),
        ("company.headquarters", ["{S} is home to {items}."]),
    ],
    "country": [("city.country", ["Cities in {s} include {items}."])],
    "university": [("person.studied_at", ["Alumni of {s} include {items}."])],
    "company": [("film.produced_by", ["{S} produced {items}."])],
    "film": [],
}
_MAX_BACKREF_ITEMS = 2
_VOWEL_START = re.compile(r"^[aeiou]", re.IGNORECASE)


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    entity_id: str

    @property
    def contents(self) -> str:
        """wiki-18's ``contents`` field: quoted title, newline, text."""
        return f'"{self.title}"\n{self.text}'

    @property
    def words(self) -> int:
        return len(self.text.split())


def _a(noun: str) -> str:
    return ("an " if _VOWEL_START.match(noun) else "a ") + noun


def _fields(world: World, e: Entity) -> dict[str, str]:
    fields = {"name": e.name, **e.extra}
    for key in e.attrs:
        fields[key.split(".", 1)[1]] = world.value_text(e, key)
    if e.type == "person":
        fields["occupation_a"] = _a(fields["occupation"])
    if e.type == "company":
        industry = e.extra["industry"]
        fields["industry_a"] = (
            "a film studio" if industry == "film studio" else _a(f"{industry} company")
        )
    return fields


def _render(template: str, fields: dict[str, str], ref: str) -> str:
    text = template.format(s=ref, S=ref[0].upper() + ref[1:], **fields)
    return text[0].upper() + text[1:]


def _sentences(e: Entity, rng: random.Random, backrefs: dict) -> list[tuple[str, tuple[str, ...]]]:
    """(template, covered relation keys) in passage order: intro, facts, back-references."""
    rel = lambda name: f"{e.type}.{name}"  # noqa: E731 (template keys → relation keys)
    intro, covers = rng.choice(_TEMPLATES[f"{e.type}.intro"])
    out = [(intro, tuple(rel(c) for c in covers))]
    remaining = [k for k in e.attrs if k not in out[0][1]]
    rng.shuffle(remaining)
    for key in remaining:
        options = _TEMPLATES.get(key)
        if options is None:
            raise KeyError(f"no passage template states {key!r} of {e.id}")
        template, covers = rng.choice(options)
        out.append((template, tuple(rel(c) for c in covers)))
    for key, templates in _BACKREFS[e.type]:
        items = backrefs.get((e.id, key), [])[:_MAX_BACKREF_ITEMS]
        if items:
            out.append((rng.choice(templates).replace("{items}", " and ".join(items)), ()))
    return out


def _words(chunk, fields, e: Entity) -> int:
    return sum(len(_render(t, fields, e.name).split()) for t, _ in chunk)


def _pack(
    sentences, fillers, fields, e: Entity, max_words: int, rng: random.Random, filler_words: int
):
    """Split sentences into one passage, or two when they exceed ``max_words`` (and, for
    variety, a third of the entities with four or more sentences); then pad each passage with
    filler sentences up to about ``filler_words`` words (0: no filler). Every passage opens
    with a sentence naming the entity."""
    total = _words(sentences, fields, e)
    split = total > max_words or (len(sentences) >= 4 and rng.random() < 0.35)
    cut = max(1, len(sentences) // 2)
    chunks = [sentences[:cut], sentences[cut:]] if split and len(sentences) > 1 else [sentences]
    fillers = list(fillers)
    rng.shuffle(fillers)
    for chunk in chunks:
        while fillers and _words(chunk, fields, e) < filler_words:
            filler = fillers.pop()
            if _words(chunk + [filler], fields, e) <= max_words:
                chunk.append(filler)
    return chunks


def _backref_index(world: World, rng: random.Random) -> dict[tuple[str, str], list[str]]:
    """(object entity id, relation key) → names of the subjects pointing at it, shuffled."""
    index: dict[tuple[str, str], list[str]] = {}
    for e in world.entities:
        for key, value in e.attrs.items():
            if isinstance(value, str) and value in world.by_id:
                index.setdefault((value, key), []).append(e.name)
    for names in index.values():
        rng.shuffle(names)
    return index


def write_passages(world: World, rng: random.Random, max_words: int, filler_words: int = 35):
    """All passages, the canonical passage of every fact, and mention counts.

    Returns ``(passages, canonical, mentions)``: ``canonical[(entity_id, relation_key)]`` is
    the id of the passage stating that fact; ``mentions[entity_id]`` counts the passages of
    *other* entities that name it (PopQA's popularity proxy: few mentions = long tail).
    """
    if not 20 <= max_words <= 100:
        raise ValueError(f"WorldConfig.max_passage_words={max_words}: must lie in [20, 100]")
    backrefs = _backref_index(world, rng)
    order = world.entities[:]
    rng.shuffle(order)  # passage ids must not reveal an entity's pool
    passages: list[Passage] = []
    canonical: dict[tuple[str, str], str] = {}
    for e in order:
        fields = _fields(world, e)
        sentences = _sentences(e, rng, backrefs)
        fillers = _TEMPLATES[f"{e.type}.filler"]
        for chunk in _pack(sentences, fillers, fields, e, max_words, rng, filler_words):
            texts = [
                _render(t, fields, e.name if i == 0 else e.short) for i, (t, _) in enumerate(chunk)
            ]
            if e.name not in texts[0]:
                raise RuntimeError(f"passage of {e.id} does not open with its name: {texts[0]!r}")
            passage = Passage(str(len(passages)), e.name, " ".join(texts), e.id)
            if passage.words > max_words:
                raise RuntimeError(f"passage of {e.id} has {passage.words} words > {max_words}")
            passages.append(passage)
            for _, covers in chunk:
                for key in covers:
                    canonical[(e.id, key)] = passage.id
    missing = [(e.id, k) for e in world.entities for k in e.attrs if (e.id, k) not in canonical]
    if missing:
        raise RuntimeError(f"facts without a canonical passage: {missing[:5]}")
    return passages, canonical, _mention_counts(world, passages)


def _mention_counts(world: World, passages: list[Passage]) -> dict[str, int]:
    """Passages of other entities naming each entity. One alternation of all names, longest
    first, so "Port Sanolo" counts for Port Sanolo and not also for Sanolo."""
    by_name = {e.name: e.id for e in world.entities}
    names = sorted(by_name, key=lambda n: (-len(n), n))
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(n) for n in names) + r")\b")
    counts = {e.id: 0 for e in world.entities}
    for p in passages:
        for entity_id in {by_name[m.group(0)] for m in pattern.finditer(p.text)}:
            if entity_id != p.entity_id:
                counts[entity_id] += 1
    return counts
