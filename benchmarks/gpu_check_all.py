"""Every GPU-side check of the pinned GPU environment (requirements-gpu.txt: vLLM, DeepSpeed) in
one go (within 10 minutes on one GPU), then a table to paste into benchmarks/README.md. On the
machine that can be lent (no vLLM, DeepSpeed or faiss) use gpu_check_h200.sh instead.

    python benchmarks/gpu_check_all.py                 # all checks, ~8 min on one H200
    python benchmarks/gpu_check_all.py --only vllm,plan
    python benchmarks/gpu_check_all.py --dry-run       # print the commands (no GPU needed)

Checks (each a subprocess with its own time limit, so one failure or hang costs only its slot):

| name | what | limit |
| --- | --- | ---: |
| env | torch/vllm/faiss/deepspeed import (a failed import fails it), CUDA devices, ``faiss.get_num_gpus()`` | 60 s |
| vllm | gpu_check_vllm.py: vLLM tokens/s, prefix-cache hit rate, log-prob gap to the trainer | 180 s |
| hf-rollout | gpu_check_rollout.py: entropy-guided trees on the HF backend (tokens/s, log-prob gap) | 90 s |
| zero2 / zero3 | gpu_check_train.py under ``accelerate launch`` with DeepSpeed ZeRO-2 / ZeRO-3: 2 at2po steps on a random Qwen3-0.6B (0.60B) | 120 s each |
| plan | ``at2po plan --profile paper-qwen3-4b --gpus 8``: no GPU, for the record | 20 s |

Each check's last stdout line is a JSON summary; the table lists them, ``FAILED (rc)`` or
``TIMED OUT`` otherwise, and the tail of a failed check's output is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
ENV_PROBE = r"""
import json, torch
out = {"check": "env", "torch": torch.__version__, "cuda": torch.version.cuda,
       "gpus": torch.cuda.device_count(),
       "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
for name in ("vllm", "transformers", "trl", "deepspeed", "faiss"):
    try:
        module = __import__(name)
        out[name] = getattr(module, "__version__", "?")
    except Exception as exc:
        out[name] = f"import failed: {type(exc).__name__}"
try:
    import faiss
    out["faiss_gpus"] = faiss.get_num_gpus()
except Exception:
    out["faiss_gpus"] = None
print(json.dumps(out))
# a failed import fails the check (its state is then FAILED, never "ok")
raise SystemExit(1 if any(str(v).startswith("import failed") for v in out.values()) else 0)
"""


def checks() -> dict[str, tuple[list[str], int]]:
    """name -> (command, time limit in seconds)."""
    py = sys.executable
    accelerate = [py, "-m", "accelerate.commands.launch"]
    train = [str(BENCH / "gpu_check_train.py"), "--steps", "2"]
    return {
        "env": ([py, "-c", ENV_PROBE], 60),
        "vllm": ([py, str(BENCH / "gpu_check_vllm.py")], 180),
        "hf-rollout": ([py, str(BENCH / "gpu_check_rollout.py"), "--repeats", "1"], 90),
        "zero2": (
            [*accelerate, "--config_file", str(BENCH / "accelerate" / "zero2_1gpu.yaml"), *train],
            120,
        ),
        "zero3": (
            [*accelerate, "--config_file", str(BENCH / "accelerate" / "zero3_1gpu.yaml"), *train],
            120,
        ),
        "plan": (
            [
                py,
                "-m",
                "at2po_lib.cli",
                "plan",
                "--profile",
                "paper-qwen3-4b",
                "--gpus",
                "8",
                "--json",
            ],
            20,
        ),
    }


def last_json(text: str) -> dict | None:
    """The last line of ``text`` that parses as a JSON object, else the whole text as JSON."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    try:  # `at2po plan --json` prints an indented object
        value = json.loads(text)
        return value if isinstance(value, dict) else None
    except json.JSONDecodeError:
        return None


def run_check(name: str, command: list[str], limit: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return {"name": name, "state": "TIMED OUT", "seconds": limit, "tail": out[-1500:]}
    seconds = time.perf_counter() - start
    summary = last_json(proc.stdout)
    state = "ok" if proc.returncode == 0 and summary is not None else f"FAILED ({proc.returncode})"
    return {
        "name": name,
        "state": state,
        "seconds": round(seconds, 1),
        "summary": summary,
        "tail": (proc.stdout + proc.stderr)[-1500:] if state != "ok" else "",
    }


def summary_cell(result: dict) -> str:
    summary = result.get("summary") or {}
    if result["name"] == "plan" and summary:
        return (
            f"{summary['total_bytes'] / 2**30:.1f} GiB/GPU of {summary['gpu_bytes'] / 2**30:.0f}, "
            f"CPU faiss keeps up: {summary['retrieval']['CPU faiss keeps up']}"
        )
    keys = [k for k in summary if k not in ("check",)]
    return ", ".join(f"{k}={summary[k]}" for k in keys)


def table(results: list[dict]) -> str:
    lines = ["| check | state | seconds | result |", "| --- | --- | ---: | --- |"]
    lines += [
        f"| {r['name']} | {r['state']} | {r['seconds']} | {summary_cell(r)} |" for r in results
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated check names")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    selected = checks()
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(names) - set(selected))
        if unknown:
            parser.error(f"--only: unknown check(s) {unknown}; known: {', '.join(selected)}")
        selected = {n: selected[n] for n in names}
    budget = sum(limit for _, limit in selected.values())
    print(f"{len(selected)} checks, at most {budget} s ({budget / 60:.1f} min)")
    if args.dry_run:
        for name, (command, limit) in selected.items():
            print(f"{name} ({limit} s): {' '.join(command)}")
        return 0
    results = []
    for name, (command, limit) in selected.items():
        print(f"--- {name} (limit {limit} s)", flush=True)
        result = run_check(name, command, limit)
        print(f"{result['state']} in {result['seconds']} s", flush=True)
        if result["tail"]:
            print(result["tail"])
        results.append(result)
    print(f"\n{time.strftime('%Y-%m-%d')}, {(results[0].get('summary') or {}).get('gpu')}\n")
    print(table(results))
    return 0 if all(r["state"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
