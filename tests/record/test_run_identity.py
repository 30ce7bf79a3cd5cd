"""What a run is (at2po_lib.record.identity): its effective settings, recorded apart from where
they came from (issue #49 item 1), and every committed run recognised by what it ran. Records of
earlier formats are rewritten by scripts/migrate_records.py (tests/test_migrate_records.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from at2po_lib.config.profile import load_profile
from at2po_lib.record import run_folder
from at2po_lib.record.identity import (
    ROLLOUT_READS,
    method_rollout,
    rollout_settings,
    run_identity,
    same_finished_run,
)
from at2po_lib.trainer.resolve import resolve_run
from at2po_lib.util.paths import repo_root

COMMITTED = repo_root() / "results"


def test_settings_a_run_does_not_read_do_not_make_it_another_run():
    """GRPO's record keeps no tree settings: a GRPO run recorded under a profile with other
    expansion settings is the same run."""
    grpo = resolve_run(load_profile("smoke"), "grpo", 0, world_size=1)
    elsewhere = load_profile(
        "smoke", {"rollout": {"entropy_estimate": "exact", "tree_alpha": 0.3, "tree_m": 2}}
    )
    assert resolve_run(elsewhere, "grpo", 0, world_size=1).identity() == grpo.identity()
    at2po = resolve_run(load_profile("smoke"), "at2po", 0, world_size=1)
    assert resolve_run(elsewhere, "at2po", 0, world_size=1).identity() != at2po.identity()


def test_a_record_holding_a_setting_the_code_no_longer_has_is_another_configuration():
    """A removed field leaves the records (scripts/migrate_records.py); one still holding it,
    at any value, is not read as a run of the current code."""
    spec = resolve_run(load_profile("smoke"), "at2po", 0, world_size=1)
    current = spec.record()
    assert run_identity(current) == spec.identity()
    current["settings"]["rollout"]["turn_length_ends_branch"] = False
    assert run_identity(current) != spec.identity()


def _spec_of(record: dict, seed: int | None = None):
    """Today's :class:`RunSpec` of a recorded run: its profile with its ``sources.set`` values,
    its method, its seed (or ``seed``)."""
    profile_set, trainer_set = {}, {}
    for key, value in record["sources"]["set"].items():
        section, name = key.split(".", 1)
        if section == "trainer":
            trainer_set[name] = value
        else:
            profile_set.setdefault(section, {})[name] = value
    return resolve_run(
        load_profile(record["profile"], profile_set or None),
        record["method"],
        record["seed"] if seed is None else seed,
        trainer_overrides=trainer_set,
        world_size=1,
    )


def test_every_committed_run_is_taken_by_train_not_retrained():
    """Run identity recognises every committed record (all in today's format): ``at2po train``
    of the run's method, seed and settings skips it; of the next seed, it does not. Outside the
    study's blocks the record's hash is today's (the blocks' records keep the hash their
    ``BLOCK.json`` names, with a removed field at its neutral value)."""
    finished = [
        p for p in sorted(COMMITTED.rglob("DONE.json")) if (p.parent / "config.yaml").is_file()
    ]
    assert len(finished) >= 271
    for done in finished:
        run = run_folder.RunDir(done.parent)
        record = yaml.safe_load(run.config.read_text())
        assert "settings" in record, run.config
        spec, other = _spec_of(record), _spec_of(record, record["seed"] + 1)
        digest = run_folder.config_hash(spec.record())
        assert same_finished_run(run, digest, spec.identity()), run.root
        assert not same_finished_run(run, run_folder.config_hash(other.record()), other.identity())
        if "blocks" not in done.relative_to(COMMITTED).parts:
            assert run_folder.is_finished(run, digest), run.root


# ------------------------------------------------ the rollout settings each expansion reads
OTHER_VALUES = {
    "chains": 3,
    "tree_m": 2,
    "tree_l": 2,
    "tree_k": 1,
    "tree_alpha": 0.7,
    "entropy_estimate": "exact",
    "turn_entropy": "max",
    "tree_grpo_trees": 4,
    "aepo_budget": 5,
    "aepo_initial": 2,
    "aepo_beam": 3,
    "aepo_entropy_weight": 0.9,
    "aepo_branch_threshold": 0.1,
    "aepo_branch_penalty": 0.3,
    "aepo_entropy_tokens": 4,
}
"""Another valid value of every expansion-specific rollout setting."""


def test_every_expansion_specific_setting_has_another_value_here():
    assert set(OTHER_VALUES) == {k for keys in ROLLOUT_READS.values() for k in keys}


@pytest.fixture(scope="module")
def toy(smoke_toy):
    return smoke_toy  # tests/conftest.py: one smoke ToySetup per module


def _grown(toy, rollout_cfg) -> list:
    """What training reads of one rollout: every training row's ids, masks, log-probs and
    reward, and each tree's shape."""
    from at2po_lib.rollout.export import training_rows
    from at2po_lib.rollout.trees import rollout

    questions, golden = toy.questions(2)
    trees = rollout(toy.sampler(rollout_cfg, seed=1), questions, golden, prompt_ids=[0, 1])
    rows = [
        {k: v for k, v in row.items() if not k.startswith("entrop")} for row in training_rows(trees)
    ]
    shapes = [[n.parent for n in t.nodes] for t in trees]
    return [rows, shapes]


@pytest.mark.slow
@pytest.mark.parametrize("expansion", sorted(ROLLOUT_READS))
def test_an_expansion_grows_the_same_trees_whatever_the_settings_it_does_not_read(toy, expansion):
    """:data:`ROLLOUT_READS` is what :func:`rollout_settings` keeps: every expansion-specific
    setting it leaves out of a run's record is changed here, all at once, and the rows the
    trainer reads come out identical."""
    base = method_rollout(toy.cfg, expansion)
    unread = {k: v for k, v in OTHER_VALUES.items() if k not in ROLLOUT_READS[expansion]}
    assert not set(unread) & set(rollout_settings(base, "vanilla"))
    changed = dataclasses.replace(base, **unread)
    assert rollout_settings(changed, "vanilla") == rollout_settings(base, "vanilla")
    first, second = _grown(toy, base), _grown(toy, changed)
    assert first[1] == second[1]
    assert len(first[0]) == len(second[0])
    for a, b in zip(*[g[0] for g in (first, second)]):
        assert a.keys() == b.keys()
        for key in a:
            assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), (expansion, key)
