#!/usr/bin/env python3
"""Git "clean" filter for the notebooks: what git stores is the notebook without what running
it adds, so saving a notebook in the lab never shows it as modified (issue #26: all six did).

Installed by scripts/bootstrap.sh (``git config filter.at2po-notebook.clean``) and named for
``notebooks/*.ipynb`` in .gitattributes. Reads a notebook on stdin, writes it on stdout with:

- every code cell's ``outputs`` emptied and ``execution_count`` null;
- cell metadata reduced to ``tags`` and ``jupyter`` (hidden sources, collapsed answers): the
  lab's ``execution`` timings, ``scrolled``, ``collapsed`` and papermill's records are dropped;
- notebook metadata: ``widgets`` state dropped, ``language_info`` reduced to its name, and the
  project kernel's display name back to ``AT2PO`` (bootstrap registers it as "AT2PO (<venv>)").

The layout is nbformat's (indent 1, UTF-8, a final newline), so a committed notebook passes
through byte-identical. Standard library only: git runs it with the system ``python3``.
Input that is not a notebook is passed through unchanged (git must never lose a file).
"""

from __future__ import annotations

import json
import sys
from typing import Any

KEPT_CELL_METADATA = ("tags", "jupyter")
PROJECT_KERNEL = "at2po"


def strip(notebook: dict[str, Any]) -> dict[str, Any]:
    """The notebook without outputs, counts and run-time metadata (modified in place)."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        metadata = cell.get("metadata")
        if isinstance(metadata, dict):
            cell["metadata"] = {k: metadata[k] for k in KEPT_CELL_METADATA if k in metadata}
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
    text = json.dumps(strip(notebook), indent=1, ensure_ascii=False) + "\n"
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
