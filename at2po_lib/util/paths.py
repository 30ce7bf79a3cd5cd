"""Where the project keeps things.

- ``repo_root()``: the checkout (found from ``AT2PO_HOME`` or by walking up from the working
  directory to the folder holding ``configs/`` and ``at2po_lib/``), so notebooks work whether
  Jupyter starts in the repository root or in ``notebooks/``.
- ``artifacts_dir(profile)``: large generated files (corpora, indexes, checkpoints); git-ignored,
  rebuilt by the commands. ``AT2PO_ARTIFACTS`` moves it (e.g. to a scratch disk).
- ``results_dir()`` / ``figures_dir()``: small tidy results and figures that git keeps.
"""

from __future__ import annotations

import contextlib
import os
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


def artifacts_dir(profile: str) -> Path:
    """Large, rebuildable files of one profile (never committed)."""
    base = os.environ.get("AT2PO_ARTIFACTS")
    root = Path(base).resolve() if base else repo_root() / "artifacts"
    path = root / profile
    path.mkdir(parents=True, exist_ok=True)
    return path


def results_dir(*parts: str) -> Path:
    """Small tidy results (CSV/JSON) that git keeps; ``AT2PO_RESULTS`` moves it (tests)."""
    base = os.environ.get("AT2PO_RESULTS")
    path = (Path(base).resolve() if base else repo_root() / "results").joinpath(*parts)
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
