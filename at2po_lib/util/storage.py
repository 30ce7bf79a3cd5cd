"""Failed writes reported as what they are: an ``OSError`` with the errno and the path.

A full disk used to end training with ``RuntimeError: basic_ios::clear: iostream error`` (or
torch's ``[enforce fail at inline_container.cc] unexpected pos``), naming neither ENOSPC nor
the file, and Python's own ``write`` gives ``[Errno 28] No space left on device`` without a
path. Every writer of a run's records and checkpoints runs inside :func:`reported_writes`::

    with reported_writes(path):
        torch.save(state, path)

and the command line prints the resulting error as one line (``at2po_lib.cli.options``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

_IO_MARKERS = (
    "iostream",
    "inline_container",
    "PytorchStreamWriter",
    "file write failed",
    "I/O error",
    "No space left",
    "os error",
)
"""Text of the non-OSError exceptions (torch, safetensors) that come from a failed write."""
LOW_SPACE_BYTES = 1 << 20
"""Below this much free space at the path, a failed write is taken to be ENOSPC."""


def _free_bytes(path: Path) -> int | None:
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def storage_error(exc: BaseException, path: str | Path) -> OSError | None:
    """The ``OSError`` (errno, message, path) that ``exc``, raised while writing ``path``,
    stands for; None when ``exc`` is not a storage failure (it is then re-raised as it is)."""
    path = Path(path)
    if isinstance(exc, OSError) and exc.errno:
        code = exc.errno
    elif any(marker in str(exc) for marker in _IO_MARKERS):
        free = _free_bytes(path)
        code = (
            errno.ENOSPC
            if (free is not None and free < LOW_SPACE_BYTES or "No space left" in str(exc))
            else errno.EIO
        )
    else:
        return None
    detail = "" if isinstance(exc, OSError) else f" ({type(exc).__name__}: {str(exc)[:200]})"
    return OSError(code, f"{os.strerror(code)} while writing{detail}", str(path))


@contextlib.contextmanager
def reported_writes(path: str | Path) -> Iterator[None]:
    """Run a write of ``path``; a storage failure leaves as ``OSError(errno, ..., path)``."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - torch: RuntimeError, safetensors: its own type
        if isinstance(exc, OSError) and exc.filename:
            raise  # already names errno and path
        error = storage_error(exc, path)
        if error is None:
            raise
        raise error from exc


def describe(exc: OSError) -> str:
    """One line: ``[Errno 28] No space left on device: '<path>'`` (what ``str()`` gives when
    the path is known), plus the advice for a full disk."""
    text = str(exc)
    if exc.errno == errno.ENOSPC:
        text += " (free some space, or move artifacts with AT2PO_ARTIFACTS; finished runs are kept)"
    return text


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary sibling, fsync, then rename it over ``path``: a kill at
    any point leaves the old file or the new one, never a torn one (a full disk: ENOSPC naming
    the file, the old one kept)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    raw = data.encode() if isinstance(data, str) else data
    with reported_writes(path):
        try:
            with tmp.open("wb") as handle:
                handle.write(raw)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    os.replace(tmp, path)
