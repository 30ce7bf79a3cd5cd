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
