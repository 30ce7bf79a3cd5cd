#!/usr/bin/env python3
"""Git "clean" filter for the notebooks: what git stores is the notebook without what running
it adds, so saving a notebook in the lab never shows it as modified (issue #26: all six did).

Installed by scripts/bootstrap.sh (``git config filter.at2po-notebook.clean``) and named for
``notebooks/*.ipynb`` in .gitattributes. Reads a notebook on stdin, writes it on stdout with:

- every code cell's ``outputs`` emptied and ``execution_count`` null;
- cell metadata reduced to ``tags`` and ``jupyter.source_hidden`` (collapsed answers): the
  lab's ``execution`` timings, ``scrolled``, ``collapsed``, ``jupyter.outputs_hidden`` and
  papermill's records are dropped, but for a computed answer (below);
- an exercise-answer markdown cell (its source opens with ``<details>``) stored with
  ``jupyter.source_hidden`` true: JupyterLab 4 ignores that flag on markdown cells and drops it
  when it saves (issue #38), so the answers hide in the ``<details>`` block and the flag is put
  back here, where the notebooks' tests read it;
- a computed answer, a code cell whose source opens with ``# the answer``, stored with
  ``jupyter.source_hidden`` and ``jupyter.outputs_hidden`` true: its code and what it prints
  stay folded until the reader opens them, like the answers in the ``<details>`` block above
  it (issue #49: the printed answer showed under the closed fold); a reader who opened them
  and saved gets the folds back in git. JupyterLab 4 unfolds a cell's outputs whenever it
  runs, so the answer cells also print inside ``at2po_lib.reporting.answers.answer_fold``, a
  closed ``<details>`` block in the output itself;
- notebook metadata: ``widgets`` state dropped, ``language_info`` reduced to its name, and the
  project kernel's display name back to ``AT2PO`` (bootstrap registers it as "AT2PO (<venv>)").

The layout is nbformat's (indent 1, keys sorted, UTF-8, a final newline), what JupyterLab
writes when it saves, so a committed notebook passes through byte-identical, and one saved in
the lab cleans back to it (a cell whose "id" came after its "source" in git made a saved
notebook 03 read as modified). Standard library only: git runs it with the system ``python3``.
Input that is not a notebook is passed through unchanged (git must never lose a file).
"""

from __future__ import annotations

import json
import sys
from typing import Any

KEPT_CELL_METADATA = ("tags", "jupyter")
PROJECT_KERNEL = "at2po"
ANSWER_OPENING = "<details>"
COMPUTED_ANSWER_OPENING = "# the answer"


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _cell_metadata(cell: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """The kept metadata of one cell (module docstring)."""
    kept = {k: metadata[k] for k in KEPT_CELL_METADATA if k in metadata}
    jupyter = kept.pop("jupyter", None)
    hidden = isinstance(jupyter, dict) and jupyter.get("source_hidden") is True
    if cell.get("cell_type") == "markdown" and _source(cell).lstrip().startswith(ANSWER_OPENING):
        hidden = True
    if cell.get("cell_type") == "code" and _source(cell).lstrip().startswith(
        COMPUTED_ANSWER_OPENING
    ):
        kept["jupyter"] = {"outputs_hidden": True, "source_hidden": True}
    elif hidden:
        kept["jupyter"] = {"source_hidden": True}
    return kept


def strip(notebook: dict[str, Any]) -> dict[str, Any]:
    """The notebook without outputs, counts and run-time metadata (modified in place)."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        metadata = cell.get("metadata")
        if isinstance(metadata, dict):
            cell["metadata"] = _cell_metadata(cell, metadata)
    metadata = notebook.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("widgets", None)
        info = metadata.get("language_info")
        if isinstance(info, dict) and "name" in info:
            metadata["language_info"] = {"name": info["name"]}
        spec = metadata.get("kernelspec")
        if isinstance(spec, dict) and spec.get("name") == PROJECT_KERNEL:
            spec["display_name"] = "AT2PO"
    return notebook


def main() -> int:
    raw = sys.stdin.buffer.read()
    try:
        notebook = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        notebook = None
    if not isinstance(notebook, dict) or "cells" not in notebook:
        sys.stdout.buffer.write(raw)  # not a notebook: stored as it is
        return 0
    text = json.dumps(strip(notebook), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
