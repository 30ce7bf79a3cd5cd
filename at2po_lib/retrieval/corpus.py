"""Passage collections in the wiki-18 format: one JSON object per line,
``{"id": "0", "contents": "\\"Title\\"\\ntext"}`` (docs/method.md §2), plain or ``.gz``.

wiki-18 is 21,015,324 passages in 14 GB, far too much to hold as Python objects, so a
:class:`Corpus` never loads it. Instead:

- **Streaming** (:meth:`Corpus.iter_chunks`): chunks of parsed rows, for building indexes; works
  on ``.gz`` too (one decompression pass).
- **Lookup by row** (:meth:`Corpus.get`): an *offsets index*, the byte position where every line
  starts (int64, shape ``(passages + 1,)``, 8 bytes a passage: 168 MB for wiki-18, memory-mapped),
  built once by a vectorised newline scan and saved as ``corpus_offsets.npy`` next to the index it
  serves, with ``corpus_offsets.json`` holding the corpus checksum, size and mtime. Random access
  needs the uncompressed file (``gzip -dk wiki-18.jsonl.gz``), as Search-R1's server does.
- **Checksum** (:meth:`Corpus.checksum`): ``v1:<bytes>:<passages>:<sha>``, where ``<bytes>`` is the
  uncompressed size, ``<passages>`` the number of rows and ``<sha>`` the first 32 hex digits of the
  SHA-256 of the first MiB followed by the last MiB of the uncompressed content. It is fast
  (two 1 MiB reads and a newline count, which the offsets scan does anyway) rather than a hash of
  all 14 GB, and identical for ``wiki-18.jsonl.gz`` and its decompressed copy, so an index built
  from one serves the other. Later loads reuse the saved value while the file's size and mtime
  are unchanged. It catches a different or truncated corpus, not an edit inside the middle.

Row ``i`` is line ``i + 1`` of the file: faiss and BM25 return rows, and Search-R1 looks up
``corpus[row]`` the same way. Empty lines would shift that numbering, so one inside the file is
an error (empty lines at the very end are ignored). A line that is not a JSON object with a
string ``contents`` and an ``id`` raises :class:`CorpusError` naming the file and the line.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from .base import Document

CHECKSUM_VERSION = "v1"
HEAD_TAIL_BYTES = 1 << 20
_SCAN_BLOCK = 16 << 20
OFFSETS_FILE = "corpus_offsets.npy"
STATS_FILE = "corpus_offsets.json"


class CorpusError(ValueError):
    """A corpus file that is missing or malformed (the message names file and line)."""


def parse_passage(line: bytes | str, path: str | Path, line_no: int) -> Document:
    """One corpus line → ``{"id": str, "contents": str}``; errors name ``path:line_no``."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # incl. too deep / long ints
        raise CorpusError(f"{path}:{line_no}: not valid JSON ({str(exc)[:200]})") from None
    if not isinstance(obj, dict):
        raise CorpusError(f"{path}:{line_no}: expected a JSON object, got {type(obj).__name__}")
    contents = obj.get("contents")
    if not isinstance(contents, str):
        raise CorpusError(
            f"{path}:{line_no}: field 'contents' must be a string, got {contents!r:.60}"
        )
    passage_id = obj.get("id")
    if isinstance(passage_id, bool) or not isinstance(passage_id, (str, int)):
        raise CorpusError(
            f"{path}:{line_no}: field 'id' must be a string or integer, got {passage_id!r:.60}"
        )
    return {"id": str(passage_id), "contents": contents}


def split_contents(contents: str) -> tuple[str, str]:
    """``"\\"Title\\"\\ntext"`` → ``("Title", "text")`` (the title line loses its quotes)."""
    title, _, text = contents.partition("\n")
    return title.strip().strip('"'), text


@dataclass(frozen=True)
class CorpusStats:
    """What the checksum is made of (see the module docstring)."""

    size: int
    passages: int
    head_tail_sha256: str

    @property
    def checksum(self) -> str:
        return f"{CHECKSUM_VERSION}:{self.size}:{self.passages}:{self.head_tail_sha256[:32]}"


class _LineScanner:
    """Counts lines block by block (NumPy, no per-line Python), keeps first/last MiB and,
    optionally, every line start. Feeding all blocks then :meth:`finish` gives the stats."""

    def __init__(self, path: Path, keep_offsets: bool) -> None:
        self.path = path
        self.keep_offsets = keep_offsets
        self.size = 0
        self.newlines = 0
        self.last_newline = -1
        self.blank_lines: list[int] = []  # 1-based numbers of empty lines
        self.chunks: list[np.ndarray] = []
        self.head = b""
        self.tail = b""
        self.last_byte = b""

    def feed(self, block: bytes) -> None:
        if not block:
            return
        if len(self.head) < HEAD_TAIL_BYTES:
            self.head += block[: HEAD_TAIL_BYTES - len(self.head)]
        self.tail = (self.tail + block)[-HEAD_TAIL_BYTES:]
        newline_pos = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + self.size
        if newline_pos.size:
            # A line is empty when its newline directly follows the previous one.
            gaps = np.diff(newline_pos, prepend=self.last_newline)
            self.blank_lines.extend((np.flatnonzero(gaps == 1) + self.newlines + 1).tolist())
            if self.keep_offsets:
                self.chunks.append(newline_pos)
            self.newlines += int(newline_pos.size)
            self.last_newline = int(newline_pos[-1])
        self.size += len(block)
        self.last_byte = block[-1:]

    def finish(self) -> tuple[CorpusStats, np.ndarray | None]:
        lines = self.newlines + (1 if self.size and self.last_byte != b"\n" else 0)
        blanks = list(self.blank_lines)
        while blanks and blanks[-1] == lines:  # trailing empty lines are harmless
            blanks.pop()
            lines -= 1
        if blanks:
            raise CorpusError(
                f"{self.path}:{blanks[0]}: empty line inside the corpus (rows are line numbers, "
                "so an empty line would shift every later passage); remove it"
            )
        stats = CorpusStats(self.size, lines, hashlib.sha256(self.head + self.tail).hexdigest())
        offsets = None
        if self.keep_offsets:
            newline_pos = np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.int64)
            offsets = np.empty(lines + 1, dtype=np.int64)
            offsets[0] = 0
            # Line i+1 starts right after newline i; the row after the last ends there too.
            ends = newline_pos[:lines] + 1
            offsets[1 : len(ends) + 1] = ends
            if len(ends) < lines:  # last line has no trailing newline
                offsets[lines] = self.size
        return stats, offsets


def offsets_cache_files(folder: Path) -> set[str]:
    """The names of :data:`OFFSETS_FILE` and :data:`STATS_FILE` in ``folder`` that are this
    module's offsets cache by their form: the stats file holds exactly the keys
    :meth:`Corpus._save_cache` writes, with a checksum that is the one its fields make, and the
    offsets file is an int64 vector of ``passages + 1`` entries. Loads rewrite the cache when the
    corpus changes, so it is recognised by form, never by a recorded hash (an index build's
    ownership check, :mod:`.ownership`)."""
    try:
        saved = json.loads((folder / STATS_FILE).read_bytes().decode("utf-8"))
        stats = CorpusStats(saved["size"], saved["passages"], saved["head_tail_sha256"])
        keys = {"corpus", "file_size", "mtime_ns", *asdict(stats), "checksum"}
        if set(saved) != keys or saved["checksum"] != stats.checksum:
            return set()
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return set()
    found = {STATS_FILE}
    try:
        offsets = np.load(folder / OFFSETS_FILE, mmap_mode="r", allow_pickle=False)
        if offsets.dtype == np.int64 and offsets.shape == (stats.passages + 1,):
            found.add(OFFSETS_FILE)
    except (OSError, ValueError, TypeError):
        pass
    return found


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


class Corpus:
    """A wiki-18-format corpus on disk; ``cache_dir`` keeps its offsets and checksum.

    >>> corpus = Corpus("wiki-18.jsonl", cache_dir="index/dense")   # doctest: +SKIP
    >>> corpus.get([0, 5])[0]["contents"][:20]                      # doctest: +SKIP
    """

    def __init__(self, path: str | Path, cache_dir: str | Path | None = None) -> None:
        self.path = Path(path).expanduser().resolve()
        if not self.path.is_file():
            raise CorpusError(f"corpus file not found: {self.path}")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._stats: CorpusStats | None = None
        self._offsets: np.ndarray | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()

    @property
    def is_gzip(self) -> bool:
        return self.path.suffix == ".gz"

    # -- stats, checksum and offsets -------------------------------------------------------
    def _file_key(self) -> dict[str, Any]:
        stat = self.path.stat()
        return {"corpus": str(self.path), "file_size": stat.st_size, "mtime_ns": stat.st_mtime_ns}

    def _load_cached(self) -> bool:
        if self.cache_dir is None or not (self.cache_dir / STATS_FILE).is_file():
            return False
        try:
            saved = json.loads((self.cache_dir / STATS_FILE).read_text())
            key = self._file_key()
            if any(saved.get(k) != v for k, v in key.items() if k != "corpus"):
                return False
            stats = CorpusStats(saved["size"], saved["passages"], saved["head_tail_sha256"])
            if not self.is_gzip:
                offsets = np.load(self.cache_dir / OFFSETS_FILE, mmap_mode="r")
                if offsets.shape != (stats.passages + 1,):
                    return False
                self._offsets = offsets
        except (OSError, ValueError, KeyError):
            return False  # a damaged cache is rebuilt, never trusted
        self._stats = stats
        return True

    def _scan(self) -> None:
        scanner = _LineScanner(self.path, keep_offsets=not self.is_gzip)
        with _open_binary(self.path) as handle:
            while block := handle.read(_SCAN_BLOCK):
                scanner.feed(block)
        self._stats, offsets = scanner.finish()
        if offsets is not None:
            self._offsets = offsets
        if self.cache_dir is not None:
            try:
                self._save_cache()
            except OSError as exc:  # e.g. a read-only prebuilt index folder: keep it in memory
                warnings.warn(
                    f"could not cache corpus offsets in {self.cache_dir}: {exc}", stacklevel=2
                )

    def _save_cache(self) -> None:
        assert self._stats is not None and self.cache_dir is not None
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        if self._offsets is not None:
            tmp = self.cache_dir / (OFFSETS_FILE + ".tmp.npy")
            np.save(tmp, np.asarray(self._offsets))
            os.replace(tmp, self.cache_dir / OFFSETS_FILE)
        record = {**self._file_key(), **asdict(self._stats), "checksum": self._stats.checksum}
        (self.cache_dir / STATS_FILE).write_text(json.dumps(record, indent=2) + "\n")

    def stats(self) -> CorpusStats:
        if self._stats is None and not self._load_cached():
            self._scan()
        assert self._stats is not None
        return self._stats

    def checksum(self) -> str:
        return self.stats().checksum

    def __len__(self) -> int:
        return self.stats().passages

    def offsets(self) -> np.ndarray:
        """Byte offset of every row's start, plus the end of the last row: shape (n + 1,)."""
        if self.is_gzip:
            raise CorpusError(
                f"{self.path}: looking passages up by row needs the uncompressed file "
                f"(run: gzip -dk {self.path})"
            )
        self.stats()
        if self._offsets is None:  # stats came from a cache without offsets
            self._scan()
        assert self._offsets is not None
        return self._offsets

    # -- lookup ------------------------------------------------------------------------------
    def _read(self, start: int, length: int) -> bytes:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        if hasattr(os, "pread"):  # positional reads need no lock between threads
            return os.pread(self._fd, length, start)
        with self._lock:
            os.lseek(self._fd, start, os.SEEK_SET)
            return os.read(self._fd, length)

    def get(self, rows: Sequence[int]) -> list[Document]:
        """Passages by row number (0-based), in the order asked."""
        offsets = self.offsets()
        count = len(offsets) - 1
        out = []
        for row in rows:
            row = int(row)
            if not 0 <= row < count:
                raise IndexError(
                    f"{self.path}: row {row} out of range (corpus has {count} passages)"
                )
            start, end = int(offsets[row]), int(offsets[row + 1])
            out.append(parse_passage(self._read(start, end - start), self.path, row + 1))
        return out

    # -- streaming ---------------------------------------------------------------------------
    def iter_chunks(
        self, chunk_size: int, start_row: int = 0
    ) -> Iterator[tuple[int, list[Document]]]:
        """Yield ``(first_row, passages)`` chunks of at most ``chunk_size`` rows, in order,
        starting at ``start_row`` (a seek when offsets exist, else lines are skipped)."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        with _open_binary(self.path) as handle:
            row = 0
            if start_row and not self.is_gzip:
                handle.seek(int(self.offsets()[min(start_row, len(self))]))
                row = start_row
            chunk: list[Document] = []
            chunk_start = start_row
            pending_blank: int | None = None
            for line in handle:
                if line == b"\n":  # the same rule as the offsets scan: only truly empty lines
                    pending_blank = pending_blank or row + 1
                    row += 1
                    continue
                if pending_blank is not None:
                    raise CorpusError(f"{self.path}:{pending_blank}: empty line inside the corpus")
                row += 1
                if row <= start_row:
                    continue
                chunk.append(parse_passage(line, self.path, row))
                if len(chunk) == chunk_size:
                    yield chunk_start, chunk
                    chunk_start += len(chunk)
                    chunk = []
            if chunk:
                yield chunk_start, chunk

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:  # best effort: do not leak descriptors in long notebooks
        try:
            self.close()
        except Exception:
            pass
