"""Resumable corpus embedding: one ``.npy`` shard per chunk of rows.

Embedding wiki-18 with e5-base-v2 takes hours even on GPUs, so the work is cut into shards of
``shard_size`` rows (``shard_000000.npy`` holds rows ``[0, shard_size)``, float32, shape
``(rows, dim)``). Each shard is written to a temporary name and renamed when complete, so a
killed build leaves only finished shards; a restart checks each shard's shape and embeds only
the missing ones. ``manifest.json`` pins the encoder, shard size and corpus checksum: shards made
under other settings are never mixed in (the build refuses, or starts over with ``force``).

Memory: one chunk of passage text plus its embeddings at a time.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .base import IndexMismatchError
from .corpus import Corpus
from .encoders import DenseEncoder

MANIFEST = "manifest.json"


def shard_path(shard_dir: Path, shard: int) -> Path:
    return shard_dir / f"shard_{shard:06d}.npy"


@dataclass
class ShardReport:
    """Which shards this call embedded and which it found finished from an earlier run."""

    shard_dir: Path
    n_shards: int
    dim: int
    embedded: list[int] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)


def _shard_rows(shard: int, shard_size: int, passages: int) -> int:
    return min(shard_size, passages - shard * shard_size)


def _is_finished(path: Path, rows: int, dim: int) -> bool:
    if not path.is_file():
        return False
    try:
        array = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False  # unreadable: embed again
    return array.shape == (rows, dim) and array.dtype == np.float32


def _check_manifest(shard_dir: Path, manifest: dict, force: bool) -> None:
    path = shard_dir / MANIFEST
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved != manifest:
            if not force:
                diffs = sorted(k for k in manifest if saved.get(k) != manifest[k])
                raise IndexMismatchError(
                    f"{shard_dir}: saved embedding shards were made with other settings "
                    f"({', '.join(diffs)} differ); rebuild with force=True / --force"
                )
            shutil.rmtree(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2) + "\n")


def embed_corpus_to_shards(
    corpus: Corpus,
    encoder: DenseEncoder,
    shard_dir: str | Path,
    shard_size: int,
    *,
    force: bool = False,
    on_shard_done: Callable[[int], None] | None = None,
    progress: bool = True,
) -> ShardReport:
    """Embed every passage (``encoder.encode_passages``) into shards, skipping finished ones.

    ``on_shard_done(shard)`` runs after each newly written shard (progress hooks; tests use it
    to interrupt a build part-way).
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be positive, got {shard_size}")
    shard_dir = Path(shard_dir)
    passages = len(corpus)
    dim = encoder.dim
    n_shards = -(-passages // shard_size)
    manifest = {
        "encoder": encoder.spec.to_dict(),
        "shard_size": shard_size,
        "dim": dim,
        "corpus_checksum": corpus.checksum(),
        "passages": passages,
    }
    _check_manifest(shard_dir, manifest, force)
    report = ShardReport(shard_dir, n_shards, dim)
    todo = []
    for shard in range(n_shards):
        done = _is_finished(
            shard_path(shard_dir, shard), _shard_rows(shard, shard_size, passages), dim
        )
        (report.reused if done else todo).append(shard)
    if not todo:
        return report
    already = sum(_shard_rows(s, shard_size, passages) for s in report.reused)
    bar = tqdm(
        total=passages, initial=already, unit="passage", desc="embedding", disable=not progress
    )
    remaining = set(todo)
    for first_row, chunk in corpus.iter_chunks(shard_size, start_row=todo[0] * shard_size):
        shard = first_row // shard_size
        if shard not in remaining:
            continue
        vectors = encoder.encode_passages([p["contents"] for p in chunk]).astype(
            np.float32, copy=False
        )
        target = shard_path(shard_dir, shard)
        tmp = target.with_name(target.stem + ".tmp.npy")
        np.save(tmp, vectors)
        os.replace(tmp, target)  # atomic: a shard exists only once complete
        report.embedded.append(shard)
        remaining.discard(shard)
        bar.update(len(chunk))
        if on_shard_done is not None:
            on_shard_done(shard)
        if not remaining:
            break
    bar.close()
    return report


def iter_shards(shard_dir: str | Path, n_shards: int) -> Iterator[np.ndarray]:
    """The shards in row order (memory-mapped: one at a time is read into memory by faiss)."""
    for shard in range(n_shards):
        yield np.load(shard_path(Path(shard_dir), shard), mmap_mode="r")
