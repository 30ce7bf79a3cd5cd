"""Training data of the warm start: the auxiliary TinyWorlds it learns from, the validation
questions it is judged on, and the text its tokenizer and pretraining read.

Why auxiliary worlds, and why not the evaluation world
------------------------------------------------------
A pretrained LLM reads names from its context because it has seen millions of them; a tiny
model trained from scratch on one world instead memorises that world's few hundred names.
Measured on TinyWorld: trained on the evaluation world's ``train`` split alone, the policy
reached a training loss of 0.5 while answering every validation question with a *training*
name. And when the evaluation world's passages were in the tokenizer's training text, its
unseen (dev/test) names became whole tokens whose embeddings no training step ever touched,
which the model then almost never produced (greedy EM on single-hop dev 0.15 against 0.5 on
a training world).

So the demonstrations come from ``sft.aux_worlds`` TinyWorlds generated with other seeds
(other names, other facts, the same relations and question styles), each with its own
retriever: all their splits, observations from *their* retriever. Their passages are also the
tokenizer's and the optional pretraining's text (``sft.pretrain_steps``).

The tiny profile also fixes ``world.name_seed``, which the auxiliary worlds copy: every world
then draws the *same names* for other entities, pools and facts. Each evaluation-world name is
a word the demonstrations produce (a name seen only in context was a token the SFT softmax
kept suppressing), while no fact carries over from one world to another, so the policy can
only answer by copying from its search results.

The evaluation world's passages join the tokenizer and pretraining text with
``sft.pretrain_eval_corpus`` (the tiny profile's choice): the toy counterpart of an LLM that has
read Wikipedia. Then its names are whole tokens whose embeddings pretraining has trained; a
big enough vocabulary matters (``policy.vocab_size``), see :mod:`at2po_lib.warmstart.sft`.
``sft.main_world_demos: true`` adds the evaluation world's ``train`` split to the
demonstrations (its corpus then joins the tokenizer text too). The evaluation world's ``dev``
split is the validation set either way; its ``test`` split is never read here, and no
question or answer of its ``dev``/``test`` pools is ever a training target.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol.qa_data import MULTI_HOP, dataset_group
from ..retrieval.indexes import build_retriever
from ..tinyworld.build import build_world, ensure_world, read_corpus, read_rows
from ..tinyworld.datasets import SPLITS
from ..util.paths import artifacts_dir
from .demos import script_demos
from .strategies import plans_for

if TYPE_CHECKING:
    from ..config.profile import ProfileConfig

AUX_SEED_OFFSET = 1000
"""Auxiliary world k uses ``world.seed + AUX_SEED_OFFSET + k``."""


@dataclass
class WorldSource:
    """A TinyWorld with its retriever and the splits that feed demonstrations."""

    name: str
    files: Any
    """``tinyworld.WorldFiles``."""
    retriever: Any
    splits: tuple[str, ...]


def aux_profile(profile_cfg: ProfileConfig, k: int) -> ProfileConfig:
    """A copy of the profile whose world is auxiliary world ``k`` (own seed, corpus, index)."""
    cfg = copy.deepcopy(profile_cfg)
    cfg.world.seed = profile_cfg.world.seed + AUX_SEED_OFFSET + k
    root = aux_root(profile_cfg.name, k)
    cfg.retrieval.corpus = str(root / "corpus.jsonl")
    cfg.retrieval.index_dir = str(root / "index")
    return cfg


def aux_root(profile: str, k: int) -> Path:
    return artifacts_dir(profile) / "policy" / "aux_worlds" / f"world-{k}"


def world_sources(profile_cfg: ProfileConfig) -> list[WorldSource]:
    """The evaluation world first (its ``train`` split when ``sft.main_world_demos``, else no
    split) and ``sft.aux_worlds`` auxiliary worlds (all splits), each built if missing, with a
    retriever of the profile's method."""
    main_splits = ("train",) if profile_cfg.sft.main_world_demos else ()
    sources = [
        WorldSource("main", ensure_world(profile_cfg), build_retriever(profile_cfg), main_splits)
    ]
    for k in range(1, profile_cfg.sft.aux_worlds + 1):
        cfg = aux_profile(profile_cfg, k)
        files = build_world(cfg.world, aux_root(profile_cfg.name, k))
        sources.append(WorldSource(f"aux-{k}", files, build_retriever(cfg), tuple(SPLITS)))
    return sources


def demo_datasets(profile_cfg: ProfileConfig, files) -> list[str]:
    """Datasets of the profile's evaluation list that have a ``train`` split in ``files``
    (tiny_bamboogle is test-only, like Bamboogle)."""
    return [d for d in profile_cfg.eval.datasets if files.dataset(d, "train").is_file()]


def validation_rows(profile_cfg: ProfileConfig, files) -> dict[str, list[dict]]:
    """Validation questions per multi-hop dataset: ``sft.eval_questions`` spread evenly, from
    the ``dev`` split (unseen entities, like the test sets), else the last ``train`` rows."""
    multihop = [d for d in demo_datasets(profile_cfg, files) if dataset_group(d) == MULTI_HOP]
    if not multihop:
        raise ValueError(
            f"profile {profile_cfg.name!r}: no multi-hop dataset with a train split "
            f"in eval.datasets={profile_cfg.eval.datasets} to validate on"
        )
    per_dataset = math.ceil(profile_cfg.sft.eval_questions / len(multihop))
    out = {}
    for name in multihop:
        split = "dev" if files.dataset(name, "dev").is_file() else "train"
        rows = read_rows(files, name, split)
        out[name] = rows[-per_dataset:] if split == "train" else rows[:per_dataset]
    return out


def demo_source_rows(
    profile_cfg: ProfileConfig, source: WorldSource, held_out: dict[str, list[dict]] | None = None
) -> list[dict]:
    """Rows of ``source`` that become demonstrations (validation rows excluded)."""
    skip = {(name, row["id"]) for name, rows in (held_out or {}).items() for row in rows}
    rows = []
    for name in demo_datasets(profile_cfg, source.files):
        for split in source.splits:
            if source.files.dataset(name, split).is_file():
                rows += [
                    r for r in read_rows(source.files, name, split) if (name, r["id"]) not in skip
                ]
    return rows


def collect_demos(
    profile_cfg: ProfileConfig, sources: Sequence[WorldSource], validation: dict[str, list[dict]]
) -> list[Any]:
    """Scripted demonstrations from every source, observations from each world's retriever."""
    demos = []
    for k, source in enumerate(sources):
        held_out = validation if source.name == "main" else None
        rows = demo_source_rows(profile_cfg, source, held_out)
        demos += script_demos(
            rows,
            profile_cfg.policy.template,
            source.retriever,
            topk=profile_cfg.retrieval.topk,
            plans=demo_plans(profile_cfg, rows, k),
        )
    return demos


def demo_plans(profile_cfg: ProfileConfig, rows: Sequence[dict], source_index: int):
    """Each row's strategy plan under ``sft.strategy_mix`` (None without it: all follow).
    One seeded stream per source, so adding a world does not redraw the others."""
    sft = profile_cfg.sft
    if not sft.strategy_mix:
        return None

    return plans_for(
        rows, sft.follow_rate_hard, sft.follow_rate_easy, seed=sft.seed * 1_000 + source_index
    )


def corpus_texts(sources: Sequence[WorldSource], include_main: bool) -> list[str]:
    """Passage contents of the auxiliary worlds, and of the evaluation world (the source named
    ``main``) when ``include_main``."""
    return [
        text
        for source in sources
        if include_main or source.name != "main"
        for text in read_corpus(source.files).values()
    ]


def tokenizer_texts(corpus: Sequence[str], demos: Sequence[Any]) -> list[str]:
    """What the tokenizer is trained on: passages, prompts (with the chat roles) and the
    demonstrations' model turns and observations."""
    texts = list(corpus) + ["system", "user", "assistant"]
    for demo in demos:
        texts += [m["content"] for m in demo.messages]
        texts.append("".join(segment.text for segment in demo.segments))
    return texts


def pretraining_chunks(
    passages: Sequence[str], tokenizer, seq_len: int, epochs: int = 1, seed: int = 0
) -> list[dict[str, list[int]]]:
    """Language-model training sequences: passages shuffled, each encoded and followed by the
    pad/end-of-text token, concatenated and cut into ``seq_len``-token chunks (every token
    is a target, as in pretraining). ``epochs`` reshuffled passes over the passages."""
    if seq_len < 2:
        raise ValueError(f"sft.pretrain_seq_len={seq_len} must be at least 2")
    rng = random.Random(seed)
    encoded = [
        tokenizer.encode(p, add_special_tokens=False) + [tokenizer.pad_token_id] for p in passages
    ]
    stream: list[int] = []
    for _ in range(epochs):
        order = list(range(len(encoded)))
        rng.shuffle(order)
        for i in order:
            stream += encoded[i]
    return [
        {"input_ids": stream[i : i + seq_len]} for i in range(0, len(stream) - seq_len + 1, seq_len)
    ]
