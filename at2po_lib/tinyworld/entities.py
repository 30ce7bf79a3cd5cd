"""TinyWorld's entity graph: six entity types, twenty relations, three disjoint pools.

Schema (subject type → relation → object)::

    country     capital → city, independence_year → year
    city        country → country, founded_year → year
    university  city → city, founded_year → year
    person      occupation → word, birth_year → year, born_in → city, studied_at → university
    company     founded_by → person, founded_year → year, headquarters → city, ceo → person
    film        directed_by → person, release_year → year, starring → person,
                produced_by → company (a film studio), genre → word

Every relation is functional (one object per subject), so every question has one answer.

**Pools.** Each entity belongs to exactly one pool, ``train``, ``dev`` or ``test``, and every
relation stays inside its pool (a test film is directed by a test person born in a test city of
a test country). Questions of a split are built from its pool only, so the facts a test
question needs sit in passages that no training question ever uses: a policy can answer test
questions only by searching, never from memory (docs/toy_scale.md). Names are drawn for the whole
world before the pools are split, so near-miss twins often sit in different pools (the
distractor a model may have memorised is the wrong entity).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from . import names as N

ENTITY_TYPES = ("country", "city", "university", "person", "company", "film")
POOLS = ("train", "dev", "test")
LITERAL_KINDS = ("year", "occupation", "genre")


@dataclass(frozen=True)
class Relation:
    """One functional relation ``subject --key--> object``."""

    key: str
    """``"<subject type>.<name>"``, e.g. ``"person.born_in"``."""
    subject: str
    obj: str
    """An entity type, or a literal kind (``year``, ``occupation``, ``genre``)."""
    keyword: str
    """Word a natural search query adds to the subject's name ("Belavo Karin born")."""

    @property
    def entity_valued(self) -> bool:
        return self.obj in ENTITY_TYPES


RELATIONS: dict[str, Relation] = {
    r.key: r
    for r in (
        Relation("country.capital", "country", "city", "capital"),
        Relation("country.independence_year", "country", "year", "independence"),
        Relation("city.country", "city", "country", "country"),
        Relation("city.founded_year", "city", "year", "founded"),
        Relation("university.city", "university", "city", "location"),
        Relation("university.founded_year", "university", "year", "founded"),
        Relation("person.occupation", "person", "occupation", "occupation"),
        Relation("person.birth_year", "person", "year", "born"),
        Relation("person.born_in", "person", "city", "born"),
        Relation("person.studied_at", "person", "university", "studied"),
        Relation("company.founded_by", "company", "person", "founder"),
        Relation("company.founded_year", "company", "year", "founded"),
        Relation("company.headquarters", "company", "city", "headquarters"),
        Relation("company.ceo", "company", "person", "CEO"),
        Relation("film.directed_by", "film", "person", "director"),
        Relation("film.release_year", "film", "year", "released"),
        Relation("film.starring", "film", "person", "starring"),
        Relation("film.produced_by", "film", "company", "produced"),
        Relation("film.genre", "film", "genre", "genre"),
    )
}

GOVERNMENTS = ("Republic", "Kingdom", "Federation", "Principality")
GENRES = ("drama", "comedy", "thriller", "western", "musical", "documentary", "romance")
OTHER_OCCUPATIONS = (
    "chemist",
    "novelist",
    "architect",
    "economist",
    "physicist",
    "painter",
    "journalist",
    "politician",
    "composer",
    "surgeon",
)
BUSINESS_OCCUPATIONS = ("entrepreneur", "engineer", "business executive")
INDUSTRIES = {  # industry -> name suffixes
    "software": ("Systems", "Software", "Labs"),
    "automobile": ("Motors",),
    "food": ("Foods",),
    "pharmaceutical": ("Pharma",),
    "energy": ("Energy", "Power"),
    "airline": ("Airways",),
    "shipping": ("Shipping", "Lines"),
}
STUDIO_SUFFIXES = ("Pictures", "Studios", "Films")
# Minimum entities per pool, so every question kind has material in the smallest pool.
_MIN_PER_POOL = {"country": 2, "city": 3, "university": 2, "person": 8, "company": 3, "film": 3}


@dataclass
class Entity:
    id: str
    type: str
    name: str
    pool: str
    short: str
    """How a passage refers to the entity after the first mention ("Karin", "the city")."""
    attrs: dict[str, str | int] = field(default_factory=dict)
    """Relation key → object entity id, year (int) or word."""
    extra: dict[str, str] = field(default_factory=dict)
    """Descriptive facts no question asks about (industry, government, first name …)."""


@dataclass
class World:
    entities: list[Entity]
    by_id: dict[str, Entity]
    _of: dict = field(default_factory=dict, repr=False, compare=False)

    def of(self, etype: str, pool: str | None = None) -> list[Entity]:
        """Entities of a type (in one pool), in generation order; cached (the graph is final)."""
        if (etype, pool) not in self._of:
            self._of[etype, pool] = [
                e for e in self.entities if e.type == etype and (pool is None or e.pool == pool)
            ]
        return self._of[etype, pool]

    def obj(self, entity: Entity, key: str) -> Entity:
        """The entity a relation points to."""
        return self.by_id[str(entity.attrs[key])]

    def value_text(self, entity: Entity, key: str) -> str:
        """The object of ``key`` as text: an entity's name, a year or a word."""
        value = entity.attrs[key]
        return self.by_id[value].name if RELATIONS[key].entity_valued else str(value)


def pool_sizes(n: int, etype: str, dev_fraction: float, test_fraction: float) -> dict[str, int]:
    """Split ``n`` entities of a type into pools; each pool gets at least its minimum, so the
    world may hold slightly more than ``n`` of a type when ``n`` is small."""
    low = _MIN_PER_POOL[etype]
    dev = max(low, round(n * dev_fraction))
    test = max(low, round(n * test_fraction))
    return {"train": max(low, n - dev - test), "dev": dev, "test": test}


def _roles(people: list[Entity], n_films: int, n_companies: int, rng: random.Random):
    """Partition a pool's people into directors, actors, business people and others."""
    order = people[:]
    rng.shuffle(order)
    n_dir = max(2, math.ceil(n_films / 2.5))
    n_act = max(2, math.ceil(n_films / 2))
    n_bus = max(3, math.ceil(n_companies * 1.2))
    directors, rest = order[:n_dir], order[n_dir:]
    actors, rest = rest[:n_act], rest[n_act:]
    business, others = rest[:n_bus], rest[n_bus:]
    if len(actors) < 2 or len(business) < 3:
        raise ValueError(
            f"WorldConfig: {len(people)} people per pool are too few for "
            f"{n_films} films and {n_companies} companies; raise n_people"
        )
    return directors, actors, business, others


class _Builder:
    """Fills one world pool by pool; a single ``random.Random`` keeps it deterministic."""

    def __init__(self, cfg, rng: random.Random):
        self.cfg, self.rng = cfg, rng
        self.entities: list[Entity] = []
        self.per_type: dict[str, int] = {}
        self.counts = {
            t: pool_sizes(_config_count(cfg, t), t, cfg.dev_fraction, cfg.test_fraction)
            for t in ENTITY_TYPES
        }
        # A separate name stream (world.name_seed) gives other worlds the same names; which
        # entity and pool gets which name still follows this world's own stream (shuffles below).
        names_rng = rng if cfg.name_seed is None else random.Random(f"{cfg.name_seed}:names")
        bank = N.NameBank(names_rng)
        total = {t: sum(self.counts[t].values()) for t in ENTITY_TYPES}
        rate = cfg.distractor_rate
        self.person_names = N.person_names(bank, total["person"], rate)
        self.city_names = N.city_names(bank, total["city"], rate)
        self.country_names = N.country_names(bank, total["country"])
        self.company_roots = N.company_roots(bank, total["company"], rate)
        self.film_titles = N.film_titles(bank, total["film"])
        self.bank = bank
        for seq in (
            self.person_names,
            self.city_names,
            self.country_names,
            self.company_roots,
            self.film_titles,
        ):
            rng.shuffle(seq)  # names are spread over pools at random

    def add(self, etype: str, name: str, pool: str, short: str, **extra: str) -> Entity:
        index = self.per_type.get(etype, 0)
        self.per_type[etype] = index + 1
        entity = Entity(f"{etype}_{index:03d}", etype, name, pool, short, {}, dict(extra))
        self.entities.append(entity)
        return entity

    def build(self) -> World:
        for pool in POOLS:
            self._pool(pool)
        return World(self.entities, {e.id: e for e in self.entities})

    def _pool(self, pool: str) -> None:
        rng, n = self.rng, {t: self.counts[t][pool] for t in ENTITY_TYPES}
        # a country's passage repeats its name, not "the country": the word "country" in
        # every country passage would outrank cities for queries like "<city> country"
        countries = [
            self.add("country", name, pool, name, government=rng.choice(GOVERNMENTS))
            for name in (self.country_names.pop() for _ in range(n["country"]))
        ]
        for c in countries:
            c.attrs["country.independence_year"] = rng.randint(1200, 1990)
        cities = []
        for i in range(n["city"]):
            city = self.add("city", self.city_names.pop(), pool, "the city")
            # round-robin first, so every country has at least one city
            country = countries[i] if i < len(countries) else rng.choice(countries)
            city.attrs["city.country"] = country.id
            city.attrs["city.founded_year"] = rng.randint(800, 1900)
            cities.append(city)
        for country in countries:
            own = [c for c in cities if c.attrs["city.country"] == country.id]
            country.attrs["country.capital"] = rng.choice(own).id
        universities = [self._university(pool, cities) for _ in range(n["university"])]
        people = []
        for _ in range(n["person"]):
            first, last = self.person_names.pop()
            person = self.add("person", f"{first} {last}", pool, last, first=first)
            person.attrs["person.birth_year"] = rng.randint(1900, 1995)
            person.attrs["person.born_in"] = rng.choice(cities).id
            person.attrs["person.studied_at"] = rng.choice(universities).id
            people.append(person)
        directors, actors, business, others = _roles(people, n["film"], n["company"], rng)
        for group, jobs in (
            (directors, ("film director",)),
            (actors, ("actor",)),
            (business, BUSINESS_OCCUPATIONS),
            (others, OTHER_OCCUPATIONS),
        ):
            for person in group:
                person.attrs["person.occupation"] = rng.choice(jobs)
        n_studios = max(1, n["company"] // 4)
        companies = [
            self._company(pool, i < n_studios, business, cities) for i in range(n["company"])
        ]
        studios = companies[:n_studios]
        for _ in range(n["film"]):
            self._film(pool, directors, actors, studios)

    def _university(self, pool: str, cities: list[Entity]) -> Entity:
        rng = self.rng
        city = rng.choice(cities)
        taken = {e.name for e in self.entities}
        form = rng.random()
        if form < 0.35 and f"University of {city.name}" not in taken:
            name = f"University of {city.name}"
        elif form < 0.6:
            name = f"{self.bank.fresh(2, 3)} Institute of Technology"
        elif form < 0.8:
            # named after a surname: a distractor for searches about people of that name
            name = f"{rng.choice(self.person_names)[1]} College"
        else:
            name = f"{self.bank.fresh(2, 3)} University"
        while name in taken:
            name = f"{self.bank.fresh(2, 3)} University"
        uni = self.add("university", name, pool, "the university")
        uni.attrs["university.city"] = city.id
        uni.attrs["university.founded_year"] = rng.randint(
            max(1300, city.attrs["city.founded_year"]), 1990
        )
        return uni

    def _company(self, pool: str, studio: bool, business: list[Entity], cities) -> Entity:
        rng = self.rng
        root = self.company_roots.pop()
        industry = "film studio" if studio else rng.choice(sorted(INDUSTRIES))
        suffix = rng.choice(STUDIO_SUFFIXES if studio else INDUSTRIES[industry])
        while f"{root} {suffix}" in {e.name for e in self.entities}:
            root = self.bank.fresh(2, 3)
        name = f"{root} {suffix}"
        company = self.add("company", name, pool, root, industry=industry)
        founder, ceo = rng.sample(business, 2)
        born = founder.attrs["person.birth_year"]
        company.attrs["company.founded_by"] = founder.id
        company.attrs["company.founded_year"] = rng.randint(
            min(born + 22, 2023), min(born + 60, 2023)
        )
        company.attrs["company.headquarters"] = rng.choice(cities).id
        company.attrs["company.ceo"] = ceo.id
        return company

    def _film(self, pool: str, directors, actors, studios) -> Entity:
        rng = self.rng
        film = self.add("film", self.film_titles.pop(), pool, "the film")
        director, actor, studio = rng.choice(directors), rng.choice(actors), rng.choice(studios)
        earliest = max(
            director.attrs["person.birth_year"] + 22, studio.attrs["company.founded_year"]
        )
        film.attrs["film.directed_by"] = director.id
        film.attrs["film.release_year"] = rng.randint(min(earliest, 2023), 2023)
        film.attrs["film.starring"] = actor.id
        film.attrs["film.produced_by"] = studio.id
        film.attrs["film.genre"] = rng.choice(GENRES)
        return film


def _config_count(cfg, etype: str) -> int:
    plural = {
        "country": "countries",
        "city": "cities",
        "university": "universities",
        "person": "people",
        "company": "companies",
        "film": "films",
    }[etype]
    return int(getattr(cfg, f"n_{plural}"))


def check_config(cfg) -> None:
    """Raise a ``ValueError`` naming the ``WorldConfig`` field that cannot make a world."""
    for etype in ENTITY_TYPES:
        if _config_count(cfg, etype) < 1:
            raise ValueError(f"WorldConfig.n_{etype}: must be at least 1")
    if not (
        0 < cfg.dev_fraction and 0 < cfg.test_fraction and cfg.dev_fraction + cfg.test_fraction < 1
    ):
        raise ValueError(
            f"WorldConfig.dev_fraction={cfg.dev_fraction}, test_fraction="
            f"{cfg.test_fraction}: both must be > 0 and sum to less than 1"
        )
    if not 0 <= cfg.distractor_rate <= 1:
        raise ValueError(f"WorldConfig.distractor_rate={cfg.distractor_rate}: must lie in [0, 1]")
    for pool in POOLS:
        cities = pool_sizes(cfg.n_cities, "city", cfg.dev_fraction, cfg.test_fraction)[pool]
        countries = pool_sizes(cfg.n_countries, "country", cfg.dev_fraction, cfg.test_fraction)[
            pool
        ]
        if cities < countries:
            raise ValueError(
                f"WorldConfig.n_cities={cfg.n_cities}: the {pool} pool gets {cities} "
                f"cities for {countries} countries; every country needs a capital"
            )


def build_entities(cfg, rng: random.Random) -> World:
    """The entity graph for a ``WorldConfig`` (see the module docstring)."""
    check_config(cfg)
    return _Builder(cfg, rng).build()
