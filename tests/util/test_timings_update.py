"""`python -m at2po_lib.util.timings --update PROFILE`: docs/timings.yaml and docs/setup.md's
table regenerated from a run's timings.json (issue #38 item 6), never typed by hand."""

from __future__ import annotations

import json

import pytest

from at2po_lib.lab.notebook_runner import record_timing
from at2po_lib.util import timings as t


def _data() -> dict:
    return {
        "machine": "2 cores",
        "notebooks": {
            "00_tinyworld": {
                "smoke": {"seconds": 7.8, "how": "old smoke"},
                "tiny": {"seconds": 3.3, "how": "old tiny"},
            },
            "05_paper_tables_figures": {"tiny": {"seconds": 37.4, "how": "old"}},
        },
    }


def test_seconds_round_up_never_down():
    assert t.rounded_up(95.31) == 95.4
    assert t.rounded_up(3.3) == 3.3  # 33.000000000000004 tenths is still 3.3
    assert t.rounded_up(0.01) == 0.1


def test_a_pipeline_record_is_read_back_with_its_load(tmp_path):
    path = tmp_path / "timings.json"
    record_timing(path, "00_tinyworld", 5.14, "2026-12-03 10:29 UTC", 3.784)
    entry = t.read_measured(path)["00_tinyworld"]
    assert entry["seconds"] == 5.1 and entry["load_average"] == 3.78
    how = t.how_measured(entry, "tiny", "two trainings alongside")
    assert "2026-12-03 10:29 UTC" in how and "load average 3.8" in how
    assert how.endswith("; two trainings alongside")


def test_an_older_bare_seconds_file_is_read(tmp_path):
    path = tmp_path / "timings.json"
    path.write_text(json.dumps({"00_tinyworld": 4.0}))
    assert t.read_measured(path) == {"00_tinyworld": {"seconds": 4.0}}
    assert "load not recorded" in t.how_measured({"seconds": 4.0}, "tiny")


def test_bad_or_missing_file_names_itself(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `./run_all.sh`"):
        t.read_measured(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text(json.dumps({"00_tinyworld": {"started": "x"}}))
    with pytest.raises(ValueError, match="00_tinyworld has no number of seconds"):
        t.read_measured(tmp_path / "bad.json")


def test_update_replaces_only_the_measured_profile_and_stages():
    data = t.updated(
        _data(),
        {"00_tinyworld": {"seconds": 12.01, "started": "d", "load_average": 6.0, "cpus": 2}},
        "tiny",
    )
    tiny = data["notebooks"]["00_tinyworld"]["tiny"]
    assert tiny["seconds"] == 12.1 and "load average 6.0 at its start on 2 cores" in tiny["how"]
    assert data["notebooks"]["00_tinyworld"]["smoke"] == {"seconds": 7.8, "how": "old smoke"}
    assert data["notebooks"]["05_paper_tables_figures"]["tiny"]["seconds"] == 37.4
    with pytest.raises(ValueError, match="99_unknown"):
        t.updated(_data(), {"99_unknown": {"seconds": 1.0}}, "tiny")


def test_written_file_reads_back_and_the_table_is_replaced(tmp_path):
    path = tmp_path / "timings.yaml"
    t.write_timings(_data(), path)
    assert path.read_text().startswith("# Measured wall time")
    assert t.load_timings(path) == _data()
    page = f"intro\n{t.SETUP_BEGIN}\nold table\n{t.SETUP_END}\nafter\n"
    assert (
        t.with_table(page, "| new |") == f"intro\n{t.SETUP_BEGIN}\n| new |\n{t.SETUP_END}\nafter\n"
    )
    with pytest.raises(ValueError, match="markers"):
        t.with_table("no markers", "| new |")


def test_update_writes_the_file_and_the_setup_table_for_the_chosen_stages(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    t.write_timings(_data(), tmp_path / "docs" / "timings.yaml")
    (tmp_path / "docs" / "setup.md").write_text(f"x\n{t.SETUP_BEGIN}\nold\n{t.SETUP_END}\n")
    monkeypatch.setattr(t, "repo_root", lambda: tmp_path)
    record_timing(tmp_path / "timings.json", "00_tinyworld", 61.0, "d", 7.0)
    record_timing(tmp_path / "timings.json", "05_paper_tables_figures", 12.2, "d", 8.0)
    with pytest.raises(ValueError, match="not in the run's timings.json"):
        t.update("tiny", source=tmp_path / "timings.json", stages=["02_tree_rollout"])
    assert t.update(
        "tiny", "two trainings alongside", tmp_path / "timings.json", ["05_paper_tables_figures"]
    ) == ["05_paper_tables_figures: 12.2 s"]
    data = t.load_timings(tmp_path / "docs" / "timings.yaml")
    assert data["notebooks"]["05_paper_tables_figures"]["tiny"]["seconds"] == 12.2
    assert data["notebooks"]["00_tinyworld"]["tiny"]["seconds"] == 3.3  # not chosen: kept
    page = (tmp_path / "docs" / "setup.md").read_text()
    assert "| `05_paper_tables_figures` | not measured | 12 s |" in page and "old" not in page
