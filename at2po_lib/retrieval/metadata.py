"""Index metadata (``meta.json`` beside every index) and the checks made when an index loads.

An index is only meaningful with the corpus whose rows it numbers and, for dense indexes, the
encoder that made its vectors. Its identity is recorded at build time and checked on every
load, so a swapped corpus or encoder is a clear :class:`IndexMismatchError` instead of silently
wrong passages:

- ``corpus_checksum`` and ``passages`` (the count): compared with the corpus it is used with;
- ``encoder`` (name, pooling, prefixes, max length) for dense indexes: compared with the
  query encoder;
- ``files``: the size in bytes of every index file, so a truncated or replaced file is refused
  with its name before the index library reads it.

Indexes are built in a staging folder beside their final place and swapped in only when
complete (:mod:`at2po_lib.util.staging`), so a failed rebuild leaves the previous index (or none),
never a half-written folder that loads. The swap replaces the whole destination folder, so a
build first checks that the destination is one this tool may replace
(:func:`check_index_destination`): absent, empty, or an index it built (the marker file
:data:`INDEX_MARKER`, written with ``meta.json``; an index from before the marker is recognised
by its ``meta.json`` and file list). Anything else, a user's folder, a corpus folder, a file or a
symbolic link, is refused before any work, naming the path.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import IndexMismatchError, RetrievalError

if TYPE_CHECKING:  # pragma: no cover
    from .corpus import Corpus
    from .encoders import EncoderSpec

META_FILE = "meta.json"
FORMAT_VERSION = 1
ENCODER_FIELDS = ("name", "pooling", "query_prefix", "passage_prefix")
"""Fields that must match between an index and the encoder used to query it. ``max_length``
is recorded but may differ (queries are short either way)."""


INDEX_MARKER = ".at2po-index"
"""Written into every index folder this tool builds: a rebuild may replace such a folder."""
BY_PRODUCTS = ("embeddings", ".replaced-by-swap")
"""Entries an index folder may hold beside its recorded files (kept embedding shards, the mark
of an interrupted swap); names starting with ``corpus_offsets`` are the corpus's offset cache."""


def write_metadata(index_dir: str | Path, meta: dict[str, Any]) -> Path:
    (Path(index_dir) / INDEX_MARKER).write_text(
        "built by at2po; `at2po index` may replace this whole folder\n")
    path = Path(index_dir) / META_FILE
    record = {"format_version": FORMAT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **meta}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)  # a half-written meta.json never looks like a finished index
    return path


def _strangers(folder: Path, entries: list[str]) -> list[str]:
    """The entries of an unmarked folder that no index build wrote: all of them unless the
    folder holds a readable ``meta.json`` of an index kind (an index built before
    :data:`INDEX_MARKER`), then those that are neither its recorded files nor by-products."""
    try:
        meta = json.loads((folder / META_FILE).read_text())
    except (OSError, ValueError):
        return entries
    if not isinstance(meta, dict) or meta.get("kind") not in ("bm25", "dense") \
            or "corpus_checksum" not in meta:
        return entries
    known = {META_FILE, *BY_PRODUCTS, *(meta.get("files") or {})}
    return [e for e in entries if e not in known and not e.startswith("corpus_offsets")]


def check_index_destination(index_dir: str | Path) -> None:
    """Refuse, before any work, a destination that an index build must not replace (module
    docstring): the build swaps its result in for the whole folder."""
    path = Path(index_dir)
    if path.is_symlink():
        raise RetrievalError(
            f"{path}: a symbolic link (to {os.path.realpath(path)}); an index build replaces "
            "its destination folder, so give a real folder path (e.g. the link's target)")
    if not path.exists():
        return
    if not path.is_dir():
        raise RetrievalError(f"{path}: a file, not a folder; give a new or empty folder for "
                             "the index (the file is left as it is)")
    if (path / INDEX_MARKER).is_file():
        return
    strangers = _strangers(path, sorted(e.name for e in path.iterdir()))
    if not strangers:
        return
    shown = ", ".join(strangers[:5]) + (f" and {len(strangers) - 5} more"
                                        if len(strangers) > 5 else "")
    raise RetrievalError(
        f"{path}: holds files no index build wrote ({shown}); an index build replaces its whole "
        "destination folder, so it refuses one that is not an index. Give a new or empty folder; "
        "nothing was changed")


def file_sizes(index_dir: str | Path, names: list[str]) -> dict[str, int]:
    """``{file name: size in bytes}`` of the index files, for ``meta["files"]``."""
    folder = Path(index_dir)
    return {name: (folder / name).stat().st_size for name in names}


def check_files(meta: dict[str, Any], index_dir: str | Path) -> None:
    """Every file recorded in ``meta["files"]`` must exist with its recorded size."""
    folder = Path(index_dir)
    for name, size in (meta.get("files") or {}).items():
        path = folder / name
        if not path.is_file():
            raise RetrievalError(f"{path}: missing (the index in {folder} is incomplete); rebuild it")
        actual = path.stat().st_size
        if actual != size:
            raise IndexMismatchError(
                f"{path}: {actual} bytes, but the index was built with {size} bytes (truncated or "
                "replaced); rebuild the index")


def read_metadata(index_dir: str | Path, kind: str) -> dict[str, Any]:
    """Load ``meta.json`` and check it describes an index of ``kind`` (``dense``/``bm25``)."""
    path = Path(index_dir) / META_FILE
    if not path.is_file():
        raise RetrievalError(f"{index_dir}: no {META_FILE}; not an index built by at2po (or unfinished)")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RetrievalError(f"{path}: not valid JSON ({exc})") from None
    if meta.get("kind") != kind:
        raise IndexMismatchError(f"{path}: this is a {meta.get('kind')!r} index, expected {kind!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise IndexMismatchError(
            f"{path}: format_version {meta.get('format_version')} (this code reads {FORMAT_VERSION}); rebuild"
        )
    check_files(meta, index_dir)
    return meta


def check_corpus(meta: dict[str, Any], corpus: "Corpus", where: str | Path) -> None:
    """The corpus must be the one the index was built from (same checksum)."""
    actual = corpus.checksum()
    if meta.get("corpus_checksum") != actual:
        raise IndexMismatchError(
            f"{where}: index was built from a different corpus\n"
            f"  index: {meta.get('corpus_path')} (checksum {meta.get('corpus_checksum')})\n"
            f"  given: {corpus.path} (checksum {actual})\n"
            "Use the corpus the index was built from, or rebuild the index (force=True / --force)."
        )


def check_encoder(meta: dict[str, Any], spec: "EncoderSpec", where: str | Path) -> None:
    """A query encoder must match the passage encoder of the index (name, pooling, prefixes)."""
    stored = meta.get("encoder", {})
    wanted = spec.to_dict()
    diffs = [f"{k}: index {stored.get(k)!r} vs asked {wanted[k]!r}" for k in ENCODER_FIELDS if stored.get(k) != wanted[k]]
    if diffs:
        raise IndexMismatchError(
            f"{where}: index was built with a different encoder ({'; '.join(diffs)}). "
            "Query with the index's encoder, or rebuild the index."
        )
