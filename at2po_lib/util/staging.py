"""Build a folder beside its final place and swap it in only when it is complete.

Training runs (``results/runs/.../seed<S>``) and retrieval indexes (``artifacts/.../index/dense``)
are folders of many files written over minutes to days. Writing them in place means a failed
or killed re-run has already destroyed the previous, finished folder. Instead::

    staging = staging_path(final)        # <parent>/.<name>.staging, same file system
    ... write everything into staging ...
    swap_in(staging, final)              # final is now the new folder; the old one is removed

Guarantee: at every instant, ``final`` is either the old complete folder or the new complete
one; after a crash anywhere, :func:`recover` (called before every use) restores that state and
finishes or undoes the interrupted swap.

How: on Linux the two folders trade places in one ``renameat2(RENAME_EXCHANGE)`` call (atomic).
Elsewhere, or on a file system without it, two renames (``final`` → ``.<name>.replaced``, then
``staging`` → ``final``) with a window in between, which :func:`recover` closes. Before the swap
the old folder gets a marker file (:data:`REPLACED_MARKER`), so after an exchange the old content
found at the staging path is never mistaken for a new build. Discarded folders are first renamed
to a ``.<name>.trash-*`` name (atomic) and then deleted, so a half-deleted old folder never looks
like a complete one.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

REPLACED_MARKER = ".replaced-by-swap"
"""Written into the old folder just before it is swapped out."""

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def staging_path(final: Path) -> Path:
    """Where the next version of ``final`` is built: ``<parent>/.<name>.staging``."""
    final = Path(final)
    return final.with_name(f".{final.name}.staging")


def replaced_path(final: Path) -> Path:
    final = Path(final)
    return final.with_name(f".{final.name}.replaced")


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2``); False where that is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # pragma: no cover - glibc < 2.28, musl
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # not supported here
        return False
    raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def discard(path: Path) -> None:
    """Remove a folder: renamed to a trash name first (atomic), then deleted."""
    path = Path(path)
    if not path.exists():
        return
    trash = path.with_name(f"{path.name}.trash-{uuid.uuid4().hex[:8]}")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def swap_in(staging: Path, final: Path) -> None:
    """Make the complete folder ``staging`` the new ``final``; the old ``final`` is removed."""
    staging, final = Path(staging), Path(final)
    if not staging.is_dir():
        raise FileNotFoundError(f"{staging}: nothing to swap in")
    final.parent.mkdir(parents=True, exist_ok=True)
    if not final.exists():
        os.rename(staging, final)
        _fsync_dir(final.parent)
        return
    (final / REPLACED_MARKER).write_text("this folder is being replaced\n")
    if _exchange(staging, final):
        _fsync_dir(final.parent)
        discard(staging)  # now holds the old folder
        return
    old = replaced_path(final)
    discard(old)
    os.rename(final, old)
    os.rename(staging, final)  # a crash between the two renames is repaired by recover()
    _fsync_dir(final.parent)
    discard(old)


def recover(final: Path, is_complete: Callable[[Path], bool]) -> None:
    """Repair whatever an interrupted :func:`swap_in` (or :func:`discard`) left behind.

    ``is_complete(folder)`` says whether a staging folder holds a finished build (a run's
    ``DONE.json``, an index's ``meta.json``). A finished staging folder is swapped in (the
    build that made it had succeeded); an unfinished one is left for a resume.
    """
    final = Path(final)
    staging, old = staging_path(final), replaced_path(final)
    if final.parent.is_dir():
        for trash in final.parent.glob(f".{final.name}.*.trash-*"):
            shutil.rmtree(trash, ignore_errors=True)
    if (staging / REPLACED_MARKER).exists():  # exchanged, old not yet removed
        discard(staging)
    if (final / REPLACED_MARKER).exists():  # marked, but not swapped out
        (final / REPLACED_MARKER).unlink()
    if staging.is_dir() and is_complete(staging):
        swap_in(staging, final)
    elif not final.exists() and old.is_dir():  # first rename done, nothing complete to put in
        os.rename(old, final)
        (final / REPLACED_MARKER).unlink(missing_ok=True)
    if final.exists():
        discard(old)
