"""Reporting refuses damaged run records naming the file and line, and never drops a run
silently (issue #24, item 6)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from at2po_lib.cli.report import main as report_main
from at2po_lib.reporting.records import (RecordError, load_final_evals, load_outcomes,
                                         load_training_records)
from test_reporting import DATASETS, N_QUESTIONS, write_run


@pytest.fixture()
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path / "results"))
    root = tmp_path / "results"
    rng = np.random.default_rng(0)
    for seed in range(3):
        write_run(root, "grpo", seed, (rng.random((len(DATASETS), N_QUESTIONS)) < 0.4) * 1.0)
    return root / "runs" / "smoke" / "grpo"


def _edit_line(path, line: int, column: str, value: str) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[line - 1].split(",")
    cells[header.index(column)] = value
    lines[line - 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


def test_an_em_outside_0_1_is_refused_naming_file_and_line(runs):
    _edit_line(runs / "seed1" / "outcomes.csv", 5, "em", "7")
    with pytest.raises(RecordError, match=r"seed1/outcomes\.csv, line 5: em='?7"):
        load_outcomes("smoke")


@pytest.mark.parametrize("column, value", [("f1", "abc"), ("num_turns", "-1"),
                                           ("num_tool_calls", "1.5")])
def test_non_numeric_or_negative_outcome_cells_are_refused(runs, column, value):
    _edit_line(runs / "seed0" / "outcomes.csv", 3, column, value)
    with pytest.raises(RecordError, match=r"seed0/outcomes\.csv, line 3"):
        load_outcomes("smoke")


def test_a_header_only_outcomes_file_is_refused(runs):
    path = runs / "seed2" / "outcomes.csv"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    with pytest.raises(RecordError, match=r"seed2/outcomes\.csv: a header and no rows"):
        load_outcomes("smoke")


@pytest.mark.parametrize("content", [b"\x00\xff\xfe binary \x80\x81", b"", b'"dataset,em\n'])
def test_binary_empty_or_torn_files_are_refused_naming_them(runs, content):
    (runs / "seed0" / "outcomes.csv").write_bytes(content)
    with pytest.raises(RecordError, match=r"seed0/outcomes\.csv"):
        load_outcomes("smoke")
    (runs / "seed1" / "final_eval.csv").write_bytes(content)
    with pytest.raises(RecordError, match=r"seed1/final_eval\.csv"):
        load_final_evals("smoke")


def test_a_final_eval_out_of_range_is_refused(runs):
    _edit_line(runs / "seed0" / "final_eval.csv", 2, "em", "1.5")
    with pytest.raises(RecordError, match=r"seed0/final_eval\.csv, line 2: em"):
        load_final_evals("smoke")


def test_metrics_rows_that_are_not_objects_with_a_step_are_refused(runs):
    with open(runs / "seed0" / "metrics.jsonl", "a") as fh:
        fh.write('[1, 2]\n{"step": 9}\n')
    with pytest.raises(RecordError, match=r"seed0/metrics\.jsonl, row 5"):
        load_training_records("smoke")
    (runs / "seed0" / "metrics.jsonl").write_bytes(b'{"step": 1}\n\xff\xfe\n{"step": 2}\n')
    with pytest.raises(RecordError, match=r"seed0.*not UTF-8"):
        load_training_records("smoke")


def test_a_missing_outcomes_file_is_named_with_the_runs_used(runs, capsys):
    (runs / "seed1" / "outcomes.csv").unlink()
    frame = load_outcomes("smoke")
    assert sorted(frame["seed"].unique()) == [0, 2]
    err = capsys.readouterr().err
    assert "rests on 2 run(s) (grpo seeds 0,2)" in err
    assert "left out 1: grpo/seed1 (no outcomes.csv)" in err


@pytest.mark.parametrize("done", [None, "{not json", "[1]"])
def test_a_run_without_a_valid_done_json_is_not_counted(runs, capsys, done):
    path = runs / "seed2" / "DONE.json"
    if done is None:
        path.unlink()
    else:
        path.write_text(done)
    assert sorted(load_outcomes("smoke")["seed"].unique()) == [0, 1]
    assert sorted(load_final_evals("smoke")["seed"].unique()) == [0, 1]
    assert "left out 1: grpo/seed2 (" in capsys.readouterr().err


def test_at2po_report_names_the_damaged_file_without_a_traceback(runs, capsys, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    _edit_line(runs / "seed1" / "outcomes.csv", 4, "em", "7")
    assert report_main(["--profile", "smoke"]) == 2
    err = capsys.readouterr().err
    assert "seed1/outcomes.csv, line 4" in err and "Traceback" not in err
    assert json.loads((runs / "seed0" / "DONE.json").read_text()) == {}
