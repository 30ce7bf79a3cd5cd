"""Writing TinyWorld to disk in the real formats, with a cache stamp, statistics and a CLI.

Layout of ``out_dir`` (what the real pipeline reads unchanged)::

    corpus.jsonl                     wiki-18 rows {"id": "0", "contents": "\"Title\"\ntext"}
    datasets/<name>/<split>.jsonl    FlashRAG rows {"id", "question", "golden_answers", "metadata"}
    world.json                       entities, relations (with canonical passage ids), stats,
                                     config, seed, generator version
    stamp.json                       cache key (config hash + generator version)

Everything is a pure function of the ``WorldConfig`` and :data:`GENERATOR_VERSION`: the same
config gives byte-identical files (no timestamps, no unordered iteration), and ``build_world``
skips the work when ``stamp.json`` matches.

Command line (:mod:`at2po_lib.cli.world`)::

    at2po world --profile tiny            # build artifacts/tiny/world (skipped if up to date)
    at2po world --profile smoke --force   # rebuild
    at2po world --profile tiny --set world.seed=3 --out /tmp/w
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..config.profile import load_profile
from ..util.paths import artifacts_dir
from ..config.choices import DATASETS
from .datasets import MIRRORS, make_split, split_sizes
from .entities import ENTITY_TYPES, POOLS, RELATIONS, build_entities
from .passages import write_passages

GENERATOR_VERSION = "1"
"""Bump when the generator's output changes for an unchanged config (invalidates caches)."""


@dataclass(frozen=True)
class WorldFiles:
    """Paths of a built TinyWorld; ``rebuilt`` says whether this call generated it."""

    root: Path
    rebuilt: bool = False
    seconds: float = field(default=0.0, compare=False)

    @property
    def corpus(self) -> Path:
        return self.root / "corpus.jsonl"

    @property
    def datasets_dir(self) -> Path:
        """``local_dir`` for ``at2po_lib.protocol.qa_data.load_flashrag(name, split, local_dir=...)``."""
        return self.root / "datasets"

    @property
    def world_json(self) -> Path:
        return self.root / "world.json"

    @property
    def stamp(self) -> Path:
        return self.root / "stamp.json"

    def dataset(self, name: str, split: str) -> Path:
        return self.datasets_dir / name / f"{split}.jsonl"

    def all_files(self) -> list[Path]:
        files = [self.corpus, self.world_json]
        for name in DATASETS:
            files += sorted((self.datasets_dir / name).glob("*.jsonl"))
        return files


@dataclass
class GeneratedWorld:
    """Everything TinyWorld generates, in memory (``build_world`` writes it)."""

    world: Any
    passages: list
    canonical: dict
    mentions: dict
    datasets: dict[str, dict[str, list[dict]]]


def cache_key(cfg) -> str:
    blob = json.dumps({"config": asdict(cfg), "generator": GENERATOR_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def generate(cfg) -> GeneratedWorld:
    """Generate the world for a ``WorldConfig`` without touching the disk.

    Separate random streams per stage (``"<seed>:entities"``, ``"<seed>:passages"``, one per
    dataset split) keep, e.g., the entities unchanged when only the question counts change.
    """
    world = build_entities(cfg, random.Random(f"{cfg.seed}:entities"))
    passages, canonical, mentions = write_passages(
        world, random.Random(f"{cfg.seed}:passages"), cfg.max_passage_words, cfg.filler_words
    )
    datasets = {
        name: {
            split: make_split(world, canonical, mentions, name, split, n, cfg.seed)
            for split, n in split_sizes(cfg, name).items()
        }
        for name in DATASETS
    }
    return GeneratedWorld(world, passages, canonical, mentions, datasets)


def _jsonl(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


_WORD = re.compile(r"[A-Za-z]+|\d+")


def _stats(gen: GeneratedWorld) -> dict:
    words = [p.words for p in gen.passages]
    text = " ".join(p.contents for p in gen.passages)
    text += " ".join(r["question"] for d in gen.datasets.values() for s in d.values() for r in s)
    return {
        "entities": {t: {pool: len(gen.world.of(t, pool)) for pool in POOLS} for t in ENTITY_TYPES},
        "passages": len(gen.passages),
        "passage_words": {
            "min": min(words),
            "mean": round(sum(words) / len(words), 1),
            "max": max(words),
        },
        "passages_per_entity": round(len(gen.passages) / len(gen.world.entities), 2),
        "vocabulary": len(set(_WORD.findall(text))),
        "vocabulary_lowercase": len({w.lower() for w in _WORD.findall(text)}),
        "questions": {n: {s: len(rows) for s, rows in d.items()} for n, d in gen.datasets.items()},
    }


def _world_json(cfg, gen: GeneratedWorld) -> dict:
    passages_of: dict[str, list[str]] = {}
    for p in gen.passages:
        passages_of.setdefault(p.entity_id, []).append(p.id)
    w = gen.world
    entities = [
        {
            "id": e.id,
            "type": e.type,
            "name": e.name,
            "pool": e.pool,
            "facts": {k: w.value_text(e, k) for k in e.attrs},
            "extra": e.extra,
            "passages": passages_of[e.id],
            "mentions": gen.mentions[e.id],
        }
        for e in w.entities
    ]
    relations = [
        {
            "subject": e.id,
            "relation": k,
            "object": e.attrs[k],
            "object_text": w.value_text(e, k),
            "object_is_entity": RELATIONS[k].entity_valued,
            "passage_id": gen.canonical[(e.id, k)],
        }
        for e in w.entities
        for k in e.attrs
    ]
    return {
        "generator_version": GENERATOR_VERSION,
        "seed": cfg.seed,
        "cache_key": cache_key(cfg),
        "config": asdict(cfg),
        "datasets": {n: {"group": g, "mirrors": MIRRORS[n]} for n, g in DATASETS.items()},
        "stats": _stats(gen),
        "entities": entities,
        "relations": relations,
    }


def _is_current(files: WorldFiles, key: str) -> bool:
    try:
        stamp = json.loads(files.stamp.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return stamp.get("cache_key") == key and all(p.is_file() for p in _expected_files(files))


def _expected_files(files: WorldFiles) -> list[Path]:
    out = [files.corpus, files.world_json]
    for name in DATASETS:
        splits = ["test"] if name == "tiny_bamboogle" else ["train", "dev", "test"]
        out += [files.dataset(name, s) for s in splits]
    return out


def build_world(cfg, out_dir: Path, force: bool = False) -> WorldFiles:
    """Generate TinyWorld for ``cfg`` (a ``WorldConfig``) into ``out_dir``; skip when the stamp
    shows the same config and generator version and every file exists (unless ``force``)."""
    out_dir = Path(out_dir)
    key = cache_key(cfg)
    if not force and _is_current(WorldFiles(out_dir), key):
        return WorldFiles(out_dir, rebuilt=False)
    start = time.perf_counter()
    gen = generate(cfg)
    files = WorldFiles(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files.stamp.unlink(missing_ok=True)  # a crash mid-write leaves no valid stamp behind
    files.corpus.write_text(_jsonl({"id": p.id, "contents": p.contents} for p in gen.passages))
    for name, splits in gen.datasets.items():
        (files.datasets_dir / name).mkdir(parents=True, exist_ok=True)
        for split, rows in splits.items():
            files.dataset(name, split).write_text(_jsonl(rows))
    files.world_json.write_text(json.dumps(_world_json(cfg, gen), indent=1) + "\n")
    files.stamp.write_text(
        json.dumps(
            {"cache_key": key, "generator_version": GENERATOR_VERSION, "config": asdict(cfg)},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    return WorldFiles(out_dir, rebuilt=True, seconds=time.perf_counter() - start)


def ensure_world(profile_cfg, force: bool = False) -> WorldFiles:
    """The profile's TinyWorld under ``artifacts_dir(profile)/"world"``, built if missing.
    ``profile_cfg`` is a ``ProfileConfig`` or a profile name."""
    if isinstance(profile_cfg, str):
        profile_cfg = load_profile(profile_cfg)
    return build_world(profile_cfg.world, artifacts_dir(profile_cfg.name) / "world", force=force)


# --------------------------------------------------------------------------- reading back


def load_world(files: WorldFiles) -> dict:
    """``world.json`` as a dict (entities, relations, stats, config)."""
    return json.loads(files.world_json.read_text())


def read_rows(files: WorldFiles, name: str, split: str) -> list[dict]:
    path = files.dataset(name, split)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no split {split!r} of {name!r} (run build_world)")
    return _jsonl_rows(path)


def read_corpus(files: WorldFiles) -> dict[str, str]:
    """Passage id → ``contents``."""
    return {r["id"]: r["contents"] for r in _jsonl_rows(files.corpus)}


def _jsonl_rows(path: Path) -> list[dict]:
    """Rows of a world's JSONL file; bad bytes or JSON are an error naming file and line."""
    rows = []
    for line_no, data in enumerate(path.read_bytes().splitlines(), 1):
        if not data.strip():
            continue
        try:
            rows.append(json.loads(data.decode("utf-8")))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ValueError(
                f"{path}:{line_no}: not a valid UTF-8 JSON row "
                f"({str(exc)[:120]}); rebuild the world (at2po world --force)"
            ) from None
    return rows


def world_stats(files: WorldFiles):
    """One row per (dataset, split): questions, hop distribution, question types, answers."""
    records = []
    for name, group in DATASETS.items():
        for split in ("train", "dev", "test"):
            if not files.dataset(name, split).is_file():
                continue
            rows = read_rows(files, name, split)
            rec = {
                "dataset": name,
                "group": group,
                "split": split,
                "questions": len(rows),
                "mean_hops": round(sum(r["metadata"]["hops"] for r in rows) / max(1, len(rows)), 2),
            }
            for h in (1, 2, 3, 4):
                rec[f"hops_{h}"] = sum(r["metadata"]["hops"] == h for r in rows)
            for t in ("single", "bridge", "compositional", "comparison"):
                rec[t] = sum(r["metadata"]["type"] == t for r in rows)
            rec["yes_no"] = sum(r["metadata"]["answer_type"] == "yesno" for r in rows)
            records.append(rec)
    return pd.DataFrame.from_records(records)


def entity_stats(files: WorldFiles):
    """Entities per type and pool, with passages and mean mentions per type."""
    world = load_world(files)
    df = pd.DataFrame.from_records(
        [
            {
                "type": e["type"],
                "pool": e["pool"],
                "passages": len(e["passages"]),
                "mentions": e["mentions"],
            }
            for e in world["entities"]
        ]
    )
    table = df.pivot_table(
        index="type", columns="pool", values="passages", aggfunc="size", fill_value=0
    )
    table = table.reindex(index=list(ENTITY_TYPES), columns=list(POOLS), fill_value=0)
    table["total"] = table.sum(axis=1)
    table["passages"] = df.groupby("type")["passages"].sum()
    table["mean_mentions"] = df.groupby("type")["mentions"].mean().round(2)
    return table


# --------------------------------------------------------------------------- CLI
