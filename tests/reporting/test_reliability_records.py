"""Reporting refuses damaged run records naming the file and line, and never drops a run
silently (issue #24, item 6); it refuses duplicated questions, copied runs, seeds of another
configuration and torn record lines before writing anything (issue #39, item 3)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from at2po_lib.cli.report import main as report_main
from at2po_lib.reporting import report
from at2po_lib.reporting import table2 as report_table2
from at2po_lib.record.reading import (
    check_seeds,
    load_final_evals,
    load_outcomes,
    load_training_records,
)
from at2po_lib.util.errors import RecordError
from at2po_lib.util.paths import repo_root
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


@pytest.mark.parametrize(
    "column, value", [("f1", "abc"), ("num_turns", "-1"), ("num_tool_calls", "1.5")]
)
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
    with pytest.raises(RecordError, match=r"seed0/metrics\.jsonl, line 5"):
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


def test_at2po_report_names_the_damaged_file_without_a_traceback(
    runs, capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    _edit_line(runs / "seed1" / "outcomes.csv", 4, "em", "7")
    assert report_main(["--profile", "smoke"]) == 2
    err = capsys.readouterr().err
    assert "seed1/outcomes.csv, line 4" in err and "Traceback" not in err
    assert json.loads((runs / "seed0" / "DONE.json").read_text()) == {}


# ----------------------------------------------- issue #39 item 3: duplicated or damaged
def _tables(root):
    """Every file of the tables folder with its bytes."""
    folder = root.parent.parent.parent / "smoke" / "tables"
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _record_provenance(
    run,
    seed: int,
    method: str = "grpo",
    epsilon: float = 0.2,
    revision: str = "a" * 40,
    profile: str = "smoke",
) -> None:
    """config.yaml, meta.json and DONE.json as the trainer writes them (hash of the config)."""
    from at2po_lib.record.run_folder import config_hash

    config = {
        "method": method,
        "seed": seed,
        "profile": profile,
        "settings": {"train": {"max_steps": 4}, "trainer": {"seed": seed, "epsilon": epsilon}},
        "sources": {"profile": profile, "preset": {"trainer.epsilon": epsilon}, "set": {}},
    }
    digest = config_hash(config)
    (run / "config.yaml").write_text(
        yaml.safe_dump({**config, "config_hash": digest}, sort_keys=False)
    )
    (run / "meta.json").write_text(
        json.dumps(
            {
                "profile": profile,
                "seed": seed,
                "git_revision": revision,
                "method": method,
                "config_hash": digest,
            }
        )
    )
    (run / "DONE.json").write_text(json.dumps({"config_hash": digest, "status": "trained"}))


@pytest.fixture()
def recorded(runs):
    """The three GRPO seeds with the trainer's provenance records."""
    for seed in range(3):
        _record_provenance(runs / f"seed{seed}", seed)
    check_seeds("smoke")  # the well-formed records pass
    return runs


def test_a_duplicated_question_id_is_refused_naming_both_lines(runs):
    path = runs / "seed1" / "outcomes.csv"
    lines = path.read_text().splitlines()
    first = lines[3].split(",")
    first[lines[0].split(",").index("em")] = "1.0" if first[4] != "1.0" else "0.0"
    path.write_text("\n".join(lines + [",".join(first)]) + "\n")  # line 4 again, other EM
    with pytest.raises(
        RecordError,
        match=rf"seed1/outcomes\.csv, line {len(lines) + 1}: "
        r"question tiny_hotpotqa/tiny_hotpotqa-2 again "
        r"\(first on line 4\)",
    ):
        load_outcomes("smoke")


def test_the_same_id_in_two_datasets_is_two_questions(runs):
    path = runs / "seed0" / "outcomes.csv"
    text = path.read_text().replace("tiny_nq-0,", "tiny_hotpotqa-0,")
    path.write_text(text)
    assert len(load_outcomes("smoke")) == 3 * len(DATASETS) * N_QUESTIONS


def test_a_torn_last_metrics_line_of_a_finished_run_is_refused(runs):
    with open(runs / "seed2" / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 5, "entropy": 0.1')
    with pytest.raises(
        RecordError,
        match=r"seed2/metrics\.jsonl, line 5: not valid JSON "
        r"\(a torn last line",
    ):
        load_training_records("smoke")
    with open(runs / "seed0" / "eval.jsonl", "a") as fh:
        fh.write('{"step": 9, "data')
    (runs / "seed2" / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RecordError, match=r"seed0/eval\.jsonl, line 3: .*torn"):
        load_training_records("smoke")


@pytest.mark.parametrize("name", ["outcomes.csv", "metrics.jsonl"])
def test_a_run_copied_to_another_seed_is_refused(runs, name):
    copy = runs / "seed3"
    shutil.copytree(runs / "seed1", copy)
    if name == "metrics.jsonl":  # only the metrics are the same: outcomes edited apart
        _edit_line(copy / "outcomes.csv", 2, "em", "1.0")
        _edit_line(copy / "outcomes.csv", 3, "em", "0.0")
    else:  # only the outcomes: metrics differ
        (copy / "metrics.jsonl").write_text('{"step": 1, "entropy": 0.5}\n')
    with pytest.raises(
        RecordError,
        match=rf"seed3/{name.replace('.', '[.]')}: the same "
        rf"{name.replace('.', '[.]')} as grpo/seed1",
    ):
        check_seeds("smoke")
    check_seeds("smoke", methods=["at2po"])  # other methods are not concerned


def test_a_copied_run_with_one_em_flipped_and_its_step_time_nudged_is_refused(runs):
    copy = runs / "seed3"
    shutil.copytree(runs / "seed1", copy)
    _edit_line(copy / "outcomes.csv", 2, "em", "1.0")
    _edit_line(copy / "outcomes.csv", 3, "em", "0.0")
    rows = [json.loads(line) for line in (copy / "metrics.jsonl").read_text().splitlines()]
    rows[0]["step_time"] = rows[0].get("step_time", 1.0) + 0.001  # the clock, not the training
    (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(RecordError, match=r"seed3/metrics[.]jsonl: the same metrics[.]jsonl"):
        check_seeds("smoke")


def test_seeds_of_other_methods_may_agree(runs):
    shutil.copytree(runs / "seed0", runs.with_name("dapo") / "seed0")
    check_seeds("smoke")  # two presets may train alike; only seeds of one method must differ


@pytest.mark.parametrize(
    "change, file, match",
    [
        (
            {"epsilon": 0.3},
            "config.yaml",
            r"configuration less the seed .* settings\.trainer\.epsilon: 0\.3 "
            r"here, 0\.2 there",
        ),
        ({"revision": "b" * 40}, "meta.json", r"git revision \(meta\.json\) differs .*bbbb"),
    ],
)
def test_a_seed_of_another_configuration_or_revision_is_refused(recorded, change, file, match):
    _record_provenance(recorded / "seed1", 1, **change)
    with pytest.raises(RecordError, match=rf"seed1/{file.replace('.', '[.]')}: {match}"):
        check_seeds("smoke")


def test_a_seed_recorded_for_another_profile_seed_or_method_is_refused(recorded):
    _record_provenance(recorded / "seed2", 2, profile="tiny")
    with pytest.raises(
        RecordError,
        match=r"seed2/meta\.json: records profile 'tiny', but it "
        r"lies in results/runs/smoke/",
    ):
        check_seeds("smoke")
    _record_provenance(recorded / "seed2", 0)  # seed0's records in seed2's folder
    with pytest.raises(
        RecordError,
        match=r"seed2/meta\.json: records seed 0, but it lies "
        r"in seed2",
    ):
        check_seeds("smoke")
    _record_provenance(recorded / "seed2", 2, method="dapo")
    with pytest.raises(RecordError, match=r"seed2/config\.yaml: records method 'dapo'"):
        check_seeds("smoke")


def test_hashes_that_do_not_match_the_config_are_refused(recorded):
    config = recorded / "seed0" / "config.yaml"
    config.write_text(config.read_text().replace("epsilon: 0.2", "epsilon: 0.25"))
    with pytest.raises(
        RecordError,
        match=r"seed0/config\.yaml: config_hash \w+ is not the "
        r"hash of the configuration",
    ):
        check_seeds("smoke")
    _record_provenance(recorded / "seed0", 0)
    (recorded / "seed0" / "DONE.json").write_text(json.dumps({"config_hash": "0" * 16}))
    with pytest.raises(
        RecordError,
        match=r"seed0/DONE\.json: config_hash 0+ is not "
        r"config\.yaml's",
    ):
        check_seeds("smoke")


def test_a_seed_without_the_records_its_siblings_have_is_refused(recorded):
    (recorded / "seed2" / "config.yaml").unlink()
    with pytest.raises(
        RecordError,
        match=r"seed2/config\.yaml: absent, while seed0, seed1 "
        r"record their configuration",
    ):
        check_seeds("smoke")


def test_runs_recorded_under_another_methods_name_are_refused(runs):
    exact = runs.with_name("at2po_exact")
    runs.rename(exact)
    for seed in range(3):
        _record_provenance(exact / f"seed{seed}", seed, method="at2po")
    with pytest.raises(RecordError, match=r"records method 'at2po', but it lies in at2po_exact/"):
        check_seeds("smoke")


def test_every_committed_run_records_the_method_of_its_folder():
    """at2po_exact's study runs, trained under at2po's name before the variant had one, record
    at2po_exact since their records' migration (scripts/migrate_records.py)."""
    configs = sorted((repo_root() / "results").rglob("config.yaml"))
    named = [c for c in configs if "reproduction" not in c.parts]
    assert len(named) >= 269
    for config in named:
        assert yaml.safe_load(config.read_text())["method"] == config.parent.parent.name, config


def test_the_report_refuses_before_writing_and_leaves_the_tables_as_they_were(
    recorded, capsys, tmp_path, monkeypatch
):
    """Refused records leave every table as it was; a failure half-way puts back what it had
    already rewritten (issue #39 item 3)."""
    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    assert report_main(["--profile", "smoke", "--no-figures"]) == 0
    before = _tables(recorded)
    assert any(p.name == "table1.csv" for p in before)
    capsys.readouterr()
    shutil.copytree(recorded / "seed2", recorded / "seed3")
    _record_provenance(recorded / "seed3", 3)  # a copy with its own records: same outcomes
    assert report_main(["--profile", "smoke", "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert "seed3/outcomes.csv: the same outcomes.csv as grpo/seed2" in err
    assert "Traceback" not in err
    assert _tables(recorded) == before
    # records that pass, and a table that fails after Table 1 was rewritten: all put back
    shutil.rmtree(recorded / "seed3")
    for line in range(2, 8):  # seed0 answers six more questions: Table 1 changes
        _edit_line(recorded / "seed0" / "outcomes.csv", line, "em", "1.0")

    def broken(*args, **kwargs):
        raise RuntimeError("a table that cannot be computed")

    table2 = report_table2.table2
    monkeypatch.setattr("at2po_lib.reporting.table2.table2", broken)
    with pytest.raises(RuntimeError, match="cannot be computed"):
        report.write_report("smoke", figures=False)
    assert _tables(recorded) == before
    monkeypatch.setattr("at2po_lib.reporting.table2.table2", table2)
    report.write_report("smoke", figures=False)
    after = _tables(recorded)
    assert after.keys() == before.keys() and after != before  # there was something to undo


# ------------------------------------ issue #50 item 3: lookalike seeds, copies, bad numbers
def _report(capsys) -> tuple[int, str]:
    code = report_main(["--profile", "smoke", "--no-figures"])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("name", ["seed01", "seed\u0661", "link"])
def test_a_second_folder_of_one_seed_is_refused_naming_it(
    recorded, capsys, tmp_path, monkeypatch, name
):
    """b8f2d3f: ``cp -r seed1 seed01`` (or ``seed١``, or a link) counted seed 1 twice: Figure
    3's GRPO change moved and Table 1 rested on one more run."""
    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    assert _report(capsys)[0] == 0
    before = _tables(recorded)
    if name == "link":
        (recorded / "seed3").symlink_to(recorded / "seed1", target_is_directory=True)
        named = "seed3: a symbolic link"
    else:
        shutil.copytree(recorded / "seed1", recorded / name)
        named = f"{name}: reads as seed 1 but is not a run folder name"
    code, err = _report(capsys)
    assert code == 2 and named in err and "\n" not in err and "Traceback" not in err
    assert _tables(recorded) == before


def test_a_backup_folder_is_no_run_for_the_report_or_dissect_runs(
    recorded, capsys, tmp_path, monkeypatch
):
    """b8f2d3f: a ``seed1.bak`` copy added a row to ``at2po dissect runs``'s clip levels."""
    from at2po_lib.record.reading import finished_run_folders

    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    assert _report(capsys)[0] == 0
    before = _tables(recorded)
    shutil.copytree(recorded / "seed1", recorded / "seed1.bak")
    assert _report(capsys)[0] == 0 and _tables(recorded) == before
    assert [p.name for p in finished_run_folders("smoke", ["grpo"])] == ["seed0", "seed1", "seed2"]


def test_dissect_runs_refuses_a_copied_run(recorded, capsys, monkeypatch, tmp_path):
    """``at2po dissect runs`` reads the runs the report reads, checked alike."""
    from at2po_lib.cli import main

    shutil.copytree(recorded / "seed2", recorded / "seed3")
    _record_provenance(recorded / "seed3", 3)
    assert main(["dissect", "runs", "--profile", "smoke", "--methods", "grpo"]) == 2
    err = capsys.readouterr().err
    assert "seed3/outcomes.csv: the same outcomes.csv as grpo/seed2" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "file, line, match",
    [
        (
            "metrics.jsonl",
            '{"step": 4, "entropy": 0.1}',
            r"seed1/metrics\.jsonl, line 5: step 4 again \(first on line 4\)",
        ),
        (
            "metrics.jsonl",
            '{"step": 5, "entropy": NaN}',
            r"seed1/metrics\.jsonl, line 5: entropy=nan is not a finite number",
        ),
        (
            "metrics.jsonl",
            '{"step": 5, "entropy": Infinity}',
            r"seed1/metrics\.jsonl, line 5: entropy=inf is not a finite number",
        ),
        (
            "eval.jsonl",
            '{"step": 4, "dataset": "tiny_hotpotqa", "em": 0.5}',
            r"seed1/eval\.jsonl, line 3: step 4, dataset tiny_hotpotqa again \(first on line 2\)",
        ),
    ],
)
def test_duplicated_or_non_finite_metric_rows_are_refused_naming_file_and_line(
    runs, file, line, match
):
    """b8f2d3f: accepted, and they moved Figure 3 and the claims."""
    with open(runs / "seed1" / file, "a") as fh:
        fh.write(line + "\n")
    with pytest.raises(RecordError, match=match):
        load_training_records("smoke")


def test_a_greedy_em_other_than_0_or_1_is_refused(runs):
    """b8f2d3f: ``em=0.5`` for one question was accepted."""
    _edit_line(runs / "seed1" / "outcomes.csv", 3, "em", "0.5")
    with pytest.raises(RecordError, match=r"seed1/outcomes\.csv, line 3: em=0\.5 is not 0 or 1"):
        load_outcomes("smoke")
    _edit_line(runs / "seed1" / "outcomes.csv", 3, "em", "1.0")
    _edit_line(runs / "seed1" / "outcomes.csv", 4, "num_turns", "inf")
    with pytest.raises(RecordError, match=r"line 4: turns=inf is not a finite number"):
        load_outcomes("smoke")
    lines = (runs / "seed2" / "final_eval.csv").read_text().splitlines()
    (runs / "seed2" / "final_eval.csv").write_text("\n".join(lines + [lines[1]]) + "\n")
    with pytest.raises(
        RecordError,
        match=r"seed2/final_eval\.csv, line \d+: dataset "
        r"tiny_hotpotqa again \(first on line 2\)",
    ):
        load_final_evals("smoke")


KILLED_WRITER = r"""
import os, signal, sys
from pathlib import Path
from at2po_lib.util.writing import all_or_none, write_if_changed

folder, journal = Path(sys.argv[1]), Path(sys.argv[2])
with all_or_none(journal):
    write_if_changed(folder / "a.csv", "new a\n")
    write_if_changed(folder / "new.csv", "a new file\n")
    write_if_changed(folder / "b.csv", "new b\n")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_writes_killed_half_way_are_put_back_by_the_next_block(tmp_path):
    """b8f2d3f: ``at2po report`` killed left half-written tables until rerun."""
    import subprocess
    import sys

    from at2po_lib.util.writing import all_or_none, write_if_changed

    folder, journal = tmp_path / "tables", tmp_path / ".journal"
    folder.mkdir()
    for name in ("a.csv", "b.csv", "c.csv"):
        (folder / name).write_text(f"old {name}\n")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    child = subprocess.run(
        [sys.executable, str(script), str(folder), str(journal)], capture_output=True, timeout=120
    )
    assert child.returncode == -9
    assert (folder / "a.csv").read_text() == "new a\n" and (folder / "new.csv").exists()
    with open(journal / "undo.jsonl", "a") as handle:  # a kill in the middle of a listing
        handle.write('{"path": "/nowhere", "bef')
    with all_or_none(journal):  # the next block puts the killed one's files back first
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
        write_if_changed(folder / "c.csv", "new c\n")
    assert (folder / "c.csv").read_text() == "new c\n" and not journal.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tables", "writer.py"]


REPORT_KILLED = r"""
import os, signal
from at2po_lib.reporting import report, table2

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

table2.table2 = killed
report.write_report("smoke", figures=False)
"""


@pytest.mark.slow  # a child process that imports the reporting stack: ~15 s on 2 cores
def test_a_report_killed_after_table1_is_put_back_then_written_whole(
    recorded, capsys, tmp_path, monkeypatch
):
    import os
    import subprocess
    import sys

    from at2po_lib.reporting.report import write_journal
    from at2po_lib.util.writing import roll_back

    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    assert _report(capsys)[0] == 0
    before = _tables(recorded)
    for line in range(2, 8):  # seed0 answers six more questions: Table 1 changes
        _edit_line(recorded / "seed0" / "outcomes.csv", line, "em", "1.0")
    script = tmp_path / "report_killed.py"
    script.write_text(REPORT_KILLED)
    child = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert child.returncode == -9, child.stderr[-2000:]
    half = _tables(recorded)
    assert half != before and write_journal("smoke").is_dir()  # Table 1 was rewritten
    assert roll_back(write_journal("smoke")) and _tables(recorded) == before
    assert _report(capsys)[0] == 0
    after = _tables(recorded)
    assert after.keys() == before.keys() and after != before


@pytest.mark.parametrize("change", ["extra", "missing", "renamed"])
def test_a_seed_answering_other_questions_is_named_with_its_file(
    recorded, capsys, tmp_path, monkeypatch, change
):
    """b8f2d3f: ``ValueError ... did not answer every question`` naming no file, and for an
    extra id the good seeds instead of the bad one (issue #50 item 7)."""
    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    path = recorded / "seed1" / "outcomes.csv"
    lines = path.read_text().splitlines()
    if change == "extra":
        lines.append(lines[-1].replace("tiny_nq-", "tiny_nq-extra"))
    elif change == "missing":
        del lines[-1]
    else:
        lines[-1] = lines[-1].replace("tiny_nq-", "tiny_nq-renamed")
    path.write_text("\n".join(lines) + "\n")
    code, err = _report(capsys)
    assert code == 2 and "\n" not in err and "Traceback" not in err
    assert "seed1/outcomes.csv:" in err and "answer the same test questions" in err


def test_a_studys_tables_are_written_all_or_none(tmp_path):
    """``credit-accuracy``, ``expansion-stats`` and ``dissect`` write their tables through
    ``write_csv_tables``: a failure at the second table puts the first back."""
    import pandas as pd

    from at2po_lib.util.provenance import write_csv_tables

    class Broken:
        def to_csv(self, **options):
            raise RuntimeError("half-way")

    (tmp_path / "one.csv").write_text("old\n")
    with pytest.raises(RuntimeError, match="half-way"):
        write_csv_tables(
            tmp_path, {"one.csv": pd.DataFrame({"a": [1]}), "two.csv": Broken()}, {"writer": "test"}
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.csv"]
    assert (tmp_path / "one.csv").read_text() == "old\n"
