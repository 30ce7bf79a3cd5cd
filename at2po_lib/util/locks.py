"""One writer per folder: an exclusive lock held for the life of a training run or an index build.

Two ``at2po train`` on one run folder used to interleave their writes into one staging folder
(a finished run without ``metrics.jsonl``; duplicated eval rows). Now the second process finds
the lock taken and stops at once with an error naming the holder's PID::

    with folder_lock(run_root, "training run"):
        ...  # build, swap in

The lock is POSIX ``flock`` on ``<parent>/.<name>.lock`` (the kernel drops it when the holder
exits, even after ``kill -9``, so a stale file never blocks anyone); the file holds the holder's
PID for the message. The holder deletes it when done, so nothing is left beside the folder; a
process that locked a file which was deleted meanwhile sees that its inode is no longer the
path's and starts again, so two processes never hold "the" lock at once. Where ``fcntl`` is
missing (Windows) there is no lock.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from .errors import ProfileError

# Imported inside the functions that use them: fcntl; POSIX only: elsewhere the lock is skipped.


class FolderLockedError(ProfileError):
    """Another live process holds the folder's lock (a usage error on the command line)."""


def lock_path(folder: Path) -> Path:
    folder = Path(folder)
    return folder.with_name(f".{folder.name}.lock")


def _holder(handle) -> str:
    handle.seek(0)
    text = handle.read(64).strip()
    return text if text.isdigit() else "unknown"


@contextlib.contextmanager
def folder_lock(folder: Path, what: str, *, wait: bool = False) -> Iterator[None]:
    """Hold the exclusive lock of ``folder`` (``what`` names it in the error). ``wait``: block
    until the holder is done (a note on stderr names it) instead of raising
    :class:`FolderLockedError`."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock
        yield
        return
    path = lock_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = _acquire(path, folder, what, wait, fcntl)
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        path.unlink(missing_ok=True)  # before unlocking: a waiter then sees a deleted inode
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def lock_holder(folder: Path) -> str | None:
    """The PID (as the lock file holds it) of the live process that holds ``folder``'s lock,
    or None when nobody does; looks without creating or taking anything."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock
        return None
    path = lock_path(folder)
    try:
        handle = open(path)  # noqa: SIM115 - closed below, after the probe
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(handle)
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def _acquire(path: Path, folder: Path, what: str, wait: bool, fcntl):  # noqa: ANN001, ANN202
    """The locked, still-current lock file (opened ``r+``)."""
    while True:
        handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            if not wait:
                handle.close()
                raise FolderLockedError(
                    f"{folder}: another process (PID {holder}) is writing this {what} (lock "
                    f"{path}); wait for it to finish or stop it first"
                ) from None
            print(
                f"{folder}: waiting for PID {holder}, which is writing this {what}",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            current = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            current = False
        if current:
            return handle
        handle.close()  # the holder deleted this file as we locked it: lock the new one
