"""scripts/migrate_records.py: every committed record in today's format, with no machine's path
(issue #64 items 1-2), and records of earlier formats migrated to what today's code records.

The earlier formats are reproduced here as their code wrote them, from a committed run's
configuration: put back into the format its code wrote, a committed run migrates back to the
committed bytes, and a record of another configuration is not taken for it."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from at2po_lib.config.profile import load_profile
from at2po_lib.method.presets import get_method
from at2po_lib.record import run_folder
from at2po_lib.trainer.at2po_config import TRL_LOSS_TYPES
from at2po_lib.trainer.resolve import resolve_run
from at2po_lib.util.paths import repo_root

sys.path.insert(0, str(repo_root() / "scripts"))
import migrate_records  # noqa: E402

COMMITTED = repo_root() / "results"


def profile_format(spec, profile=None) -> dict:
    """The record as the code before today's format wrote it: the whole profile as loaded, the
    preset's fields with its fixed rollout settings under ``rollout``, the trainer overrides
    and the trainer fields. ``profile``: the profile dict it held."""
    preset = get_method(spec.method)
    recorded = dict(preset.overrides)
    if preset.rollout:
        recorded["rollout"] = dict(preset.rollout)
    return {
        "profile": profile or spec.profile.to_dict(),
        "method": spec.method,
        "seed": spec.seed,
        "preset": recorded,
        "trainer_overrides": dict(spec.trainer_overrides),
        "trainer": {k: v for k, v in spec.trainer.items() if k != "use_cpu"},
    }


def oldest_format(spec) -> dict:
    """The record as the oldest code wrote it: the chain count in ``train.chain_leaves``, the
    rollout's knobs mirrored as trainer fields, the preset's expansion as ``tree_expansion``,
    TRL's ``loss_type``, ``tree_dynamic_sampling``, and no ``rollout.turn_entropy``."""
    record = copy.deepcopy(profile_format(spec))
    record["profile"]["train"]["chain_leaves"] = record["profile"]["rollout"].pop("chains")
    del record["profile"]["rollout"]["turn_entropy"]
    for fields in (record["preset"], record["trainer_overrides"], record["trainer"]):
        if "loss_aggregation" in fields:
            fields["loss_type"] = TRL_LOSS_TYPES[fields.pop("loss_aggregation")]
        if "dynamic_sampling" in fields:
            fields["tree_dynamic_sampling"] = fields.pop("dynamic_sampling")
    if spec.geometry is None:
        return record
    rollout, chain = spec.rollout, spec.rollout.expansion == "chain"
    record["preset"]["tree_expansion"] = rollout.expansion
    record["trainer"].update(
        tree_m=rollout.chains if chain else rollout.tree_m,
        tree_l=0 if chain else rollout.tree_l,
        tree_k=0 if chain else rollout.tree_k,
        tree_alpha=rollout.tree_alpha,
        tree_aepo_beam=rollout.aepo_beam,
        tree_expansion=rollout.expansion,
    )
    if rollout.expansion == "aepo":
        record["trainer"]["tree_aepo_initial"] = rollout.aepo_initial
    return record


METHODS = (
    "react",
    "grpo",
    "dapo",
    "aepo",
    "tree_grpo",
    "grpo_tree_budget",
    "at2po",
    "at2po_exact",
    "ablation_atpo_loss",
    "credit_child_mean_diff_parent",
)


@pytest.mark.parametrize("method", METHODS)
def test_a_record_of_earlier_code_is_read_as_the_run_of_the_same_settings(method):
    spec = resolve_run(load_profile("smoke"), method, 3, world_size=1)
    for old in (profile_format(spec), oldest_format(spec)):
        assert migrate_records.legacy_identity(old) == spec.identity()
        assert migrate_records.today_spec(old, method).record() == spec.record()
    other = resolve_run(
        load_profile("smoke", {"train": {"learning_rate": 1e-3}}), method, 3, world_size=1
    )
    assert migrate_records.legacy_identity(profile_format(other)) != spec.identity()


def test_a_field_added_since_counts_at_its_neutral_value_and_a_removed_one_only_at_it():
    spec = resolve_run(load_profile("smoke"), "at2po", 0, world_size=1)
    old = profile_format(spec)
    del old["profile"]["rollout"]["turn_entropy"]
    assert migrate_records.legacy_identity(old) == spec.identity()
    old["profile"]["rollout"]["turn_length_ends_branch"] = False
    assert migrate_records.legacy_identity(old) == spec.identity()
    old["profile"]["rollout"]["turn_length_ends_branch"] = True
    assert migrate_records.legacy_identity(old) is None
    assert migrate_records.today_spec(old, "at2po") is None
    gone = profile_format(spec)
    gone["profile"]["rollout"]["a_removed_knob"] = 1
    assert migrate_records.legacy_identity(gone) is None


def test_the_loss_types_of_the_oldest_records_invert_the_trainer_map():
    assert migrate_records.LEGACY_LOSS_TYPES == {v: k for k, v in TRL_LOSS_TYPES.items()}


def test_a_machine_path_keeps_its_place_in_the_results_or_artifacts_folder():
    shown = migrate_records.machine_path_as_recorded
    assert shown("/work/wt-l4/results/tiny/warmstart_base") == "results/tiny/warmstart_base"
    assert (
        shown("/work/wt-l4/artifacts/tiny/policy/step-00500") == "artifacts/tiny/policy/step-00500"
    )
    assert shown("/tmp/at2po_s0_final") == "<outside>/at2po_s0_final"
    assert shown("/work/study/at2po_s0_rerun/") == "<outside>/at2po_s0_rerun"


def test_the_committed_records_are_in_todays_format_and_name_no_machine_path():
    """Running the script over the committed results changes nothing and leaves no run."""
    changed, refused = migrate_records.migrate(COMMITTED, write=False)
    assert (changed, refused) == ([], [])


def _as_written_then(run: Path, record: dict, machine: str) -> None:
    """``run``'s records as the code before today's format wrote them: ``record`` with its
    hash in config.yaml, DONE.json and meta.json, and DONE.json naming ``machine``'s staging
    folder."""
    old_hash, new_hash = (
        run_folder.config_hash(record),
        yaml.safe_load((run / "config.yaml").read_text())["config_hash"],
    )
    (run / "config.yaml").write_text(yaml.safe_dump({**record, "config_hash": old_hash}))
    done = json.loads((run / "DONE.json").read_text())
    done["final_eval"] = f"{machine}/results/.staging/{run.name}/final_eval.csv"
    text = json.dumps(done, indent=2) + "\n"
    (run / "DONE.json").write_text(text.replace(new_hash, old_hash))
    meta = run / "meta.json"
    meta.write_text(meta.read_text().replace(new_hash, old_hash))


@pytest.mark.parametrize(
    ("method", "recorded_as", "written"),
    [
        ("grpo", "grpo", oldest_format),
        ("at2po", "at2po", profile_format),
        # at2po_exact's runs were recorded under at2po, the variant's settings in the profile
        ("at2po_exact", "at2po", profile_format),
        # ran the variant's settings under the profile: today's record says so in sources.set
        ("ablation_entropy_tree", "ablation_entropy_tree", profile_format),
    ],
)
def test_a_committed_run_written_in_an_earlier_format_migrates_back_to_its_record(
    tmp_path, method, recorded_as, written
):
    committed = COMMITTED / "runs" / "tiny" / method / "seed0"
    results = tmp_path / "results"
    run = results / "runs" / "tiny" / method / "seed0"
    shutil.copytree(committed, run)
    record = yaml.safe_load((committed / "config.yaml").read_text())
    sections = {
        **{k: v for k, v in record["settings"].items() if k not in ("rollout", "trainer")},
        "rollout": {**load_profile("tiny").to_dict()["rollout"], **record["settings"]["rollout"]},
    }
    profile = load_profile("tiny", sections)
    old_record = written(resolve_run(profile, method, 0, world_size=1))
    old_record["method"] = recorded_as
    _as_written_then(run, old_record, machine=str(tmp_path / "another_machine"))
    changed, refused = migrate_records.migrate(results, write=True)
    assert refused == [] and len(changed) == 2  # the config and the DONE.json's path
    for name in ("config.yaml", "DONE.json", "meta.json"):
        assert (run / name).read_bytes() == (committed / name).read_bytes(), name


def test_a_block_run_keeps_its_config_and_its_staging_path_becomes_its_place(tmp_path):
    """A block's record holds its runs' hashes: their config.yaml stays as it is."""
    block = COMMITTED / "blocks" / "tiny" / "headline" / "block00"
    results = tmp_path / "results"
    copy = results / "blocks" / "tiny" / "headline" / "block00"
    shutil.copytree(block, copy)
    run = copy / "grpo" / "seed100"
    done = json.loads((run / "DONE.json").read_text())
    done["final_eval"] = str(tmp_path / "wt/results/blocks/tiny/headline/.block00.staging/x.csv")
    (run / "DONE.json").write_text(json.dumps(done, indent=2) + "\n")
    changed, refused = migrate_records.migrate(results, write=True)
    assert (len(changed), refused) == (1, [])
    assert (run / "DONE.json").read_bytes() == (block / "grpo/seed100/DONE.json").read_bytes()
    for path in block.rglob("*"):
        if path.is_file():
            assert (copy / path.relative_to(block)).read_bytes() == path.read_bytes(), path


def test_what_git_ignores_in_the_results_folder_is_no_record(tmp_path):
    """A notebook's executed run (git-ignored) may hold this machine's paths; the script neither
    reports nor rewrites it, and rewrites the committed file beside it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("results/executed/\n")
    results = tmp_path / "results"
    executed = results / "executed" / "tiny" / "notes.txt"
    committed = results / "tiny" / "notes.txt"
    for path in (executed, committed):
        path.parent.mkdir(parents=True)
        path.write_text("trained from /work/elsewhere/results/tiny/warmstart\n")
    changed, refused = migrate_records.migrate(results, write=True)
    assert (changed, refused) == ([f"{committed}: machine paths made relative"], [])
    assert committed.read_text() == "trained from results/tiny/warmstart\n"
    assert executed.read_text() == "trained from /work/elsewhere/results/tiny/warmstart\n"


def _put_back_removed_field(run: Path, block_record: Path) -> str:
    """The run's config.yaml as the study wrote it before the field was removed: the field in
    its rollout settings at ``false`` and that record's hash in its records and its block's.
    Returns the hash."""
    record = yaml.safe_load((run / "config.yaml").read_text())
    today = record.pop("config_hash")
    rollout = record["settings"]["rollout"]
    at = list(rollout).index("max_turn_tokens") + 1
    items = list(rollout.items())
    record["settings"]["rollout"] = dict(
        items[:at] + [("turn_length_ends_branch", False)] + items[at:]
    )
    old = run_folder.config_hash(record)
    run_folder.write_config(run_folder.RunDir(run), {**record, "config_hash": old})
    for path in (run / "DONE.json", run / "meta.json", block_record):
        path.write_text(path.read_text().replace(f'"{today}"', f'"{old}"'))
    return old


def test_a_removed_field_leaves_a_block_run_and_its_hash_changes_in_every_record(tmp_path):
    block = COMMITTED / "blocks" / "tiny" / "headline" / "block03"
    results = tmp_path / "results"
    copy_ = results / "blocks" / "tiny" / "headline" / "block03"
    shutil.copytree(block, copy_)
    run = copy_ / "at2po" / "seed103"
    old = _put_back_removed_field(run, copy_ / "BLOCK.json")
    assert old in (copy_ / "BLOCK.json").read_text()
    changed, refused = migrate_records.migrate(results, write=True)
    assert refused == [] and len(changed) == 1 and old in changed[0]
    for path in block.rglob("*"):
        if path.is_file():
            assert (copy_ / path.relative_to(block)).read_bytes() == path.read_bytes(), path
    # at the value of a rule the code no longer has, the run is left as it is
    config = run / "config.yaml"
    _put_back_removed_field(run, copy_ / "BLOCK.json")
    config.write_text(config.read_text().replace("ends_branch: false", "ends_branch: true"))
    before = config.read_bytes()
    changed, refused = migrate_records.migrate(results, write=True)
    assert len(refused) == 1 and str(config) in refused[0]
    assert config.read_bytes() == before


def test_a_removed_field_leaves_the_warm_starts_record_and_key(tmp_path):
    from at2po_lib.warmstart.cache import cache_key

    shipped = COMMITTED / "tiny" / "warmstart" / "warmstart.json"
    record = tmp_path / "results" / "tiny" / "warmstart" / "warmstart.json"
    record.parent.mkdir(parents=True)
    data = json.loads(shipped.read_text())
    assert data["cache_key"] == cache_key(load_profile("tiny"))  # the profile finds it
    rollout = list(data["config"]["rollout"].items())
    data["config"]["rollout"] = dict(
        rollout[:5] + [("turn_length_ends_branch", False)] + rollout[5:]
    )
    data["cache_key"] = "0123456789abcdef"
    record.write_text(json.dumps(data, indent=1) + "\n")
    changed, refused = migrate_records.migrate(tmp_path / "results", write=True)
    assert (len(changed), refused) == (1, [])
    assert record.read_bytes() == shipped.read_bytes()


def test_a_removed_field_leaves_a_meta_line_by_line_or_not_at_all(tmp_path):
    meta = tmp_path / "results" / "tiny" / "x.csv.meta.json"
    meta.parent.mkdir(parents=True)
    body = '{\n  "config": {\n    "max_turn_tokens": 0,\n%s    "top_p": 1.0\n  }\n}\n'
    meta.write_text(body % '    "turn_length_ends_branch": false,\n')
    changed, refused = migrate_records.migrate(tmp_path / "results", write=True)
    assert (len(changed), refused) == (1, [])
    assert meta.read_text() == body % ""
    last = '{\n  "config": {\n    "top_p": 1.0,\n    "turn_length_ends_branch": false\n  }\n}\n'
    meta.write_text(last)  # the last key: its line cannot go alone
    changed, refused = migrate_records.migrate(tmp_path / "results", write=True)
    assert len(refused) == 1 and meta.read_text() == last
