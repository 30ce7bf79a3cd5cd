"""Nothing finished is lost (issue 13): folders are built beside their final place and swapped in
only when complete (:mod:`at2po_lib.util.staging`), and ``train()`` never removes a finished run
before a new one has succeeded. Fault injection: exceptions mid-run, a refused re-run, and
processes killed (``os._exit``) at every step of the swap."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from at2po_lib.util import staging
from at2po_lib.util.paths import recorded_path
from at2po_lib.util.staging import REPLACED_MARKER, recover, replaced_path, staging_path, swap_in


def _complete(folder: Path) -> bool:
    return (folder / "DONE").is_file()


def _make(folder: Path, label: str) -> Path:
    folder.mkdir(parents=True)
    for i in range(20):  # several files: a half-deleted folder would be visible
        (folder / f"part{i}.txt").write_text(f"{label} {i}\n")
    (folder / "DONE").write_text(label)
    return folder


def _label(folder: Path, marker_allowed: bool = False) -> str:
    """Which complete version a folder is ("old"/"new"); fails on anything partial."""
    assert _complete(folder), f"{folder} is not complete"
    label = (folder / "DONE").read_text()
    assert [(folder / f"part{i}.txt").read_text() for i in range(20)] == [
        f"{label} {i}\n" for i in range(20)
    ]
    assert marker_allowed or not (folder / REPLACED_MARKER).exists()
    return label


def _no_leftovers(final: Path) -> None:
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name]


@pytest.mark.parametrize("exchange", [True, False])
def test_swap_replaces_the_old_folder_and_leaves_nothing_behind(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(staging, "_exchange", lambda a, b: False)
    final = _make(tmp_path / "runs" / "seed0", "old")
    swap_in(_make(staging_path(final), "new"), final)
    assert _label(final) == "new"
    _no_leftovers(final)


def test_swap_into_a_missing_folder_is_a_rename(tmp_path):
    final = tmp_path / "runs" / "seed0"
    swap_in(_make(staging_path(final), "new"), final)
    assert _label(final) == "new"
    with pytest.raises(FileNotFoundError, match="nothing to swap in"):
        swap_in(staging_path(final), final)


KILL_SCRIPT = """
import os, sys
from pathlib import Path
from at2po_lib.util import staging

final = Path(sys.argv[1])
point = sys.argv[2]
real_rename, real_exchange, real_rmtree = os.rename, staging._exchange, staging.shutil.rmtree
renames = []

def die():
    os._exit(9)  # like kill -9: no cleanup, no finally blocks

def rename(a, b):
    renames.append((a, b))
    if point == f"rename{len(renames)}":
        die()
    real_rename(a, b)

def exchange(a, b):
    if point == "before-exchange":
        die()
    if point.startswith("rename"):
        return False  # the two-rename path
    done = real_exchange(a, b)
    if point == "after-exchange":
        die()
    return done

def rmtree(path, ignore_errors=False):
    if point == "mid-delete":  # delete half the files of the old folder, then die
        for p in sorted(Path(path).iterdir())[:10]:
            p.unlink()
        die()
    real_rmtree(path, ignore_errors=ignore_errors)

staging.os.rename = rename
staging._exchange = exchange
staging.shutil.rmtree = rmtree
staging.swap_in(staging.staging_path(final), final)
"""

KILL_POINTS = ["before-exchange", "after-exchange", "rename1", "rename2", "rename3", "mid-delete"]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_kill_anywhere_in_the_swap_leaves_the_old_or_the_new_folder_complete(tmp_path, point):
    final = _make(tmp_path / "runs" / "seed0", "old")
    _make(staging_path(final), "new")
    script = tmp_path / "swap.py"
    script.write_text(textwrap.dedent(KILL_SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script), str(final), point], cwd=Path(__file__).parents[2]
    )
    assert done.returncode == 9, f"the fault at {point!r} was not reached"
    # Right after the kill (before any repair), whatever sits at the final path is complete
    # or absent; never a mixture.
    if final.exists():
        assert _label(final, marker_allowed=True) in {"old", "new"}
    recover(final, _complete)
    assert _label(final) == "new"  # the new folder was complete: the swap is finished
    _no_leftovers(final)


def test_recover_puts_the_old_folder_back_when_nothing_complete_replaces_it(tmp_path):
    final = _make(tmp_path / "runs" / "seed0", "old")
    (final / REPLACED_MARKER).write_text("")
    final.rename(replaced_path(final))  # state after the first of two renames ...
    unfinished = staging_path(final)
    unfinished.mkdir()  # ... with an unfinished staging folder (no DONE)
    recover(final, _complete)
    assert _label(final) == "old"
    assert unfinished.is_dir()  # kept: a resume continues it


# -- train(): fault injection on the run folder ------------------------------------------------

OVERRIDES = {"eval": {"max_questions": 2}}


@pytest.fixture()
def react_runs(isolated_outputs, monkeypatch):
    """``train(method="react")`` with the warm-start evaluation replaced by one that writes a
    ``final_eval.csv`` (or raises), so only the run-folder handling is exercised."""
    import pandas as pd

    from at2po_lib.study import run as run_module

    calls = {"fail": False}

    def evaluate(cfg, method, seed, run):
        (run.root / "progress.txt").write_text("half-way\n")
        if calls["fail"]:
            raise RuntimeError("evaluation crashed half-way")
        frame = pd.DataFrame({"dataset": ["tiny_nq"], "em": [cfg.eval.max_questions / 10]})
        frame.to_csv(run.final_eval, index=False)
        return frame

    monkeypatch.setattr(run_module, "_evaluate_warmstart", evaluate)
    return run_module, calls


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_a_failed_or_refused_re_run_keeps_the_finished_run(react_runs):
    run_module, calls = react_runs
    first = run_module.train("smoke", "react", 0, profile_overrides=OVERRIDES)
    assert first.status == "evaluated" and first.run.done.is_file()
    committed = _snapshot(first.run.root)
    assert "final_eval.csv" in committed and "DONE.json" in committed

    changed = {"eval": {"max_questions": 3}}
    with pytest.raises(run_module.RunExistsError, match="another configuration.*--force"):
        run_module.train("smoke", "react", 0, profile_overrides=changed)
    assert _snapshot(first.run.root) == committed

    calls["fail"] = True  # forced, but the new run dies half-way
    with pytest.raises(RuntimeError, match="crashed half-way"):
        run_module.train("smoke", "react", 0, profile_overrides=changed, force=True)
    assert _snapshot(first.run.root) == committed
    assert (staging_path(first.run.root) / "progress.txt").is_file()  # the unfinished attempt

    calls["fail"] = False
    again = run_module.train("smoke", "react", 0, profile_overrides=OVERRIDES)
    assert again.status == "skipped"  # the old run is still the committed one

    calls["fail"] = False
    new = run_module.train("smoke", "react", 0, profile_overrides=changed, force=True)
    assert new.status == "evaluated"
    assert (
        json.loads(new.run.done.read_text())["config_hash"]
        != json.loads(committed["DONE.json"])["config_hash"]
    )
    assert new.run.final_eval.read_text().splitlines()[1] == "tiny_nq,0.3"
    recorded = json.loads(new.run.done.read_text())["final_eval"]
    assert recorded == recorded_path(new.run.final_eval)  # no machine's path in the record
    assert recorded.startswith("results/") and recorded.endswith("seed0/final_eval.csv")
    _no_leftovers(new.run.root)


def test_a_run_finished_but_killed_before_its_swap_is_committed_on_the_next_call(react_runs):
    run_module, _ = react_runs
    first = run_module.train("smoke", "react", 0, profile_overrides=OVERRIDES)
    # Simulate a kill between DONE.json and the swap: a complete staging copy beside the run.
    pending = staging_path(first.run.root)
    pending.mkdir()
    for name, data in _snapshot(first.run.root).items():
        (pending / name).write_bytes(data)
    (pending / "final_eval.csv").write_text("dataset,em\ntiny_nq,0.9\n")
    again = run_module.train("smoke", "react", 0, profile_overrides=OVERRIDES)
    assert again.status == "skipped" and "0.9" in again.run.final_eval.read_text()
    _no_leftovers(first.run.root)
