"""What a run is (at2po_lib.trainer.identity): its effective settings, recorded apart from where
they came from, and runs recorded by earlier code in other formats recognised by what they ran
(issue #49 item 1).

The record formats before issue #49 are reproduced here as their code wrote them, from a
current run's :class:`~at2po_lib.trainer.resolve.RunSpec`: a record in that format of the same
configuration must be recognised, and one of another configuration must not."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from at2po_lib.config.profile import load_profile
from at2po_lib.method.presets import get_method
from at2po_lib.trainer import run_folder
from at2po_lib.trainer.at2po_config import TRL_LOSS_TYPES
from at2po_lib.trainer.identity import (
    LEGACY_LOSS_TYPES,
    ROLLOUT_READS,
    method_rollout,
    recorded_identity,
    rollout_settings,
    run_identity,
    same_finished_run,
)
from at2po_lib.trainer.resolve import resolve_run


def profile_format(spec, profile=None) -> dict:
    """The record as the code of issues #25-#48 wrote it (RunSpec.record then): the whole
    profile as loaded, the preset's fields with its fixed rollout settings under ``rollout``,
    the trainer overrides and the trainer fields. ``profile``: the profile dict it held."""
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


def renovation_format(spec) -> dict:
    """The record as the code before issue #25 wrote it (RunSpec.legacy_record then): the chain
    count in ``train.chain_leaves``, the rollout's knobs mirrored as trainer fields, the
    preset's expansion as ``tree_expansion``, TRL's ``loss_type``, ``tree_dynamic_sampling``,
    and no ``rollout.turn_entropy`` (added later)."""
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
def test_a_record_of_earlier_code_is_the_run_of_the_same_settings(method):
    spec = resolve_run(load_profile("smoke"), method, 3, world_size=1)
    assert run_identity(spec.record()) == spec.identity()
    for old in (profile_format(spec), renovation_format(spec)):
        assert run_identity(old) == spec.identity()
        assert run_folder.config_hash(old) != run_folder.config_hash(spec.record())
    other = resolve_run(
        load_profile("smoke", {"train": {"learning_rate": 1e-3}}), method, 3, world_size=1
    )
    assert run_identity(profile_format(other)) != spec.identity()
    assert (
        run_identity(profile_format(spec))
        != resolve_run(load_profile("smoke"), method, 4, world_size=1).identity()
    )


def test_the_variant_recorded_under_at2po_with_its_settings_in_the_profile_is_the_variant():
    """at2po_exact's study runs: method ``at2po``, the exact entropy and alpha 0.001 in the
    profile itself, no fixed settings in the preset (before issue #35 named the variant)."""
    exact = resolve_run(load_profile("smoke"), "at2po_exact", 0, world_size=1)
    old_profile = load_profile(
        "smoke", {"rollout": {"entropy_estimate": "exact", "tree_alpha": 0.001}}
    )
    recorded = profile_format(
        resolve_run(old_profile, "credit_entropy_softmax_node_value", 0, world_size=1)
    )
    recorded["method"] = "at2po"
    assert run_identity(recorded) == exact.identity()
    assert (
        run_identity(recorded)
        != resolve_run(load_profile("smoke"), "at2po", 0, world_size=1).identity()
    )


def test_settings_a_run_does_not_read_do_not_make_it_another_run():
    """GRPO's record keeps no tree settings: a GRPO run recorded under a profile with other
    expansion settings is the same run."""
    grpo = resolve_run(load_profile("smoke"), "grpo", 0, world_size=1)
    elsewhere = load_profile(
        "smoke", {"rollout": {"entropy_estimate": "exact", "tree_alpha": 0.3, "tree_m": 2}}
    )
    assert run_identity(profile_format(grpo, elsewhere.to_dict())) == grpo.identity()
    at2po = resolve_run(load_profile("smoke"), "at2po", 0, world_size=1)
    assert run_identity(profile_format(at2po, elsewhere.to_dict())) != at2po.identity()


def test_a_profile_field_added_later_at_its_neutral_value_is_the_same_run():
    mean = resolve_run(load_profile("smoke"), "at2po", 0, world_size=1)
    old = profile_format(mean)
    del old["profile"]["rollout"]["turn_entropy"]
    assert run_identity(old) == mean.identity()
    other = resolve_run(
        load_profile("smoke", {"rollout": {"turn_entropy": "max"}}), "at2po", 0, world_size=1
    )
    assert run_identity(old) != other.identity()
    gone = profile_format(mean)
    gone["profile"]["rollout"]["a_removed_knob"] = 1
    assert run_identity(gone) is None  # not readable as a current run: another configuration


def test_a_profile_field_removed_since_is_the_same_run_at_its_neutral_value_only():
    """Records hold ``rollout.turn_length_ends_branch`` (removed with issue #49): at false, what
    the code does now, in either format; at true, a rule the code no longer has."""
    spec = resolve_run(load_profile("smoke"), "at2po", 0, world_size=1)
    old = profile_format(spec)
    old["profile"]["rollout"]["turn_length_ends_branch"] = False
    assert run_identity(old) == spec.identity()
    current = spec.record()
    current["settings"]["rollout"]["turn_length_ends_branch"] = False
    assert run_identity(current) == spec.identity()
    for record, rollout in (
        (old, old["profile"]["rollout"]),
        (current, current["settings"]["rollout"]),
    ):
        rollout["turn_length_ends_branch"] = True
        assert run_identity(record) is None


def test_legacy_loss_types_invert_the_trainer_map():
    assert LEGACY_LOSS_TYPES == {v: k for k, v in TRL_LOSS_TYPES.items()}


def test_a_finished_run_in_an_earlier_format_is_skipped_not_retrained(tmp_path):
    import json

    import yaml

    spec = resolve_run(load_profile("smoke"), "at2po", 0, world_size=1)
    old = profile_format(spec)
    run = run_folder.RunDir(tmp_path / "seed0")
    run.root.mkdir()
    old_hash = run_folder.config_hash(old)
    run.config.write_text(yaml.safe_dump({**old, "config_hash": old_hash}))
    run.done.write_text(json.dumps({"config_hash": old_hash}))
    assert recorded_identity(run.config) == spec.identity()
    digest = run_folder.config_hash(spec.record())
    assert same_finished_run(run, digest, spec.identity())
    exact = resolve_run(load_profile("smoke"), "at2po_exact", 0, world_size=1)
    assert not same_finished_run(run, run_folder.config_hash(exact.record()), exact.identity())


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
    trees = rollout(
        toy.model,
        toy.tokenizer,
        toy.template,
        toy.retriever,
        questions,
        golden,
        rollout_cfg,
        expansion=rollout_cfg.expansion,
        seed=1,
        prompt_ids=[0, 1],
    )
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
