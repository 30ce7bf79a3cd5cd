"""TinyWorld: formats, determinism, answerability, hop plans and the train/test separation."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from at2po_lib.cli.world import main
from at2po_lib.config.profile import WorldConfig, load_profile
from at2po_lib.config.choices import DATASETS
from at2po_lib.tinyworld.datasets import BAMBOOGLE_TEST_SIZE
from at2po_lib.tinyworld.bm25_check import bm25_recall
from at2po_lib.tinyworld.build import (
    build_world,
    ensure_world,
    entity_stats,
    generate,
    load_world,
    read_corpus,
    read_rows,
    world_stats,
)
from at2po_lib.tinyworld.datasets import RECIPES, _part_sizes
from at2po_lib.tinyworld.names import NameBank
from at2po_lib.tinyworld.questions import relation_paths

SMOKE = load_profile("smoke").world
WIKI18_LINE = re.compile(r'\A"(?P<title>[^"\n]+)"\n(?P<text>[^\n]+)\Z')


@pytest.fixture(scope="module")
def smoke_world(tmp_path_factory):
    return build_world(SMOKE, tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def corpus(smoke_world):
    return read_corpus(smoke_world)


@pytest.fixture(scope="module")
def all_rows(smoke_world):
    """(dataset, split, row) for every row of every file."""
    out = []
    for name in DATASETS:
        for path in sorted((smoke_world.datasets_dir / name).glob("*.jsonl")):
            out += [(name, path.stem, r) for r in read_rows(smoke_world, name, path.stem)]
    return out


def _passage_has(contents: str, value: str) -> bool:
    return re.search(rf"\b{re.escape(value)}\b", contents) is not None


# ----------------------------------------------------------------------------- formats


def test_corpus_is_wiki18_format(smoke_world, fixtures_dir):
    fixture = json.loads((fixtures_dir / "wiki18_sample.jsonl").read_text().splitlines()[0])
    lines = smoke_world.corpus.read_text().splitlines()
    for i, line in enumerate(lines):
        row = json.loads(line)
        assert set(row) == set(fixture) == {"id", "contents"}
        assert row["id"] == str(i)  # string ids 0..N-1, like wiki-18
        match = WIKI18_LINE.match(row["contents"])
        assert match, row
        assert match["title"] in match["text"], "the text names its entity"


def test_corpus_reads_with_the_retrieval_parser(smoke_world):
    from at2po_lib.retrieval.corpus import parse_passage, split_contents

    line = smoke_world.corpus.read_text().splitlines()[3]
    doc = parse_passage(line, smoke_world.corpus, 4)
    title, text = split_contents(doc["contents"])
    assert doc["id"] == "3" and title and title in text


def test_passages_respect_the_word_budget(corpus):
    words = [len(c.split("\n", 1)[1].split()) for c in corpus.values()]
    assert max(words) <= SMOKE.max_passage_words <= 100
    assert 15 <= sum(words) / len(words) <= 80  # ~24 without filler (smoke, tiny), ~36 with


def test_filler_words_zero_writes_facts_only():
    """``filler_words: 0`` (the tiny profile) drops the fact-free sentences, nothing else."""
    from at2po_lib.tinyworld.passages import _TEMPLATES

    fillers = [
        re.escape(t).replace(r"\{S\}", ".+").replace(r"\{s\}", ".+")
        for key, options in _TEMPLATES.items()
        if key.endswith(".filler")
        for t, _ in options
    ]
    filler = re.compile("|".join(fillers))
    padded = generate(dataclasses.replace(SMOKE, filler_words=35))
    bare = generate(dataclasses.replace(SMOKE, filler_words=0))
    assert any(filler.search(p.text) for p in padded.passages)
    assert not any(filler.search(p.text) for p in bare.passages)
    mean_words = lambda g: sum(p.words for p in g.passages) / len(g.passages)  # noqa: E731
    assert mean_words(bare) < mean_words(padded)
    # Every fact still has its canonical passage, so every question stays answerable.
    assert set(bare.canonical) == set(padded.canonical)


def test_name_seed_shares_names_across_worlds_but_not_facts():
    """Worlds with other seeds and one ``name_seed`` (the tiny profile's auxiliary worlds) use
    the same person, city and country names for other entities with other facts."""

    def people(cfg):
        world = generate(cfg).world
        return {
            e.name: (e.pool, e.attrs["person.birth_year"], e.attrs["person.born_in"])
            for e in world.entities
            if e.type == "person"
        }

    one = people(dataclasses.replace(SMOKE, name_seed=7))
    other = people(dataclasses.replace(SMOKE, seed=SMOKE.seed + 1, name_seed=7))
    unshared = people(dataclasses.replace(SMOKE, seed=SMOKE.seed + 1))
    assert set(one) == set(other)
    assert len(set(one) & set(unshared)) < len(one) / 4
    # Same names, other facts: birth years and pools differ for most people.
    differ = sum(one[n][:2] != other[n][:2] for n in one)
    assert differ > 0.8 * len(one)


def test_rows_are_flashrag_rows(all_rows, fixtures_dir):
    fixture = json.loads(
        (fixtures_dir / "flashrag_nq_test_sample.jsonl").read_text().splitlines()[0]
    )
    seen = set()
    for name, split, row in all_rows:
        assert set(fixture) <= set(row) == {"id", "question", "golden_answers", "metadata"}
        assert re.fullmatch(rf"{split}_\d+", row["id"]) and (name, row["id"]) not in seen
        seen.add((name, row["id"]))
        assert isinstance(row["question"], str) and row["question"].strip()
        answers = row["golden_answers"]
        assert answers and all(isinstance(a, str) and a for a in answers)
        assert row["metadata"]["dataset"] == name and row["metadata"]["split"] == split


def test_load_flashrag_reads_the_datasets(smoke_world):
    from at2po_lib.protocol.qa_data import load_flashrag

    rows = load_flashrag("tiny_hotpotqa", "test", local_dir=smoke_world.datasets_dir)
    assert len(rows) == SMOKE.test_per_dataset
    assert rows[0]["metadata"]["hop_queries"]


def test_seven_datasets_with_their_splits(smoke_world):
    assert list(DATASETS) == [
        "tiny_hotpotqa",
        "tiny_2wiki",
        "tiny_musique",
        "tiny_bamboogle",
        "tiny_nq",
        "tiny_triviaqa",
        "tiny_popqa",
    ]
    assert set(DATASETS.values()) == {"multihop", "singlehop"}
    for name in DATASETS:
        splits = sorted(p.stem for p in (smoke_world.datasets_dir / name).glob("*.jsonl"))
        if name == "tiny_bamboogle":
            assert splits == ["test"]
            assert len(read_rows(smoke_world, name, "test")) == BAMBOOGLE_TEST_SIZE == 125
        else:
            assert splits == ["dev", "test", "train"]
            assert len(read_rows(smoke_world, name, "train")) == SMOKE.train_per_dataset
            assert len(read_rows(smoke_world, name, "dev")) == SMOKE.dev_per_dataset
            assert len(read_rows(smoke_world, name, "test")) == SMOKE.test_per_dataset


# ----------------------------------------------------------------------------- answerability


def test_every_hop_answer_is_in_its_supporting_passage(all_rows, corpus):
    for name, split, row in all_rows:
        meta = row["metadata"]
        for pid, entity, answer in zip(
            meta["supporting_ids"], meta["hop_entities"], meta["hop_answers"]
        ):
            contents = corpus[pid]
            assert _passage_has(contents, entity), (name, row["id"], entity, contents)
            assert _passage_has(contents, answer), (name, row["id"], answer, contents)
        if meta["type"] != "comparison":
            assert meta["hop_answers"][-1] == row["golden_answers"][0]


def test_comparison_answers_follow_from_the_compared_facts(all_rows):
    n = 0
    for _, _, row in all_rows:
        meta = row["metadata"]
        if meta["type"] != "comparison":
            continue
        n += 1
        cmp = meta["comparison"]
        half = meta["hops"] // 2
        # the compared values are the last answers of each side's chain
        assert cmp["values"] == [meta["hop_answers"][half - 1], meta["hop_answers"][-1]]
        a, b = cmp["entities"]
        assert meta["hop_entities"][0] == a and meta["hop_entities"][half] == b
        va, vb = cmp["values"]
        if cmp["op"] == "same":
            assert row["golden_answers"] == ["yes" if va == vb else "no"]
        else:
            earlier = a if int(va) < int(vb) else b
            later = b if earlier == a else a
            assert row["golden_answers"][0] == (earlier if cmp["op"] == "earlier" else later)
            assert a in row["question"] and b in row["question"]
    assert n > 0


def test_hop_plans_are_consistent_and_match_the_recipes(all_rows):
    expected_hops = {
        "tiny_hotpotqa": {2},
        "tiny_2wiki": {2, 4},
        "tiny_musique": {3, 4},
        "tiny_bamboogle": {2},
        "tiny_nq": {1},
        "tiny_triviaqa": {1},
        "tiny_popqa": {1},
    }
    for name, _, row in all_rows:
        meta = row["metadata"]
        k = meta["hops"]
        for field in (
            "supporting_ids",
            "hop_queries",
            "hop_answers",
            "hop_entities",
            "hop_relations",
            "sub_questions",
        ):
            assert len(meta[field]) == k, (name, row["id"], field)
        assert k in expected_hops[name]
        assert (meta["type"] == "single") == (k == 1)
        # each hop query names the entity it searches for
        assert all(q.startswith(e) for q, e in zip(meta["hop_queries"], meta["hop_entities"]))
        # a chain's hop i+1 searches for what hop i found
        if meta["type"] != "comparison":
            assert meta["hop_entities"][1:] == meta["hop_answers"][:-1]


def test_questions_name_the_entity_of_their_first_hop(all_rows):
    for name, _, row in all_rows:
        meta = row["metadata"]
        assert meta["hop_entities"][0] in row["question"], (name, row["question"])


def test_golden_answers_carry_aliases():
    gen = generate(SMOKE)
    rows = [r for d in gen.datasets.values() for s in d.values() for r in s]
    years = [r for r in rows if r["metadata"]["answer_type"] == "year"]
    countries = [r for r in rows if r["metadata"]["answer_type"] == "country"]
    assert years and all(
        r["golden_answers"] == [r["golden_answers"][0], f"in {r['golden_answers'][0]}"]
        for r in years
    )
    assert countries and all(
        re.fullmatch(
            rf"the (Republic|Kingdom|Federation|Principality) of "
            rf"{re.escape(r['golden_answers'][0])}",
            r["golden_answers"][1],
        )
        for r in countries
    )


# ----------------------------------------------------------------------------- separation


def test_test_supporting_passages_support_no_training_question(all_rows, smoke_world):
    support = {"train": set(), "dev": set(), "test": set()}
    for _, split, row in all_rows:
        support[split] |= set(row["metadata"]["supporting_ids"])
    assert support["test"] and support["train"] and support["dev"]
    assert not support["test"] & support["train"]
    assert not support["dev"] & support["train"]
    assert not support["test"] & support["dev"]
    # and by construction: every entity a split's rows touch belongs to that split's pool
    world = load_world(smoke_world)
    pools: dict[str, set[str]] = {}
    for e in world["entities"]:
        pools.setdefault(e["name"], set()).add(e["pool"])
    for _, split, row in all_rows:
        for entity in row["metadata"]["hop_entities"]:
            assert pools[entity] == {split}, (row["id"], entity)


def test_relations_never_cross_pools(smoke_world):
    world = load_world(smoke_world)
    pool_of = {e["id"]: e["pool"] for e in world["entities"]}
    for rel in world["relations"]:
        if rel["object_is_entity"]:
            assert pool_of[rel["subject"]] == pool_of[rel["object"]], rel


# ----------------------------------------------------------------------------- determinism, cache


def test_same_seed_gives_byte_identical_files(tmp_path):
    a = build_world(SMOKE, tmp_path / "a")
    b = build_world(SMOKE, tmp_path / "b")
    names_a = [p.relative_to(a.root) for p in a.all_files()]
    assert names_a == [p.relative_to(b.root) for p in b.all_files()] and len(names_a) == 21
    for rel in names_a + [Path("stamp.json")]:
        assert (a.root / rel).read_bytes() == (b.root / rel).read_bytes(), rel


def test_different_seed_gives_a_different_world(tmp_path):
    a = build_world(SMOKE, tmp_path / "a")
    b = build_world(dataclasses.replace(SMOKE, seed=SMOKE.seed + 1), tmp_path / "b")
    assert a.corpus.read_bytes() != b.corpus.read_bytes()
    assert a.dataset("tiny_nq", "test").read_bytes() != b.dataset("tiny_nq", "test").read_bytes()


def test_build_is_skipped_when_up_to_date_and_redone_when_forced_or_changed(tmp_path):
    first = build_world(SMOKE, tmp_path)
    assert first.rebuilt
    assert not build_world(SMOKE, tmp_path).rebuilt
    assert build_world(SMOKE, tmp_path, force=True).rebuilt
    assert build_world(dataclasses.replace(SMOKE, test_per_dataset=7), tmp_path).rebuilt
    assert len(read_rows(first, "tiny_nq", "test")) == 7
    first.dataset("tiny_nq", "dev").unlink()  # a missing file invalidates the stamp
    assert build_world(dataclasses.replace(SMOKE, test_per_dataset=7), tmp_path).rebuilt


def test_question_counts_do_not_change_the_entities():
    a, b = generate(SMOKE), generate(dataclasses.replace(SMOKE, train_per_dataset=5))
    assert [e.name for e in a.world.entities] == [e.name for e in b.world.entities]
    assert [p.contents for p in a.passages] == [p.contents for p in b.passages]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=10**6))
def test_invariants_hold_for_any_seed(seed):
    gen = generate(dataclasses.replace(SMOKE, seed=seed))
    contents = {p.id: p.contents for p in gen.passages}
    assert all(p.words <= SMOKE.max_passage_words for p in gen.passages)
    support = {}
    for d in gen.datasets.values():
        for split, rows in d.items():
            for row in rows:
                meta = row["metadata"]
                assert len(meta["supporting_ids"]) == meta["hops"]
                for pid, answer in zip(meta["supporting_ids"], meta["hop_answers"]):
                    assert _passage_has(contents[pid], answer)
                support.setdefault(split, set()).update(meta["supporting_ids"])
    assert not support["test"] & support["train"]
    assert len(gen.datasets["tiny_bamboogle"]["test"]) == 125


# ----------------------------------------------------------------------------- difficulty, retrieval


def test_names_have_near_miss_twins_and_shared_first_names():
    gen = generate(SMOKE)
    people = [e.name.split() for e in gen.world.of("person")]
    firsts = [p[0] for p in people]
    assert len(set(firsts)) < len(firsts), "people share first names"
    twins = [
        (a, b)
        for a in people
        for b in people
        if a[0] == b[0]
        and a[1] != b[1]
        and len(a[1]) == len(b[1])
        and sum(x != y for x, y in zip(a[1], b[1])) == 1
    ]
    assert twins, "at least one 'Belavo Karin' / 'Belavo Karan' pair"
    assert all(len(e.name.split()) >= 2 for e in gen.world.of("person") + gen.world.of("film"))


def test_near_miss_changes_exactly_one_vowel():
    bank = NameBank(random.Random(0))
    twin = bank.near_miss("Karin")
    assert twin != "Karin" and len(twin) == 5
    assert sum(x != y for x, y in zip(twin, "Karin")) == 1
    assert bank.near_miss("Karin") not in {twin, "Karin"}  # twins are never handed out twice


def test_bm25_finds_the_supporting_passages(smoke_world):
    pytest.importorskip("bm25s")
    recall = bm25_recall(smoke_world, k=3, split="train").set_index("dataset")
    single = recall.loc[["tiny_nq", "tiny_triviaqa", "tiny_popqa"]]
    assert (single.question_recall >= 0.85).all(), single
    assert (recall.hop_query_recall >= 0.8).all(), recall


def test_vocabulary_stays_bounded(smoke_world):
    assert load_world(smoke_world)["stats"]["vocabulary"] < 3000


# ----------------------------------------------------------------------------- helpers, stats, CLI


def test_part_sizes_sum_exactly():
    # 0.45, 0.40, 0.15 of 10 → 4.5, 4.0, 1.5 → floors 4, 4, 1 (sum 9); the largest remainder
    # (0.5, first in order) gets the last one → 5, 4, 1
    assert _part_sizes(RECIPES["tiny_2wiki"], 10) == [5, 4, 1]
    assert sum(_part_sizes(RECIPES["tiny_hotpotqa"], 333)) == 333


def test_relation_paths_exclude_round_trips_and_occupation_endings():
    two = relation_paths("country", 2)
    assert ("country.capital", "city.founded_year") in two
    assert ("country.capital", "city.country") not in two
    assert all(p[-1] != "person.occupation" for p in relation_paths("film", 2))
    assert ("person.occupation",) in relation_paths("person", 1)


def test_world_and_entity_stats(smoke_world):
    stats = world_stats(smoke_world)
    assert len(stats) == 6 * 3 + 1
    nq = stats[(stats.dataset == "tiny_nq") & (stats.split == "test")].iloc[0]
    assert nq.questions == nq.hops_1 == nq.single == SMOKE.test_per_dataset
    mus = stats[stats.dataset == "tiny_musique"]
    assert (mus.hops_3 + mus.hops_4 == mus.questions).all()
    ents = entity_stats(smoke_world)
    assert list(ents.index) == ["country", "city", "university", "person", "company", "film"]
    assert ents["total"].sum() == len(load_world(smoke_world)["entities"])
    assert ents["passages"].sum() == len(read_corpus(smoke_world))


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="max_passage_words"):
        generate(dataclasses.replace(SMOKE, max_passage_words=500))
    with pytest.raises(ValueError, match="test_fraction"):
        generate(dataclasses.replace(SMOKE, test_fraction=0.9))
    with pytest.raises(ValueError, match="n_cities"):
        generate(dataclasses.replace(SMOKE, n_cities=3, n_countries=12))
    with pytest.raises(ValueError, match="tiny_bamboogle"):
        generate(
            dataclasses.replace(SMOKE, n_films=3, n_companies=3, n_people=24, test_fraction=0.1)
        )


def test_cli_builds_then_skips(tmp_path, capsys):
    assert main(["--profile", "smoke", "--out", str(tmp_path)]) == 0
    assert "built in" in capsys.readouterr().out
    assert main(["--profile", "smoke", "--out", str(tmp_path)]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["--profile", "smoke", "--out", str(tmp_path), "--set", "world.seed=5"]) == 0
    assert load_world(build_world(dataclasses.replace(SMOKE, seed=5), tmp_path))["seed"] == 5
    assert main(["--profile", "nope"]) == 2


def test_ensure_world_uses_the_profile_artifacts(isolated_outputs):
    files = ensure_world(load_profile("smoke"))
    assert files.root == isolated_outputs / "artifacts" / "smoke" / "world"
    assert files.corpus.is_file() and not ensure_world("smoke").rebuilt


def test_default_config_is_the_tiny_world():
    # the tiny profile keeps the dataclass defaults for the world's sizes; it only shares one
    # name stream between worlds and drops filler sentences (configs/tiny.yaml says why)
    assert load_profile("tiny").world == WorldConfig(name_seed=0, filler_words=0)


def test_tiny_profile_builds_full_sized(tmp_path):
    files = build_world(load_profile("tiny").world, tmp_path)
    stats = world_stats(files)
    cfg = load_profile("tiny").world
    sizes = {
        "train": cfg.train_per_dataset,
        "dev": cfg.dev_per_dataset,
        "test": cfg.test_per_dataset,
    }
    for rec in stats.itertuples():
        assert rec.questions == (125 if rec.dataset == "tiny_bamboogle" else sizes[rec.split]), rec
    assert load_world(files)["stats"]["vocabulary"] < 3000
