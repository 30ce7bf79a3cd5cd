"""Every multi-process test, N times in a row beside a CPU-bound process (issue #65, item 2).

A multi-process test that passes alone can fail where another process takes a core: CI runs
the plain suite on two pytest workers, and a 2-process rehearsal there once lost rank 1 to
"terminate called without an active exception" (the gloo teardown that
``at2po_lib.util.process_group`` now orders). This script starts one burner (a Python process
spinning on one core, so the test's processes share the machine with it), then runs the
multi-process tests in one pytest call per round, round after round, and stops at the first
failing round, keeping its output. It prints each round's result, its wall time and the load
average, and last the count of rounds that passed in a row.

    python scripts/repeat_multiprocess_tests.py                  # the plain suite's, 10 rounds
    python scripts/repeat_multiprocess_tests.py --repeats 3 --stop-after 3600
    # the engines tier's (2-rank ZeRO, colocated vLLM), in the engines environment:
    .venv-engines/bin/python scripts/repeat_multiprocess_tests.py --engines --repeats 2

The plain suite's multi-process tests: the 2-process DDP rehearsals (tests/test_rehearsal.py:
train, sync and resume; killed after the last checkpoint; killed during a step), the 2-rank
tensor-parallel group over gloo (tests/rollout/test_vllm_colocated.py) and the process group's end
(tests/util/test_process_group.py, a gloo group in a child process). The engines tier's: every
2-rank test of tests/test_engines_deepspeed.py (ZeRO-2/3 killed after the last checkpoint and
during a step; ZeRO-3 with colocated vLLM killed during a step).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PLAIN = [
    "tests/test_rehearsal.py",
    "tests/rollout/test_vllm_colocated.py::test_tensor_parallel_ranks_submit_the_same_requests_and_drain",
    "tests/util/test_process_group.py",
]
ENGINES = ["tests/test_engines_deepspeed.py", "-m", "engines", "-k", "not digest"]
"""The engines tier's 2-rank tests (the digest test runs one process)."""

ENGINES_ENV = {
    "OMP_NUM_THREADS": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "DS_ACCELERATOR": "cpu",
    "AT2PO_ENGINES": "1",
}
"""What ``./run_tests.sh --engines`` sets."""

BURN = "while True:\n    pass\n"


def round_command(engines: bool, basetemp: Path, extra: list[str]) -> list[str]:
    tests = ENGINES if engines else PLAIN
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-q",
        "--basetemp",
        str(basetemp),
        *tests,
        *extra,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--engines", action="store_true", help="the engines tier's tests")
    parser.add_argument(
        "--no-burner", action="store_true", help="without the CPU-bound process beside"
    )
    parser.add_argument(
        "--stop-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no round after this many seconds (the count says how far it got)",
    )
    parser.add_argument("--logs", type=Path, default=None, help="where a failed round's log goes")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    if args.engines:
        env.update(ENGINES_ENV)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="at2po-repeats-"))
    logs.mkdir(parents=True, exist_ok=True)
    burner = None
    if not args.no_burner:
        burner = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.DEVNULL)
    started, passed = time.time(), 0
    tests = " ".join(ENGINES if args.engines else PLAIN)
    print(f"tests: {tests}", flush=True)
    print(f"beside: {'a CPU-bound process (pid %d)' % burner.pid if burner else 'nothing'}")
    try:
        for n in range(1, args.repeats + 1):
            if args.stop_after is not None and time.time() - started > args.stop_after:
                print(f"stopped before round {n}: --stop-after {args.stop_after:.0f} s reached")
                break
            basetemp = Path(tempfile.mkdtemp(prefix=f"round{n}-", dir=logs))
            t0 = time.time()
            proc = subprocess.run(
                round_command(args.engines, basetemp, args.pytest_args),
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            wall, load = time.time() - t0, os.getloadavg()[0]
            summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
            print(f"round {n}: rc {proc.returncode}, {wall:.0f} s, load {load:.1f}: {summary}")
            sys.stdout.flush()
            if proc.returncode != 0:
                log = logs / f"round{n}.log"
                log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
                print(f"round {n} failed; its output: {log} (test folders: {basetemp})")
                break
            passed += 1
            shutil.rmtree(basetemp, ignore_errors=True)
    finally:
        if burner is not None:
            burner.terminate()
            burner.wait(timeout=30)
    print(f"{passed} of {args.repeats} rounds passed in a row ({time.time() - started:.0f} s)")
    return 0 if passed == args.repeats else 1


if __name__ == "__main__":
    sys.exit(main())
