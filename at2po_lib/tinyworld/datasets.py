"""The seven TinyWorld datasets, each mirroring one of the paper's benchmarks (docs/method.md §3).

=================  =========  ==================  ==========================================
dataset            group      mirrors (FlashRAG)  what it asks
=================  =========  ==================  ==========================================
tiny_hotpotqa      multihop   hotpotqa            75% 2-hop bridge, 25% 2-hop comparison
tiny_2wiki         multihop   2wikimultihopqa     45% 2-hop compositional, 40% 2-hop
                                                  comparison, 15% 4-hop comparison ("born in
                                                  the same country?")
tiny_musique       multihop   musique             60% 3-hop, 40% 4-hop compositional chains
tiny_bamboogle     multihop   bamboogle           2-hop compositional; test only, 125 rows
tiny_nq            singlehop  nq                  single facts, search-engine phrasing
tiny_triviaqa      singlehop  triviaqa            single facts, quiz phrasing
tiny_popqa         singlehop  popqa               single facts about the least-mentioned
                                                  (long-tail) entities, PopQA templates
=================  =========  ==================  ==========================================

Splits: ``train`` (train pool), ``dev`` (dev pool, for picking checkpoints) and ``test``
(test pool); ``tiny_bamboogle`` has only ``test``, like Bamboogle. Pools are disjoint by
construction (:mod:`.entities`), so no test row shares a supporting passage with a train row.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass

from . import questions as Q

MIRRORS: dict[str, str] = {
    "tiny_hotpotqa": "hotpotqa",
    "tiny_2wiki": "2wikimultihopqa",
    "tiny_musique": "musique",
    "tiny_bamboogle": "bamboogle",
    "tiny_nq": "nq",
    "tiny_triviaqa": "triviaqa",
    "tiny_popqa": "popqa",
}
"""Dataset name → the FlashRAG dataset it mirrors."""

BAMBOOGLE_TEST_SIZE = 125
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Part:
    """One kind of question in a dataset's mix."""

    kind: str
    """``single``, ``longtail`` (single-hop on long-tail subjects), ``chain`` or ``compare``."""
    weight: float
    hops: int = 1
    """Chain length; for ``compare``, the length of each side's chain."""
    style: str = "plain"
    qtype: str = "single"


RECIPES: dict[str, list[Part]] = {
    "tiny_hotpotqa": [
        Part("chain", 0.75, 2, "hotpot", "bridge"),
        Part("compare", 0.25, 1, "hotpot", "comparison"),
    ],
    "tiny_2wiki": [
        Part("chain", 0.45, 2, "wiki2", "compositional"),
        Part("compare", 0.40, 1, "wiki2", "comparison"),
        Part("compare", 0.15, 2, "wiki2", "comparison"),
    ],
    "tiny_musique": [
        Part("chain", 0.6, 3, "musique", "compositional"),
        Part("chain", 0.4, 4, "musique", "compositional"),
    ],
    "tiny_bamboogle": [Part("chain", 1.0, 2, "bamboogle", "compositional")],
    "tiny_nq": [Part("single", 1.0, 1, "nq")],
    "tiny_triviaqa": [Part("single", 1.0, 1, "trivia")],
    "tiny_popqa": [Part("longtail", 1.0, 1, "popqa")],
}


def split_sizes(cfg, name: str) -> dict[str, int]:
    """Rows per split of one dataset under a ``WorldConfig``."""
    if name == "tiny_bamboogle":
        return {"test": BAMBOOGLE_TEST_SIZE}
    return {
        "train": cfg.train_per_dataset,
        "dev": cfg.dev_per_dataset,
        "test": cfg.test_per_dataset,
    }


def _part_sizes(parts: list[Part], n: int) -> list[int]:
    """Largest-remainder rounding of ``n`` by the parts' weights (sums to ``n`` exactly)."""
    raw = [p.weight * n for p in parts]
    sizes = [int(r) for r in raw]
    by_remainder = sorted(range(len(parts)), key=lambda i: raw[i] - sizes[i], reverse=True)
    for i in by_remainder[: n - sum(sizes)]:
        sizes[i] += 1
    return sizes


def _part_rows(world, canonical, mentions, part: Part, pool: str, n: int, rng) -> list[Q.Row]:
    if part.kind == "single":
        return Q.sample_chains(world, canonical, pool, 1, n, part.style, "single", rng)
    if part.kind == "longtail":
        subjects = Q.long_tail_subjects(world, pool, mentions, n)
        rows = Q.sample_chains(world, canonical, pool, 1, n, part.style, "single", rng, subjects)
        for row in rows:
            row.metadata["subject_mentions"] = mentions[row.key[1]]  # key: ("chain", id, path)
        return rows
    if part.kind == "chain":
        return Q.sample_chains(world, canonical, pool, part.hops, n, part.style, part.qtype, rng)
    if part.kind == "compare":
        return Q.sample_comparisons(world, canonical, pool, part.hops, n, part.style, rng)
    raise ValueError(f"unknown question kind {part.kind!r}")


def make_split(world, canonical, mentions, name: str, split: str, n: int, seed: int) -> list[dict]:
    """FlashRAG rows ``{"id", "question", "golden_answers", "metadata"}`` of one split."""
    rng = random.Random(f"{seed}:questions:{name}:{split}")
    rows: dict[tuple, Q.Row] = {}
    for part, size in zip(RECIPES[name], _part_sizes(RECIPES[name], n)):
        for row in _part_rows(world, canonical, mentions, part, split, size, rng):
            rows.setdefault(row.key, row)
    picked = list(rows.values())
    if len(picked) < n:
        if name == "tiny_bamboogle":
            raise ValueError(
                f"tiny_bamboogle needs {n} distinct 2-hop test questions but the test "
                f"pool allows {len(picked)}; raise the WorldConfig entity counts"
            )
        warnings.warn(
            f"TinyWorld {name}/{split}: only {len(picked)} of {n} questions fit the "
            f"{split} pool; raise the entity counts",
            stacklevel=2,
        )
    rng.shuffle(picked)
    out = []
    for i, row in enumerate(picked):
        meta = {"dataset": name, "split": split, "pool": split, **row.metadata}
        out.append(
            {
                "id": f"{split}_{i}",
                "question": row.question,
                "golden_answers": row.golden_answers,
                "metadata": meta,
            }
        )
    return out
