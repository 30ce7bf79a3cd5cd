"""./run_all.sh's engine: order, skipping up-to-date stages, and failing loudly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from at2po_lib.lab.notebook_runner import list_notebooks, run_notebooks

ROOT = Path(__file__).resolve().parent.parent


def _notebook(path: Path, *sources: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "tiny"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params] + [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


@pytest.fixture()
def two_notebooks(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    _notebook(nbdir / "00_first.ipynb", "x = 1")
    _notebook(nbdir / "01_second.ipynb", "assert profile == 'smoke', profile")
    return nbdir


@pytest.mark.slow  # executes notebooks
@pytest.mark.integration
def test_runs_in_order_then_skips_until_forced(two_notebooks, tmp_path, monkeypatch):
    # pin the library fingerprint: this test is about the stamps, not about source edits
    library = {"hash": "v1"}
    monkeypatch.setattr(
        "at2po_lib.lab.notebook_runner.library_fingerprint", lambda root: library["hash"]
    )
    out = tmp_path / "out"
    first = run_notebooks("smoke", notebooks_dir=two_notebooks, out_dir=out)
    assert [r.status for r in first] == ["ran", "ran"]
    assert (out / "00_first.ipynb").exists() and (out / "01_second.ipynb").exists()
    second = run_notebooks("smoke", notebooks_dir=two_notebooks, out_dir=out)
    assert [r.status for r in second] == ["skipped", "skipped"]
    # changing an upstream notebook re-runs it and everything after it
    _notebook(two_notebooks / "00_first.ipynb", "x = 2")
    third = run_notebooks("smoke", notebooks_dir=two_notebooks, out_dir=out)
    assert [r.status for r in third] == ["ran", "ran"]
    # a library change re-runs every stage
    library["hash"] = "v2"
    fourth = run_notebooks("smoke", notebooks_dir=two_notebooks, out_dir=out)
    assert [r.status for r in fourth] == ["ran", "ran"]
    forced = run_notebooks(
        "smoke", only=["01"], force=True, notebooks_dir=two_notebooks, out_dir=out
    )
    assert [(r.notebook.name, r.status) for r in forced] == [("01_second.ipynb", "ran")]


@pytest.mark.integration
@pytest.mark.skipif(os.name != "posix", reason="Unix-socket kernels are POSIX only")
def test_kernel_talks_over_unix_sockets_and_prints_no_warning(tmp_path, capfd):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    _notebook(
        nbdir / "00_transport.ipynb",
        "from ipykernel.kernelapp import IPKernelApp\n"
        "app = IPKernelApp.instance()\n"
        "assert app.transport == 'ipc', app.transport",
    )
    results = run_notebooks("smoke", notebooks_dir=nbdir, out_dir=tmp_path / "out")
    assert [r.status for r in results] == ["ran"], results
    err = capfd.readouterr().err
    assert "WARNING" not in err, err  # e.g. ipykernel 7's "running over TCP without encryption"


def test_only_rejects_unknown_prefix(two_notebooks):
    with pytest.raises(ValueError, match="07"):
        list_notebooks(two_notebooks, ["07"])


@pytest.mark.slow  # executes notebooks
@pytest.mark.integration
def test_failing_notebook_exits_nonzero_naming_notebook_and_cell(two_notebooks, tmp_path):
    _notebook(two_notebooks / "02_broken.ipynb", "y = 1", "raise RuntimeError('boom in stage 02')")
    _notebook(two_notebooks / "03_after.ipynb", "z = 3")
    out = tmp_path / "out"
    env = {**os.environ, "AT2PO_HOME": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "at2po_lib.cli",
            "run-notebooks",
            "--profile",
            "smoke",
            "--notebooks-dir",
            str(two_notebooks),
            "--out-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "02_broken.ipynb" in proc.stderr
    assert "cell 2" in proc.stderr and "boom in stage 02" in proc.stderr
    # earlier stages' outputs stay; later stages never ran
    assert (out / "00_first.ipynb").exists() and (out / "01_second.stamp").exists()
    assert not (out / "03_after.ipynb").exists()


def test_unknown_profile_is_an_error_listing_known_ones(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "at2po_lib.cli", "run-notebooks", "--profile", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "tiny" in proc.stderr and "smoke" in proc.stderr


def test_only_with_no_prefix_is_an_error_not_every_stage(two_notebooks):
    for only in ([], ["", " "]):
        with pytest.raises(ValueError, match="names no notebook"):
            list_notebooks(two_notebooks, only)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "at2po_lib.cli",
            "run-notebooks",
            "--profile",
            "smoke",
            "--only",
            ",,,",
            "--notebooks-dir",
            str(two_notebooks),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and "--only" in proc.stderr, proc.stderr


@pytest.mark.integration
def test_a_corrupt_notebook_is_named_and_no_executed_copy_is_promised(
    two_notebooks, tmp_path, capsys
):
    (two_notebooks / "01_second.ipynb").write_text('{"cells": [')  # truncated JSON
    out = tmp_path / "out"
    results = run_notebooks("smoke", notebooks_dir=two_notebooks, out_dir=out)
    assert [r.status for r in results] == ["ran", "failed"]
    assert "cannot be read" in results[-1].message
    err = capsys.readouterr().err
    assert "01_second.ipynb" in err and "no executed copy was written" in err
    assert "executed copy with the traceback" not in err and not (out / "01_second.ipynb").exists()


@pytest.mark.slow  # executes a notebook
@pytest.mark.integration
def test_set_and_retrain_reach_every_notebook_and_its_stamp(tmp_path):
    """``--set`` values arrive as the ``overrides`` parameter (checked before anything runs),
    ``--retrain`` as ``retrain``; a changed override re-runs an up-to-date stage."""
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "tiny"\noverrides = {}\nretrain = False')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        params,
        nbformat.v4.new_code_cell(
            "assert overrides == {'train': {'max_steps': 3}}, overrides\nassert retrain is True"
        ),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, nbdir / "00_params.ipynb")
    # a notebook that declares neither gets neither (papermill would warn about each)
    _notebook(
        nbdir / "01_plain.ipynb", "assert 'retrain' not in dir() and 'overrides' not in dir()"
    )
    out = tmp_path / "out"
    first = run_notebooks(
        "smoke",
        notebooks_dir=nbdir,
        out_dir=out,
        retrain=True,
        overrides={"train": {"max_steps": 3}},
    )
    assert [r.status for r in first] == ["ran", "ran"]
    with pytest.raises(Exception, match="nope"):
        run_notebooks("smoke", notebooks_dir=nbdir, out_dir=out, overrides={"train": {"nope": 1}})
