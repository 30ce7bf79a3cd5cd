"""Files that are damaged, bomb-like or cannot be written (issue #24, items 9-10): the warm
start's sha256s checked at load, checkpoint JSON named when damaged, trees validated at load,
a full disk reported as ENOSPC with the path."""

from __future__ import annotations

import errno
import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from at2po_lib.method.tree import TreeArrays
from at2po_lib.record.tree_files import load_trees, save_trees

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "results" / "tiny" / "warmstart"


@pytest.fixture
def shipped_copy(tmp_path, monkeypatch):
    """The shipped tiny warm start copied to a scratch folder that cached_warmstart finds."""
    from at2po_lib.warmstart import cache as warmstart_cache

    copy = tmp_path / "shipped" / "warmstart"
    shutil.copytree(SHIPPED, copy)
    monkeypatch.setattr(warmstart_cache, "shipped_warmstart_dir", lambda profile: copy)
    monkeypatch.setenv("AT2PO_ARTIFACTS", str(tmp_path / "artifacts"))  # no local cache
    return copy


def test_the_shipped_record_lists_the_sha256_of_each_file():
    record = json.loads((SHIPPED / "warmstart.json").read_text())
    names = {p.name for p in SHIPPED.iterdir() if p.name != "warmstart.json"}
    assert set(record["files"]) == names


def test_a_same_size_corrupt_model_file_is_refused_at_load(shipped_copy):
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.checkpoint_files import CheckpointError
    from at2po_lib.warmstart.cache import cached_warmstart

    cfg = load_profile("tiny")
    assert cached_warmstart(cfg) == shipped_copy  # intact: found and verified
    weights = shipped_copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4096:] = np.full(1024, np.nan, dtype=np.float32).tobytes()  # NaN bytes, same size
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: sha256 .* differs"):
        cached_warmstart(cfg)


def test_a_truncated_tokenizer_file_is_named(shipped_copy):
    from at2po_lib.policy.checkpoint_files import CheckpointError
    from at2po_lib.policy.tokenizer import load_tokenizer

    tokenizer = shipped_copy / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: not a readable JSON file"):
        load_tokenizer(shipped_copy)


# ------------------------------------------------ the warm start verified whole (issue #39 item 4)
def _corrupt_weights(folder: Path) -> None:
    """The same size, other numbers: what only a sha256 tells apart."""
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4096:] = np.full(1024, np.nan, dtype=np.float32).tobytes()
    weights.write_bytes(bytes(data))


def _no_training(monkeypatch) -> None:
    """A refusal must not fall through to SFT (66 minutes at tiny scale)."""
    from at2po_lib.warmstart import sft as warmstart

    def refuse(cfg):
        raise AssertionError("the warm start was retrained")

    monkeypatch.setattr(warmstart, "train_warmstart", refuse)


def test_an_adapter_or_any_unlisted_entry_beside_the_weights_is_refused(shipped_copy):
    """transformers loads an adapter found beside the weights (the model changed while every
    recorded sha256 still matched): an entry the record does not list is refused."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.checkpoint_files import CheckpointError
    from at2po_lib.warmstart.cache import cached_warmstart

    cfg = load_profile("tiny")
    (shipped_copy / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8}\n')
    (shipped_copy / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(
        CheckpointError,
        match=r"warmstart: holds adapter_config\.json, "
        r"adapter_model\.safetensors, not listed in .*warmstart\.json",
    ):
        cached_warmstart(cfg)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (shipped_copy / name).unlink()
    (shipped_copy / "extra").mkdir()  # a folder counts too
    with pytest.raises(CheckpointError, match=r"holds extra, not listed"):
        cached_warmstart(cfg)
    (shipped_copy / "extra").rmdir()
    assert cached_warmstart(cfg) == shipped_copy


@pytest.mark.parametrize(
    "files, refusal",
    [
        ({}, r"warmstart\.json: lists no files"),
        (None, r"warmstart\.json: lists no files"),
        ("model.safetensors", r"warmstart\.json: its 'files' is not a table"),
        ("tokenizer.json", r"warmstart\.json: lists no model\.safetensors"),
        ("all but config.json", r"holds config\.json, not listed in"),
    ],
)
def test_a_record_listing_no_or_some_files_does_not_let_changed_weights_load(
    shipped_copy, files, refusal
):
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.checkpoint_files import CheckpointError
    from at2po_lib.warmstart.cache import cached_warmstart

    record_path = shipped_copy / "warmstart.json"
    record = json.loads(record_path.read_text())
    if files == "tokenizer.json":
        files = {"tokenizer.json": record["files"]["tokenizer.json"]}
    elif files == "all but config.json":
        files = {k: v for k, v in record["files"].items() if k != "config.json"}
    record["files"] = files
    record_path.write_text(json.dumps(record))
    _corrupt_weights(shipped_copy)
    with pytest.raises(CheckpointError, match=refusal):
        cached_warmstart(load_profile("tiny"))


@pytest.mark.parametrize(
    "damage, refusal",
    [
        ("missing", r"warmstart\.json: missing, so the warm start in .* cannot be verified"),
        ("torn", r"warmstart\.json: not a readable warm-start record"),
        ("list", r"warmstart\.json: not a warm-start record \(a JSON list"),
    ],
)
def test_a_missing_or_damaged_shipped_record_is_refused_with_the_rebuild_command(
    shipped_copy, monkeypatch, damage, refusal
):
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.checkpoint_files import CheckpointError
    from at2po_lib.warmstart.sft import ensure_warmstart

    _no_training(monkeypatch)
    record = shipped_copy / "warmstart.json"
    if damage == "missing":
        record.unlink()
    elif damage == "torn":
        record.write_bytes(record.read_bytes()[:3000])
    else:
        record.write_text("[]\n")
    with pytest.raises(CheckpointError, match=refusal) as refused:
        ensure_warmstart(load_profile("tiny"))
    assert "`git checkout -- results/tiny/warmstart`" in str(refused.value)
    assert "`at2po warmstart --profile tiny --force --ship`" in str(refused.value)


def _local_copy(shipped: Path, artifacts: Path) -> tuple[Path, Path]:
    """The shipped warm start as a local build: the folder and its record beside it."""
    policy = artifacts / "tiny" / "policy"
    folder = policy / "warmstart"
    shutil.copytree(shipped, folder)
    record = policy / "warmstart.json"
    (folder / "warmstart.json").rename(record)
    return folder, record


def test_a_damaged_local_record_is_refused_not_retrained(shipped_copy, tmp_path, monkeypatch):
    """The local build is checked before the shipped copy: a torn or missing record there is
    named with the local rebuild command; a record for another configuration is simply stale."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.checkpoint_files import CheckpointError
    from at2po_lib.warmstart.cache import cached_warmstart
    from at2po_lib.warmstart.sft import ensure_warmstart

    _no_training(monkeypatch)
    cfg = load_profile("tiny")
    folder, record = _local_copy(shipped_copy, tmp_path / "artifacts")
    assert cached_warmstart(cfg) == folder  # intact: the local build is used
    whole = record.read_bytes()
    record.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(
        CheckpointError,
        match=r"policy/warmstart\.json: not a readable .*"
        r"rebuild it with `at2po warmstart --profile tiny --force`",
    ):
        ensure_warmstart(cfg)
    record.unlink()
    with pytest.raises(CheckpointError, match=r"policy/warmstart\.json: missing"):
        ensure_warmstart(cfg)
    stale = json.loads(whole)
    stale["cache_key"] = "another-config"
    record.write_text(json.dumps(stale))
    assert cached_warmstart(cfg) == shipped_copy  # stale, not damaged: the shipped copy


def test_the_warmstart_command_names_a_damaged_record_in_one_line(
    shipped_copy, monkeypatch, capsys
):
    from at2po_lib.cli import main

    _no_training(monkeypatch)
    record = shipped_copy / "warmstart.json"
    record.write_bytes(record.read_bytes()[:3000])
    assert main(["warmstart", "--profile", "tiny"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(record) in err and "--force --ship" in err


def test_a_study_refuses_a_stale_local_warm_start(shipped_copy, tmp_path):
    """analysis' policy_folder rolled out the local warm start when no copy matched the
    configuration, unverified: it now takes only a verified current copy, and names a stale one
    with the rebuild command."""
    from at2po_lib.analysis.study_trees import policy_folder
    from at2po_lib.policy.checkpoint_files import CheckpointError

    folder, record = _local_copy(shipped_copy, tmp_path / "artifacts")
    assert policy_folder("tiny") == folder  # current and whole: used
    stale = json.loads(record.read_text())
    stale["cache_key"] = "another-config"
    record.write_text(json.dumps(stale))
    assert policy_folder("tiny") == shipped_copy  # the shipped copy is current
    shipped_record = shipped_copy / "warmstart.json"
    shipped_record.write_text(
        json.dumps({**json.loads(shipped_record.read_text()), "cache_key": "another-config"})
    )
    _corrupt_weights(folder)  # stale and damaged: never loaded
    with pytest.raises(
        CheckpointError,
        match=re.escape(
            f"{folder}: a warm start built from another configuration of profile 'tiny'; "
            "rebuild it with `at2po warmstart --profile tiny --force`"
        ),
    ):
        policy_folder("tiny")
    assert policy_folder("tiny", folder) == folder  # asked for by name: the caller's choice


def _init_from_copy(tmp_path: Path) -> Path:
    """The shipped warm start as a stage-1 folder for sft.init_from, its record inside."""
    folder = tmp_path / "stage1"
    shutil.copytree(SHIPPED, folder)
    return folder


@pytest.mark.parametrize(
    "damage, refusal",
    [
        ("tokenizer", r"stage1/tokenizer\.json: sha256 .* differs"),
        ("adapter", r"stage1: holds adapter_config\.json, adapter_model\.safetensors, not listed"),
        (
            "no record",
            r"stage1/warmstart\.json: missing, so the warm start in .* cannot be verified",
        ),
        ("model only", r"stage1: holds chat_template\.jinja, config\.json"),
    ],
)
def test_sft_init_from_is_verified_whole(tmp_path, damage, refusal):
    """sft.init_from checked the sha256 of model.safetensors only: a changed tokenizer, an adapter
    beside the weights or a folder without its record started SFT from another policy."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.checkpoint_files import CheckpointError
    from at2po_lib.warmstart.cache import initial_policy

    folder = _init_from_copy(tmp_path)
    cfg = load_profile("tiny", {"sft": {"init_from": str(folder)}})
    intact = initial_policy(cfg)
    record = json.loads((folder / "warmstart.json").read_text())
    assert intact["model_sha256"] == record["files"]["model.safetensors"]
    assert intact["git_revision"] == record["git_revision"]
    if damage == "tokenizer":  # the same size, one byte changed
        tokenizer = folder / "tokenizer.json"
        data = bytearray(tokenizer.read_bytes())
        data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\t")
        tokenizer.write_bytes(bytes(data))
    elif damage == "adapter":
        (folder / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8}\n')
        (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    elif damage == "no record":
        (folder / "warmstart.json").unlink()
    else:  # a record vouching for the weights alone
        record["files"] = {"model.safetensors": record["files"]["model.safetensors"]}
        (folder / "warmstart.json").write_text(json.dumps(record))
    with pytest.raises(CheckpointError, match=refusal) as refused:
        initial_policy(cfg)
    assert f"`git checkout -- {folder}`" in str(refused.value)


def _tree(parent) -> TreeArrays:
    n = len(parent)
    return TreeArrays(parent=np.asarray(parent), entropy=np.zeros(n), leaf_reward=np.zeros(n))


def _rewrite_member(path: Path, member: str, array: np.ndarray) -> None:
    """Replace one ``.npy`` member of an archive (what a damaged or crafted file holds)."""
    import io

    with zipfile.ZipFile(path) as src:
        members = {name: src.read(name) for name in src.namelist()}
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    members[f"{member}.npy"] = buffer.getvalue()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for name, data in members.items():
            dst.writestr(name, data)


def test_a_saved_tree_with_a_parent_cycle_is_refused_at_load(tmp_path):
    path = save_trees([_tree([-1, 0, 0, 2])], tmp_path / "trees.npz")
    _rewrite_member(path, "parent", np.array([-1, 2, 3, 1]))  # 1 -> 2 -> 3 -> 1
    with pytest.raises(ValueError, match=r"trees\.npz: tree 0: node 1 never reaches the root"):
        load_trees(path)


def test_a_saved_tree_with_fractional_ids_is_refused_at_load(tmp_path):
    path = save_trees([_tree([-1, 0, 0, 2])], tmp_path / "trees.npz")
    _rewrite_member(path, "parent", np.array([-1.0, 0.5, 0.0, 2.0]))
    with pytest.raises(ValueError, match=r"trees\.npz: tree 0: parent ids must be integers"):
        load_trees(path)


def test_a_decompression_bomb_member_is_refused_unread(tmp_path):
    path = save_trees([_tree([-1, 0, 0])], tmp_path / "trees.npz")
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("node.padding.npy", "w", force_zip64=True) as member:
            block = b"\0" * (1 << 20)
            for _ in range(256):  # 256 MiB of zeros: ~260 kB compressed
                member.write(block)
    assert path.stat().st_size < 2 << 20
    with pytest.raises(ValueError, match=r"member node\.padding\.npy holds 268,435,456 bytes"):
        load_trees(path)


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs (root only; skipped elsewhere), nearly filled."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip()})")
    try:
        yield mount
    finally:
        import gc

        gc.collect()  # a file torch left open keeps the mount busy
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)  # detach it regardless


def _fill(folder: Path) -> None:
    with contextlib_suppress_enospc():
        with open(folder / "filler", "wb") as fh:
            fh.write(b"\0" * (2 << 20))


class contextlib_suppress_enospc:  # noqa: N801 - contextlib.suppress for ENOSPC only
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, OSError) and value.errno == errno.ENOSPC


def test_torch_save_on_a_full_disk_is_enospc_with_the_path(full_disk):
    import torch

    from at2po_lib.util.storage import reported_writes

    target = full_disk / "checkpoint-4" / "optimizer.pt"
    target.parent.mkdir()
    _fill(full_disk)
    with pytest.raises(OSError) as caught:
        with reported_writes(target):
            torch.save({"state": torch.zeros(100_000)}, target)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert "No space left on device" in str(caught.value)


def test_run_records_on_a_full_disk_are_enospc_with_the_path_and_the_old_file_kept(full_disk):
    from at2po_lib.record.run_folder import append_jsonl
    from at2po_lib.util.storage import atomic_write

    done = full_disk / "DONE.json"
    done.write_text('{"config_hash": "old"}\n')
    _fill(full_disk)
    with pytest.raises(OSError) as caught:
        atomic_write(done, json.dumps({"config_hash": "new", "pad": "x" * 100_000}))
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(done)
    assert json.loads(done.read_text()) == {"config_hash": "old"}
    metrics = full_disk / "metrics.jsonl"
    with pytest.raises(OSError) as caught:
        append_jsonl(metrics, {"step": 1, "pad": "x" * 100_000})
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(metrics)


def test_the_command_line_reports_a_full_disk_in_one_line(full_disk, capsys, monkeypatch):
    from at2po_lib.cli.options import run_guarded
    from at2po_lib.record.run_folder import append_jsonl

    _fill(full_disk)
    status = run_guarded(
        "at2po train", lambda: append_jsonl(full_disk / "m.jsonl", {"step": 1, "x": "y" * 100_000})
    )
    err = capsys.readouterr().err
    assert status == 1 and "[Errno 28] No space left on device" in err
    assert str(full_disk / "m.jsonl") in err and "Traceback" not in err


@pytest.mark.parametrize(
    "bad", [b'{"id": "1", "contents": "caf\xe9"}', b"[" * 100_000, b'{"id": ' + b"9" * 5000 + b"}"]
)
def test_corpus_and_world_readers_name_the_file_and_line(tmp_path, bad):
    from at2po_lib.retrieval.corpus import CorpusError, parse_passage
    from at2po_lib.tinyworld.build import _jsonl_rows

    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"id": "0", "contents": "fine"}\n' + bad + b"\n")
    with pytest.raises(CorpusError, match=r"corpus\.jsonl:2: not valid JSON"):
        parse_passage(bad, path, 2)
    with pytest.raises(ValueError, match=r"corpus\.jsonl:2: not a valid UTF-8 JSON row"):
        _jsonl_rows(path)
