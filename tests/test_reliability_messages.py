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
    from at2po_lib.config import ProfileError
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
