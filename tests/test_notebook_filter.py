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
    return subprocess.run(
        [sys.executable, str(FILTER)], input=data, capture_output=True, check=True, timeout=60
    ).stdout


def _as_saved_by_the_lab(notebook: dict) -> dict:
    """What JupyterLab writes after running every cell and saving."""
    saved = copy.deepcopy(notebook)
    for n, cell in enumerate(saved["cells"], start=1):
        cell["metadata"]["execution"] = {"iopub.execute_input": "2026-12-01T10:00:00Z"}
        cell["metadata"]["scrolled"] = True
        if cell["cell_type"] == "markdown":  # JupyterLab 4.6 drops source_hidden on markdown
            cell["metadata"].pop("jupyter", None)
        elif "jupyter" in cell["metadata"]:
            cell["metadata"]["jupyter"]["outputs_hidden"] = False
        if cell["cell_type"] == "code":
            cell["execution_count"] = n
            cell["outputs"] = [
                {"output_type": "stream", "name": "stdout", "text": ["hi\n"]},
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {"image/png": "iVBORw0KGgo="},
                },
            ]
    saved["metadata"]["kernelspec"]["display_name"] = "AT2PO (main/.venv)"
    saved["metadata"]["language_info"] = {
        "name": "python",
        "version": "3.11.7",
        "mimetype": "text/x-python",
    }
    saved["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    return saved


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_pass_through_byte_identical(path):
    assert _clean(path.read_bytes()) == path.read_bytes()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_saved_in_the_lab_cleans_back_to_the_committed_one(path):
    saved = _as_saved_by_the_lab(json.loads(path.read_text(encoding="utf-8")))
    # what jupyter_server writes on a save: nbformat's layout, keys sorted
    raw = (json.dumps(saved, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    assert _clean(raw) == path.read_bytes()


def test_answers_stay_hidden_and_nothing_else_is_hidden():
    """A markdown cell opening with <details> is stored hidden whatever the lab saved; another
    markdown cell keeps what it had; a code cell keeps only source_hidden."""
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["<details><summary>A</summary>\n"]},
        {
            "cell_type": "markdown",
            "metadata": {"jupyter": {"source_hidden": True}},
            "source": "hidden by hand",
        },
        {"cell_type": "markdown", "metadata": {}, "source": "plain text, <details> later"},
        {
            "cell_type": "code",
            "metadata": {"jupyter": {"source_hidden": True, "outputs_hidden": False}},
            "source": "1",
            "outputs": [],
            "execution_count": 3,
        },
        {
            "cell_type": "code",
            "metadata": {"jupyter": {"outputs_hidden": True}},
            "source": "2",
            "outputs": [],
            "execution_count": 4,
        },
        {
            "cell_type": "code",
            "metadata": {"jupyter": {"outputs_hidden": False}},
            "source": "# the answer to exercise 1, computed\nprint(1)",
            "outputs": [],
            "execution_count": 5,
        },
    ]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    out = json.loads(_clean(json.dumps(notebook).encode()))
    assert [c["metadata"] for c in out["cells"]] == [
        {"jupyter": {"source_hidden": True}},
        {"jupyter": {"source_hidden": True}},
        {},
        {"jupyter": {"source_hidden": True}},
        {},
        {"jupyter": {"outputs_hidden": True, "source_hidden": True}},
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_computed_answer_is_stored_folded_with_its_output(path):
    """Issue #49: a computed answer's code was hidden but what it printed showed under the
    closed fold (02: ``[2 8 7 6]``). Its code and its output are stored folded."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code" and "".join(cell["source"]).startswith("# the answer"):
            assert cell["metadata"]["jupyter"] == {"outputs_hidden": True, "source_hidden": True}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_computed_answer_prints_inside_its_fold(path):
    """JupyterLab 4 unfolds a cell's outputs whenever it runs, whatever ``outputs_hidden``
    says: after Run All, 02's ``[2 8 7 6]`` showed under the closed input fold (seen in
    scripts/check_inspector_browser.py). An answer cell prints only inside
    ``answer_fold()`` (a closed <details> block in the output) and ends on no bare value."""
    import ast

    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or not source.startswith("# the answer"):
            continue
        body = ast.parse(source).body
        folds = [
            s
            for s in body
            if isinstance(s, ast.With) and ast.unparse(s.items[0].context_expr) == "answer_fold()"
        ]
        assert folds, f"{path.name}: the computed answer is not printed inside answer_fold()"
        outside = [
            ast.unparse(s)[:60]
            for s in body
            if not isinstance(s, (ast.With, ast.Import, ast.ImportFrom))
        ]
        assert outside == [], f"{path.name}: shown outside the fold: {outside}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_hidden_answer_is_a_details_block(path):
    """JupyterLab 4 ignores source_hidden on markdown: an answer shows unless it sits in a
    <details> block (and then the filter keeps its flag when the lab drops it)."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and cell["metadata"].get("jupyter", {}).get(
            "source_hidden"
        ):
            assert source.lstrip().startswith("<details>"), f"{path.name}: {source[:60]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_cell_has_its_own_id(path):
    """The lab gives a cell without an id one when it saves, and the filter keeps ids: a
    committed cell without one would show as a change after every save."""
    ids = [cell.get("id") for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), f"{path.name}: cells without or sharing an id"


def test_input_that_is_not_a_notebook_is_kept_as_it_is():
    for data in (b"", b"not json \xff", b"[1, 2]\n", b'{"cells": '):
        assert _clean(data) == data


def _repo_with_the_filter(tmp_path: Path) -> tuple[Path, Path, dict, object]:
    """A git checkout holding the first notebook, the filter installed by bootstrap.sh:
    (repo, notebook, env, run)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "notebooks").mkdir()
    for name in ("bootstrap.sh", "strip_notebook_outputs.py"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")  # the lab's .ipynb_checkpoints
    notebook = repo / "notebooks" / NOTEBOOKS[0].name
    shutil.copy(NOTEBOOKS[0], notebook)
    env = {
        **os.environ,
        "AT2PO_SKIP_INSTALL": "1",
        "AT2PO_VENV": str(Path(sys.executable).parent.parent),
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter"),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    env.pop("AT2PO_GIT_FILTER", None)

    def run(*cmd: str) -> str:
        return subprocess.run(
            cmd, cwd=repo, env=env, capture_output=True, text=True, check=True, timeout=120
        ).stdout

    run("git", "init", "-q")
    run("bash", "-c", "source scripts/bootstrap.sh")
    assert run("git", "config", "--get", "filter.at2po-notebook.clean").strip()
    run("git", "add", "-A")
    run("git", "commit", "-qm", "notebooks without outputs")
    return repo, notebook, env, run


def test_bootstrap_installs_the_filter_so_a_saved_notebook_is_unmodified(tmp_path):
    repo, notebook, env, run = _repo_with_the_filter(tmp_path)
    saved = _as_saved_by_the_lab(json.loads(notebook.read_text(encoding="utf-8")))
    notebook.write_text(json.dumps(saved, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    # git status lists the file until the index is refreshed (its size differs from the
    # cleaned blob's, and git trusts sizes); what git would store is unchanged:
    assert run("git", "diff") == ""
    run("git", "add", "-A")
    assert run("git", "status", "--porcelain") == ""
    assert run("git", "diff", "--cached") == ""
    assert "outputs" in notebook.read_text() and '"hi\\n"' in notebook.read_text(), (
        "the working copy keeps its outputs; only git's copy is clean"
    )


def test_the_labs_save_hook_leaves_git_status_clean(tmp_path, monkeypatch):
    """JupyterLab saves through its contents manager with scripts/lab.sh's post-save hook: a
    run-and-saved notebook (outputs, the lab's metadata, source_hidden dropped on markdown)
    leaves `git status` clean; a notebook whose cells changed still shows, nothing staged."""
    pytest.importorskip("jupyter_server")
    import nbformat
    from jupyter_server.services.contents.filemanager import FileContentsManager

    repo, notebook, env, run = _repo_with_the_filter(tmp_path)
    for key in ("GIT_CONFIG_GLOBAL", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL"):
        monkeypatch.setenv(key, env[key])
    hook = (
        [
            line
            for line in (ROOT / "scripts" / "lab.sh").read_text().splitlines()
            if "post_save_hook=" in line
        ][0]
        .split("post_save_hook=")[1]
        .split()[0]
    )
    manager = FileContentsManager(root_dir=str(repo), post_save_hook=hook)
    relative = f"notebooks/{notebook.name}"

    def save(content: dict) -> None:
        manager.save(
            {"type": "notebook", "format": "json", "content": nbformat.from_dict(content)}, relative
        )

    committed = json.loads(notebook.read_text(encoding="utf-8"))
    save(_as_saved_by_the_lab(committed))
    assert "image/png" in notebook.read_text()  # the lab's copy keeps its outputs
    assert run("git", "status", "--porcelain") == ""
    assert run("git", "diff", "--cached") == ""

    changed = _as_saved_by_the_lab(committed)
    changed["cells"][0]["source"] = "# a student's own title\n"
    save(changed)
    assert run("git", "status", "--porcelain").split() == ["M", relative]
    assert run("git", "diff", "--cached") == ""  # shown, never staged behind the user's back
