"""Notebook outputs never reach git (issue #26, item 7): the clean filter strips what running and
saving a notebook adds, and scripts/bootstrap.sh installs it, so a notebook saved in the lab
is not modified in git."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILTER = ROOT / "scripts" / "strip_notebook_outputs.py"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _clean(data: bytes) -> bytes:
    return subprocess.run([sys.executable, str(FILTER)], input=data, capture_output=True,
                          check=True, timeout=60).stdout


def _as_saved_by_the_lab(notebook: dict) -> dict:
    """What JupyterLab writes after running every cell and saving."""
    saved = copy.deepcopy(notebook)
    for n, cell in enumerate(saved["cells"], start=1):
        cell["metadata"]["execution"] = {"iopub.execute_input": "2026-12-01T10:00:00Z"}
        cell["metadata"]["scrolled"] = True
        if cell["cell_type"] == "code":
            cell["execution_count"] = n
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]},
                               {"output_type": "display_data", "metadata": {},
                                "data": {"image/png": "iVBORw0KGgo="}}]
    saved["metadata"]["kernelspec"]["display_name"] = "AT2PO (main/.venv)"
    saved["metadata"]["language_info"] = {"name": "python", "version": "3.11.7",
                                          "mimetype": "text/x-python"}
    saved["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    return saved


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_pass_through_byte_identical(path):
    assert _clean(path.read_bytes()) == path.read_bytes()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_saved_in_the_lab_cleans_back_to_the_committed_one(path):
    saved = _as_saved_by_the_lab(json.loads(path.read_text(encoding="utf-8")))
    raw = (json.dumps(saved, indent=1, ensure_ascii=False) + "\n").encode()
    assert _clean(raw) == path.read_bytes()


def test_input_that_is_not_a_notebook_is_kept_as_it_is():
    for data in (b"", b"not json \xff", b"[1, 2]\n", b'{"cells": '):
        assert _clean(data) == data


def test_bootstrap_installs_the_filter_so_a_saved_notebook_is_unmodified(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "notebooks").mkdir()
    for name in ("bootstrap.sh", "strip_notebook_outputs.py"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    notebook = repo / "notebooks" / NOTEBOOKS[0].name
    shutil.copy(NOTEBOOKS[0], notebook)
    env = {**os.environ, "AT2PO_SKIP_INSTALL": "1", "AT2PO_VENV": str(Path(sys.executable).parent.parent),
           "JUPYTER_DATA_DIR": str(tmp_path / "jupyter"), "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    env.pop("AT2PO_GIT_FILTER", None)

    def run(*cmd: str) -> str:
        return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, check=True,
                              timeout=120).stdout

    run("git", "init", "-q")
    run("bash", "-c", "source scripts/bootstrap.sh")
    assert run("git", "config", "--get", "filter.at2po-notebook.clean").strip()
    run("git", "add", "-A")
    run("git", "commit", "-qm", "notebooks without outputs")
    saved = _as_saved_by_the_lab(json.loads(notebook.read_text(encoding="utf-8")))
    notebook.write_text(json.dumps(saved, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    # git status lists the file until the index is refreshed (its size differs from the
    # cleaned blob's, and git trusts sizes); what git would store is unchanged:
    assert run("git", "diff") == ""
    run("git", "add", "-A")
    assert run("git", "status", "--porcelain") == ""
    assert run("git", "diff", "--cached") == ""
    assert "outputs" in notebook.read_text() and '"hi\\n"' in notebook.read_text(), \
        "the working copy keeps its outputs; only git's copy is clean"
