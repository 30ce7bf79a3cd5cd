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


def _results(root: Path, em: float) -> Path:
    _run(root / "runs" / "tiny" / "grpo" / "seed0", eval_time=1.0, em=em)
    return root


def test_a_tolerance_accepts_rounding_and_says_how_large_it_was(tmp_path, capsys):
    a = _results(tmp_path / "a", 0.5)
    b = _results(tmp_path / "b", 0.50000002)  # a relative difference of 4e-8
    assert compare_runs.main([str(a), str(b)]) == 1  # exact by default
    assert "DIFFERENCES FOUND" in capsys.readouterr().out
    assert compare_runs.main([str(a), str(b), "--rtol", "1e-6"]) == 0
    out = capsys.readouterr().out
    assert "eval.jsonl within tolerance" in out
    assert "ALL WITHIN TOLERANCE (rtol 1e-06, atol 0; largest relative difference 4.00e-08)" in out
    # beyond the tolerance it is a difference again
    c = _results(tmp_path / "c", 0.51)
    assert compare_runs.main([str(a), str(c), "--rtol", "1e-6"]) == 1
    assert compare_runs.main([str(a), str(a), "--rtol", "1e-6"]) == 0
    assert capsys.readouterr().out.strip().endswith("ALL IDENTICAL")
