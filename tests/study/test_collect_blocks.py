"""scripts/collect_blocks.py: finished blocks copied from the worktree that trained them, without
checkpoints, never over another record of the same block."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import collect_blocks  # noqa: E402


HEADLINE = ("at2po", "grpo", "grpo_tree_budget")


def _block(results: Path, block: int, status: str = "finished", revision: str = "a" * 40) -> Path:
    """A whole headline block: a run folder of each method, with what git does not keep."""
    folder = results / "blocks" / "tiny" / "headline" / f"block{block:02d}"
    seed = 100 + block
    for method in HEADLINE:
        run = folder / method / f"seed{seed}"
        (run / "checkpoints" / "checkpoint-96").mkdir(parents=True)
        (run / "checkpoints" / "checkpoint-96" / "model.safetensors").write_bytes(b"weights")
        (run / "tensorboard").mkdir()
        (run / "tensorboard" / "events").write_bytes(b"events")
        (run / "DONE.json").write_text("{}")
        (run / "outcomes.csv").write_text("dataset,id,em\n")
        (run / "trees").mkdir()
        (run / "trees" / "step0001.npz").write_bytes(b"npz")
    record = {
        "block": block,
        "block_set": "headline",
        "seed": seed,
        "status": status,
        "git_revision": revision,
        "runs": {m: {"config_hash": f"hash-{m}"} for m in HEADLINE},
    }
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
    kept = ("DONE.json", "outcomes.csv", "trees/step0001.npz")
    assert files == ["BLOCK.json", *(f"{m}/seed100/{f}" for m in HEADLINE for f in kept)]
    assert (copied / "BLOCK.json").read_bytes() == (
        source / "results/blocks/tiny/headline/block00/BLOCK.json"
    ).read_bytes()
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


# ------------------------------------------------------------ unfinished blocks: collect, restore
def _staged(results: Path, block: int, runs: list[str], started: str = "2026-12-05T20:00") -> Path:
    """A block still training: ``runs`` finished, the next one half written."""
    staging = results / "blocks" / "tiny" / "ablation" / f".block{block:02d}.staging"
    seed = 200 + block
    for method in [*runs, "credit_leaf_mean_diff_parent"]:  # the last one still training
        run = staging / method / f"seed{seed}"
        (run / "checkpoints").mkdir(parents=True, exist_ok=True)
        (run / "checkpoints" / "model.safetensors").write_bytes(b"weights")
        (run / "outcomes.csv").write_text(f"{method}\n")
        if method in runs:
            (run / "DONE.json").write_text("{}")
    record = {
        "block": block,
        "block_set": "ablation",
        "seed": seed,
        "started": started,
        "build": "fc-v1147",
        "runs": {m: {"config_hash": f"hash-{m}", "status": "trained"} for m in runs},
    }
    (staging / "BLOCK.json").write_text(json.dumps(record))
    return staging


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_the_finished_runs_of_an_unfinished_block_are_collected_as_they_finish(tmp_path):
    worktree, records = tmp_path / "study" / "results", tmp_path / "main" / "results"
    records.mkdir(parents=True)
    staging = _staged(worktree, 0, ["at2po"])
    proc = _run(worktree, records)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "blocks/tiny/ablation/unfinished/block00: 1 finished run copied"
    ]
    kept = records / "blocks/tiny/ablation/unfinished/block00"
    # the record and the finished run; not the run in progress, not the weights
    assert _files(kept) == ["BLOCK.json", "at2po/seed200/DONE.json", "at2po/seed200/outcomes.csv"]
    assert "already there (1 finished run)" in _run(worktree, records).stdout

    # the block's next run finishes: the record grows, nothing else changes
    _staged(worktree, 0, ["at2po", "ablation_atpo_loss"])
    assert "2 finished runs copied, was 1" in _run(worktree, records).stdout
    assert _files(kept) == [
        "BLOCK.json",
        "ablation_atpo_loss/seed200/DONE.json",
        "ablation_atpo_loss/seed200/outcomes.csv",
        "at2po/seed200/DONE.json",
        "at2po/seed200/outcomes.csv",
    ]
    assert not list(kept.parent.glob(".*")), "no copy left half-way"
    assert staging.is_dir()  # the worktree is only read


def test_an_unfinished_record_of_another_start_is_refused_and_kept(tmp_path):
    worktree, records = tmp_path / "study" / "results", tmp_path / "main" / "results"
    _staged(records / "tmp", 0, ["at2po", "ablation_atpo_loss"], started="2026-12-04T10:00")
    (records / "blocks/tiny/ablation/unfinished").mkdir(parents=True)
    (records / "tmp/blocks/tiny/ablation/.block00.staging").rename(
        records / "blocks/tiny/ablation/unfinished/block00"
    )
    before = (records / "blocks/tiny/ablation/unfinished/block00/BLOCK.json").read_text()
    _staged(worktree, 0, ["at2po"])  # the block began again elsewhere
    proc = _run(worktree, records)
    assert proc.returncode == 1
    assert "REFUSED blocks/tiny/ablation/unfinished/block00" in proc.stderr
    assert "started 2026-12-04T10:00 on fc-v1147 (at2po, ablation_atpo_loss)" in proc.stderr
    assert (records / "blocks/tiny/ablation/unfinished/block00/BLOCK.json").read_text() == before


class _TwoMachines:
    """A block killed after its first run on machine 1 (build ``fc-v669``, or what
    :attr:`build` says), a records checkout, and an empty machine 2, with the block tests'
    stand-in trainer."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        from test_blocks import FakeTrain, _Kill  # the block tests' stand-in trainer

        from at2po_lib.study import blocks
        from at2po_lib.util import provenance

        self.blocks, self.monkeypatch, self.fake = blocks, monkeypatch, FakeTrain
        self.build = "fc-v669"
        monkeypatch.setattr(provenance, "git_revision", lambda: "a" * 40)
        monkeypatch.setattr(
            provenance.platform,
            "platform",
            lambda: f"Linux-6.18.44-{self.build}-x86_64-with-glibc2.36",
        )
        self.first, self.records, self.second = (tmp_path / n for n in ("m1", "main", "m2"))
        self.records.mkdir()
        self.second.mkdir()
        self.use(self.first)
        monkeypatch.setattr(blocks, "train", FakeTrain(kill_at=2))
        with pytest.raises(_Kill):
            blocks.run_blocks("smoke", "headline", [0])

    def use(self, results: Path) -> None:
        self.monkeypatch.setenv("AT2PO_RESULTS", str(results))

    def resume_on_machine_2(self):
        """The study, resumed with --keep-finished-runs on machine 2: the stand-in's calls."""
        self.use(self.second)
        again = self.fake()
        self.monkeypatch.setattr(self.blocks, "train", again)
        self.blocks.run_blocks("smoke", "headline", [0], keep_finished_runs=True)
        return again.calls


def test_a_block_killed_on_one_machine_continues_on_the_same_build_after_collect_and_restore(
    tmp_path, monkeypatch
):
    """The whole path: a block killed after its first run, its run collected into the records,
    the machine gone (a new, empty worktree), the records restored, the study resumed with
    --keep-finished-runs: the collected run is kept, the others trained, and collecting the
    finished block retires the unfinished record."""
    m = _TwoMachines(tmp_path, monkeypatch)
    lines, refused = collect_blocks.collect(m.first, m.records)
    assert lines == ["blocks/smoke/headline/unfinished/block00: 1 finished run copied"]
    assert not refused
    m.use(m.records)  # the records checkout's --plan
    (planned,) = m.blocks.block_plan("smoke", "headline", [0])
    assert planned.state == "new"
    assert planned.detail.startswith("the records hold 1 finished runs of it (started ")
    assert planned.detail.endswith("scripts/collect_blocks.py --restore gives them to a worktree")

    lines, refused = collect_blocks.restore(m.records, m.second)
    assert not refused and "1 finished runs restored" in lines[0]
    assert m.resume_on_machine_2() == [("grpo", 100), ("grpo_tree_budget", 100)]
    block = m.second / "blocks/smoke/headline/block00"
    assert (block / "at2po/seed100/token").read_text() == "call 1"  # machine 1's run

    lines, refused = collect_blocks.collect(m.second, m.records)
    assert lines == [
        "blocks/smoke/headline/block00: copied",
        "blocks/smoke/headline/block00: its unfinished record is complete now, removed",
    ]
    assert not (m.records / "blocks/smoke/headline/unfinished").exists()


def test_restored_runs_from_another_build_are_not_kept(tmp_path, monkeypatch, capsys):
    m = _TwoMachines(tmp_path, monkeypatch)
    collect_blocks.collect(m.first, m.records)
    collect_blocks.restore(m.records, m.second)
    m.build = "fc-v1147"  # the next machine is another build
    assert m.resume_on_machine_2() == [
        ("at2po", 100),
        ("grpo", 100),
        ("grpo_tree_budget", 100),
    ]
    assert "build fc-v669 then, fc-v1147 now" in capsys.readouterr().out
    # the records keep the other build's runs, named, beside the finished block
    lines, _ = collect_blocks.collect(m.second, m.records)
    assert lines[0] == "blocks/smoke/headline/block00: copied"
    assert "holds the runs of another start" in lines[1]
    assert (m.records / "blocks/smoke/headline/unfinished/block00/BLOCK.json").is_file()


def test_restore_leaves_a_worktrees_own_staging_and_finished_blocks_alone(tmp_path):
    records, worktree = tmp_path / "main" / "results", tmp_path / "study" / "results"
    _block(records, 0)
    _staged(records / "tmp", 1, ["at2po"])
    (records / "blocks/tiny/ablation/unfinished").mkdir(parents=True)
    (records / "tmp/blocks/tiny/ablation/.block01.staging").rename(
        records / "blocks/tiny/ablation/unfinished/block01"
    )
    _staged(worktree, 1, ["at2po", "ablation_atpo_loss"], started="2026-12-06T08:00")
    own = (worktree / "blocks/tiny/ablation/.block01.staging/BLOCK.json").read_text()
    lines, refused = collect_blocks.restore(records, worktree)
    assert not refused
    assert lines[0] == "blocks/tiny/headline/block00: copied"
    assert "the worktree's own staging folder" in lines[1] and "stays as it is" in lines[1]
    assert (worktree / "blocks/tiny/ablation/.block01.staging/BLOCK.json").read_text() == own


def test_restore_from_the_command_line_names_a_missing_worktree(tmp_path):
    proc = _run("--restore", tmp_path / "nowhere")
    assert proc.returncode == 2 and "nowhere: no such folder" in proc.stderr


# ------------------------------------------------- issue #66: nothing from outside, no half block
def _collect(source: Path, dest: Path, capsys) -> tuple[int, str, str]:
    code = collect_blocks.main([str(source), str(dest)])
    out, err = capsys.readouterr()
    return code, out, err


def _leftovers(results: Path) -> list[Path]:
    return [p for p in results.rglob(".*") if p.name.endswith((".collecting", ".replaced"))]


def test_a_run_name_that_leaves_the_block_is_refused_and_nothing_copied(tmp_path, capsys):
    worktree, records = tmp_path / "study" / "results", tmp_path / "main" / "results"
    records.mkdir(parents=True)
    staging = _staged(worktree, 0, ["at2po"])
    loot = worktree / "loot" / "seed200"
    loot.mkdir(parents=True)
    (loot / "DONE.json").write_text("{}")
    (loot / "secret.txt").write_text("not the study's")
    record = json.loads((staging / "BLOCK.json").read_text())
    record["runs"]["../../../../loot"] = {"config_hash": "x"}
    (staging / "BLOCK.json").write_text(json.dumps(record))
    code, out, err = _collect(worktree, records, capsys)
    assert code == 1 and err.count("\n") == 1
    assert "REFUSED blocks/tiny/ablation/unfinished/block00" in err
    assert "runs ['../../../../loot'] are not methods of ablation" in err
    assert not list(records.rglob("secret.txt")) and not (records / "blocks").exists()


def test_a_link_in_a_run_folder_is_refused_never_followed(tmp_path, capsys):
    source, dest = tmp_path / "study" / "results", tmp_path / "main" / "results"
    dest.mkdir(parents=True)
    block = _block(source, 0)
    outside = tmp_path / "outside.txt"
    outside.write_text("a file of the machine")
    (block / "grpo" / "seed100" / "notes.txt").symlink_to(outside)
    code, out, err = _collect(source, dest, capsys)
    assert code == 1 and err.count("\n") == 1
    assert "notes.txt is a link; only regular files are copied, links never" in err
    assert not (dest / "blocks/tiny/headline/block00").exists() and not _leftovers(dest)


def test_a_finished_block_missing_a_method_is_refused_naming_it(tmp_path, capsys):
    import shutil

    source, dest = tmp_path / "study" / "results", tmp_path / "main" / "results"
    dest.mkdir(parents=True)
    block = _block(source, 0)
    shutil.rmtree(block / "grpo")
    code, out, err = _collect(source, dest, capsys)
    assert code == 1 and err.count("\n") == 1
    assert "grpo/seed100 is not a finished run folder" in err
    assert not (dest / "blocks").exists()


@pytest.mark.parametrize("broken", ["blocks_is_a_file", "block_is_a_dangling_link"])
def test_a_destination_that_is_no_folder_is_one_line_and_leaves_nothing(tmp_path, capsys, broken):
    source, dest = tmp_path / "study" / "results", tmp_path / "main" / "results"
    _block(source, 0)
    if broken == "blocks_is_a_file":
        dest.mkdir(parents=True)
        (dest / "blocks").write_text("not a folder")
        named = dest / "blocks"
    else:
        (dest / "blocks/tiny/headline").mkdir(parents=True)
        named = dest / "blocks/tiny/headline/block00"
        named.symlink_to(tmp_path / "nowhere")
    code, out, err = _collect(source, dest, capsys)
    assert code == 1 and err.count("\n") == 1 and f"{named} is " in err
    assert not _leftovers(dest) and not (tmp_path / "nowhere").exists()


def test_a_dest_that_is_a_file_is_one_line(tmp_path, capsys):
    source = tmp_path / "study" / "results"
    _block(source, 0)
    (tmp_path / "dest").write_text("a file")
    with pytest.raises(SystemExit) as stopped:
        collect_blocks.main([str(source), str(tmp_path / "dest")])
    err = capsys.readouterr().err.splitlines()
    assert stopped.value.code == 2 and err[-1].endswith("dest: not a folder")
