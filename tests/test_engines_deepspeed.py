"""The engines tier, DeepSpeed: ZeRO-2 and ZeRO-3 with 2 processes on DeepSpeed's CPU accelerator
(``DS_ACCELERATOR=cpu``, gloo), for real: the rehearsal profile's paper path (the HTTP retrieval
server, dense faiss Flat index, 8 updates a step) trains, checkpoints, is killed after its last
checkpoint or during a step and resumes to exactly the uninterrupted run; under ZeRO-3 with a
colocated vLLM engine per rank (profile ``engines``) the weights gathered from both shards are
synced into each rank's engine, and a run killed during a step resumes to exactly the
uninterrupted run, its engine answering after the first sync as the uninterrupted run's does.

Runs in the engines environment only: ``./run_tests.sh --engines`` (docs/setup.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from at2po_lib.record import run_folder
from engines_guard import assert_synced, require_engine
from test_engines_vllm import run_scenario
from test_rehearsal import (
    ROOT,
    _assert_resumed_to_the_uninterrupted_run,
    _checkpoint_steps,
    _free_port,
    _killed_during_a_step_and_resumed,
    _rehearsal,
    _resume_command,
    _without_wall_time,
)

pytestmark = [pytest.mark.engines, pytest.mark.slow, pytest.mark.integration]

try:
    import deepspeed  # noqa: F401 - is DeepSpeed here?

    HAVE_DEEPSPEED = True
except Exception:  # ImportError, or an accelerator probe failing at import
    HAVE_DEEPSPEED = False

require_engine("DeepSpeed", HAVE_DEEPSPEED)

ACCELERATE = ROOT / "configs" / "accelerate"
ENTRY = str(ROOT / "tests" / "rehearsal_entry.py")


@pytest.fixture(autouse=True)
def deepspeed_on_cpu(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")


def test_zero3_digest_hashes_the_gathered_weights_so_another_model_differs(tmp_path):
    """The per-rank digest of a ZeRO-3-partitioned model is the digest of its full weights
    (gathered with DeepSpeed's ``GatheredParameters``): two models of different weights (what a
    resume from a wrong checkpoint holds) differ. Hashing the module as it is read ZeRO-3's
    empty placeholders, the same bytes for any weights."""
    result = run_scenario("zero3-digest", tmp_path, "--port", str(_free_port()), results=False)
    assert result["placeholder_numel"] == 0 < result["full_numel"]  # the partitioned case
    assert result["full"][0] != result["full"][1]
    assert result["zero3"][0] != result["zero3"][1]  # another model, another digest
    assert result["zero3"] == result["full"]  # each copy: its source's full weights


def _shard_files(checkpoint: Path) -> list[str]:
    """DeepSpeed's per-rank files of a checkpoint (``global_step*/…rank…``)."""
    return sorted(p.name for p in checkpoint.glob("global_step*/*rank*"))


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_run_killed_after_its_last_checkpoint_resumes_to_the_uninterrupted_run(
    tmp_path, stage
):
    """ZeRO-``stage``, 2 processes: one rollout step (8 updates), its checkpoint holding both
    ranks' shards; killed after that last checkpoint and resumed (``at2po train --resume``), the
    run trains nothing more, and its metrics, per-rank weights and every question's outcome
    equal the uninterrupted launch's."""
    config = ACCELERATE / f"zero{stage}_cpu_2proc.yaml"
    one_step = ("--set", "train.max_steps=1")
    run = run_folder.RunDir(tmp_path / "results" / "runs" / "rehearsal" / "at2po" / "seed0")
    straight = run_folder.RunDir(tmp_path / "uninterrupted")
    with _rehearsal(tmp_path, config) as rehearsal:
        whole = rehearsal.launch([ENTRY, "--crash", "none", *rehearsal.set_args, *one_step])
        assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-5000:]
        shutil.move(run.root, straight.root)
        killed = rehearsal.launch([ENTRY, "--crash", "end", *rehearsal.set_args, *one_step])
        assert (
            killed.returncode != 0
            and "crash after the last checkpoint (global step 8)" in killed.stdout
        ), killed.stdout[-3000:] + killed.stderr[-5000:]
        resumed = rehearsal.launch(_resume_command(rehearsal, *one_step))
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-5000:]
    assert "resumed:" in resumed.stdout

    done, meta = json.loads(run.done.read_text()), json.loads(run.meta.read_text())
    assert (done["status"], done["world_size"], meta["world_size"]) == ("resumed", 2, 2)
    shards = _shard_files(straight.checkpoints / "checkpoint-8")
    assert any("zero_pp_rank_0" in n for n in shards) and any("zero_pp_rank_1" in n for n in shards)
    assert sorted(p.name for p in run.checkpoints.glob("checkpoint-*")) == ["checkpoint-8"]
    for r in (0, 1):
        got = run_folder.read_jsonl(run.root / "ranks" / f"rank{r}.jsonl")
        want = run_folder.read_jsonl(straight.root / "ranks" / f"rank{r}.jsonl")
        assert [row["weights_sha256"] for row in got] == [row["weights_sha256"] for row in want]
    assert [_without_wall_time(r) for r in run_folder.read_jsonl(run.metrics)] == [
        _without_wall_time(r) for r in run_folder.read_jsonl(straight.metrics)
    ]
    assert run_folder.read_jsonl(run.metrics)[0]["grad_norm"] > 0
    assert run.outcomes.read_text() == straight.outcomes.read_text()


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_run_killed_during_a_step_resumes_to_the_uninterrupted_run(tmp_path, stage):
    """ZeRO-``stage``, 2 processes, killed during the second rollout step (after update 11 of
    16, the first step's checkpoint saved) and resumed: the second step's logged loss and grad
    norm, each rank's full weights after it (ZeRO-3: gathered), and the last checkpoint's
    DeepSpeed optimizer partitions (fp32 master weights and Adam moments), scheduler, RNG
    states and trainer state equal the uninterrupted run's bit for bit (tolerance 0: the same
    CPU kernels, one thread a process, in the same order)."""
    config = ACCELERATE / f"zero{stage}_cpu_2proc.yaml"
    straight, run = _killed_during_a_step_and_resumed(tmp_path, config)
    _assert_resumed_to_the_uninterrupted_run(run, straight)
    shards = _shard_files(run.checkpoints / "checkpoint-16")
    assert any("zero_pp_rank_1" in name and "optim" in name for name in shards)


def _engines_env(tmp_path: Path) -> dict:
    """The environment of an engines-profile launch, with its warm start built in one process
    first (inside a launch it is refused)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "AT2PO_ARTIFACTS": str(tmp_path / "artifacts"),
        "AT2PO_RESULTS": str(tmp_path / "results"),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "DS_ACCELERATOR": "cpu",
    }
    warm = subprocess.run(
        [sys.executable, "-m", "at2po_lib.cli", "warmstart", "--profile", "engines"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert warm.returncode == 0, warm.stdout[-2000:] + warm.stderr[-4000:]
    return env


def _engines_launch(env: dict, *args: str) -> subprocess.CompletedProcess:
    """``tests/engines_entry.py`` under a 2-process ZeRO-3 launch."""
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ACCELERATE / "zero3_cpu_2proc.yaml"),
        "--main_process_port",
        str(_free_port()),
        str(ROOT / "tests" / "engines_entry.py"),
        *args,
    ]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_zero3_colocated_vllm_run_killed_during_a_step_resumes_to_the_uninterrupted_run(
    tmp_path,
):
    """ZeRO-3 with colocated vLLM, 2 processes (profile ``engines``: 2 rollout steps of 2
    updates, a checkpoint after each), killed during the second step (after its first update,
    the first step's checkpoint saved) and resumed.

    The sync, in the uninterrupted run: each rank holds a shard of the parameters; TRL's sync
    at the second step's rollout gathers them into each rank's engine, which then answers 8 test
    questions greedily as the gathered model does (a bf16 copy, the engine's dtype, up to bf16
    near-ties: :func:`engines_guard.assert_synced`), where before the sync it still gave the
    initial weights' answers (stale).

    The resume: the second step's logged loss and grad norm, each rank's gathered weights
    after it, and the last checkpoint's DeepSpeed optimizer partitions (fp32 master weights,
    Adam moments), scheduler, RNG states and trainer state equal the uninterrupted run's bit for
    bit (tolerance 0: the same CPU kernels, one thread a process, in the same order; the
    rollouts come from the same engine kernels on the same weights with the same per-request
    seeds, so any difference is state the resume lost). The engine after the resume's first
    sync (it starts from the initial weights) answers as the uninterrupted run's engine does at
    that sync, token for token on both ranks (the same engine kernels on the same weights: no
    tie can break otherwise), and the stale answers before it are the same too."""
    env = {**_engines_env(tmp_path), "AT2PO_RANK_RECORDS": "1"}  # gathered weights' digests
    run = run_folder.RunDir(tmp_path / "results" / "runs" / "engines" / "at2po" / "seed0")
    straight = run_folder.RunDir(tmp_path / "uninterrupted")
    launches = {}
    for crash in ("none", "mid-step", "resume"):
        work = tmp_path / crash
        launches[crash] = proc = _engines_launch(
            env, "zero3-resume", "--crash", crash, "--work", str(work)
        )
        output = proc.stdout[-4000:] + proc.stderr[-6000:]
        if crash == "mid-step":
            assert proc.returncode != 0, output
            assert "crash during a step, after update 3" in proc.stdout, output
            staging = run.root.with_name(".seed0.staging")
            assert _checkpoint_steps(run_folder.RunDir(staging)) == [2]
        else:
            assert proc.returncode == 0, output
        if crash == "none":
            shutil.move(run.root, straight.root)
    assert json.loads(run.done.read_text())["status"] == "resumed"
    _assert_resumed_to_the_uninterrupted_run(run, straight, updates_per_step=2)

    answers = {
        crash: [
            json.loads((tmp_path / crash / f"answers-rank{r}.json").read_text()) for r in (0, 1)
        ]
        for crash in ("none", "resume")
    }
    for result in answers["none"]:
        assert result["world_size"] == 2 and result["zero_stage"] == 3
        assert result["local_numel"] < result["full_numel"]  # this rank holds a shard only
        assert result["engine_dtype"] == "torch.bfloat16"
        assert_synced(result)
    assert answers["none"][0]["after_hf"] == answers["none"][1]["after_hf"]  # the same model
    at_the_sync = ("stale", "after_hf", "after", "after_gaps", "local_numel", "full_numel")
    for got, want in zip(answers["resume"], answers["none"]):
        assert "before" not in got  # the resumed run starts at the checkpoint
        assert {k: got[k] for k in at_the_sync} == {k: want[k] for k in at_the_sync}
