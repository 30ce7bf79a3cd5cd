r"""Saving a notebook in JupyterLab leaves ``git status`` clean.

The notebooks are stored without outputs: a git clean filter strips them
(``scripts/strip_notebook_outputs.py``, installed by ``scripts/bootstrap.sh``), so what git
would store from a saved notebook is the committed notebook. ``git status`` still lists the
file: the index keeps the working file's size from the last ``git add``, and git takes a new
size as a change without running the filter (only ``git diff`` runs it, and shows nothing).

:func:`refresh_saved_notebook` is JupyterLab's post-save hook (``scripts/lab.sh`` sets
``--ContentsManager.post_save_hook``): after each save of a tracked notebook it asks git what the
filter makes of the file (``git hash-object --path``); when that is exactly the blob the index
already holds, it re-adds the file, which stores the same blob and records the new size, and
``git status`` is clean. A notebook whose cells really changed is left alone (its change shows,
nothing is staged). The hook never raises: a failed save hook would fail the user's save.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

LOG = logging.getLogger(__name__)
GIT_TIMEOUT_S = 30


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=GIT_TIMEOUT_S
    ).stdout.strip()


def index_blob(root: Path, relative: str) -> str | None:
    """The blob id the index holds for ``relative`` (stage 0), None when it is not tracked."""
    listed = _git(root, "ls-files", "--stage", "--", relative)
    if not listed:
        return None
    mode_blob_stage = listed.splitlines()[0].split("\t", 1)[0].split()
    return mode_blob_stage[1] if mode_blob_stage[2] == "0" else None


def refresh_if_unchanged(path: Path) -> bool:
    """Re-add the notebook at ``path`` when git's filtered copy of it is the index's blob
    (module docstring); True when it did. A notebook outside a git checkout, untracked, or
    really changed: False, nothing touched."""
    path = Path(path).resolve()
    try:
        root = Path(_git(path.parent, "rev-parse", "--show-toplevel"))
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False
    relative = path.relative_to(root).as_posix()
    blob = index_blob(root, relative)
    if blob is None:
        return False
    if _git(root, "hash-object", f"--path={relative}", "--", relative) != blob:
        return False
    _git(root, "add", "--", relative)
    return True


def refresh_saved_notebook(
    os_path: str, model: Any = None, contents_manager: Any = None, **_: Any
) -> None:
    """JupyterLab's post-save hook (called with keywords): :func:`refresh_if_unchanged` on a
    saved ``.ipynb``; errors are logged, never raised."""
    if not str(os_path).endswith(".ipynb"):
        return
    log = getattr(contents_manager, "log", LOG)
    try:
        if refresh_if_unchanged(Path(os_path)):
            log.debug("at2po: %s saved; git's copy unchanged, index refreshed", os_path)
    except Exception as err:  # a save must never fail because of git
        log.warning("at2po: could not refresh git's index for %s: %s", os_path, err)
