"""Writing committed outputs so that a re-run on a clean checkout leaves ``git status`` clean.

Figures and tables under ``figures/`` and ``results/`` are committed. A deterministic stage
re-run on another machine or day must then produce the same bytes, or leave the file alone:

- :func:`save_figure` writes a PNG without the metadata that varies between installations
  (matplotlib's ``Software`` tag) and skips the write when the bytes are unchanged;
- :func:`write_if_changed` does the same for any bytes or text;
- ``provenance.write_meta`` keeps a ``*.meta.json`` whose result is unchanged;
- :func:`all_or_none` makes a stage's writes one unit: if the stage raises, every file it
  wrote gets its earlier bytes back (or is removed if it is new), so a refused record never
  leaves a tables folder half rewritten. Given a ``journal`` folder it holds under a kill too:
  before a file is first changed, its earlier bytes are saved there and listed in
  ``journal/undo.jsonl`` (fsynced), and every file is replaced whole (a temporary file renamed);
  the block's success removes the journal. A kill leaves the journal, and the next
  :func:`all_or_none` (or :func:`roll_back`) with that folder puts every listed file back first.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator

from .staging import discard
from .storage import atomic_write


class _Journal:
    """The writes of one :func:`all_or_none` block: path -> earlier bytes (None: it was new),
    mirrored on disk when the block has a folder."""

    def __init__(self, folder: Path | None) -> None:
        self.before: dict[Path, bytes | None] = {}
        self.folder = folder

    def remember(self, path: Path) -> None:
        if path in self.before:
            return
        before = path.read_bytes() if path.is_file() else None
        if self.folder is not None:  # saved and listed before the file changes
            saved = None
            if before is not None:
                saved = f"{len(self.before):06d}.before"
                atomic_write(self.folder / saved, before)
            line = json.dumps({"path": str(path.resolve()), "before": saved}) + "\n"
            with open(self.folder / UNDO_LIST, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
        self.before[path] = before


_JOURNAL: ContextVar[_Journal | None] = ContextVar("write_journal", default=None)
"""Inside :func:`all_or_none`: the writes made so far."""
UNDO_LIST = "undo.jsonl"
"""In a journal folder: one line per file changed, ``{"path", "before"}`` (``before``: the file
holding its earlier bytes, null when the file was new)."""


def write_if_changed(path: str | Path, data: bytes | str) -> bool:
    """Write ``data`` to ``path`` unless the file already holds exactly it; True if written.
    The file is replaced whole (a temporary file renamed): a kill never leaves half of it."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    if path.is_file() and path.read_bytes() == raw:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    journal = _JOURNAL.get()
    if journal is not None:
        journal.remember(path)
    atomic_write(path, raw)
    return True


@contextmanager
def all_or_none(journal: str | Path | None = None) -> Iterator[None]:
    """Every :func:`write_if_changed` inside the block is undone if the block raises: a file
    it replaced gets its earlier bytes back, a file it created is removed. With ``journal`` (a
    folder of its own) the undo survives a kill: it is rolled back on the next entry (module
    docstring). Nested blocks join the outer one (the outermost decides)."""
    if _JOURNAL.get() is not None:
        yield
        return
    folder = Path(journal) if journal is not None else None
    if folder is not None:
        roll_back(folder)  # a block killed before: put its files back first
        folder.mkdir(parents=True)
    state = _Journal(folder)
    token = _JOURNAL.set(state)
    try:
        yield
    except BaseException:
        _undo(state.before)
        raise
    finally:
        _JOURNAL.reset(token)
        if folder is not None:
            discard(folder)  # renamed away first: the commit is that one atomic rename


def roll_back(journal: str | Path) -> list[Path]:
    """Put back every file a killed :func:`all_or_none` block listed in ``journal``, newest
    first, then remove the journal; returns the files put back ([] when there is no journal)."""
    folder = Path(journal)
    for trash in folder.parent.glob(f"{folder.name}.trash-*"):  # a commit killed mid-delete
        shutil.rmtree(trash, ignore_errors=True)
    if not folder.is_dir():
        return []
    entries = []
    undo = folder / UNDO_LIST
    lines = undo.read_bytes().decode("utf-8", "replace").splitlines() if undo.is_file() else []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:  # the last line, torn by the kill: its file was not changed yet
            break
        entries.append(entry)
    restored = []
    for entry in reversed(entries):
        path = Path(entry["path"])
        if entry["before"] is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write(path, (folder / entry["before"]).read_bytes())
        restored.append(path)
    discard(folder)
    return restored


def _undo(journal: dict[Path, bytes | None]) -> None:
    """Put back what :func:`all_or_none` recorded, newest write first."""
    for path, before in reversed(list(journal.items())):
        if before is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write(path, before)


def figure_png(fig: Any, **savefig_kwargs: Any) -> bytes:
    """The figure as PNG bytes with no ``Software`` (matplotlib version) tag."""
    buffer = io.BytesIO()
    metadata = {"Software": None, **savefig_kwargs.pop("metadata", {})}
    fig.savefig(buffer, format="png", metadata=metadata, **savefig_kwargs)
    return buffer.getvalue()


def save_figure(fig: Any, path: str | Path, **savefig_kwargs: Any) -> Path:
    """``fig.savefig(path, ...)`` as a PNG that is byte-identical for identical content, written
    only when it changed (``savefig_kwargs``: ``dpi``, ``bbox_inches``, ...)."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"save_figure writes PNG files; got {path}")
    write_if_changed(path, figure_png(fig, **savefig_kwargs))
    return path
