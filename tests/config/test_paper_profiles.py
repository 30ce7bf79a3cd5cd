"""Paper profiles as docs/paper_scale.md uses them: paths, settings, run folders, local data,
master weights, and every documented command parses."""

from __future__ import annotations

import importlib
import shlex
import shutil
from pathlib import Path

import pytest

from at2po_lib.config.profile import load_profile
from at2po_lib.record import run_folder

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "paper_scale.md").read_text()
BACKBONES = ("paper-qwen3-4b", "paper-qwen3-8b", "paper-qwen25-7b")


@pytest.mark.parametrize("name", [*BACKBONES, *(f"{b}-nq" for b in BACKBONES)])
def test_paper_profiles_serve_the_downloaded_index_where_the_download_puts_it(name):
    rcfg = load_profile(name).retrieval
    assert rcfg.prebuilt is True and rcfg.index_type == "Flat"
    assert f"--local-dir {rcfg.index_dir}" in DOC  # hf download target
    assert f"> {rcfg.index_dir}/e5_Flat.index" in DOC  # the concatenated file
    assert f"gunzip {rcfg.corpus}.gz" in DOC


@pytest.mark.parametrize("base", BACKBONES)
def test_each_backbone_has_a_single_hop_profile_with_its_own_run_folder(base):
    multi, single = load_profile(base), load_profile(f"{base}-nq")
    assert single.policy.model == multi.policy.model
    assert multi.train.train_datasets == ["hotpotqa"] and single.train.train_datasets == ["nq"]
    assert set(single.train.val_datasets) == {"nq", "triviaqa", "popqa"}
    assert run_folder.run_profile_key(multi) != run_folder.run_profile_key(single)


def test_overriding_the_training_datasets_keys_the_run_folder_apart():
    hotpot = load_profile("paper-qwen3-4b")
    nq = load_profile("paper-qwen3-4b", {"train": {"train_datasets": ["nq"]}})
    assert run_folder.run_profile_key(hotpot) == "paper-qwen3-4b"
    assert run_folder.run_profile_key(nq) == "paper-qwen3-4b@nq"
    assert run_folder.run_profile_key(load_profile("paper-qwen3-4b-nq")) == "paper-qwen3-4b-nq"


def _flashrag_folder(tmp_path: Path, fixtures_dir: Path) -> Path:
    folder = tmp_path / "flashrag"
    for split in ("train", "test"):
        (folder / "nq").mkdir(parents=True, exist_ok=True)
        shutil.copy(
            fixtures_dir / "flashrag_nq_test_sample.jsonl", folder / "nq" / f"{split}.jsonl"
        )
    return folder


def test_data_local_dir_feeds_training_and_evaluation(tmp_path, fixtures_dir):
    from at2po_lib.evaluation.greedy import load_eval_rows
    from at2po_lib.study.run import training_prompts

    folder = _flashrag_folder(tmp_path, fixtures_dir)
    cfg = load_profile("paper-qwen3-4b-nq", {"data": {"local_dir": str(folder)}})
    prompts = training_prompts(cfg)
    assert len(prompts) == 17 and prompts[0]["question"].startswith("who got the first nobel prize")
    assert len(load_eval_rows(cfg, "nq", max_questions=5)) == 5
    missing = load_profile("paper-qwen3-4b", {"data": {"local_dir": str(folder)}})  # hotpotqa
    with pytest.raises(Exception, match=r"hotpotqa/train\.jsonl: file not found"):
        training_prompts(missing)


def test_data_dir_flag_and_the_hash_that_ignores_where_data_lies(tmp_path):
    from at2po_lib.cli import evaluate as evaluate_cli
    from at2po_lib.cli import train as train_cli
    from at2po_lib.trainer.resolve import resolve_run

    args = train_cli.build_parser().parse_args(["--method", "at2po", "--data-dir", str(tmp_path)])
    profile_overrides, _ = train_cli.split_overrides(train_cli.override_texts(args))
    assert profile_overrides == {"data": {"local_dir": str(tmp_path)}}
    assert evaluate_cli.build_parser().parse_args(["--data-dir", "d"]).data_dir == "d"
    here = load_profile("smoke")
    there = load_profile("smoke", profile_overrides)
    digest = [run_folder.config_hash(resolve_run(c, "at2po", 0).record()) for c in (here, there)]
    assert digest[0] == digest[1]  # the same files elsewhere: the same run


@pytest.mark.parametrize(
    "dtype, deepspeed, expected",
    [
        ("bfloat16", False, "float32"),
        ("float16", False, "float32"),
        ("bfloat16", True, "bfloat16"),
        ("float32", False, "float32"),
    ],
)
def test_master_weights_are_fp32_unless_zero_keeps_them(dtype, deepspeed, expected):
    from at2po_lib.study.run import master_weights_dtype

    assert master_weights_dtype(dtype, deepspeed) == expected


def test_lora_loads_the_frozen_base_in_the_policy_dtype():
    """peft keeps the adapters in fp32; the frozen base needs no fp32 master copy (the plan's
    LoRA rows count it in bf16)."""
    from at2po_lib.study.run import master_weights_dtype

    assert master_weights_dtype("bfloat16", False, lora=True) == "bfloat16"


def test_uses_deepspeed_reads_accelerates_flag(monkeypatch):
    from types import SimpleNamespace

    from at2po_lib.study.run import uses_deepspeed

    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    assert not uses_deepspeed(SimpleNamespace(deepspeed=None))
    assert uses_deepspeed(SimpleNamespace(deepspeed="ds.json"))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert uses_deepspeed(SimpleNamespace(deepspeed=None))


def _documented_commands() -> list[list[str]]:
    """Every ``at2po ...`` / ``-m at2po_lib.cli ...`` command in the doc's code blocks."""
    blocks = DOC.split("```bash")[1:]
    commands = []
    for block in blocks:
        text = block.split("```", 1)[0].replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip().rstrip("&").strip()
            words = shlex.split(line) if line else []
            if words[:1] == ["at2po"] or (words and words[0].endswith("/bin/at2po")):
                commands.append(words[1:])
            elif "at2po_lib.cli" in words:
                commands.append(words[words.index("at2po_lib.cli") + 1 :])
    return commands


def test_every_documented_at2po_command_parses():
    from at2po_lib.cli import COMMANDS

    commands = _documented_commands()
    assert {c[0] for c in commands} >= {"plan", "serve-retriever", "train", "index", "report"}
    for words in commands:
        module = importlib.import_module(f"at2po_lib.cli.{COMMANDS[words[0]][0]}")
        module.build_parser().parse_args(words[1:])  # SystemExit on an unknown option


TAGS = ("tested: ", "GPU", "network")


def _tagged_lines() -> list[tuple[str, str]]:
    """(command, tag) of every line of the doc's bash blocks (continuations joined)."""
    out = []
    for block in DOC.split("```bash")[1:]:
        text = block.split("```", 1)[0].replace("\\\n", " ")
        for line in text.splitlines():
            if line.strip():
                command, _, comment = line.partition("#")
                out.append((command.strip().rstrip("&").strip(), comment.strip()))
    return out


def test_every_documented_command_is_tagged_and_exercised(capsys):
    """docs/paper_scale.md: each command says whether a test runs it (which), or that it needs
    a GPU or the downloads; a named test exists and runs that command; the commands this file
    is named for (plan, gpu-env) run here, as written."""
    from at2po_lib.cli import gpu_env, plan

    runners = {"plan": plan.main, "gpu-env": gpu_env.main}
    lines = _tagged_lines()
    assert len(lines) >= 25
    for command, tag in lines:
        assert tag.startswith(TAGS), f"docs/paper_scale.md: {command!r} has no tag ({TAGS})"
        if not tag.startswith("tested: "):
            continue
        test = ROOT / tag.removeprefix("tested: ").split()[0]
        assert test.is_file(), f"{command!r}: {test} does not exist"
        words = shlex.split(command)
        if test.name == Path(__file__).name:
            assert words[0] == "at2po" and words[1] in runners, command
            assert runners[words[1]](words[2:]) == 0, command
            continue
        # the named test runs this command: its subcommand or script, with its options
        key = (
            words[1]
            if words[0] == "at2po"
            else (
                "train"
                if "at2po_lib.cli" in words
                else Path(words[-2 if words[-1].startswith("-") else -1]).name
            )
        )
        source = test.read_text()
        assert key in source, f"{test} does not run {key!r} ({command!r})"
        for option in (w for w in words if w.startswith("--") and w != "--out"):
            assert option in source or option in ("--method", "--port"), (
                f"{test} does not pass {option} ({command!r})"
            )
    out = capsys.readouterr().out
    assert "| 24 | does not fit (40.2 GiB) | fits (14.8 GiB) |" in out  # the doc's table
    assert "faiss-gpu==1.15.1" in out and "torch==2.10.0" in out  # the retriever's own list


def test_documented_plan_runs(capsys):
    from at2po_lib.cli import plan

    for words in _documented_commands():
        if words[0] == "plan":
            assert plan.main(words[1:]) == 0
    assert "| verdict (margin" in capsys.readouterr().out


def test_gpu_check_all_lists_its_checks_within_ten_minutes(capsys):
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check_all
    finally:
        sys.path.pop(0)
    assert sum(limit for _, limit in gpu_check_all.checks().values()) <= 600
    assert gpu_check_all.main(["--dry-run"]) == 0
    assert "zero3" in capsys.readouterr().out
    assert gpu_check_all.last_json('noise\n{"check": "x", "v": 1}\n') == {"check": "x", "v": 1}
    with pytest.raises(SystemExit):
        gpu_check_all.main(["--only", "nope"])


def test_optimizer_offload_without_a_compiler_is_refused_naming_the_fix(tmp_path):
    from at2po_lib.config.profile import ProfileError
    from at2po_lib.study.run import check_optimizer_offload

    bare = {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu", "PATH": str(tmp_path)}
    with pytest.raises(ProfileError, match="DS_BUILD_CPU_ADAM=1.*zero3_8gpu.yaml"):
        check_optimizer_offload(bare)
    check_optimizer_offload({"PATH": str(tmp_path)})  # no offload: nothing to check
    for tool in ("c++", "nvcc"):  # both tools found: the JIT build can run
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    check_optimizer_offload(bare)
