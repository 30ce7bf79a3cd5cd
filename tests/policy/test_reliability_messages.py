"""Errors that name what they are about (issue 13, item 7): a truncated or corrupt policy
checkpoint names its safetensors file. (Data rows: test_data.py; notebooks: test_pipeline.py;
BM25/faiss files: test_reliability_index.py; the HTTP client: test_reliability_server.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest


def _weights(folder: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    path = folder / "model.safetensors"
    save_file({"w": torch.arange(4000, dtype=torch.float32)}, str(path))
    return path


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_safetensors_file_is_named(tmp_path, damage):
    from at2po_lib.policy.model import CheckpointError, check_weight_files, load_policy

    path = _weights(tmp_path / "ckpt")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00" * len(data))
    with pytest.raises(CheckpointError, match=rf"{path.name}: not a readable safetensors file"):
        check_weight_files(path.parent)
    with pytest.raises(CheckpointError) as caught:
        load_policy(path.parent)  # before transformers reads anything
    assert str(path) in str(caught.value)


def test_an_intact_safetensors_file_passes(tmp_path):
    from at2po_lib.policy.model import check_weight_files

    check_weight_files(_weights(tmp_path / "ckpt").parent)


def test_a_derived_trainer_field_names_how_to_set_it():
    """trainer.output_dir and trainer.seed are not profile keys: the hint says what to pass."""
    from at2po_lib.config.profile import ProfileError
    from at2po_lib.trainer.resolve import check_trainer_overrides

    with pytest.raises(ProfileError, match=r"results/runs/<profile>/<method>/seed<S>/.*--seed"):
        check_trainer_overrides({"output_dir": "/tmp/x"})
    with pytest.raises(ProfileError, match="pass --seed N"):
        check_trainer_overrides({"seed": 3})
    with pytest.raises(ProfileError, match=r"--set train\.learning_rate=\.\.\."):
        check_trainer_overrides({"learning_rate": 1e-3})


def test_the_checkout_is_found_from_outside_it(tmp_path, monkeypatch):
    """Run from another folder, the installed package's own checkout is the repository root."""
    from at2po_lib.util.paths import repo_root

    monkeypatch.delenv("AT2PO_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    root = repo_root()
    assert (root / "at2po_lib").is_dir() and (root / "configs" / "tiny.yaml").is_file()


# ------------------------------------------ issue #50 item 7: every command, out-of-range input
OUT_OF_RANGE = [
    (["index", "--bm25", "--corpus", "c.jsonl", "--out", "."], "--out '.'"),
    (["index", "--bm25", "--corpus", "c.jsonl", "--out", "x", "--batch-size", "0"], "--batch-size"),
    (["dissect", "expansion", "--prompts", "0"], "--prompts"),
    (["dissect", "expansion", "--chunk", "0"], "--chunk"),
    (["dissect", "expansion", "--resamples", "1"], "--resamples"),
    (["dissect", "expansion", "--prompts", "99999"], "--prompts 99999"),
    (["credit-accuracy", "--prompts", "0"], "--prompts"),
    (["credit-accuracy", "--resamples", "0"], "--resamples"),
    (["credit-accuracy", "--resamples", "-1"], "--resamples"),
    (["credit-accuracy", "--prompts", "99999"], "--prompts 99999"),
    (["expansion-stats", "--prompts", "0"], "--prompts"),
    (["expansion-stats", "--seed", "-1"], "--seed"),
    (["regime-pilot", "--seeds", "-1"], "--seeds"),
    (["evaluate", "--max-questions", "0"], "--max-questions"),
    (["evaluate", "--seed", "-1"], "--seed"),
    (["evaluate", "--checkpoint", ""], "--checkpoint"),
    (["train", "--method", "grpo", "--seed", "-1"], "--seed"),
    (["train", "--method", "grpo", "--max-steps", "0"], "--max-steps"),
    (
        ["train", "--method", "grpo", "--set", "train.micro_batch_rows=1000000000"],
        "train.micro_batch_rows",
    ),
    (["train", "--method", "grpo", "--set", "trainer.warmup_steps=1e12"], "trainer.warmup_steps"),
    (["study", "--table", "1", "--seeds", "-1"], "--seeds"),
    (["plan", "--profile", "tiny", "--gpus", "99999999999999999999"], "--gpus"),
    (["plan", "--profile", "tiny", "--gpus", "1", "--gpu-memory-gib", "nan"], "--gpu-memory-gib"),
    (["plan", "--profile", "tiny", "--gpus", "1", "--gpu-memory-gib", "inf"], "--gpu-memory-gib"),
    (["plan", "--profile", "tiny", "--gpus", "1", "--gpu-memory-gib", "1e308"], "--gpu-memory-gib"),
    (["plan", "--profile", "tiny", "--gpus", "1", "--gpu-tflops", "-1"], "--gpu-tflops"),
    (["plan", "--profile", "tiny", "--gpus", "1", "--passages", "-1"], "--passages"),
    (["plan", "--profile", "tiny", "--gpus", "1", "--mean-searches", "nan"], "--mean-searches"),
    (["study", "--block-set", "headline", "--blocks", "0", "--hours", "0"], "--hours"),
    (["study", "--block-set", "headline", "--blocks", "0", "--hours", "nan"], "--hours"),
    (["rehearsal", "--passages", "0"], "--passages"),
    (["serve-retriever", "--index", "x", "--port", "70000"], "--port"),
    (["serve-retriever", "--index", "x", "--max-connections", "0"], "--max-connections"),
    (["serve-retriever", "--index", "x", "--request-timeout", "nan"], "--request-timeout"),
    (["world", "--set", "world.train_per_dataset=1e9"], "world.train_per_dataset"),
    (["warmstart", "--set", "sft.batch_size=1e9"], "sft.batch_size"),
    (["run-notebooks", "--only", ",,,"], "--only"),
]


@pytest.mark.parametrize(
    "argv, named", OUT_OF_RANGE, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_every_command_refuses_out_of_range_input_in_one_line(
    argv, named, tmp_path, monkeypatch, capsys
):
    """b8f2d3f: tracebacks for ``dissect expansion --prompts 0``, ``credit-accuracy
    --resamples 0``, ``plan --gpu-memory-gib nan``, ``--set train.micro_batch_rows=1e9``, ``index
    --out .``; ``plan --gpus 99999999999999999999`` fitted and ``--gpu-tflops -1`` planned -247.8
    queries/s."""
    from at2po_lib.cli import main

    for name in ("AT2PO_ARTIFACTS", "AT2PO_RESULTS", "AT2PO_FIGURES"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    world = tmp_path / "at2po_artifacts" / "tiny" / "world" / "datasets"
    for dataset in ("tiny_hotpotqa", "tiny_2wiki", "tiny_musique"):  # a 1-row train split
        (world / dataset).mkdir(parents=True)
        (world / dataset / "train.jsonl").write_text(
            '{"id": "q0", "question": "?", "golden_answers": ["a"], '
            '"metadata": {"supporting_ids": []}}\n'
        )
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: a bad option value
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err[-500:]
    assert "Traceback" not in err and "\n" not in err and named in err, err[-500:]
