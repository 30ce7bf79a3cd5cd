"""AT2PO, its named variants and how runs recorded under the old name or the old profile are
recognised (issue #35 items 1, 2; issue #49 item 1: one AT2PO, the profile holds the authors'
settings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from at2po_lib.method.credit import sibling_spread
from at2po_lib.config.profile import ProfileError, RolloutConfig, load_profile
from at2po_lib.method.presets import EXACT_EXPANSION, METHODS, VARIANT_METHODS
from at2po_lib.record import run_folder
from at2po_lib.record.identity import same_finished_run
from at2po_lib.trainer.resolve import check_fixed_rollout, resolve_run
from at2po_lib.study.run import train

RUNS = Path(__file__).resolve().parents[2] / "results" / "runs" / "tiny"


def recognised(spec, folder: Path) -> bool:
    """Would ``train``/``study`` take the finished run in ``folder`` for ``spec``'s run?"""
    return same_finished_run(
        run_folder.RunDir(folder), run_folder.config_hash(spec.record()), spec.identity()
    )


def test_the_profile_holds_the_authors_settings_and_at2po_takes_them():
    """One home per knob: config/profile.py's defaults are the authors' code's, no shipped profile
    overrides them, and the at2po preset fixes nothing: it runs what the profile says."""
    assert (RolloutConfig().entropy_estimate, RolloutConfig().tree_alpha) == ("sampled_nll", 0.05)
    assert METHODS["at2po"].rollout == {}
    for profile in ("tiny", "smoke", "paper-qwen3-4b"):
        cfg = load_profile(profile)
        assert (cfg.rollout.entropy_estimate, cfg.rollout.tree_alpha) == ("sampled_nll", 0.05)
        spec = resolve_run(cfg, "at2po", 0, world_size=1)
        assert (spec.rollout.entropy_estimate, spec.rollout.tree_alpha) == ("sampled_nll", 0.05)
    moved = load_profile("smoke", {"rollout": {"tree_alpha": 0.1}})
    assert resolve_run(moved, "at2po", 0, world_size=1).rollout.tree_alpha == 0.1


def test_the_exact_variant_names_what_it_changes():
    tiny = load_profile("tiny")
    exact = resolve_run(tiny, "at2po_exact", 0, world_size=1)
    assert (
        METHODS["at2po_exact"].rollout
        == EXACT_EXPANSION
        == {"entropy_estimate": "exact", "tree_alpha": 0.001}
    )
    assert (exact.rollout.entropy_estimate, exact.rollout.tree_alpha) == ("exact", 0.001)
    # Table 3's cells and Table 2's step 3 take them from the profile, as AT2PO does
    cell = resolve_run(tiny, "credit_child_mean_node_value", 0, world_size=1)
    assert (cell.rollout.entropy_estimate, cell.rollout.tree_alpha) == ("sampled_nll", 0.05)
    # the variant and AT2PO differ in the rollout settings only
    authors = resolve_run(tiny, "at2po", 0, world_size=1)
    assert authors.trainer == exact.trainer
    assert authors.settings()["rollout"] == {
        **exact.settings()["rollout"],
        "entropy_estimate": "sampled_nll",
        "tree_alpha": 0.05,
    }


def test_a_run_records_its_effective_settings_and_apart_where_they_came_from():
    cfg = load_profile("smoke", {"train": {"max_steps": 7}})
    record = resolve_run(cfg, "at2po_exact", 0, {"beta": 0.01}, world_size=1).record()
    settings, sources = record["settings"], record["sources"]
    # effective: one value per knob, nothing left to merge
    assert (settings["rollout"]["entropy_estimate"], settings["rollout"]["tree_alpha"]) == (
        "exact",
        0.001,
    )
    assert settings["train"]["max_steps"] == 7 and settings["trainer"]["beta"] == 0.01
    assert settings["trainer"]["loss_level"] == "turn"
    assert "preset" not in record and "profile" not in settings
    # where each came from: the preset's, --set's, every other key the profile's
    assert sources["profile"] == "smoke"
    assert sources["preset"]["rollout.entropy_estimate"] == "exact"
    assert sources["preset"]["rollout.expansion"] == "entropy"
    assert sources["preset"]["trainer.loss_level"] == "turn"
    assert sources["set"] == {"train.max_steps": 7, "trainer.beta": 0.01}
    # provenance is not identity: the same settings by another route hash the same
    digest = run_folder.config_hash(record)
    assert digest == run_folder.config_hash({**record, "sources": {"profile": "elsewhere"}})


def test_a_chain_run_records_only_the_rollout_settings_it_reads():
    record = resolve_run(load_profile("tiny"), "grpo", 0, world_size=1).record()
    rollout = record["settings"]["rollout"]
    assert rollout["expansion"] == "chain" and rollout["chains"] == 6
    assert not {"tree_m", "tree_alpha", "entropy_estimate", "aepo_budget"} & set(rollout)


def test_grpo_at_the_tree_budget_samples_as_many_chains_as_the_tree_has_leaves():
    for profile in ("tiny", "paper-qwen3-4b"):
        cfg = load_profile(profile)
        spec = resolve_run(cfg, "grpo_tree_budget", 0, world_size=1)
        leaves = cfg.rollout.tree_m + cfg.rollout.tree_l * cfg.rollout.tree_k
        assert (spec.rollout.expansion, spec.rollout.chains) == ("chain", leaves)
        assert spec.trainer["num_generations"] == leaves
        grpo = resolve_run(cfg, "grpo", 0, world_size=1)
        assert grpo.rollout.chains == cfg.rollout.chains != leaves
        # everything but the chain count (and so the batch geometry) is GRPO's
        geometry = {
            "num_generations",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "steps_per_generation",
        }
        assert {k: v for k, v in spec.trainer.items() if k not in geometry} == {
            k: v for k, v in grpo.trainer.items() if k not in geometry
        }


def test_setting_a_fixed_rollout_key_is_refused_naming_the_method():
    with pytest.raises(
        ProfileError, match=r"method 'at2po_exact' fixes rollout\.tree_alpha=0\.001"
    ):
        check_fixed_rollout("at2po_exact", {"rollout": {"tree_alpha": 0.1}})
    check_fixed_rollout("at2po_exact", {"rollout": {"tree_m": 2}})  # not fixed: allowed
    check_fixed_rollout("at2po", {"rollout": {"tree_alpha": 0.1}})  # at2po fixes nothing
    with pytest.raises(ProfileError, match="fixes rollout.entropy_estimate"):
        train(
            "smoke",
            "at2po_exact",
            0,
            profile_overrides={"rollout": {"entropy_estimate": "sampled_nll"}},
        )


def _committed(method: str) -> list[Path]:
    return sorted(p for p in (RUNS / method).glob("seed*") if (p / "DONE.json").is_file())


def test_the_committed_runs_are_recognised_by_what_they_ran():
    """The study's runs were trained before issue #49 (the whole profile, with the exact
    entropy and alpha 0.001, plus the preset's fixed settings; their records migrated since by
    scripts/migrate_records.py): each is recognised as the run of the same effective settings
    now, not retrained. Table 2's step 3 and Table 3's cells ran
    the variant's settings, so under the profile's they are another configuration (kept and
    reported as they are until the study re-runs them)."""
    tiny = load_profile("tiny")
    exact_runs, authors_runs = _committed("at2po_exact"), _committed("at2po")
    assert len(exact_runs) >= 21 and len(authors_runs) >= 12
    for folder in exact_runs:
        seed = int(folder.name.removeprefix("seed"))
        assert recognised(resolve_run(tiny, "at2po_exact", seed), folder), folder
        assert not recognised(resolve_run(tiny, "at2po", seed), folder), folder
    for folder in authors_runs:
        seed = int(folder.name.removeprefix("seed"))
        assert recognised(resolve_run(tiny, "at2po", seed), folder), folder
        assert not recognised(resolve_run(tiny, "at2po_exact", seed), folder), folder
    for method in (
        "react",
        "grpo",
        "dapo",
        "gspo",
        "aepo",
        "tree_grpo",
        "grpo_tree_budget",
        "ablation_random_tree_grpo",
        "ablation_atpo_loss",
    ):
        for folder in _committed(method):
            seed = int(folder.name.removeprefix("seed"))
            assert recognised(resolve_run(tiny, method, seed), folder), folder
            assert not recognised(resolve_run(tiny, method, seed + 1), folder), folder
    for method in ("ablation_entropy_tree", "credit_child_mean_node_value"):
        for folder in _committed(method):
            seed = int(folder.name.removeprefix("seed"))
            assert not recognised(resolve_run(tiny, method, seed), folder), folder
            variant = load_profile("tiny", {"rollout": dict(EXACT_EXPANSION)})
            assert recognised(resolve_run(variant, method, seed), folder), folder


def test_variants_are_named_and_listed():
    assert set(VARIANT_METHODS) == {"at2po_exact", "grpo_tree_budget"}
    assert all(METHODS[m].table == "variant" for m in VARIANT_METHODS)


def test_sibling_spread_by_hand():
    # root -> 1, 2 (H 0.1, 0.3); 1 -> 3, 4, 5 (H 0, 0, 0.3); 2 -> 6 (a single child: no set)
    parent, entropy = [-1, 0, 0, 1, 1, 1, 2], [0, 0.1, 0.3, 0, 0, 0.3, 5.0]
    dev, spread, size = sibling_spread(parent, entropy)
    w2 = np.exp([0.1, 0.3]) / np.exp([0.1, 0.3]).sum()
    w3 = np.exp([0, 0, 0.3]) / np.exp([0, 0, 0.3]).sum()
    assert dev == pytest.approx([np.abs(w2 - 1 / 2).mean(), np.abs(w3 - 1 / 3).mean()])
    assert spread == pytest.approx([0.2, 0.3]) and size.tolist() == [2, 3]
    # shift invariance: adding a constant to every entropy moves no weight
    shifted, _, _ = sibling_spread(parent, np.asarray(entropy) + 7.0)
    assert shifted == pytest.approx(dev)
    # the child mean sits at zero deviation whatever the spread
    assert sibling_spread(parent, entropy, "child_mean")[0] == pytest.approx([0.0, 0.0])
