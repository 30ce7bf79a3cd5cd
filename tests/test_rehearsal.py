"""The paper path rehearsed on CPU: the ``rehearsal`` profile under 2 processes.

What runs (docs/paper_scale.md §5): the stand-in files (a random tiny Qwen3 and tokenizer,
real wiki-18 passages, real NQ rows in a FlashRAG folder), ``at2po index`` (faiss Flat),
``at2po serve-retriever`` on 127.0.0.1, then ``accelerate launch --multi_gpu --num_processes 2``
twice: tests/rehearsal_entry.py trains one rollout step with a reward that varies between
leaves and crashes after its checkpoint; ``at2po train --resume --data-dir`` continues it to
the end and runs the final evaluation sharded over both processes. (``accelerate launch
--cpu --num_processes 2`` would start one process only: accelerate 1.15's --cpu selects no
distributed type.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from at2po_lib.record import run_folder
from at2po_lib.trainer.callbacks import WALL_TIME_KEYS

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 120) -> dict:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"retrieval server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read())
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} not healthy after {timeout_s} s")


def _launch(
    args: list[str], env: dict, timeout_s: int = 400, config: Path | None = None
) -> subprocess.CompletedProcess:
    """2 processes: DDP over gloo, or the accelerate ``config`` file's set-up (the engines tier's
    DeepSpeed ZeRO copies, tests/test_engines_deepspeed.py)."""
    setup = (
        ["--config_file", str(config)]
        if config is not None
        else [
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
        ]
    )
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *setup,
        "--main_process_port",
        str(_free_port()),
        *args,
    ]
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
    )


@dataclass
class Rehearsal:
    """The stand-in files, the ``--set`` arguments that point the profile at them and at the
    retrieval server, the environment of the launches, and the server's health URL."""

    files: Any
    set_args: list[str]
    env: dict
    health: str
    server: subprocess.Popen
    config: Path | None = None

    def launch(self, args: list[str]) -> subprocess.CompletedProcess:
        return _launch(args, self.env, config=self.config)

    def served(self) -> dict:
        return _wait_healthy(self.health, self.server)


@contextmanager
def _rehearsal(tmp_path: Path, config: Path | None = None) -> Iterator[Rehearsal]:
    """Files, ``at2po index`` (faiss Flat) and ``at2po serve-retriever`` on 127.0.0.1, up for
    the body of the ``with``; results under ``tmp_path / "results"``; launches with the
    accelerate ``config`` file (None: DDP)."""
    from at2po_lib.cli import rehearsal as rehearsal_cli
    from at2po_lib.plan.rehearsal import RehearsalFiles

    assert rehearsal_cli.main(["--out", str(tmp_path / "files"), "--passages", "100"]) == 0
    files = RehearsalFiles(tmp_path / "files")
    port = _free_port()
    sets = [*files.overrides(), f"retrieval.url=http://127.0.0.1:{port}/retrieve"]
    set_args = [a for text in sets for a in ("--set", text)]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "AT2PO_ARTIFACTS": str(tmp_path / "artifacts"),
        "AT2PO_RESULTS": str(tmp_path / "results"),
        "AT2PO_RANK_RECORDS": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cli = [sys.executable, "-m", "at2po_lib.cli"]
    index = subprocess.run(
        [*cli, "index", "--profile", "rehearsal", "--method", "dense", *set_args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert index.returncode == 0, index.stderr[-3000:]

    server = subprocess.Popen(
        [*cli, "serve-retriever", "--profile", "rehearsal", *set_args, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        rehearsal = Rehearsal(
            files, set_args, env, f"http://127.0.0.1:{port}/health", server, config
        )
        health = rehearsal.served()
        assert (health["method"], health["index_type"], health["passages"]) == (
            "dense",
            "Flat",
            100,
        )
        yield rehearsal
    finally:
        server.terminate()
        server.wait(timeout=30)


def _resume_command(rehearsal: Rehearsal, *extra: str) -> list[str]:
    """The command a GPU user runs, resumed; FlashRAG files from --data-dir."""
    return [
        "-m",
        "at2po_lib.cli",
        "train",
        "--profile",
        "rehearsal",
        "--method",
        "at2po",
        "--resume",
        *_without_data_dir(rehearsal.set_args),
        *extra,
        "--data-dir",
        str(rehearsal.files.flashrag),
    ]


def test_two_process_rehearsal_trains_syncs_and_resumes(tmp_path):
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.model import load_policy
    from at2po_lib.trainer.rank_record import weights_digest

    started = time.time()
    with _rehearsal(tmp_path) as rehearsal:
        files = rehearsal.files
        # part 1: one rollout step with a gradient, then a crash after its checkpoint
        first = rehearsal.launch([str(ROOT / "tests" / "rehearsal_entry.py"), *rehearsal.set_args])
        assert first.returncode != 0 and "crash after the checkpoint" in first.stdout, (
            first.stdout[-3000:] + first.stderr[-3000:]
        )
        # part 2: the command a GPU user runs, resumed; FlashRAG files from --data-dir
        second = rehearsal.launch(_resume_command(rehearsal))
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert "resumed:" in second.stdout
        assert rehearsal.served()["queries_searched"] > 0  # rollouts searched through the server
    print(f"rehearsal wall time: {time.time() - started:.0f} s")

    run = run_folder.RunDir(tmp_path / "results" / "runs" / "rehearsal" / "at2po" / "seed0")
    meta, done = json.loads(run.meta.read_text()), json.loads(run.done.read_text())
    assert meta["world_size"] == 2 and done["world_size"] == 2 and done["status"] == "resumed"
    assert meta["resumed_from"] == "checkpoints/checkpoint-8"
    metrics = run_folder.read_jsonl(run.metrics)
    assert [m["step"] for m in metrics] == [1, 2]
    assert metrics[0]["grad_norm"] > 0  # step 1 had a gradient to all-reduce
    assert max(m["rollout/tool_calls_mean"] for m in metrics) > 0

    ranks = [run_folder.read_jsonl(run.root / "ranks" / f"rank{r}.jsonl") for r in (0, 1)]
    for rank, rows in enumerate(ranks):
        assert [row["rollout_step"] for row in rows] == [1, 2]
        assert all(row["rank"] == rank and row["world_size"] == 2 for row in rows)
    initial = weights_digest(load_policy(files.policy)[0])
    for step0, step1 in zip(*ranks):
        assert len(step0["prompt_ids"]) == len(step1["prompt_ids"]) == 4  # 8 prompts / 2
        assert not set(step0["prompt_ids"]) & set(step1["prompt_ids"])  # different prompts
        assert step0["weights_sha256"] == step1["weights_sha256"]  # synchronised
    assert ranks[0][0]["weights_sha256"] != initial  # and they moved

    import pandas as pd

    final = pd.read_csv(run.final_eval)
    n = load_profile("rehearsal").eval.max_questions
    assert int(final.loc[final["dataset"] == "nq", "n"].iloc[0]) == n  # both shards gathered
    assert json.loads(Path(str(run.final_eval) + ".meta.json").read_text())["processes"] == 2


def test_two_process_run_killed_after_its_last_checkpoint_resumes_to_the_uninterrupted_run(
    tmp_path,
):
    """Issue #39 item 2 under several processes: a 2-process run killed after its last
    checkpoint, resumed with 2 processes, trains nothing more: its last checkpoint is of global
    step 8 = max_steps x 8 updates, and its records, weights and every question's outcome equal
    the uninterrupted run's (the same launch, not killed).

    One rollout step (``max_steps=1``): an epoch of 17 NQ rows holds 2 steps of 8 prompts (16
    updates), so the resume starts inside an epoch, where transformers' loop runs an update
    before it checks max_steps (it did: a 9th update, a checkpoint-9, outcomes of another
    model). With the profile's 2 steps the run ends on the epoch's end and the loop is skipped
    without the fix too."""
    entry = str(ROOT / "tests" / "rehearsal_entry.py")
    one_step = ("--set", "train.max_steps=1")
    run = run_folder.RunDir(tmp_path / "results" / "runs" / "rehearsal" / "at2po" / "seed0")
    straight = run_folder.RunDir(tmp_path / "uninterrupted")
    with _rehearsal(tmp_path) as rehearsal:
        whole = rehearsal.launch([entry, "--crash", "none", *rehearsal.set_args, *one_step])
        assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
        shutil.move(run.root, straight.root)  # kept aside: --resume would skip a finished run
        killed = rehearsal.launch([entry, "--crash", "end", *rehearsal.set_args, *one_step])
        assert (
            killed.returncode != 0
            and "crash after the last checkpoint (global step 8)" in killed.stdout
        ), killed.stdout[-3000:] + killed.stderr[-3000:]
        staging = run.root.with_name(".seed0.staging")  # the kill left the staging folder
        assert not run.done.exists() and (staging / "checkpoints" / "checkpoint-8").is_dir()
        assert not (staging / "checkpoints" / "checkpoint-9").exists()
        resumed = rehearsal.launch(_resume_command(rehearsal, *one_step))
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resumed:" in resumed.stdout

    done, meta = json.loads(run.done.read_text()), json.loads(run.meta.read_text())
    assert (done["status"], done["world_size"], meta["world_size"]) == ("resumed", 2, 2)
    assert meta["resumed_from"] == "checkpoints/checkpoint-8"
    assert _checkpoint_steps(run) == _checkpoint_steps(straight) == [8]  # no checkpoint-9
    state = json.loads((run.checkpoints / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["global_step"] == state["max_steps"] == 8
    # the weights the final evaluation used: the uninterrupted run's, bit for bit
    assert _sha256(run.checkpoints / "checkpoint-8" / "model.safetensors") == _sha256(
        straight.checkpoints / "checkpoint-8" / "model.safetensors"
    )
    for r in (0, 1):  # per process: one rollout step, the same weights after it
        got = run_folder.read_jsonl(run.root / "ranks" / f"rank{r}.jsonl")
        want = run_folder.read_jsonl(straight.root / "ranks" / f"rank{r}.jsonl")
        assert [row["rollout_step"] for row in got] == [1]
        assert [row["weights_sha256"] for row in got] == [row["weights_sha256"] for row in want]
    assert [_without_wall_time(r) for r in run_folder.read_jsonl(run.metrics)] == [
        _without_wall_time(r) for r in run_folder.read_jsonl(straight.metrics)
    ]
    # the final evaluation, question by question and summed up, is the uninterrupted run's
    assert run.outcomes.read_text() == straight.outcomes.read_text()
    assert run.final_eval.read_text() == straight.final_eval.read_text()


def test_two_process_run_killed_during_a_step_resumes_to_the_uninterrupted_run(tmp_path):
    """Issue #65: a 2-process run killed during its second rollout step (3 of its 8 updates
    run, after the first step's checkpoint), resumed with 2 processes, redoes that step: the
    step's logged loss and grad norm, each process's weights after it, and the final
    checkpoint's weights, optimizer moments, scheduler, RNG states and trainer state equal
    the uninterrupted run's bit for bit (tolerance 0: one thread per process on CPU runs the
    same kernels in the same order, so any difference is state the resume lost)."""
    straight, run = _killed_during_a_step_and_resumed(tmp_path)
    _assert_resumed_to_the_uninterrupted_run(run, straight)
    assert _sha256(run.checkpoints / "checkpoint-16" / "model.safetensors") == _sha256(
        straight.checkpoints / "checkpoint-16" / "model.safetensors"
    )


def _killed_during_a_step_and_resumed(
    tmp_path: Path, config: Path | None = None
) -> tuple[run_folder.RunDir, run_folder.RunDir]:
    """The uninterrupted 2-step launch (kept aside), then one killed after update 11 of 16 and
    resumed (``train(resume=True)``, what ``at2po train --resume`` calls, with the launches'
    test reward): (uninterrupted, resumed) run folders."""
    entry = str(ROOT / "tests" / "rehearsal_entry.py")
    run = run_folder.RunDir(tmp_path / "results" / "runs" / "rehearsal" / "at2po" / "seed0")
    straight = run_folder.RunDir(tmp_path / "uninterrupted")
    with _rehearsal(tmp_path, config) as rehearsal:
        whole = rehearsal.launch([entry, "--crash", "none", *rehearsal.set_args])
        assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-5000:]
        shutil.move(run.root, straight.root)
        killed = rehearsal.launch([entry, "--crash", "mid-step", *rehearsal.set_args])
        assert killed.returncode != 0 and "crash during a step, after update 11" in killed.stdout, (
            killed.stdout[-3000:] + killed.stderr[-5000:]
        )
        staging = run.root.with_name(".seed0.staging")
        assert sorted(p.name for p in (staging / "checkpoints").glob("checkpoint-*")) == [
            "checkpoint-8"
        ]
        # the entry's --resume: the resumed updates score leaves with the launches' reward
        resumed = rehearsal.launch([entry, "--resume", *rehearsal.set_args])
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-5000:]
    assert json.loads(run.done.read_text())["status"] == "resumed"
    return straight, run


def _assert_resumed_to_the_uninterrupted_run(
    run: run_folder.RunDir, straight: run_folder.RunDir, updates_per_step: int = 8
) -> None:
    """The resumed run's records and last checkpoint equal the uninterrupted run's (2 rollout
    steps of ``updates_per_step`` updates, resumed from the first one's checkpoint)."""
    first, last_step = updates_per_step, 2 * updates_per_step
    meta = json.loads(run.meta.read_text())
    assert meta["resumed_from"] == f"checkpoints/checkpoint-{first}"
    assert _checkpoint_steps(run) == _checkpoint_steps(straight) == [first, last_step]
    got = [_without_wall_time(r) for r in run_folder.read_jsonl(run.metrics)]
    want = [_without_wall_time(r) for r in run_folder.read_jsonl(straight.metrics)]
    assert [r["step"] for r in got] == [1, 2] and got[0]["grad_norm"] > 0
    for key in ("loss", "grad_norm", "reward", "learning_rate"):  # the updates after the resume
        assert got[1][key] == want[1][key], key
    assert got == want
    for r in (0, 1):
        rows = [run_folder.read_jsonl(f.root / "ranks" / f"rank{r}.jsonl") for f in (run, straight)]
        digests = [[row["weights_sha256"] for row in got_rows] for got_rows in rows]
        assert [row["rollout_step"] for row in rows[0]] == [1, 2]
        assert digests[0] == digests[1] and digests[0][0] != digests[0][1]  # step 2 moved them
    last = run.checkpoints / f"checkpoint-{last_step}"
    want_last = straight.checkpoints / f"checkpoint-{last_step}"
    assert _trainer_state(last) == _trainer_state(want_last)
    states = _torch_states(last)
    assert states.keys() == _torch_states(want_last).keys()
    assert any("optim" in name for name in states)  # the moments are among them
    for name, state in states.items():
        assert not _differences(state, _torch_states(want_last)[name]), name


def _trainer_state(checkpoint: Path) -> dict:
    """``trainer_state.json`` less its clock readings."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    state["log_history"] = [_without_wall_time(row) for row in state["log_history"]]
    return state


def _torch_states(checkpoint: Path) -> dict[str, Any]:
    """Every torch file of a checkpoint (optimizer and its moments, scheduler, RNG states;
    under DeepSpeed its per-rank optimizer partitions and model states), loaded."""
    import torch

    return {
        str(path.relative_to(checkpoint)): torch.load(path, map_location="cpu", weights_only=False)
        for path in sorted([*checkpoint.rglob("*.pt"), *checkpoint.rglob("*.pth")])
    }


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two nested structures of tensors, arrays, numbers and strings differ (none: the
    same values, dtypes and shapes)."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
        return [] if same else [where]
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return [] if np.array_equal(a, b) else [where]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where} keys"]
        return [d for k in a for d in _differences(a[k], b[k], f"{where}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where} length"]
        return [
            d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")
        ]
    return [] if a == b or repr(a) == repr(b) else [where]


def _checkpoint_steps(run: run_folder.RunDir) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in run.checkpoints.glob("checkpoint-*"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _without_wall_time(row: dict) -> dict:
    """A metrics row less what depends on the clock (timings differ between launches)."""
    return {k: v for k, v in row.items() if k not in WALL_TIME_KEYS}


def _without_data_dir(set_args: list[str]) -> list[str]:
    """The ``--set`` pairs minus ``data.local_dir`` (given as ``--data-dir`` instead)."""
    out: list[str] = []
    for flag, text in zip(set_args[::2], set_args[1::2]):
        if not text.startswith("data.local_dir="):
            out += [flag, text]
    return out
