"""scripts/compare_runs.py: two runs are the same run when everything but timing agrees."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import compare_runs  # noqa: E402


def _run(folder: Path, eval_time: float, em: float) -> Path:
    folder.mkdir(parents=True)
    row = {"step": 2, "em": em, "eval_time": eval_time, "rollout/seconds": eval_time}
    (folder / "eval.jsonl").write_text(json.dumps(row) + "\n")
    (folder / "outcomes.csv").write_text(f"dataset,id,em,git_revision\nd,1,{em},{eval_time}\n")
    return folder


def test_timing_and_revision_aside_two_runs_are_identical(tmp_path):
    a = _run(tmp_path / "a", eval_time=3.1, em=0.5)
    b = _run(tmp_path / "b", eval_time=7.4, em=0.5)
    parts, differences = compare_runs.compare_run(a, b)
    assert differences == []
    # the two timing keys are left out of the comparison
    assert parts == ["eval.jsonl identical (1 rows, 2 keys)", "outcomes.csv identical (1 rows)"]


def test_a_different_number_is_named(tmp_path):
    a = _run(tmp_path / "a", eval_time=3.1, em=0.5)
    b = _run(tmp_path / "b", eval_time=3.1, em=0.25)
    _, differences = compare_runs.compare_run(a, b)
    assert differences == ["eval.jsonl row 0: ['em']", "outcomes.csv"]
