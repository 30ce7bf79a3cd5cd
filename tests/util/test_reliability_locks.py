"""One writer per run folder and per index build (issue #24, item 1): a second process stops
at once with an error naming the holder's PID, and a killed holder never blocks anyone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from at2po_lib.util.locks import folder_lock
    with folder_lock(Path(sys.argv[1]), "test"):
        print("held", flush=True)
        time.sleep(120)
""")


@pytest.fixture
def holder():
    """Start a process holding the lock of a folder; yields (start, ...) and kills it after."""
    procs = []

    def start(folder: Path) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(folder)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def test_a_second_training_run_on_one_folder_stops_naming_the_first(
    tmp_path, monkeypatch, holder, capsys
):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path / "results"))
    from at2po_lib.cli.train import main

    run_root = tmp_path / "results" / "runs" / "tiny" / "grpo" / "seed0"
    first = holder(run_root)
    assert (
        main(["--profile", "tiny", "--method", "grpo", "--seed", "0", "--set", "train.max_steps=1"])
        == 2
    )
    err = capsys.readouterr().err
    assert f"PID {first.pid}" in err and str(run_root) in err
    assert not any(run_root.parent.glob(".seed0.staging")), "nothing may be written"
    assert list(run_root.iterdir()) == []


def test_a_second_index_build_into_one_folder_stops_naming_the_first(tmp_path, holder, capsys):
    from at2po_lib.cli.index import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "0", "contents": "\\"A\\"\\nsome text"}\n')
    out = tmp_path / "index" / "bm25"
    first = holder(out)
    assert main(["--corpus", str(corpus), "--out", str(out), "--bm25"]) == 2
    assert f"PID {first.pid}" in capsys.readouterr().err
    assert not out.exists()


def test_a_killed_holder_leaves_the_lock_free(tmp_path, holder):
    from at2po_lib.util.locks import folder_lock

    folder = tmp_path / "run"
    first = holder(folder)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    with folder_lock(folder, "test"):  # the kernel dropped the dead holder's lock
        assert (tmp_path / ".run.lock").read_text().strip() == str(os.getpid())
    assert not (tmp_path / ".run.lock").exists(), "a released lock leaves nothing behind"


def test_a_waiting_build_takes_the_lock_once_the_holder_is_done(tmp_path, holder):
    import threading

    from at2po_lib.util.locks import folder_lock

    folder = tmp_path / "index"
    first = holder(folder)
    threading.Timer(1.0, first.kill).start()
    with folder_lock(folder, "index build", wait=True):  # blocks until the holder is gone
        assert first.wait(timeout=10) is not None


def test_a_method_name_cannot_make_folders_outside_the_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path / "results"))
    from at2po_lib.study.run import train

    with pytest.raises(KeyError):
        train("tiny", "../../../outside", 0)
    assert not (tmp_path / "outside").exists()
    assert not (tmp_path / "results" / "runs").exists()
