"""The end of a multi-process launch (at2po_lib.util.process_group, issue #65): the process group
and its gloo worker threads are gone before Python finalizes, on success and on an exception.

Each case runs in a fresh process (a process group per process), world size 1 over gloo: the
worker threads (``pt_gloo_runloop``) exist as in a 2-process launch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="reads native thread names from /proc"
)

SCRIPT = """
import json, os, sys
import torch, torch.distributed as dist
from at2po_lib.util.process_group import process_group_left_at_end

def gloo_workers():
    tasks = os.listdir("/proc/self/task")
    return sum(open(f"/proc/self/task/{t}/comm").read().strip() == "pt_gloo_runloop" for t in tasks)

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=0, world_size=1)
t = torch.ones(8)
dist.all_reduce(t)
before = gloo_workers()
raised = False
try:
    with process_group_left_at_end():
        if sys.argv[1] == "raise":
            raise RuntimeError("a failed run")
except RuntimeError:
    raised = True
print("RESULT " + json.dumps({"before": before, "after": gloo_workers(),
      "initialized": dist.is_initialized(), "raised": raised}))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("body", ["return", "raise"])
def test_the_process_group_and_its_gloo_workers_are_gone_before_exit(body):
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, body, str(_free_port())],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["before"] > 0  # the workers the abort came from
    assert (result["after"], result["initialized"]) == (0, False)
    assert result["raised"] is (body == "raise")  # the exception still reaches the caller


def test_without_a_process_group_nothing_happens():
    from at2po_lib.util.process_group import leave_process_group

    assert leave_process_group(barrier=True) is False  # pytest's process: never initialized
