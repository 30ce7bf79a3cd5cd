"""Committed outputs are rewritten only when their content changes (a clean re-run leaves git
clean), and library progress bars are off only inside hf_progress_bars_off()."""

from __future__ import annotations

import json
import sys

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from at2po_lib.reporting.figure4 import turn_table  # noqa: E402
from at2po_lib.reporting.output import prose  # noqa: E402
from at2po_lib.util.writing import figure_png, save_figure, write_if_changed  # noqa: E402
from at2po_lib.util.provenance import run_metadata, write_meta  # noqa: E402
from at2po_lib.util.quiet import hf_progress_bars_off  # noqa: E402


def test_meta_is_kept_when_only_volatile_fields_change(tmp_path):
    result = tmp_path / "table.csv"
    result.write_text("a,b\n1,2\n")
    meta = write_meta(result, {"profile": "tiny", "created": "monday", "git_revision": "abc"})
    first = meta.read_text()
    assert json.loads(first)["result_sha256"]
    write_meta(
        result,
        {
            "profile": "tiny",
            "created": "tuesday",
            "git_revision": "def",
            "command": "at2po report --profile tiny",
        },
    )
    assert meta.read_text() == first  # same result bytes: the old meta stays

    result.write_text("a,b\n1,3\n")  # the result changed: a new meta
    write_meta(result, {"profile": "tiny", "created": "tuesday", "git_revision": "def"})
    assert json.loads(meta.read_text())["created"] == "tuesday"
    write_meta(result, {"profile": "smoke", "created": "tuesday", "git_revision": "def"})
    assert json.loads(meta.read_text())["profile"] == "smoke"  # a stable field changed


def _table_maker(profile: str) -> dict:
    """Stands for a function that computes a result and collects its meta."""
    return run_metadata(profile)


def test_meta_names_the_function_and_the_command_that_wrote_it(monkeypatch):
    monkeypatch.delenv("AT2PO_COMMAND", raising=False)
    monkeypatch.setattr(sys, "argv", ["/opt/tools/bin/pytest", "-k", "table one"])
    meta = _table_maker("tiny")
    assert meta["writer"] == f"{__name__}:_table_maker"
    assert meta["command"] == "pytest -k 'table one'"  # this process's argv, program by name
    from at2po_lib.reporting.output import source_meta
    from at2po_lib.reporting.table1 import table1

    assert source_meta("tiny", writer=table1)["writer"] == "at2po_lib.reporting.table1:table1"
    monkeypatch.setenv("AT2PO_COMMAND", "at2po report --profile tiny")
    assert (
        run_metadata("tiny", writer="notebooks/05.ipynb")["command"]
        == "at2po report --profile tiny"
    )


def test_the_at2po_command_is_recorded_while_it_runs_and_only_then(monkeypatch, capsys):
    """cli.main sets AT2PO_COMMAND around the subcommand (notebooks it runs inherit it)."""
    import types

    from at2po_lib import cli

    seen = {}
    fake = types.SimpleNamespace(
        main=lambda rest: seen.setdefault("meta", run_metadata("smoke")) and 0
    )
    monkeypatch.delenv("AT2PO_COMMAND", raising=False)
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: fake)
    assert cli.main(["report", "--profile", "smoke"]) == 0
    assert seen["meta"]["command"] == "at2po report --profile smoke"
    import os

    assert "AT2PO_COMMAND" not in os.environ


def test_broken_meta_is_replaced(tmp_path):
    result = tmp_path / "r.csv"
    result.write_text("x\n")
    (tmp_path / "r.csv.meta.json").write_text("{not json")
    assert json.loads(write_meta(result, {"profile": "tiny"}).read_text())["profile"] == "tiny"


def _figure():
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1, 2], [1, 0, 1])
    ax.set_title("t")
    return fig


def test_save_figure_is_byte_stable_without_a_software_tag_and_skips_unchanged(tmp_path):
    path = tmp_path / "f.png"
    fig = _figure()
    save_figure(fig, path, dpi=50)
    data, mtime = path.read_bytes(), path.stat().st_mtime_ns
    assert b"Software" not in data and b"matplotlib" not in data.lower()
    save_figure(_figure(), path, dpi=50)  # a second, identical figure
    assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime
    assert figure_png(fig, dpi=50) == data
    plt.close("all")


def test_write_if_changed(tmp_path):
    path = tmp_path / "sub" / "x.txt"
    assert write_if_changed(path, "a") is True
    assert write_if_changed(path, "a") is False
    assert write_if_changed(path, b"b") is True and path.read_text() == "b"


def test_hf_progress_bars_off_restores_the_previous_setting():
    from datasets.utils import logging as datasets_logging
    from transformers.utils import logging as transformers_logging

    transformers_logging.enable_progress_bar()
    datasets_logging.enable_progress_bar()
    with hf_progress_bars_off():
        assert not transformers_logging.is_progress_bar_enabled()
        assert not datasets_logging.is_progress_bar_enabled()
    assert transformers_logging.is_progress_bar_enabled()
    assert datasets_logging.is_progress_bar_enabled()

    transformers_logging.disable_progress_bar()  # a user who turned them off keeps them off
    with hf_progress_bars_off():
        pass
    assert not transformers_logging.is_progress_bar_enabled()
    transformers_logging.enable_progress_bar()


def test_training_progress_keeps_the_loss_and_closes_its_bar():
    from types import SimpleNamespace

    from at2po_lib.trainer.callbacks import TrainingProgress

    progress = TrainingProgress("sft", extra_points=lambda: {"dev EM": [(10, 0.5)]}, plot=False)
    state = SimpleNamespace(is_world_process_zero=True, max_steps=20, global_step=0)
    progress.on_train_begin(None, state, None)
    state.global_step = 10
    progress.on_step_end(None, state, None)
    progress.on_log(None, state, None, logs={"loss": 1.5, "grad_norm": 0.3})
    progress.on_log(None, state, None, logs={"train_runtime": 3.0})  # the final summary: no loss
    assert progress.losses == ([10], [1.5]) and progress.bar.n == 10
    progress.on_train_end(None, state, None)
    assert progress.bar is None


def test_step_progress_counts_rollout_steps_and_shows_validation_em():
    from types import SimpleNamespace

    from at2po_lib.trainer.callbacks import StepProgress

    validation = SimpleNamespace(history=[(0, 0.2), (2, 0.25)])
    progress = StepProgress(
        8, updates_per_step=4, description="grpo", validation=validation, plot=False
    )
    state = SimpleNamespace(is_world_process_zero=True, max_steps=32, global_step=4)
    progress.on_train_begin(None, state, None)  # resumed after one rollout step
    assert (progress.bar.total, progress.bar.n) == (8, 1)
    state.global_step = 12
    progress.on_log(None, state, None, logs={"reward": 0.4, "entropy": 0.08})
    progress.on_log(None, state, None, logs={"train_runtime": 3.0})  # no reward: ignored
    assert progress.rewards == ([3], [0.4]) and progress.bar.n == 3
    assert progress.bar.postfix == "reward=0.400, entropy=0.080, val_em=0.250"
    assert progress._plot_data()["validation EM"]["greedy"] == ([0, 2], [0.2, 0.25])
    progress.on_train_end(None, state, None)
    assert progress.bar is None


def test_live_plot_renders_a_png_with_every_panel():
    from at2po_lib.trainer.callbacks import LivePlot

    png = LivePlot(["loss", "validation"], "t")._render(
        {"loss": {"train": ([1, 2, 3], [3.0, 2.0, 1.5])}, "validation": {"dev EM": ([2], [0.5])}}
    )
    assert png.startswith(b"\x89PNG")


def test_git_revision_is_dirty_for_code_not_for_outputs(tmp_path, monkeypatch):
    import shutil
    import subprocess

    from at2po_lib.util.provenance import git_revision

    if shutil.which("git") is None:
        pytest.skip("git not installed")
    for folder in ("configs", "at2po_lib", "results", "figures"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "f.txt").write_text("0\n")
    (tmp_path / "README.md").write_text("# x\n")

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    from at2po_lib.util import provenance

    monkeypatch.setattr(provenance, "code_tree", lambda: tmp_path)  # the code that runs
    clean = git_revision()
    assert len(clean) == 40
    for output in ("results/f.txt", "figures/f.txt", "README.md"):
        (tmp_path / output).write_text("changed by a stage\n")
    (tmp_path / "results" / "f.txt").unlink()  # a deleted record is an output change too
    assert git_revision() == clean
    (tmp_path / "at2po_lib" / "f.txt").write_text("edited code\n")
    assert git_revision() == clean + "-dirty"


def test_a_table_csv_keeps_enough_decimals_to_round_like_its_markdown(tmp_path, monkeypatch):
    # 0.03449 is -3.449 points: shown as -3.4. Four decimals would store 0.0345, which a reader
    # rounding the CSV turns into -3.5 (the double-rounding mismatch notebook 05 once showed).
    import pandas as pd

    from at2po_lib.reporting.output import write_table

    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    tidy = pd.DataFrame({"delta": [-0.03449]})
    paths = write_table(tidy, tidy.assign(delta=["-3.4"]), "t", "tiny", {})
    stored = pd.read_csv(paths["csv"])["delta"].iloc[0]
    assert f"{stored * 100:.1f}" == "-3.4"


def test_prose_wraps_a_long_sentence_at_words_and_never_splits_a_number():
    """Issue #63: long generated sentences printed as one line, numbers wrapping mid-number."""
    sentence = "AT2PO minus GRPO is -2.0 [-4.5, +0.5] EM points over 15 blocks; " * 6
    wrapped = prose(sentence.strip(), width=40)
    lines = wrapped.splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 40
    assert all(not line.endswith("-") for line in lines)  # no break at a minus sign
    assert wrapped.split() == sentence.split()  # words and numbers intact, in order
    assert prose("one\n\ntwo") == "one\n\ntwo"  # paragraphs stay paragraphs
    # lines stay lines ("rule: ...\nhere: ..."), and an indented line wraps under its indent
    assert prose("rule: a b\nhere: c d", width=9) == "rule: a b\nhere: c d"
    assert prose("node 5\n  text: one two three", width=15) == "node 5\n  text: one two\n  three"


def test_figure4s_turn_table_shows_names_not_record_columns():
    """Issue #63: 05 displayed Figure 4's summary with ``one_search`` and ``ci_low``."""
    summary = pd.DataFrame(
        [
            {
                "method": "at2po",
                "group": "singlehop",
                "metric": "one_search",
                "value": 0.869,
                "ci_low": 0.832,
                "ci_high": 0.906,
                "n_seeds": 12,
                "n_questions": 600,
            }
        ]
    )
    table = turn_table(summary)
    shown = table.reset_index().to_string()
    assert "one_search" not in shown and "ci_low" not in shown and "singlehop" not in shown
    assert table.iloc[0]["value [95% CI]"] == "86.90% [83.20, 90.60]"


# ------------------------------------------- issue #66: the revision of the code that ran
def _repo(folder, monkeypatch):
    """A clean git checkout with the project's markers at ``folder``; returns its git()."""
    import subprocess

    for marker in ("configs", "at2po_lib"):
        (folder / marker).mkdir(parents=True)
        (folder / marker / "f.txt").write_text("0\n")

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=folder, check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    return git


def test_the_revision_names_the_imported_code_not_the_working_directory(tmp_path, monkeypatch):
    from at2po_lib.util import provenance

    elsewhere = _repo(tmp_path / "other", monkeypatch)
    monkeypatch.chdir(tmp_path / "other")  # the working tree is another checkout
    monkeypatch.delenv("AT2PO_HOME", raising=False)
    assert provenance.git_revision() == provenance.revision_of(provenance.code_tree())
    assert not provenance.git_revision().startswith(elsewhere("rev-parse", "HEAD"))


def test_uncommitted_imported_code_is_dirty_from_a_clean_working_tree(tmp_path, monkeypatch):
    from at2po_lib.util import provenance

    _repo(tmp_path / "clean", monkeypatch)
    code = tmp_path / "code"
    _repo(code, monkeypatch)
    (code / "at2po_lib" / "f.txt").write_text("edited, not committed\n")
    monkeypatch.setattr(provenance, "code_tree", lambda: code)
    monkeypatch.chdir(tmp_path / "clean")
    monkeypatch.delenv("AT2PO_HOME", raising=False)
    assert provenance.git_revision().endswith("-dirty")
    assert "is not this checkout's" in provenance.code_mismatch()


def test_a_startup_hook_on_the_path_makes_the_revision_dirty(tmp_path, monkeypatch):
    import sys

    from at2po_lib.util import provenance

    code = tmp_path / "code"
    _repo(code, monkeypatch)
    monkeypatch.setattr(provenance, "code_tree", lambda: code)
    assert not provenance.git_revision().endswith("-dirty")
    (code / "sitecustomize.py").write_text("# runs before the project's code\n")  # untracked
    monkeypatch.setattr(sys, "path", [str(code), *sys.path])
    assert provenance.git_revision().endswith("-dirty")
    assert provenance.startup_hooks() == [code / "sitecustomize.py"]
