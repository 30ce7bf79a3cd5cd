"""scripts/collect_blocks.py: finished blocks copied from the worktree that trained them, without
checkpoints, never over another record of the same block."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import collect_blocks  # noqa: E402


def _block(results: Path, block: int, status: str = "finished", revision: str = "a" * 40) -> Path:
    folder = results / "blocks" / "tiny" / "headline" / f"block{block:02d}"
    run = folder / "at2po" / f"seed{100 + block}"
    (run / "checkpoints" / "checkpoint-96").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-96" / "model.safetensors").write_bytes(b"weights")
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events").write_bytes(b"events")
    (run / "outcomes.csv").write_text("dataset,id,em\n")
    (run / "trees").mkdir()
    (run / "trees" / "step0001.npz").write_bytes(b"npz")
    record = {"block": block, "status": status, "git_revision": revision}
    (folder / "BLOCK.json").write_text(json.dumps(record))
    return folder


def _run(*args: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "collect_blocks.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_finished_blocks_are_copied_without_what_git_does_not_keep(tmp_path):
    source, dest = tmp_path / "study", tmp_path / "main"
    (source / "results").mkdir(parents=True)
    (dest / "results").mkdir(parents=True)
    _block(source / "results", 0)
    _block(source / "results", 1, status="running")
    staging = source / "results/blocks/tiny/headline/.block02.staging"
    staging.mkdir()
    proc = _run(source, dest)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["blocks/tiny/headline/block00: copied"]
    copied = dest / "results/blocks/tiny/headline/block00"
    files = sorted(str(p.relative_to(copied)) for p in copied.rglob("*") if p.is_file())
    assert files == ["BLOCK.json", "at2po/seed100/outcomes.csv", "at2po/seed100/trees/step0001.npz"]
    assert not (dest / "results/blocks/tiny/headline/block01").exists()
    assert not (dest / "results/blocks/tiny/headline/.block02.staging").exists()
    again = _run(source, dest)
    assert again.returncode == 0 and "block00: already there" in again.stdout


def test_another_record_of_the_same_block_is_refused_and_kept(tmp_path):
    source, dest = tmp_path / "study", tmp_path / "main"
    _block(source / "results", 3, revision="b" * 40)
    kept = _block(dest / "results", 3, revision="c" * 40)
    before = (kept / "BLOCK.json").read_text()
    proc = _run(source, dest)
    assert proc.returncode == 1
    assert "REFUSED blocks/tiny/headline/block03" in proc.stderr and "another record" in proc.stderr
    assert (kept / "BLOCK.json").read_text() == before


def test_an_unreadable_block_record_is_named(tmp_path):
    results = tmp_path / "results"
    folder = _block(results, 0)
    (folder / "BLOCK.json").write_text("{not json")
    proc = _run(tmp_path, tmp_path / "elsewhere")
    assert proc.returncode != 0 and "BLOCK.json: not a readable block record" in proc.stderr


def test_the_copy_is_renamed_into_place_only_when_complete(tmp_path, monkeypatch):
    source, dest = tmp_path / "s" / "results", tmp_path / "d" / "results"
    _block(source, 0)
    dest.mkdir(parents=True)

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(collect_blocks.Path, "rename", fail)
    with pytest.raises(OSError, match="disk full"):
        collect_blocks.collect(source, dest)
    assert not (dest / "blocks/tiny/headline/block00").exists()
