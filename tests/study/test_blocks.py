"""Study blocks (at2po_lib/study/blocks.py): one seed of every method per block, finished or
re-run whole, one revision per set. Training is replaced by a stand-in that writes a run folder,
so the bookkeeping is tested in seconds (a 2-step smoke block runs in the slow suite's place:
``at2po study --profile smoke --block-set headline --blocks 0 --set train.max_steps=2``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from at2po_lib.cli.options import UsageError, int_list
from at2po_lib.study import block_records, blocks
from at2po_lib.record import run_folder
from at2po_lib.util import provenance
from at2po_lib.util.errors import ProfileError, RecordError
from at2po_lib.util.locks import folder_lock, lock_path
from at2po_lib.util.provenance import machine_build
from at2po_lib.util.staging import staging_path

CLEAN = "a" * 40
OTHER = "b" * 40
PLATFORM = "Linux-6.18.44-fc-v669-x86_64-with-glibc2.36"


@dataclass
class _Result:
    run: run_folder.RunDir
    status: str
    wall_time: float


class _Kill(Exception):
    pass


class FakeTrain:
    """Writes a finished run folder (with a token naming the call) where ``train`` would;
    raises :class:`_Kill` at the call numbered ``kill_at`` (a block killed part-way)."""

    def __init__(self, kill_at: int | None = None):
        self.calls: list[tuple[str, int]] = []
        self.kill_at = kill_at

    def __call__(self, cfg, method, seed, *, force, runs_root, provenance):
        assert force and provenance["block"]["block_set"] in blocks.BLOCK_SETS
        self.calls.append((method, seed))
        if self.kill_at is not None and len(self.calls) == self.kill_at:
            raise _Kill(method)
        run = run_folder.RunDir(Path(runs_root) / method / f"seed{seed}")
        run.root.mkdir(parents=True)
        run_folder.mark_finished(run, f"hash-{method}", wall_time=1.0)
        (run.root / "token").write_text(f"call {len(self.calls)}")
        run.meta.write_text(json.dumps({"block": provenance["block"]}))
        return _Result(run, "trained", 1.0)


@pytest.fixture()
def study(isolated_outputs, monkeypatch):
    """A clean revision on build fc-v669 and the stand-in trainer."""
    monkeypatch.setattr(provenance, "git_revision", lambda: CLEAN)
    monkeypatch.setattr(provenance.platform, "platform", lambda: PLATFORM)
    fake = FakeTrain()
    monkeypatch.setattr(blocks, "train", fake)
    return fake


def _root() -> Path:
    return block_records.blocks_root("smoke", "headline")


def test_a_block_trains_one_seed_of_every_method_and_records_where(study):
    (result,) = blocks.run_blocks("smoke", "headline", [3], threads=1)
    assert result.status == "finished"
    assert study.calls == [("at2po", 103), ("grpo", 103), ("grpo_tree_budget", 103)]
    record = json.loads((_root() / "block03" / "BLOCK.json").read_text())
    assert (record["block"], record["seed"], record["status"]) == (3, 103, "finished")
    assert (record["commit"], record["clean"], record["build"]) == (CLEAN, True, "fc-v669")
    assert record["torch_threads"] == 1 and record["platform"] == PLATFORM
    assert set(record["runs"]) == {"at2po", "grpo", "grpo_tree_budget"}
    # every stage of the runs at the block's threads: recorded with the overrides
    assert record["overrides"] == {
        "rollout": {"num_threads": 1},
        "train": {"update_num_threads": 1},
    }
    meta = json.loads((_root() / "block03" / "grpo" / "seed103" / "meta.json").read_text())
    assert meta["block"]["build"] == "fc-v669" and meta["block"]["block"] == 3
    # the committed record's folder is not touched
    assert not (block_records.results_dir() / "runs" / "smoke").exists()


def test_a_killed_block_reruns_whole_and_a_finished_one_is_skipped(study, monkeypatch):
    killer = FakeTrain(kill_at=2)  # dies in the second run, after the first finished
    monkeypatch.setattr(blocks, "train", killer)
    with pytest.raises(_Kill):
        blocks.run_blocks("smoke", "headline", [0])
    folder = _root() / "block00"
    assert not folder.exists() and staging_path(folder).is_dir()
    (planned,) = blocks.block_plan("smoke", "headline", [0])
    assert (planned.state, planned.detail) == ("interrupted", "1 of 3 runs finished; re-runs whole")

    again = FakeTrain()
    monkeypatch.setattr(blocks, "train", again)
    (result,) = blocks.run_blocks("smoke", "headline", [0])
    assert result.status == "finished"
    # every run trained again, the one that had finished included: nothing of the killed
    # process is kept
    assert again.calls == [("at2po", 100), ("grpo", 100), ("grpo_tree_budget", 100)]
    assert (folder / "at2po" / "seed100" / "token").read_text() == "call 1"
    assert not staging_path(folder).exists()

    third = FakeTrain()
    monkeypatch.setattr(blocks, "train", third)
    (skipped,) = blocks.run_blocks("smoke", "headline", [0])
    assert skipped.status == "skipped" and third.calls == []
    assert blocks.block_plan("smoke", "headline", [0])[0].state == "finished"


def _kill_block_in_its_second_run(monkeypatch) -> Path:
    killer = FakeTrain(kill_at=2)
    monkeypatch.setattr(blocks, "train", killer)
    with pytest.raises(_Kill):
        blocks.run_blocks("smoke", "headline", [0])
    return staging_path(_root() / "block00")


def test_a_killed_block_keeps_its_finished_runs_only_when_asked_and_unchanged(
    study, monkeypatch, capsys
):
    staging = _kill_block_in_its_second_run(monkeypatch)
    left = json.loads((staging / "BLOCK.json").read_text())
    assert list(left["runs"]) == ["at2po"]
    (planned,) = blocks.block_plan("smoke", "headline", [0], keep_finished_runs=True)
    assert planned.detail == "1 of 3 runs finished; keeps at2po"
    assert planned.runs_left == ("grpo", "grpo_tree_budget")
    (whole,) = blocks.block_plan("smoke", "headline", [0])
    assert whole.runs_left == ("at2po", "grpo", "grpo_tree_budget")

    again = FakeTrain()
    monkeypatch.setattr(blocks, "train", again)
    (result,) = blocks.run_blocks("smoke", "headline", [0], keep_finished_runs=True)
    assert result.status == "finished"
    # the finished run is the killed process's own (call 1), the others are trained now
    assert again.calls == [("grpo", 100), ("grpo_tree_budget", 100)]
    folder = _root() / "block00"
    assert (folder / "at2po" / "seed100" / "token").read_text() == "call 1"
    record = json.loads((folder / "BLOCK.json").read_text())
    assert record["started"] == left["started"] and record["status"] == "finished"
    assert [r["kept"] for r in record["resumed"]] == [["at2po"]]
    assert list(record["runs"]) == ["at2po", "grpo", "grpo_tree_budget"]
    assert "keeps its finished runs (at2po)" in capsys.readouterr().out


def test_the_plan_tells_a_block_a_live_process_holds_from_a_killed_one(study, monkeypatch):
    import os

    _kill_block_in_its_second_run(monkeypatch)
    folder = _root() / "block00"
    with folder_lock(folder, "study block"):
        (planned,) = blocks.block_plan("smoke", "headline", [0])
        assert planned.state == "running"
        assert planned.detail == f"PID {os.getpid()}; 1 of 3 runs finished so far"
    (planned,) = blocks.block_plan("smoke", "headline", [0])
    assert planned.state == "interrupted"
    assert not lock_path(folder).exists()  # looking leaves no lock file behind


def test_a_killed_block_on_another_build_reruns_whole_even_when_asked(study, monkeypatch):
    _kill_block_in_its_second_run(monkeypatch)
    monkeypatch.setattr(
        provenance.platform, "platform", lambda: PLATFORM.replace("fc-v669", "fc-v700")
    )
    (planned,) = blocks.block_plan("smoke", "headline", [0], keep_finished_runs=True)
    assert planned.detail.startswith("1 of 3 runs finished; re-runs whole (not kept: build ")
    assert "fc-v669 then, fc-v700 now" in planned.detail
    again = FakeTrain()
    monkeypatch.setattr(blocks, "train", again)
    blocks.run_blocks("smoke", "headline", [0], keep_finished_runs=True)
    assert [m for m, _ in again.calls] == ["at2po", "grpo", "grpo_tree_budget"]
    assert "resumed" not in json.loads((_root() / "block00" / "BLOCK.json").read_text())


def test_a_kept_run_must_be_the_finished_run_its_block_recorded(study, monkeypatch):
    staging = _kill_block_in_its_second_run(monkeypatch)
    (staging / "at2po" / "seed100" / "DONE.json").write_text(
        json.dumps({"config_hash": "hash-edited"})
    )
    (planned,) = blocks.block_plan("smoke", "headline", [0], keep_finished_runs=True)
    assert "holds config hash hash-edited, the block recorded hash-at2po" in planned.detail
    again = FakeTrain()
    monkeypatch.setattr(blocks, "train", again)
    blocks.run_blocks("smoke", "headline", [0], keep_finished_runs=True)
    assert [m for m, _ in again.calls] == ["at2po", "grpo", "grpo_tree_budget"]


def test_a_block_needs_a_clean_checkout_and_the_sets_revision(study, monkeypatch):
    monkeypatch.setattr(provenance, "git_revision", lambda: CLEAN + "-dirty")
    with pytest.raises(ProfileError, match="uncommitted code"):
        blocks.run_blocks("smoke", "headline", [0])
    assert study.calls == []
    blocks.run_blocks("smoke", "headline", [0], allow_dirty=True)
    assert json.loads((_root() / "block00" / "BLOCK.json").read_text())["clean"] is False

    monkeypatch.setattr(provenance, "git_revision", lambda: OTHER)
    with pytest.raises(ProfileError, match=r"block 0: aaaaaaa"):
        blocks.run_blocks("smoke", "headline", [1])
    blocks.run_blocks("smoke", "headline", [1], allow_revisions=True)
    assert block_records.finished_blocks(_root())[1]["commit"] == OTHER


def test_a_block_with_other_overrides_than_the_sets_is_refused(study):
    blocks.run_blocks("smoke", "headline", [0], overrides={"train": {"max_steps": 2}})
    with pytest.raises(ProfileError, match="other overrides"):
        blocks.run_blocks("smoke", "headline", [1], overrides={"train": {"max_steps": 3}})
    with pytest.raises(ProfileError, match="other overrides"):  # another thread count
        blocks.run_blocks(
            "smoke", "headline", [1], threads=2, overrides={"train": {"max_steps": 2}}
        )
    # a thread count the caller sets in --set is kept
    assert blocks.with_threads({"rollout": {"num_threads": 3}}, 1) == {
        "rollout": {"num_threads": 3},
        "train": {"update_num_threads": 1},
    }


def test_a_block_another_process_holds_is_skipped(study):
    with folder_lock(_root() / "block00", "study block"):
        held, done = blocks.run_blocks("smoke", "headline", [0, 1])
    assert (held.status, done.status) == ("held", "finished")
    assert {seed for _, seed in study.calls} == {101}


def test_the_ablation_set_runs_only_on_the_authors_expansion(study, tmp_path):
    """Table 2's step 3 and Table 3's cells take the expansion settings from the profile: the
    set refuses a profile that does not hold the authors' (the at2po preset fixes them)."""
    exact = tmp_path / "exact.yaml"
    exact.write_text("extends: smoke\nrollout:\n  entropy_estimate: exact\n  tree_alpha: 0.001\n")
    with pytest.raises(ProfileError, match="rollout.tree_alpha=0.05"):
        blocks.run_blocks(str(exact), "ablation", [0])
    assert study.calls == []
    authors = tmp_path / "authors.yaml"
    authors.write_text(
        "extends: smoke\nrollout:\n  entropy_estimate: sampled_nll\n  tree_alpha: 0.05\n"
    )
    (result,) = blocks.run_blocks(str(authors), "ablation", [0])
    assert result.status == "finished" and len(study.calls) == 11
    assert {seed for _, seed in study.calls} == {200}


def test_block_sets_keep_their_seeds_apart():
    seeds = {
        name: {blocks.block_seed(s, b) for b in range(block_records.MAX_BLOCKS)}
        for name, s in blocks.BLOCK_SETS.items()
    }
    assert not seeds["headline"] & seeds["ablation"]
    assert blocks.BLOCK_SETS["headline"].methods == ("at2po", "grpo", "grpo_tree_budget")
    ablation = blocks.BLOCK_SETS["ablation"].methods
    assert ablation[0] == "at2po" and len(ablation) == 1 + 3 + 7
    # what the records are checked against is what the blocks train
    for name, block_set in blocks.BLOCK_SETS.items():
        assert block_records.set_methods(name) == block_set.methods
    with pytest.raises(ProfileError, match="0-99"):
        blocks.block_seed(blocks.BLOCK_SETS["headline"], 100)


def test_machine_build_is_the_kernels_local_release():
    assert machine_build(PLATFORM) == "fc-v669"
    assert machine_build("Linux-6.18.44-fc-v1045-x86_64-with-glibc2.36") == "fc-v1045"
    assert machine_build("Linux-5.15.0-91-generic-x86_64-with-glibc2.35") == "91-generic"
    assert machine_build("Linux-6.1.0-x86_64-with-glibc2.36") == "6.1.0"
    assert machine_build("macOS-14.2-arm64-arm-64bit") == "14.2"
    assert machine_build("something else") == "something else"


def test_block_and_seed_lists_take_ranges():
    assert int_list("0-3,7,2", "--blocks") == [0, 1, 2, 3, 7]
    with pytest.raises(UsageError, match="backwards"):
        int_list("5-2", "--blocks")
    with pytest.raises(UsageError, match="ranges"):
        int_list("a-b", "--blocks")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--block-set", "headline"], "needs --blocks"),
        (["--table", "1", "--blocks", "0-3"], "go with --block-set"),
        (["--table", "1", "--keep-finished-runs"], "go with --block-set"),
        (["--table", "1", "--hours", "2"], "go with --block-set"),
        (["--table", "1", "--share-blocks"], "go with --block-set"),
        (["--block-set", "headline", "--blocks", "0", "--methods", "grpo"], "go with --table"),
        (["--block-set", "nowhere", "--blocks", "0"], "unknown block set 'nowhere'"),
    ],
)
def test_study_cli_refuses_mixed_block_and_table_options(argv, message, capsys, isolated_outputs):
    from at2po_lib import cli

    assert cli.main(["study", "--profile", "smoke", *argv]) == 2
    assert message in capsys.readouterr().err


def test_study_cli_plans_blocks_without_writing(study, capsys):
    from at2po_lib import cli

    blocks.run_blocks("smoke", "headline", [1])
    capsys.readouterr()
    before = sorted(block_records.results_dir().rglob("*"))

    assert (
        cli.main(
            ["study", "--profile", "smoke", "--block-set", "headline", "--blocks", "0-1", "--plan"]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["block", "0", "seed", "100", "new"]
    assert out[1].split()[4:7] == ["finished", "aaaaaaa,", "build"]
    assert out[-3] == "block set headline: 2 blocks: 1 finished, 1 new"
    # a sign-flip test over 5 blocks gives no p below 2/32; the headline has no Table 3 family
    assert out[-2] == "verdicts: a pair of methods can read a direction from 6 finished blocks on"
    # the stand-in's runs take 1 s each: block 0's three runs, about 3 s of one process
    assert out[-1].startswith("left: 3 runs in 1 block: about 0.0 h of one process")
    assert "over the set's 3 finished runs" in out[-1]
    assert sorted(block_records.results_dir().rglob("*")) == before


def test_plan_names_the_blocks_a_table3_verdict_needs():
    from at2po_lib.cli.study import _verdicts_line

    ablation = blocks.get_block_set("ablation").methods
    assert _verdicts_line(ablation).endswith(
        "; a Table 3 cell, one of 7 under Holm's correction, from 9"
    )
    three = [
        "credit_leaf_mean_node_value",
        "credit_leaf_mean_diff_parent",
        "credit_child_mean_diff_global",
    ]
    assert _verdicts_line(["at2po", *three]).endswith("one of 3 under Holm's correction, from 7")
    # a method named like a cell but not one of Table 3's is not counted in its family
    assert _verdicts_line(["at2po", "credit_made_up"]).endswith("from 6 finished blocks on")


def test_time_left_sums_each_methods_median_and_times_untimed_methods_by_all_runs():
    plan = [
        blocks.PlannedBlock(0, 100, "finished"),
        blocks.PlannedBlock(1, 101, "interrupted", runs_left=("grpo", "grpo_tree_budget")),
        blocks.PlannedBlock(2, 102, "new", runs_left=("at2po", "grpo", "grpo_tree_budget")),
    ]
    walls = {"at2po": [100.0, 300.0, 900.0], "grpo": [50.0, 70.0]}
    left = blocks.time_left(plan, walls)
    # medians: at2po 300, grpo 60; grpo_tree_budget untimed → median of all five runs, 100
    assert (left.runs, left.blocks, left.measured) == (5, 2, 5)
    assert left.seconds == pytest.approx(300 + 2 * 60 + 2 * 100)
    assert left.untimed == ("grpo_tree_budget",)
    assert blocks.time_left(plan, {}).seconds is None
    assert blocks.time_left(plan[:1], walls).runs == 0


def test_measured_wall_times_read_finished_and_interrupted_blocks(study, monkeypatch):
    blocks.run_blocks("smoke", "headline", [1])
    _kill_block_in_its_second_run(monkeypatch)  # block 0: its at2po run finished, staged
    walls = blocks.measured_wall_times(blocks.set_root("smoke", "headline"))
    assert walls == {"at2po": [1.0, 1.0], "grpo": [1.0], "grpo_tree_budget": [1.0]}


# ----------------------------------------------------------------- a time budget (--hours)
class _Clock:
    """``blocks.time`` with a clock that a stand-in run moves on by its wall time."""

    def __init__(self):
        self.now = 1_000_000.0
        self.strftime = __import__("time").strftime
        self.monotonic = __import__("time").monotonic  # lock waits keep the real clock
        self.sleep = __import__("time").sleep

    def time(self) -> float:
        return self.now


def _timed(monkeypatch, clock: _Clock, seconds: float, kill_at: int | None = None) -> FakeTrain:
    """The stand-in trainer, each run taking ``seconds`` on ``clock`` and in its record."""
    fake = FakeTrain(kill_at)

    def train(*args, **kwargs):
        result = fake(*args, **kwargs)
        clock.now += seconds
        return _Result(result.run, result.status, seconds)

    monkeypatch.setattr(blocks, "train", train)
    monkeypatch.setattr(blocks, "time", clock)
    return fake


def test_a_block_that_would_end_after_the_deadline_is_not_started(study, monkeypatch, capsys):
    clock = _Clock()
    _timed(monkeypatch, clock, 100.0)
    blocks.run_blocks("smoke", "headline", [0])  # three runs of 100 s: the set's wall times
    late = _timed(monkeypatch, clock, 100.0)
    (result,) = blocks.run_blocks("smoke", "headline", [1], deadline=clock.now + 299)
    assert result.status == "deferred" and late.calls == []
    assert not (_root() / "block01").exists() and not staging_path(_root() / "block01").exists()
    out = capsys.readouterr().out
    assert "block 1: not started: 3 runs take about 5 min" in out and "4 min are left" in out
    (result,) = blocks.run_blocks("smoke", "headline", [1], deadline=clock.now + 301)
    assert result.status == "finished" and len(late.calls) == 3


def test_a_block_that_keeps_its_runs_stops_before_a_run_past_the_deadline(study, monkeypatch):
    clock = _Clock()
    _timed(monkeypatch, clock, 100.0, kill_at=2)  # block 0: at2po finished (100 s), then killed
    with pytest.raises(_Kill):
        blocks.run_blocks("smoke", "headline", [0])
    again = _timed(monkeypatch, clock, 100.0)
    # 150 s left: grpo (100 s, at the median of all: it has no run of its own yet) fits, the
    # next one no longer does
    (result,) = blocks.run_blocks(
        "smoke", "headline", [0], keep_finished_runs=True, deadline=clock.now + 150
    )
    assert result.status == "deferred" and again.calls == [("grpo", 100)]
    staged = json.loads((staging_path(_root() / "block00") / "BLOCK.json").read_text())
    assert list(staged["runs"]) == ["at2po", "grpo"] and staged["status"] == "running"
    (planned,) = blocks.block_plan("smoke", "headline", [0], keep_finished_runs=True)
    assert planned.runs_left == ("grpo_tree_budget",)
    last = _timed(monkeypatch, clock, 100.0)
    (result,) = blocks.run_blocks("smoke", "headline", [0], keep_finished_runs=True)
    assert result.status == "finished" and last.calls == [("grpo_tree_budget", 100)]


def test_a_set_with_no_timed_run_starts_its_block_whatever_the_deadline(study, monkeypatch):
    clock = _Clock()
    fake = _timed(monkeypatch, clock, 100.0)
    (result,) = blocks.run_blocks("smoke", "headline", [0], deadline=clock.now + 1)
    assert result.status == "finished" and len(fake.calls) == 3


def test_study_cli_hours_defers_a_block_that_would_end_too_late(study, capsys):
    from at2po_lib import cli

    blocks.run_blocks("smoke", "headline", [0])  # the stand-in's runs: 1 s each
    study.calls.clear()
    argv = ["study", "--profile", "smoke", "--block-set", "headline", "--blocks", "1"]
    # 1.8 s left, three runs of 1 s: not started, and the command still succeeds
    assert cli.main([*argv, "--hours", "0.0005", "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "block 1: not started: 3 runs take about 1 min" in out
    assert "[study] headline block 1: deferred" in out and study.calls == []
    assert cli.main([*argv, "--hours", "1", "--no-report"]) == 0
    assert len(study.calls) == 3


# ------------------------------------------------------------------- two processes, one block
class SecondProcess(FakeTrain):
    """The stand-in trainer of a first process that, while its first run trains, lets a second
    process (``run_blocks`` called again: its own lock files, so flock holds between the two)
    share the block; both record into one :class:`FakeTrain` call list."""

    def __init__(self, blocks_to_share: list[int]):
        super().__init__()
        self.blocks_to_share = blocks_to_share
        self.second: list[blocks.BlockResult] | None = None

    def __call__(self, cfg, method, seed, *, force, runs_root, provenance):
        if self.second is None:
            self.second = []  # the second process starts once, during the first run
            self.second = blocks.run_blocks(
                "smoke", "headline", self.blocks_to_share, share_blocks=True
            )
        return super().__call__(
            cfg, method, seed, force=force, runs_root=runs_root, provenance=provenance
        )


def test_two_processes_share_a_blocks_runs_and_the_last_to_finish_swaps_it_in(study, monkeypatch):
    first = SecondProcess([0])
    monkeypatch.setattr(blocks, "train", first)
    (result,) = blocks.run_blocks("smoke", "headline", [0], share_blocks=True)
    # the first process claimed at2po; the second, started meanwhile, took the two runs
    # nobody trained and left the block to the first, which recorded the last run
    assert [r.status for r in first.second] == ["shared"]
    assert first.calls == [("grpo", 100), ("grpo_tree_budget", 100), ("at2po", 100)]
    assert result.status == "finished"
    record = json.loads((_root() / "block00" / "BLOCK.json").read_text())
    assert record["status"] == "finished" and record["shared"] is True
    assert list(record["runs"]) == ["at2po", "grpo", "grpo_tree_budget"]  # the set's order
    assert len(record["joined"]) == 2
    assert not staging_path(_root() / "block00").exists()
    folder = _root() / "block00"
    assert not [p for p in folder.rglob(".*.lock")], "no claim left behind"


def test_sharing_processes_train_each_run_of_each_block_once(study, monkeypatch):
    """Two threads (two lock holders: flock is per open file) on blocks 0-1 at once."""
    import threading
    import time as clock

    class Slow(FakeTrain):
        def __call__(self, *args, **kwargs):
            clock.sleep(0.2)
            return super().__call__(*args, **kwargs)

    fake = Slow()
    monkeypatch.setattr(blocks, "train", fake)
    out: list[list[blocks.BlockResult]] = []
    workers = [
        threading.Thread(
            target=lambda: out.append(
                blocks.run_blocks("smoke", "headline", [0, 1], share_blocks=True)
            )
        )
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert len(out) == 2
    assert sorted(fake.calls) == sorted(
        (m, 100 + b) for b in (0, 1) for m in ("at2po", "grpo", "grpo_tree_budget")
    )
    for b in (0, 1):
        record = json.loads((_root() / f"block{b:02d}" / "BLOCK.json").read_text())
        assert record["status"] == "finished" and len(record["runs"]) == 3
    statuses = sorted(r.status for results in out for r in results)
    assert statuses.count("finished") == 2  # each block swapped in once


def test_a_sharing_process_keeps_a_killed_blocks_runs_on_the_same_build_only(study, monkeypatch):
    _kill_block_in_its_second_run(monkeypatch)
    again = FakeTrain()
    monkeypatch.setattr(blocks, "train", again)
    (result,) = blocks.run_blocks("smoke", "headline", [0], share_blocks=True)
    assert result.status == "finished" and again.calls == [("grpo", 100), ("grpo_tree_budget", 100)]

    _kill_block_in_its_second_run_of(monkeypatch, block=1)
    monkeypatch.setattr(
        provenance.platform, "platform", lambda: PLATFORM.replace("fc-v669", "fc-v700")
    )
    third = FakeTrain()
    monkeypatch.setattr(blocks, "train", third)
    (result,) = blocks.run_blocks("smoke", "headline", [1], share_blocks=True, allow_revisions=True)
    assert third.calls == [("at2po", 101), ("grpo", 101), ("grpo_tree_budget", 101)]


def _kill_block_in_its_second_run_of(monkeypatch, block: int) -> None:
    killer = FakeTrain(kill_at=2)
    monkeypatch.setattr(blocks, "train", killer)
    with pytest.raises(_Kill):
        blocks.run_blocks("smoke", "headline", [block])


def test_a_process_of_other_conditions_leaves_a_block_others_train_alone(
    study, monkeypatch, capsys
):
    import os

    _kill_block_in_its_second_run(monkeypatch)
    staging = staging_path(_root() / "block00")
    monkeypatch.setattr(
        provenance.platform, "platform", lambda: PLATFORM.replace("fc-v669", "fc-v700")
    )
    untouched = FakeTrain()
    monkeypatch.setattr(blocks, "train", untouched)
    with folder_lock(staging / "grpo", "study block run"):  # a live process trains grpo
        (planned,) = blocks.block_plan("smoke", "headline", [0], keep_finished_runs=True)
        assert planned.state == "running" and planned.detail.startswith(f"PID {os.getpid()};")
        (result,) = blocks.run_blocks("smoke", "headline", [0], share_blocks=True)
    assert result.status == "held" and untouched.calls == []
    assert "trains it under other conditions (build fc-v669 then, fc-v700 now, platform" in (
        capsys.readouterr().err
    )
    assert json.loads((staging / "BLOCK.json").read_text())["runs"].keys() == {"at2po"}


def test_a_sharing_process_starts_no_run_past_the_deadline(study, monkeypatch):
    clock = _Clock()
    _timed(monkeypatch, clock, seconds=100)
    blocks.run_blocks("smoke", "headline", [0])  # times the set: 100 s a run
    fake = _timed(monkeypatch, clock, seconds=100)
    (result,) = blocks.run_blocks(
        "smoke", "headline", [1], share_blocks=True, deadline=clock.now + 150
    )
    assert result.status == "deferred" and [m for m, _ in fake.calls] == ["at2po"]
    (planned,) = blocks.block_plan("smoke", "headline", [1], keep_finished_runs=True)
    assert planned.runs_left == ("grpo", "grpo_tree_budget")


def test_a_process_of_whole_blocks_never_discards_a_block_others_share(study, monkeypatch, capsys):
    _kill_block_in_its_second_run(monkeypatch)
    staging = staging_path(_root() / "block00")
    before = sorted(p.relative_to(staging) for p in staging.rglob("*"))
    untouched = FakeTrain()
    monkeypatch.setattr(blocks, "train", untouched)
    with folder_lock(staging / "grpo", "study block run"):  # a sharing process trains grpo
        (result,) = blocks.run_blocks("smoke", "headline", [0])  # would re-run it whole
    assert result.status == "held" and untouched.calls == []
    assert "trains its runs with --share-blocks" in capsys.readouterr().err
    assert sorted(p.relative_to(staging) for p in staging.rglob("*")) == before


# ------------------------------------------------------------------ issue #66: never replaced
@pytest.mark.parametrize("share_blocks", [False, True])
def test_a_finished_block_is_never_replaced_by_a_finished_staging_record(study, share_blocks):
    import shutil

    (first,) = blocks.run_blocks("smoke", "headline", [0])
    folder = _root() / "block00"
    staging = staging_path(folder)
    shutil.copytree(folder, staging)  # a second record of the block, also saying finished
    (staging / "at2po" / "seed100" / "token").write_text("planted")
    with pytest.raises(ProfileError) as refused:
        blocks.run_blocks("smoke", "headline", [0], share_blocks=share_blocks)
    message = str(refused.value)
    assert "\n" not in message and "two finished records of block 0" in message
    assert str(folder / "BLOCK.json") in message and str(staging / "BLOCK.json") in message
    assert (folder / "at2po" / "seed100" / "token").read_text() == "call 1"
    assert (staging / "at2po" / "seed100" / "token").read_text() == "planted"


@pytest.mark.parametrize("where", ["finished", "staging"])
@pytest.mark.parametrize("plan", [True, False])
def test_a_torn_block_record_is_one_line_naming_it(study, capsys, where, plan):
    from at2po_lib import cli

    blocks.run_blocks("smoke", "headline", [0])
    folder = _root() / "block00"
    if where == "staging":
        folder.rename(staging_path(folder))
        folder = staging_path(folder)
    record = folder / "BLOCK.json"
    record.write_text(record.read_text()[:40])  # a write cut short
    capsys.readouterr()
    argv = ["study", "--profile", "smoke", "--block-set", "headline", "--blocks", "0"]
    assert cli.main(argv + (["--plan"] if plan else [])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{record}: not a readable block record" in err
    assert record.read_text().startswith("{")  # left as it was, for a person to look at


def test_a_block_record_of_wrong_types_is_refused_naming_the_field(study):
    blocks.run_blocks("smoke", "headline", [0])
    record = _root() / "block00" / "BLOCK.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "block": "0"}))
    with pytest.raises(RecordError, match=r"BLOCK.json: block is '0', not int"):
        block_records.read_block(record.parent)


def test_a_finished_block_missing_a_run_is_damaged_not_finished(study, capsys):
    import shutil

    from at2po_lib import cli

    blocks.run_blocks("smoke", "headline", [0])
    shutil.rmtree(_root() / "block00" / "grpo_tree_budget")
    (planned,) = blocks.block_plan("smoke", "headline", [0])
    assert planned.state == "damaged"
    assert "grpo_tree_budget/seed100 is not a finished run folder" in planned.detail
    capsys.readouterr()
    argv = ["study", "--profile", "smoke", "--block-set", "headline", "--blocks", "0"]
    assert cli.main(argv + ["--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a finished block that is not whole" in err
    assert study.calls == [("at2po", 100), ("grpo", 100), ("grpo_tree_budget", 100)]


def test_a_study_refuses_to_run_when_the_working_tree_is_not_the_imported_code(
    study, tmp_path, monkeypatch, capsys
):
    import subprocess

    from at2po_lib import cli

    other = tmp_path / "other-checkout"
    (other / "configs").mkdir(parents=True)
    (other / "at2po_lib").mkdir()
    (other / "at2po_lib" / "f.py").write_text("# another revision of the code\n")
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", *args], cwd=other, check=True, capture_output=True)
    monkeypatch.chdir(other)
    monkeypatch.delenv("AT2PO_HOME", raising=False)
    for argv in (["--block-set", "headline", "--blocks", "0"], ["--table", "1", "--seeds", "0"]):
        assert cli.main(["study", "--profile", "smoke", *argv, "--no-report"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not this checkout's" in err
    assert study.calls == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--block-set", "headline", "--blocks", "0-4294967295"], "expected integers in [0, 99]"),
        (["--table", "1", "--seeds", "0-99999"], "names 100,000 values; at most 100"),
        (["--table", "1", "--seeds", "0-4294967295"], "at most 100"),
        (["--block-set", "headline", "--blocks", "٣"], "expected integers (digits 0-9)"),
        (["--table", "1", "--seeds", "1,٣"], "expected integers (digits 0-9)"),
    ],
)
def test_study_lists_are_bounded_and_ascii_before_any_work(argv, message, capsys, isolated_outputs):
    import signal
    import time

    from at2po_lib import cli

    def too_slow(signum, frame):
        raise TimeoutError("no answer in 5 s")

    signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(5)  # the refusal comes before any list is built or run looked at
    started = time.monotonic()
    try:
        code = cli.main(["study", "--profile", "smoke", *argv, "--plan"])
    finally:
        signal.alarm(0)
    assert code == 2 and time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
