"""What an index build owns, and when it may replace its destination folder.

A build writes the new index in a staging folder and swaps it in for the destination
(:mod:`at2po_lib.util.staging`): the old folder goes, with everything in it. So before any work
a build proves that everything in the destination is its own, by content, never by a name:

- every index built here carries a manifest, :data:`MANIFEST` (``.at2po-index``, JSON, written
  last): each file the build wrote, by its path inside the folder, with size and sha256;
- a destination may be replaced when it is absent or empty, or when each entry in it is one of
  (a) the manifest, (b) a file the manifest lists whose sha256 still matches, (c) the corpus's
  offsets cache (exactly ``corpus_offsets.npy``/``.json``, each valid by its form:
  :func:`~at2po_lib.retrieval.corpus.offsets_cache_files`; loads rewrite it when the corpus
  changes, so no recorded hash can hold for it), (d) the mark of an interrupted swap, or a folder
  holding only such files;
- an index built before the manifest (``meta.json`` with file sizes, a text marker) is recognised
  only when its ``meta.json`` lists exactly the files such a build wrote (dense: ``index.faiss``;
  BM25: bm25s's seven files), each present with its recorded size, beside (c), (d) and the old
  marker's exact text;
- anything else refuses the build in one line naming the path and the strange entries: a user's
  file or folder, a link, a listed file whose bytes changed, a marker that is not a manifest (the
  marker alone proves nothing), a ``meta.json`` listing another name, the corpus the build reads.

The destination must also name a folder of its own: ``.``, ``..``, ``/``, and any path that is
the file system's root or holds the working directory are refused, naming the argument.

The check runs before any work and again, from a snapshot of names, sizes and times, just before
the swap: a file added during a build of hours refuses the swap (the new index waits in the
staging folder). Cost: a build hashes what it wrote once, and a rebuild the old index once:
168 MiB/s measured on this project's shared 2-core machine (``util.digests.file_sha256``, 256 MiB,
other work running), so about 7 minutes each for the 64.6 GB wiki-18 Flat index, beside hours of
embedding.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..util.digests import file_sha256
from ..util.staging import REPLACED_MARKER
from .base import RetrievalError
from .corpus import offsets_cache_files

MANIFEST = ".at2po-index"
"""The manifest of an index build (module docstring)."""
MANIFEST_FORMAT = 2
"""Format 1 was a text marker (:data:`LEGACY_MARKER_TEXT`), which proved nothing."""
LEGACY_MARKER_TEXT = "built by at2po; `at2po index` may replace this whole folder\n"
LEGACY_FILES = {
    "dense": frozenset({"index.faiss"}),
    "bm25": frozenset(
        {
            "params.index.json",
            "vocab.index.json",
            "data.csc.index.npy",
            "indices.csc.index.npy",
            "indptr.csc.index.npy",
            "vocab.tokenizer.json",
            "stopwords.tokenizer.json",
        }
    ),
}
"""What an index build wrote before the manifest, beside ``meta.json``, per kind."""
SHOWN = 5
"""Strange entries named in a refusal (then a count)."""

Entry = tuple[str, str, int, int, int]
"""(path inside the folder, kind ``file``/``dir``/``link``/``other``, size, mtime_ns, inode)."""


@dataclass(frozen=True)
class Destination:
    """A destination found replaceable, and what it held then (for :func:`confirm_destination`)."""

    path: Path
    corpus: Path | None
    entries: tuple[Entry, ...] | None
    """None: the destination did not exist."""


def check_destination_name(path: str | Path, label: str = "") -> Path:
    """``path`` as a folder a build may swap out; ``.``, ``..``, ``/`` and a folder holding the
    working directory are a :class:`RetrievalError` naming ``label`` (an option) and the path."""
    given = Path(path)
    resolved = given.expanduser().resolve()
    cwd = Path.cwd().resolve()
    if (
        given.name in ("", ".", "..")
        or resolved == resolved.parent
        or cwd == resolved
        or resolved in cwd.parents
    ):
        raise RetrievalError(
            f"{label}{str(path)!r}: not a folder an index can be built in (a build replaces its "
            "whole destination, so '.', '..', '/' and any folder holding the working directory "
            "are refused); give a named folder, e.g. ./index"
        )
    return given


def _entries(folder: Path) -> list[Entry]:
    """Every entry below ``folder`` (links not followed), sorted by path."""
    found: list[Entry] = []
    pending = [folder]
    while pending:
        current = pending.pop()
        with os.scandir(current) as listing:
            for item in listing:
                info = item.stat(follow_symlinks=False)
                kind = (
                    "link"
                    if stat.S_ISLNK(info.st_mode)
                    else "dir"
                    if stat.S_ISDIR(info.st_mode)
                    else "file"
                    if stat.S_ISREG(info.st_mode)
                    else "other"
                )
                rel = Path(item.path).relative_to(folder).as_posix()
                found.append((rel, kind, info.st_size, info.st_mtime_ns, info.st_ino))
                if kind == "dir":
                    pending.append(Path(item.path))
    return sorted(found)


def _read_json_object(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _manifest_files(folder: Path) -> dict[str, tuple[int, str]] | None:
    """``{path: (size, sha256)}`` of a well-formed manifest, else None."""
    record = _read_json_object(folder / MANIFEST)
    if (
        record is None
        or record.get("format") != MANIFEST_FORMAT
        or not isinstance(record.get("files"), dict)
    ):
        return None
    files = {}
    for name, item in record["files"].items():
        if not (
            isinstance(item, dict)
            and isinstance(item.get("size"), int)
            and isinstance(item.get("sha256"), str)
        ):
            return None
        files[name] = (item["size"], item["sha256"])
    return files


def _legacy_files(folder: Path) -> dict[str, int]:
    """``{name: size}`` of an index built before the manifest, when its ``meta.json`` lists
    exactly what such a build wrote ({} otherwise: nothing is recognised)."""
    meta = _read_json_object(folder / "meta.json")
    if meta is None or "corpus_checksum" not in meta:
        return {}
    files = meta.get("files")
    expected = LEGACY_FILES.get(meta.get("kind"))  # type: ignore[arg-type]
    if (
        expected is None
        or not isinstance(files, dict)
        or set(files) != expected
        or not all(isinstance(size, int) for size in files.values())
    ):
        return {}
    return {"meta.json": (folder / "meta.json").stat().st_size, **files}


def _file_problem(
    folder: Path,
    rel: str,
    size: int,
    manifest: dict[str, tuple[int, str]] | None,
    legacy: dict[str, int],
    cache: set[str],
) -> str | None:
    """Why the build may not delete the file ``rel`` (of ``size`` bytes): ``"not written by a
    build"``, ``"changed since the build"``, or None when it may."""
    if rel in cache or rel == REPLACED_MARKER:
        return None
    if manifest is not None:
        listed = manifest.get(rel)
        if rel == MANIFEST:
            return None
        if listed is None:
            return "not written by a build"
        same = listed[0] == size and file_sha256(folder / rel) == listed[1]
        return None if same else "changed since the build"
    if rel == MANIFEST:
        same = (
            size == len(LEGACY_MARKER_TEXT)
            and (folder / rel).read_text(errors="replace") == LEGACY_MARKER_TEXT
        )
        return None if same else "not written by a build"
    if rel not in legacy:
        return "not written by a build"
    return None if legacy[rel] == size else "changed since the build"


def strangers(folder: Path, entries: list[Entry] | None = None) -> list[str]:
    """The top-level names in ``folder`` that hold something an index build may not delete
    (module docstring), sorted, a changed file marked so; [] when it may replace the folder."""
    entries = _entries(folder) if entries is None else entries
    manifest = _manifest_files(folder)
    legacy = {} if manifest is not None else _legacy_files(folder)
    cache = offsets_cache_files(folder)
    bad: dict[str, str] = {}
    owned_dirs: set[str] = set()
    for rel, kind, size, _, _ in entries:
        top = rel.split("/")[0]
        problem = (
            _file_problem(folder, rel, size, manifest, legacy, cache)
            if kind == "file"
            else None
            if kind == "dir"
            else "not written by a build"
        )
        if problem is None and kind == "file":
            parts = rel.split("/")
            owned_dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        elif problem is not None:
            bad[top] = problem if bad.get(top, problem) == problem else "not written by a build"
    for rel, kind, *_ in entries:  # a folder with none of our files in it (an empty one too)
        if kind == "dir" and rel not in owned_dirs:
            bad.setdefault(rel.split("/")[0], "not written by a build")
    return [
        name if why == "not written by a build" else f"{name}: {why}"
        for name, why in sorted(bad.items())
    ]


def _refuse(path: Path, names: list[str]) -> RetrievalError:
    shown = ", ".join(names[:SHOWN]) + (
        f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    )
    return RetrievalError(
        f"{path}: holds files no index build wrote ({shown}); an index build replaces its whole "
        "destination folder, so it refuses one that is not an index it built, unchanged "
        "(.at2po-index lists each file with its sha256). Give a new or empty folder, or remove "
        "this one yourself; nothing was changed"
    )


def check_index_destination(
    index_dir: str | Path, corpus: str | Path | None = None, label: str = ""
) -> Destination:
    """Refuse, before any work, a destination an index build must not replace (module
    docstring): :class:`RetrievalError` naming the path (``label``: the option that gave it)."""
    path = check_destination_name(index_dir, label)
    corpus_path = Path(corpus).expanduser().resolve() if corpus is not None else None
    if path.is_symlink():
        raise RetrievalError(
            f"{path}: a symbolic link (to {os.path.realpath(path)}); an index build replaces "
            "its destination folder, so give a real folder path (e.g. the link's target)"
        )
    if not path.exists():
        return Destination(path, corpus_path, None)
    if not path.is_dir():
        raise RetrievalError(
            f"{path}: a file, not a folder; give a new or empty folder for "
            "the index (the file is left as it is)"
        )
    if corpus_path is not None and path.resolve() in corpus_path.parents:
        raise RetrievalError(
            f"{path}: holds the corpus this build reads ({corpus_path}); an index build replaces "
            "its whole destination folder, so give another folder; nothing was changed"
        )
    entries = _entries(path)
    found = strangers(path, entries)
    if found:
        raise _refuse(path, found)
    return Destination(path, corpus_path, tuple(entries))


def confirm_destination(destination: Destination) -> None:
    """Just before the swap: the destination holds what it held when it was checked, else it
    is checked again (a file added during the build refuses the swap)."""
    path = destination.path
    now = tuple(_entries(path)) if path.is_dir() and not path.is_symlink() else None
    if now != destination.entries or (now is None and os.path.lexists(path)):
        check_index_destination(path, destination.corpus)


def is_complete_build(folder: Path) -> bool:
    """A staging folder holding a finished build: ``meta.json`` and, written last, the manifest
    (what :func:`at2po_lib.util.staging.recover` swaps in)."""
    return (folder / "meta.json").is_file() and (folder / MANIFEST).is_file()


def write_manifest(folder: Path) -> Path:
    """List every file in the finished build ``folder`` with its size and sha256 (written last,
    atomically: a half-written manifest never looks like one)."""
    files = {
        rel: {"size": size, "sha256": file_sha256(folder / rel)}
        for rel, kind, size, _, _ in _entries(folder)
        if kind == "file" and rel != MANIFEST
    }
    record = {
        "format": MANIFEST_FORMAT,
        "written_by": "at2po index",
        "note": "an index build may replace this folder only while every entry is listed "
        "here with its sha256 (at2po_lib/retrieval/ownership.py)",
        "files": files,
    }
    path = folder / MANIFEST
    tmp = folder / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
