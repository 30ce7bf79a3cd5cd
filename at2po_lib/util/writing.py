"""Writing committed outputs so that a re-run on a clean checkout leaves ``git status`` clean.

Figures and tables under ``figures/`` and ``results/`` are committed. A deterministic stage
re-run on another machine or day must then produce the same bytes, or leave the file alone:

- :func:`save_figure` writes a PNG without the metadata that varies between installations
  (matplotlib's ``Software`` tag) and skips the write when the bytes are unchanged;
- :func:`write_if_changed` does the same for any bytes or text;
- ``provenance.write_meta`` keeps a ``*.meta.json`` whose result is unchanged;
- :func:`all_or_none` makes a stage's writes one unit: if the stage raises, every file it
  wrote gets its earlier bytes back (or is removed if it is new), so a refused record never
  leaves a tables folder half rewritten.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator

_JOURNAL: ContextVar[dict[Path, bytes | None] | None] = ContextVar("write_journal", default=None)
"""Inside :func:`all_or_none`: each path written so far -> its bytes before (None: it was new)."""


def write_if_changed(path: str | Path, data: bytes | str) -> bool:
    """Write ``data`` to ``path`` unless the file already holds exactly it; True if written."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    if path.is_file() and path.read_bytes() == raw:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    journal = _JOURNAL.get()
    if journal is not None and path not in journal:
        journal[path] = path.read_bytes() if path.is_file() else None
    path.write_bytes(raw)
    return True


@contextmanager
def all_or_none() -> Iterator[None]:
    """Every :func:`write_if_changed` inside the block is undone if the block raises: a file
    it replaced gets its earlier bytes back, a file it created is removed. Nested blocks join
    the outer one (the outermost decides)."""
    if _JOURNAL.get() is not None:
        yield
        return
    journal: dict[Path, bytes | None] = {}
    token = _JOURNAL.set(journal)
    try:
        yield
    except BaseException:
        _undo(journal)
        raise
    finally:
        _JOURNAL.reset(token)


def _undo(journal: dict[Path, bytes | None]) -> None:
    """Put back what :func:`all_or_none` recorded, newest write first."""
    for path, before in reversed(list(journal.items())):
        if before is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(before)


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
