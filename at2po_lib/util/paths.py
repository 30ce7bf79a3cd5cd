"""Where the project keeps things.

- ``repo_root()``: the checkout (found from ``AT2PO_HOME`` or by walking up from the working
  directory to the folder holding ``configs/`` and ``at2po_lib/``), so notebooks work whether
  Jupyter starts in the repository root or in ``notebooks/``.
- ``artifacts_dir(profile)``: large generated files (corpora, indexes, checkpoints); git-ignored,
  rebuilt by the commands. ``AT2PO_ARTIFACTS`` moves it (e.g. to a scratch disk).
- ``results_dir()`` / ``figures_dir()``: small tidy results and figures that git keeps.
- ``recorded_path(path)``: a path as a record holds it, never the writing machine's.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Iterator

_MARKERS = ("configs", "at2po_lib")


def repo_root() -> Path:
    """The project checkout; ``AT2PO_HOME`` wins, else the nearest parent with the markers."""
    env = os.environ.get("AT2PO_HOME")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if all((candidate / m).is_dir() for m in _MARKERS):
            return candidate
    # Installed elsewhere (pip install .): fall back to the source tree of this file.
    source = Path(__file__).resolve().parents[2]  # at2po_lib/util/paths.py -> the checkout
    if all((source / m).is_dir() for m in _MARKERS):
        return source
    return here


def configs_dir() -> Path:
    return repo_root() / "configs"


def _artifacts_root() -> Path:
    """The artifacts folder, without creating it: ``AT2PO_ARTIFACTS`` or the checkout's."""
    base = os.environ.get("AT2PO_ARTIFACTS")
    return Path(base).resolve() if base else repo_root() / "artifacts"


def artifacts_dir(profile: str) -> Path:
    """Large, rebuildable files of one profile (never committed)."""
    path = _artifacts_root() / profile
    path.mkdir(parents=True, exist_ok=True)
    return path


def _results_root() -> Path:
    """The results folder, without creating it: ``AT2PO_RESULTS`` or the checkout's."""
    base = os.environ.get("AT2PO_RESULTS")
    return Path(base).resolve() if base else repo_root() / "results"


def results_dir(*parts: str) -> Path:
    """Small tidy results (CSV/JSON) that git keeps; ``AT2PO_RESULTS`` moves it (tests)."""
    path = _results_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def figures_dir() -> Path:
    base = os.environ.get("AT2PO_FIGURES")
    path = Path(base).resolve() if base else repo_root() / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def results_moved_to(folder: Path) -> Iterator[None]:
    """``AT2PO_RESULTS`` pointed at ``folder`` for the block: run folders are made, and records
    read, there (a scratch run that no table reads)."""
    before = os.environ.get("AT2PO_RESULTS")
    os.environ["AT2PO_RESULTS"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("AT2PO_RESULTS", None)
        else:
            os.environ["AT2PO_RESULTS"] = before


RESULTS_IN_RECORDS = "results"
"""How a record names the results folder, wherever ``AT2PO_RESULTS`` puts it: a report over a
copy of the records elsewhere writes the same bytes as over the checkout's."""
ARTIFACTS_IN_RECORDS = "artifacts"
"""How a record names the artifacts folder, wherever ``AT2PO_ARTIFACTS`` puts it."""
OUTSIDE = "<outside>"
"""How a record names a folder outside the checkout and the results folder (a scratch folder,
another worktree): its own name is kept, the machine's path to it is not."""

ABSOLUTE_PATH = re.compile(r"(?<![\w.~/:\\>}\])$-])(?:/[\w.@+-]+){2,}/?")
"""An absolute path of some machine inside a text: a ``/`` at the file-system root followed by
at least two names, not inside a word, a URL (``https://host/a/b``), a relative path
(``results/tiny``), a home (``~/x``) or a variable (``${HOME}/x``, ``$ROOT/x``). One name
alone (``/s`` in ``steps/s``, ``/2``) is a unit or a fraction, not a path."""
WINDOWS_PATH = re.compile(r"(?<!\w)[A-Za-z]:\\{1,2}[\w.-]")
r"""A Windows drive's path (``C:\Users``, or ``C:\\Users`` as JSON escapes it)."""


def recorded_path(path: str | Path) -> str:
    """``path`` as a record holds it: ``results/...`` inside the results folder and
    ``artifacts/...`` inside the artifacts folder (wherever ``AT2PO_RESULTS`` and
    ``AT2PO_ARTIFACTS`` put them), else relative to the checkout inside it, else
    ``<outside>/<its name>``. Never the writing machine's absolute path."""
    resolved = Path(path).resolve()
    root = repo_root()
    for folder, name in (
        (_results_root(), RESULTS_IN_RECORDS),
        (_artifacts_root(), ARTIFACTS_IN_RECORDS),
    ):
        if resolved.is_relative_to(folder.resolve()):
            return (Path(name) / resolved.relative_to(folder.resolve())).as_posix()
    if resolved.is_relative_to(root):
        return resolved.relative_to(root).as_posix()
    return f"{OUTSIDE}/{resolved.name}"


def recorded_paths_in(text: str) -> str:
    """``text`` (a command line) with every absolute path in it (:data:`ABSOLUTE_PATH`) as
    :func:`recorded_path` records it; unchanged when it holds none."""
    return ABSOLUTE_PATH.sub(lambda match: recorded_path(match.group(0)), text)
