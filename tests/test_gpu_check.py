"""Issue #36, part 7: the GPU check sized for the machine that can be lent
(benchmarks/gpu_check_h200.py and its wrapper). Its ``--dry-run`` runs here, on CPU with tiny
shapes, through the same wrapper and the same sub-checks; a failed import is a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check_h200 as check  # noqa: E402


def _wrapper(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "AT2PO_CHECK_SITE": "none", "OUT": str(out)}
    return subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check_h200.sh"), "--dry-run", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow  # ~20 s: a tiny model trained one AT2PO step on CPU
def test_the_dry_run_passes_every_sub_check_through_the_wrapper(tmp_path):
    proc = _wrapper(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "checks.json").read_text())
    assert summary["failed"] == []
    states = {
        name: summary[name]["state"]
        for name in ("env", "model", "loss", "rollout", "train", "plan", "vllm")
    }
    assert states == {
        "env": "ok",
        "model": "ok",
        "loss": "ok",
        "rollout": "ok",
        "train": "ok",
        "plan": "SKIPPED: no GPU memory measured (CPU)",
        "vllm": "SKIPPED: --dry-run (CPU)",
    }
    model, train, rollout = summary["model"], summary["train"], summary["rollout"]
    assert model["parameters"] == model["planned_parameters"] and model["vocab"] == 4096
    assert train["steps"] == 1 and train["generated_tokens"] > 0 and train["losses_finite"]
    assert train["max_prompt_tokens"] > 0 and len(train["rollout_s_each"]) == 1
    for rows in ("rows_2", "rows_4"):  # before, after, HF generate: tokens and operators a step
        for path in ("before", "after", "hf_generate"):
            assert (
                rollout[rows][path]["tokens_per_s"] > 0 and rollout[rows][path]["compute_ops"] > 0
            )
    assert set(summary["plan"]["phases_gib"]) == {"rollout", "update"}
    made = summary["provenance"]
    assert made["git_revision"] and made["source_digest"] == check.source_digest()
    assert made["command"] == "bash benchmarks/gpu_check_h200.sh --dry-run"
    assert made["settings"]["dry_run"] and made["settings"]["profile_overrides"]["rollout"]
    assert made["packages"]["torch"] and made["device_seconds"] > 0 and made["date_utc"]
    table = (tmp_path / "table.txt").read_text()
    assert "| check | state | seconds | result |" in table and "| train | ok |" in table
    assert "| 4 | after |" in table
    assert "gpu_check: exit 0" in proc.stdout


@pytest.mark.slow  # ~30 s: the device check's one command, both sizes, on CPU
def test_the_device_checks_one_command_runs_both_sizes(tmp_path):
    proc = _wrapper(tmp_path, "--both-sizes", "--only", "rollout,plan")  # a later --only wins
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for size in ("q06", "q17"):
        summary = json.loads((tmp_path / size / "checks.json").read_text())
        assert [k for k in summary if k not in ("check", "failed", "provenance")] == [
            "env",
            "model",
            "rollout",
            "plan",
        ]
        assert summary["failed"] == [] and summary["provenance"]["source_digest"]
    settings = json.loads((tmp_path / "q17" / "checks.json").read_text())["provenance"]["settings"]
    assert settings["size"] == "1.7b" and settings["steps"] == 2


@pytest.mark.slow
def test_a_failed_import_fails_the_check_and_its_exit_status(tmp_path):
    proc = _wrapper(tmp_path, "--also-require", "surely_not_a_module_xyz")
    assert proc.returncode == 1
    summary = json.loads((tmp_path / "checks.json").read_text())
    assert summary["env"]["state"] == "FAILED: cannot import surely_not_a_module_xyz"
    assert summary["env"]["surely_not_a_module_xyz"] == "import failed: ModuleNotFoundError"
    assert "env" in summary["failed"]
    assert (
        "| env | FAILED: cannot import surely_not_a_module_xyz |"
        in (tmp_path / "table.txt").read_text()
    )


def test_env_reports_each_failed_import_and_never_ok():
    result = check.run_check(
        check.Check("env"),
        lambda c: check.env_check(
            c, True, ("json", "surely_not_a_module_xyz", "also_not_a_module_abc")
        ),
    )
    assert (
        result.state == ("FAILED: cannot import surely_not_a_module_xyz, also_not_a_module_abc")
        and result.failed
    )


def test_an_exception_inside_a_sub_check_is_a_failure_naming_it():
    def boom(c):
        c.result["partial"] = 1
        raise RuntimeError("CUDA out of memory\nmore")

    result = check.run_check(check.Check("train"), boom)
    assert result.state == "FAILED: RuntimeError: CUDA out of memory" and result.failed


def test_the_padded_tokenizer_has_qwen3s_vocabulary(tmp_path):
    from at2po_lib.policy.tokenizer import train_tokenizer

    train_tokenizer(
        ["the capital of avaria is belmont <search> x </search>"] * 20, vocab_size=300
    ).save_pretrained(tmp_path)
    tokenizer = check.padded_tokenizer(tmp_path, check.QWEN3_VOCAB)
    assert len(tokenizer) == 151_936
    assert tokenizer.decode([151_935]) == "x151935" and tokenizer.decode([5_000]) == "x5000"
    assert max(tokenizer.encode("the capital of avaria")) < 300  # the trained merges are kept
    assert tokenizer.convert_tokens_to_ids("</search>") < 300  # the tags keep their ids
    assert tokenizer.eos_token_id < 300 and tokenizer.pad_token_id < 300


def test_the_real_shapes_are_qwen3s():
    from at2po_lib.plan.cost_estimate import KNOWN_ARCHITECTURES

    shape = check.SHAPES["1.7b"]
    arch = KNOWN_ARCHITECTURES["Qwen/Qwen3-1.7B"]
    assert (
        shape["hidden_size"],
        shape["num_hidden_layers"],
        shape["num_attention_heads"],
        shape["num_key_value_heads"],
        shape["head_dim"],
        shape["intermediate_size"],
    ) == (
        arch.hidden_size,
        arch.num_layers,
        arch.num_heads,
        arch.num_kv_heads,
        arch.head_dim,
        arch.intermediate_size,
    )
    assert check.SHAPES["0.6b"]["head_dim"] == 128 and check.QWEN3_VOCAB == arch.vocab_size


def test_the_carried_wheels_are_listed_exactly():
    """Every carried wheel is pinned; only what the machine lacks travels (its torch,
    transformers and pyarrow stay); trl's pin is the GPU list's."""
    from at2po_lib.plan.gpu_env import gpu_pins

    lines = [
        line.split("#")[0].strip()
        for line in (ROOT / "benchmarks" / "gpu_check_wheels.txt").read_text().splitlines()
    ]
    pins = dict(line.split("==") for line in lines if line)
    assert all(pins.values()) and {"trl", "datasets", "bm25s", "peft"} <= set(pins)
    assert not {"torch", "transformers", "pyarrow", "accelerate"} & set(pins)
    gpu = dict(p.split("==") for p in gpu_pins(ROOT))
    assert pins["trl"] == gpu["trl"]


def _wheel(folder: Path, module: str) -> Path:
    """A minimal pure-Python wheel holding ``module`` (what pip needs to install it)."""
    import zipfile

    name = f"{module}-1.0-py3-none-any.whl"
    info = f"{module}-1.0.dist-info"
    with zipfile.ZipFile(folder / name, "w") as wheel:
        wheel.writestr(f"{module}.py", "VALUE = 42\n")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return folder / name


@pytest.mark.slow  # ~15 s: pip installs a wheel, then the dry run's env and model
def test_carried_wheels_go_into_a_site_packages_folder_first_on_the_path(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "at2po_carried_probe")
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "AT2PO_CHECK_SITE": str(tmp_path / "site"),
        "AT2PO_CHECK_WHEELS": str(wheels),
        "OUT": str(tmp_path / "out"),
    }
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "benchmarks" / "gpu_check_h200.sh"),
            "--dry-run",
            "--only",
            "env",
            "--also-require",
            "at2po_carried_probe",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "site-packages" / "at2po_carried_probe.py").is_file()
    summary = json.loads((tmp_path / "out" / "checks.json").read_text())
    assert summary["env"]["at2po_carried_probe"] == "ok" and summary["failed"] == []


def test_a_missing_wheels_folder_is_refused_in_one_line_before_any_work(tmp_path):
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "AT2PO_CHECK_SITE": str(tmp_path / "site"),
        "AT2PO_CHECK_WHEELS": str(tmp_path / "no-wheels"),
        "OUT": str(tmp_path / "out"),
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check_h200.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "no carried wheels in" in proc.stderr
    assert "gpu_check_wheels.sh" in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "site").exists()


@pytest.mark.slow  # ~10 s: the wrapper's env sub-check
def test_the_stamped_revision_names_the_record_where_git_does_not_travel(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "at2po_carried_probe")
    (wheels / "REVISION").write_text("0123abc-dirty\n")  # what gpu_check_wheels.sh stamps
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "AT2PO_CHECK_SITE": str(tmp_path / "site"),
        "AT2PO_CHECK_WHEELS": str(wheels),
        "OUT": str(tmp_path / "out"),
        "GIT_DIR": str(tmp_path / "no-git"),  # git answers nothing, as on the lent machine
    }
    env.pop("AT2PO_CHECK_REVISION", None)
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check_h200.sh"), "--dry-run", "--only", "env"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "checks.json").read_text())
    assert summary["provenance"]["git_revision"] == "0123abc-dirty"


@pytest.fixture
def in_process(monkeypatch):
    """``main`` points the results folders and CUDA at its own choices for the whole process
    (it is a script): restored after the test, so no later test reads its scratch folders."""
    for var in ("AT2PO_RESULTS", "AT2PO_ARTIFACTS", "AT2PO_FIGURES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
    for var in check.COMPILER_CACHES:  # torch sets it once used: as in a process of its own
        monkeypatch.delenv(var, raising=False)


def test_only_runs_the_named_sub_checks_after_env_and_model(tmp_path, in_process):
    assert check.main(["--dry-run", "--only", "loss", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "checks.json").read_text())
    assert [k for k in summary if k not in ("check", "failed", "provenance")] == [
        "env",
        "model",
        "loss",
    ]
    loss = summary["loss"]
    assert loss["state"] == "ok" and float(loss["grad_diff"]) < 1e-6
    assert loss["turn_ms"] > 0 and loss["authors_loop_turn_ms"] > 0 and loss["diagnostics_ms"] > 0
    with pytest.raises(SystemExit):
        check.main(["--dry-run", "--only", "loss,bogus"])


def test_results_are_written_after_each_sub_check(tmp_path, monkeypatch, in_process):
    """A run stopped by its time limit keeps what it measured: the file holds the finished
    sub-checks while a later one runs."""
    seen = {}

    def stopped_here(c, *args, **kwargs):
        seen.update(json.loads((tmp_path / "checks.json").read_text()))
        raise KeyboardInterrupt  # what a time limit does to the process

    monkeypatch.setattr(check, "loss_check", stopped_here)
    with pytest.raises(KeyboardInterrupt):
        check.main(["--dry-run", "--only", "loss", "--out", str(tmp_path)])
    assert seen["env"]["state"] == "ok" and seen["model"]["state"] == "ok"
    assert seen["loss"]["state"] == "not run"


def test_an_unwritable_out_or_zero_steps_is_refused_before_any_check(tmp_path, in_process, capsys):
    """b8f2d3f: ``--out /proc/x`` failed with ``FileNotFoundError`` after the env check, every
    result lost; ``--steps 0`` ran one step (issue #50 item 7)."""
    for argv, named in (
        (["--out", "/proc/x"], "--out '/proc/x': cannot write there"),
        (["--steps", "0"], "argument --steps: '0'"),
    ):
        with pytest.raises(SystemExit) as exited:
            check.main(["--dry-run", "--only", "loss", *argv])
        err = capsys.readouterr().err.strip()
        assert exited.value.code == 2 and named in err and "Traceback" not in err


def test_the_scratch_folder_is_removed_after_a_run(tmp_path, in_process, monkeypatch):
    """b8f2d3f left a 2 MB ``/tmp/at2po-gpu-check-*`` folder after every run."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert check.main(["--dry-run", "--only", "loss", "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.slow  # ~10 s: a 2-layer model's rollout on CPU
def test_the_rollout_checks_cpu_smoke_run_ends_with_its_record():
    """``gpu_check_rollout.py --device cpu --small`` is the script's documented smoke test: it
    builds its tokenizer from the profile's world and template (the authors' template has no
    user message), grows trees twice and reports the recorded log-probs' gap."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_check_rollout.py"),
            "--device",
            "cpu",
            "--small",
            "--profile",
            "smoke",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["check"] == "hf-rollout" and record["traj_per_s"] > 0
    assert record["logp_gap_max"] < 1e-4


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--rows", "x"], "argument --rows: 'x': expected an integer in [1, 512]"),
        (["--rows", "0"], "argument --rows: '0'"),
        (["--rows", "-4"], "argument --rows: '-4'"),
        (["--rows", "2,1e9"], "argument --rows: '1e9'"),
        (["--rows", "٣"], "argument --rows: '٣'"),
        (["--new-tokens", "-1"], "argument --new-tokens: '-1': expected an integer in [1, 1,024]"),
        (["--new-tokens", "0"], "argument --new-tokens: '0'"),
        (["--new-tokens", "1e9"], "argument --new-tokens: '1e9'"),
        (["--new-tokens", "1000000000"], "argument --new-tokens: '1000000000'"),
    ],
)
def test_rollout_arguments_are_refused_in_one_line_before_any_sub_check(
    argv, named, in_process, monkeypatch, capsys
):
    def no_check(*args, **kwargs):
        raise AssertionError("a sub-check ran before the arguments were checked")

    monkeypatch.setattr(check, "run_check", no_check)
    with pytest.raises(SystemExit) as exited:
        check.main(["--dry-run", "--only", "rollout", *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and named in err


@pytest.mark.slow  # ~10 s: one rollout measurement on CPU
def test_the_dry_run_leaves_nothing_in_tmpdir(tmp_path, in_process, monkeypatch):
    """The rollout sub-check left ``torchinductor_<user>`` in TMPDIR (torch's compiler cache)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    out = tmp_path / "out"
    assert check.main(["--dry-run", "--only", "rollout", "--rows", "2", "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
