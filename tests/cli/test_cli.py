"""The ``at2po`` command: one subcommand per stage, one ``--profile``/``--set`` parser, help
that is instant, bad input that fails up front naming the key, and examples that work."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from at2po_lib import cli
from at2po_lib.cli import train as train_cli
from at2po_lib.config.profile import ProfileError

ROOT = Path(__file__).resolve().parents[2]
STAGE_MODULES = [
    "evaluation/greedy",
    "study/run",
    "study/tables",
    "study/blocks",
    "warmstart/sft",
    "retrieval/indexes",
    "retrieval/server",
    "tinyworld/build",
    "lab/notebook_runner",
]


def test_every_subcommand_has_a_module_with_a_parser_and_main():
    import importlib

    assert set(cli.COMMANDS) == {
        "world",
        "index",
        "serve-retriever",
        "warmstart",
        "evaluate",
        "train",
        "study",
        "report",
        "run-notebooks",
        "expansion-stats",
        "credit-accuracy",
        "dissect",
        "regime-pilot",
        "plan",
        "rehearsal",
        "gpu-env",
    }
    for name, (module_name, _) in cli.COMMANDS.items():
        module = importlib.import_module(f"at2po_lib.cli.{module_name}")
        parser = module.build_parser()
        assert parser.prog == f"at2po {name}"
        assert callable(module.main)


@pytest.mark.parametrize("relative", STAGE_MODULES)
def test_stage_modules_keep_no_command_line(relative):
    text = (ROOT / "at2po_lib" / f"{relative}.py").read_text()
    assert "argparse" not in text and not re.search(r"^def main\(", text, re.M), relative
    assert '__name__ == "__main__"' not in text, relative


def test_top_level_help_is_instant_and_lists_every_command():
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "at2po_lib.cli", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    seconds = time.perf_counter() - start
    assert proc.returncode == 0
    for name in cli.COMMANDS:
        assert name in proc.stdout
    assert seconds < 5, f"at2po --help took {seconds:.1f} s"
    probe = (
        "import sys, at2po_lib.cli as c; c.main(['--help']); "
        "print(sorted(m for m in ('torch', 'trl', 'transformers', 'faiss', 'pandas') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60
    ).stdout
    assert out.strip().endswith("[]"), out


def test_unknown_command_is_an_error(capsys):
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err


def test_train_help_examples_parse_and_pass_the_up_front_checks(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    help_text = capsys.readouterr().out
    examples = [line for line in help_text.splitlines() if "--set" in line or "\\" in line]
    assert any("train.learning_rate=1e-4" in line for line in examples)
    sets = re.findall(r"--set (\S+)", help_text[help_text.index("examples:") :])
    profile, trainer = train_cli.split_overrides(sets)
    assert profile["train"]["learning_rate"] == 1e-4 and profile["train"]["max_steps"] == 20
    assert trainer == {"epsilon_high": 0.005}


def test_shorthands_go_through_the_same_parser():
    args = train_cli.build_parser().parse_args(
        [
            "--method",
            "at2po",
            "--max-steps",
            "4",
            "--arg",
            "beta=1e-3",
            "--set",
            "train.learning_rate=1e-4",
        ]
    )
    profile, trainer = train_cli.split_overrides(train_cli.override_texts(args))
    assert profile == {"train": {"learning_rate": 1e-4, "max_steps": 4}}
    assert trainer == {"beta": 1e-3}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "train.learnin_rate=1e-4"], "did you mean train.learning_rate"),
        (["--set", "train.max_steps=many"], "train.max_steps: expected int"),
        (["--arg", "beta=high"], "trainer.beta: expected float"),
        (["--arg", "betta=0"], "unknown key 'betta'"),
        (["--set", "trainer.learning_rate=1e-4"], "set train.learning_rate instead"),
        (["--set", "trainer.tree_m=3"], "set rollout.tree_m instead"),
        (["--set", "trainer.loss_type=dapo"], "follows from trainer.loss_aggregation"),
        (["--arg", "beta"], "not FIELD=VALUE"),
    ],
)
def test_bad_train_overrides_fail_before_training(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))  # nothing may be written anyway
    assert cli.main(["train", "--profile", "smoke", "--method", "at2po", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("at2po train: error:") and message in err, err
    assert not any(tmp_path.iterdir())


def test_unknown_method_and_profile_are_one_line_errors(capsys):
    assert cli.main(["train", "--profile", "smoke", "--method", "at2pp"]) == 2
    assert "did you mean at2po" in capsys.readouterr().err
    assert cli.main(["world", "--profile", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown profile 'nope'" in err and "smoke" in err


@pytest.mark.parametrize(
    "argv, option",
    [
        (["study", "--table", "1", "--profile", "smoke", "--seeds", ",,"], "--seeds"),
        (["study", "--table", "1", "--profile", "smoke", "--seeds", "0,x"], "--seeds"),
        (["study", "--table", "1", "--profile", "smoke", "--methods", ",,,"], "--methods"),
        (["run-notebooks", "--profile", "smoke", "--only", ",,,"], "--only"),
        (["evaluate", "--profile", "smoke", "--datasets", ","], "--datasets"),
    ],
)
def test_empty_or_malformed_lists_are_errors_naming_the_option(argv, option, capsys):
    assert cli.main(argv) == 2
    assert option in capsys.readouterr().err


def test_report_writes_tables_of_finished_runs_without_training(tmp_path, monkeypatch, capsys):
    """``at2po report`` reads finished runs (a hand-made one) and trains nothing; with none it
    still writes the published Table 2 and says so."""
    import json

    import pandas as pd

    from at2po_lib.record import run_folder

    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    assert cli.main(["report", "--profile", "smoke", "--no-figures"]) == 0
    assert "no finished runs" in capsys.readouterr().err
    run = run_folder.run_dir("smoke", "react", 0)
    pd.DataFrame(
        [
            {
                "dataset": "tiny_nq",
                "group": "singlehop",
                "id": str(i),
                "prediction": "x",
                "em": float(i % 2),
                "f1": 0.0,
                "num_turns": 2,
                "num_tool_calls": 1,
                "finish_reason": "answer",
            }
            for i in range(4)
        ]
    ).to_csv(run.outcomes, index=False)
    pd.DataFrame([{"dataset": "tiny_nq", "group": "singlehop", "n": 4, "em": 0.5}]).to_csv(
        run.final_eval, index=False
    )
    run.done.write_text(json.dumps({"wall_time": 1.5}))
    assert cli.main(["report", "--profile", "smoke", "--no-figures"]) == 0
    table = pd.read_csv(tmp_path / "smoke" / "tables" / "table1.csv")
    ours = table[(table["source"] == "ours") & (table["column"] == "NQ")]
    assert ours["em"].tolist() == [0.5] and ours["n_questions"].tolist() == [4]
    assert (tmp_path / "smoke" / "tables" / "table1.csv.meta.json").is_file()


def test_study_rejects_an_unknown_method_before_training(capsys):
    assert cli.main(["study", "--table", "2", "--profile", "smoke", "--methods", "grpoo"]) == 2
    assert "grpo" in capsys.readouterr().err


def test_study_methods_expand_patterns_in_preset_order():
    from at2po_lib.study.tables import study_methods

    assert study_methods("3", ["credit_*_diff_global"]) == [
        "credit_entropy_softmax_diff_global",
        "credit_entropy_linear_diff_global",
        "credit_child_mean_diff_global",
        "credit_leaf_mean_diff_global",
    ]
    assert study_methods("1", ["at2po", "ae*", "grpo", "at2po"]) == [
        "at2po",
        "aepo",
        "aepo_paper",
        "grpo",
    ]
    with pytest.raises(KeyError, match="matches no preset"):
        study_methods("3", ["credit_*_diff_nowhere"])


def test_study_rejects_a_pattern_that_matches_nothing(capsys):
    assert (
        cli.main(
            ["study", "--table", "3", "--profile", "smoke", "--methods", "credit_*_diff_nowhere"]
        )
        == 2
    )
    assert "matches no preset" in capsys.readouterr().err


def test_study_plan_reads_the_run_folders_and_trains_nothing(tmp_path, monkeypatch, capsys):
    """``--plan``: a finished run is reused, one finished with another configuration is kept,
    an interrupted one with a complete checkpoint resumes, the rest are new; nothing written."""
    import json

    from at2po_lib.config.profile import load_profile
    from at2po_lib.record import run_folder
    from at2po_lib.trainer.resolve import resolve_run
    from at2po_lib.util.staging import staging_path

    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    runs = tmp_path / "runs" / "smoke"
    digest = run_folder.config_hash(resolve_run(load_profile("smoke"), "grpo", 0).record())
    (runs / "grpo" / "seed0").mkdir(parents=True)
    (runs / "grpo" / "seed0" / "DONE.json").write_text(
        json.dumps({"config_hash": digest, "wall_time": 600})
    )
    (runs / "grpo" / "seed1").mkdir(parents=True)
    (runs / "grpo" / "seed1" / "DONE.json").write_text(json.dumps({"config_hash": "other"}))
    checkpoint = staging_path(runs / "at2po" / "seed0") / "checkpoints" / "checkpoint-8"
    checkpoint.mkdir(parents=True)
    (checkpoint / run_folder.COMPLETE_MARKER).write_text(json.dumps({"step": 4}))
    before = sorted(p for p in tmp_path.rglob("*"))
    assert (
        cli.main(
            [
                "study",
                "--table",
                "1",
                "--profile",
                "smoke",
                "--methods",
                "grpo,at2po",
                "--seeds",
                "0,1",
                "--plan",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    states = {tuple(line.split()[:3]): line.split()[3] for line in out[:-1]}
    assert states == {
        ("grpo", "seed", "0"): "finished",
        ("at2po", "seed", "0"): "resumes",
        ("grpo", "seed", "1"): "other",
        ("at2po", "seed", "1"): "new",
    }
    assert "from step 4" in next(line for line in out if line.startswith("at2po  seed 0"))
    assert "10 min" in out[0]
    assert out[-1] == "table 1: 4 runs: 1 finished, 1 new, 1 other config, 1 resumes"
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing trained or written


def test_python_dash_m_runs_the_same_command():
    proc = subprocess.run(
        [sys.executable, "-m", "at2po_lib.cli", "train", "--list-methods"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0 and "at2po" in proc.stdout and "tree_grpo" in proc.stdout


def test_entry_point_is_the_package_main():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["at2po"] == "at2po_lib.cli:main"
    assert cli.main is not None


def test_profile_errors_are_reported_not_raised(capsys):
    """The shared guard turns a ProfileError into one line and exit status 2."""
    from at2po_lib.cli.options import run_guarded

    def body() -> int:
        raise ProfileError("configs/x.yaml: unknown key 'y'")

    assert run_guarded("at2po x", body) == 2
    assert capsys.readouterr().err == "at2po x: error: configs/x.yaml: unknown key 'y'\n"


@pytest.mark.parametrize("command", [["credit-accuracy"], ["dissect", "expansion"]])
@pytest.mark.parametrize("bad", ["../elsewhere", "a/b", "", "-x", "_x", "n" * 65, "a b"])
def test_record_names_that_would_leave_the_results_folder_are_refused(command, bad, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([*command, "--profile", "tiny", f"--name={bad}"])
    assert stop.value.code == 2
    assert "is not a record name" in capsys.readouterr().err


@pytest.mark.parametrize("good", ["trained_authors", "warmstart", "seed2-nll", "A1"])
def test_record_names_of_letters_digits_and_separators_pass(good):
    from at2po_lib.cli.options import record_name

    assert record_name(good) == good


# ------------------------------------------- issue #66: a missing engine is named before work
@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--profile", "engines", "--method", "grpo"],
        ["train", "--profile", "smoke", "--method", "grpo", "--set", "rollout.backend=vllm"],
        ["study", "--profile", "engines", "--table", "1", "--seeds", "0", "--no-report"],
        ["study", "--profile", "engines", "--block-set", "headline", "--blocks", "0"],
        ["evaluate", "--profile", "engines", "--datasets", "tiny_nq"],
    ],
    ids=["train", "train --set rollout.backend=vllm", "study --table", "study blocks", "evaluate"],
)
def test_a_missing_vllm_is_named_before_anything_is_trained_or_written(
    argv, isolated_outputs, monkeypatch, capsys
):
    from at2po_lib.cli import options
    from at2po_lib.study import blocks, run, tables as study
    from at2po_lib.warmstart import sft as warmstart

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the engine was checked")

    monkeypatch.setattr(options, "engine_installed", lambda: False, raising=False)
    for module, name in (
        (run, "train"),
        (study, "run_study"),
        (blocks, "run_blocks"),
        (warmstart, "ensure_warmstart"),
    ):
        monkeypatch.setattr(module, name, no_work)
    before = sorted(isolated_outputs.rglob("*"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs on vLLM" in err
    assert "./run_tests.sh --engines" in err and "scripts/bootstrap_engines.sh" in err
    assert sorted(isolated_outputs.rglob("*")) == before  # no run folder, not even empty
