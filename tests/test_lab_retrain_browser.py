"""scripts/check_lab_retrain.py: notebook 04's "try this" retrains AT2PO and GRPO side by side
in JupyterLab, as a learner runs it, on the smoke profile (the tiny default's time is in
benchmarks/README.md). Needs Playwright and Chromium (`pip install -e '.[browser]'`,
Debian's `chromium` or AT2PO_CHROMIUM)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # JupyterLab + a browser + two smoke runs: ~2 min
@pytest.mark.integration
@pytest.mark.browser
def test_notebook_04_retrains_the_pair_side_by_side_in_a_real_browser():
    pytest.importorskip("playwright")
    chromium = os.environ.get("AT2PO_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        pytest.skip("no Chromium (set AT2PO_CHROMIUM or install Debian's chromium)")
    done = subprocess.run(
        [
            sys.executable,
            "scripts/check_lab_retrain.py",
            "--profile",
            "smoke",
            "--chromium",
            chromium,
            "--timeout",
            "600",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "both progress bars show (at2po (seed, 1 core), grpo (seed, 1 core))" in done.stdout
    assert "retraining (the try cell's own time):" in done.stdout
    assert "ok: profile smoke, knobs none" in done.stdout
