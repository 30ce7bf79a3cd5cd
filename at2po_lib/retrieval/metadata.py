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
build first proves it owns everything there (:mod:`.ownership`: a manifest of the files it
wrote, with their sha256).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..util.provenance import TIME_FORMAT
from .base import IndexMismatchError, RetrievalError

if TYPE_CHECKING:  # pragma: no cover
    from .corpus import Corpus
    from .encoders import EncoderSpec

META_FILE = "meta.json"
FORMAT_VERSION = 1
ENCODER_FIELDS = ("name", "pooling", "query_prefix", "passage_prefix")
"""Fields that must match between an index and the encoder used to query it. ``max_length``
is recorded but may differ (queries are short either way)."""


def write_metadata(index_dir: str | Path, meta: dict[str, Any]) -> Path:
    path = Path(index_dir) / META_FILE
    record = {
        "format_version": FORMAT_VERSION,
        "created": time.strftime(TIME_FORMAT),
        **meta,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)  # a half-written meta.json never looks like a finished index
    return path


def file_sizes(index_dir: str | Path, names: list[str]) -> dict[str, int]:
    """``{file name: size in bytes}`` of the index files, for ``meta["files"]``."""
    folder = Path(index_dir)
    return {name: (folder / name).stat().st_size for name in names}


def check_files(meta: dict[str, Any], index_dir: str | Path) -> None:
    """Every file recorded in ``meta["files"]`` must exist with its recorded size."""
    folder = Path(index_dir)
    files = meta.get("files") or {}
    if not isinstance(files, dict) or not all(
        isinstance(n, str) and isinstance(s, int) and not isinstance(s, bool)
        for n, s in files.items()
    ):
        raise IndexMismatchError(
            f"{folder / META_FILE}: 'files' is not a table of file names "
            f"and sizes ({str(files)[:80]}); rebuild the index"
        )
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            raise RetrievalError(
                f"{path}: missing (the index in {folder} is incomplete); rebuild it"
            )
        actual = path.stat().st_size
        if actual != size:
            raise IndexMismatchError(
                f"{path}: {actual} bytes, but the index was built with {size} bytes (truncated or "
                "replaced); rebuild the index"
            )


def read_metadata(index_dir: str | Path, kind: str) -> dict[str, Any]:
    """Load ``meta.json`` and check it describes an index of ``kind`` (``dense``/``bm25``)."""
    path = Path(index_dir) / META_FILE
    if not path.is_file():
        raise RetrievalError(
            f"{index_dir}: no {META_FILE}; not an index built by at2po (or unfinished)"
        )
    try:
        meta = json.loads(path.read_text())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RetrievalError(f"{path}: not valid JSON ({str(exc)[:200]})") from None
    if not isinstance(meta, dict):
        raise IndexMismatchError(
            f"{path}: expected a JSON object, got {type(meta).__name__}; rebuild the index"
        )
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
    diffs = [
        f"{k}: index {stored.get(k)!r} vs asked {wanted[k]!r}"
        for k in ENCODER_FIELDS
        if stored.get(k) != wanted[k]
    ]
    if diffs:
        raise IndexMismatchError(
            f"{where}: index was built with a different encoder ({'; '.join(diffs)}). "
            "Query with the index's encoder, or rebuild the index."
        )
