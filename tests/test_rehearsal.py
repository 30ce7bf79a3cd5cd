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

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from at2po_lib.trainer import run_folder

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


def _launch(args: list[str], env: dict, timeout_s: int = 400) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
               "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--main_process_port", str(_free_port()), *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def test_two_process_rehearsal_trains_syncs_and_resumes(tmp_path):
    from at2po_lib.cli import rehearsal as rehearsal_cli
    from at2po_lib.config import load_profile
    from at2po_lib.policy.model import load_policy
    from at2po_lib.rehearsal import RehearsalFiles
    from at2po_lib.trainer.rank_record import weights_digest

    started = time.time()
    assert rehearsal_cli.main(["--out", str(tmp_path / "files"), "--passages", "100"]) == 0
    files = RehearsalFiles(tmp_path / "files")
    port = _free_port()
    sets = [*files.overrides(), f"retrieval.url=http://127.0.0.1:{port}/retrieve"]
    set_args = [a for text in sets for a in ("--set", text)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "AT2PO_ARTIFACTS": str(tmp_path / "artifacts"), "AT2PO_RESULTS": str(tmp_path / "results"),
           "AT2PO_RANK_RECORDS": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cli = [sys.executable, "-m", "at2po_lib.cli"]
    index = subprocess.run([*cli, "index", "--profile", "rehearsal", "--method", "dense", *set_args],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert index.returncode == 0, index.stderr[-3000:]

    server = subprocess.Popen([*cli, "serve-retriever", "--profile", "rehearsal", *set_args,
                               "--port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        health = _wait_healthy(f"http://127.0.0.1:{port}/health", server)
        assert (health["method"], health["index_type"], health["passages"]) == ("dense", "Flat", 100)

        # part 1: one rollout step with a gradient, then a crash after its checkpoint
        first = _launch([str(ROOT / "tests" / "rehearsal_entry.py"), *set_args], env)
        assert first.returncode != 0 and "crash after the checkpoint" in first.stdout, \
            first.stdout[-3000:] + first.stderr[-3000:]
        # part 2: the command a GPU user runs, resumed; FlashRAG files from --data-dir
        second = _launch(["-m", "at2po_lib.cli", "train", "--profile", "rehearsal", "--method",
                          "at2po", "--resume", *_without_data_dir(set_args),
                          "--data-dir", str(files.flashrag)], env)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert "resumed:" in second.stdout
        served = _wait_healthy(f"http://127.0.0.1:{port}/health", server)
        assert served["queries_searched"] > 0  # rollouts searched through the HTTP server
    finally:
        server.terminate()
        server.wait(timeout=30)
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
        assert len(step0["prompt_ids"]) == len(step1["prompt_ids"]) == 4   # 8 prompts / 2
        assert not set(step0["prompt_ids"]) & set(step1["prompt_ids"])     # different prompts
        assert step0["weights_sha256"] == step1["weights_sha256"]          # synchronised
    assert ranks[0][0]["weights_sha256"] != initial                        # and they moved

    import pandas as pd

    final = pd.read_csv(run.final_eval)
    n = load_profile("rehearsal").eval.max_questions
    assert int(final.loc[final["dataset"] == "nq", "n"].iloc[0]) == n      # both shards gathered
    assert json.loads(Path(str(run.final_eval) + ".meta.json").read_text())["processes"] == 2


def _without_data_dir(set_args: list[str]) -> list[str]:
    """The ``--set`` pairs minus ``data.local_dir`` (given as ``--data-dir`` instead)."""
    out: list[str] = []
    for flag, text in zip(set_args[::2], set_args[1::2]):
        if not text.startswith("data.local_dir="):
            out += [flag, text]
    return out
