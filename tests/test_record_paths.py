"""No machine's path in any record (issue #64 item 2, issue #66 item 6): what the code records
names paths from the results folder, the artifacts folder or the checkout on, and nothing
committed under results/, figures/ or docs/ holds an absolute path of the machine that wrote it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from at2po_lib.reporting.output import source_meta
from at2po_lib.util.paths import (
    ABSOLUTE_PATH,
    WINDOWS_PATH,
    recorded_path,
    recorded_paths_in,
    repo_root,
)
from at2po_lib.util.provenance import run_metadata

SCANNED = ("results", "figures", "docs")
SAME_ON_EVERY_MACHINE = ("/proc/", "/dev/")
"""The kernel's own files, named in docs as what they are: no machine's folder."""


def machine_paths(text: str) -> list[str]:
    """The absolute paths of some machine in ``text``."""
    found = [m.group(0) for m in ABSOLUTE_PATH.finditer(text)]
    found = [p for p in found if not p.startswith(SAME_ON_EVERY_MACHINE)]
    return found + [m.group(0) for m in WINDOWS_PATH.finditer(text)]


@pytest.mark.parametrize(
    "text",
    [
        '"final_eval": "/work/wt-study/results/runs/tiny/grpo/seed0/final_eval.csv"',
        "--trees-dir /tmp/ca",
        "`AT2PO_RESULTS=/tmp/before at2po train`",
        "see (/home/me/x)",
        '"policy": "/Users/me/warmstart"',
        '"C:\\\\Users\\\\me"',
        "--policy=/root/a/b",
    ],
)
def test_a_machine_path_is_found(text):
    assert machine_paths(text)


@pytest.mark.parametrize(
    "text",
    [
        "https://github.com/a/b/blob/main/x.py",
        "12.5 steps/s and 3 it/s, 1/2 of them",
        "results/runs/tiny/grpo/seed0/final_eval.csv",
        "~/work/x and $AT2PO_ROOT/results/x and ${HOME}/a/b",
        "<outside>/at2po_s0_rerun",
        "and/or a /s unit",
        "the kernel's `/proc/self`",
    ],
)
def test_urls_units_relative_paths_and_placeholders_are_not(text):
    assert not machine_paths(text)


def test_no_committed_record_figure_or_doc_holds_a_machine_path():
    listed = subprocess.run(
        ["git", "ls-files", "-z", *SCANNED], cwd=repo_root(), capture_output=True, check=True
    ).stdout.decode()
    files = [repo_root() / name for name in listed.split("\0") if name]
    assert len(files) > 1000
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary (figures, trees): no text to hold a path
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(repo_root())}:{number}: {p}" for p in machine_paths(line)]
    assert not found, f"{len(found)} machine paths, first: " + "\n".join(found[:10])


def test_a_path_is_recorded_from_the_results_folder_wherever_it_lies(tmp_path, monkeypatch):
    results, artifacts = tmp_path / "elsewhere" / "res", tmp_path / "art"
    monkeypatch.setenv("AT2PO_RESULTS", str(results))
    monkeypatch.setenv("AT2PO_ARTIFACTS", str(artifacts))
    run = results / "runs" / "tiny" / "grpo" / "seed0"
    assert recorded_path(run / "final_eval.csv") == "results/runs/tiny/grpo/seed0/final_eval.csv"
    assert recorded_path(artifacts / "tiny" / "policy") == "artifacts/tiny/policy"
    assert recorded_path(repo_root() / "configs" / "tiny.yaml") == "configs/tiny.yaml"
    assert recorded_path(tmp_path / "scratch" / "policy") == "<outside>/policy"


def test_a_recorded_command_names_no_machine_path(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path / "res"))
    typed = (
        f"at2po credit-accuracy --policy {tmp_path}/res/tiny/warmstart "
        f"--trees-dir {tmp_path}/ca --set rollout.tree_alpha=0.05"
    )
    meta = run_metadata("tiny", 0, None, command=typed)
    assert meta["command"] == (
        "at2po credit-accuracy --policy results/tiny/warmstart "
        "--trees-dir <outside>/ca --set rollout.tree_alpha=0.05"
    )
    assert recorded_paths_in("at2po report --profile tiny") == "at2po report --profile tiny"


def test_a_report_over_results_outside_the_checkout_names_its_runs_as_over_the_checkout(
    tmp_path, monkeypatch
):
    """Issue #66 item 6: the metas of a report over a copy of the records elsewhere are the
    committed ones (the runs named from the results folder on)."""
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    runs = pd.DataFrame(
        {"method": ["grpo"], "seed": [0], "path": [str(tmp_path / "runs/tiny/grpo/seed0")]}
    )
    meta = source_meta("tiny", runs, writer="x:y")
    assert meta["sources"] == [{"method": "grpo", "seed": 0, "run": "results/runs/tiny/grpo/seed0"}]
    assert not machine_paths(str(meta))
    committed = Path("results/runs/tiny/grpo/seed0")
    monkeypatch.delenv("AT2PO_RESULTS")
    assert (
        source_meta("tiny", runs.assign(path=[str(repo_root() / committed)]), writer="x:y")[
            "sources"
        ]
        == meta["sources"]
    )
