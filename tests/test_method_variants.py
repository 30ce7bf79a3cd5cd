"""The authors' AT2PO preset, its named variants and how runs recorded under the old name are
recognised (issue #35 item 1, 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from at2po_lib.analysis.dissection import sibling_spread
from at2po_lib.config import ProfileError, load_profile
from at2po_lib.method.presets import AUTHORS_EXPANSION, METHODS, VARIANT_METHODS
from at2po_lib.trainer import run_folder
from at2po_lib.trainer.resolve import check_fixed_rollout, resolve_run
from at2po_lib.trainer.run import train

RUNS = Path(__file__).resolve().parents[1] / "results" / "runs" / "tiny"


def same_run_hashes(spec) -> set[str]:
    return {run_folder.config_hash(r) for r in (spec.record(), *spec.earlier_records())}


@pytest.mark.parametrize("profile", ["tiny", "smoke", "paper-qwen3-4b"])
def test_at2po_uses_the_authors_estimator_and_alpha_on_every_profile(profile):
    spec = resolve_run(load_profile(profile), "at2po", 0, world_size=1)
    assert (spec.rollout.entropy_estimate, spec.rollout.tree_alpha) == ("sampled_nll", 0.05)
    assert AUTHORS_EXPANSION == {"entropy_estimate": "sampled_nll", "tree_alpha": 0.05}
    assert spec.record()["preset"]["rollout"] == dict(AUTHORS_EXPANSION)


def test_exact_variant_and_profile_presets_keep_the_tiny_settings():
    tiny = load_profile("tiny")
    exact = resolve_run(tiny, "at2po_exact", 0, world_size=1)
    assert (exact.rollout.entropy_estimate, exact.rollout.tree_alpha) == ("exact", 0.001)
    # Table 3's cells and Table 2's step 3 take them from the profile (their study runs)
    cell = resolve_run(tiny, "credit_child_mean_node_value", 0, world_size=1)
    assert (cell.rollout.entropy_estimate, cell.rollout.tree_alpha) == (
        tiny.rollout.entropy_estimate, tiny.rollout.tree_alpha)
    # the variant and the authors' preset differ in the rollout settings only
    authors = resolve_run(tiny, "at2po", 0, world_size=1)
    assert authors.trainer == exact.trainer


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
        geometry = {"num_generations", "per_device_train_batch_size",
                    "gradient_accumulation_steps", "steps_per_generation"}
        assert ({k: v for k, v in spec.trainer.items() if k not in geometry}
                == {k: v for k, v in grpo.trainer.items() if k not in geometry})


def test_setting_a_fixed_rollout_key_is_refused_naming_the_method():
    with pytest.raises(ProfileError, match=r"method 'at2po' fixes rollout\.tree_alpha=0\.05"):
        check_fixed_rollout("at2po", {"rollout": {"tree_alpha": 0.1}})
    check_fixed_rollout("at2po", {"rollout": {"tree_m": 2}})  # not fixed: allowed
    check_fixed_rollout("credit_entropy_softmax_node_value", {"rollout": {"tree_alpha": 0.1}})
    with pytest.raises(ProfileError, match="fixes rollout.entropy_estimate"):
        train("smoke", "at2po", 0, profile_overrides={"rollout": {"entropy_estimate": "exact"}})


def _committed(method: str) -> list[Path]:
    return sorted(p for p in (RUNS / method).glob("seed*") if (p / "DONE.json").is_file())


def test_the_committed_exact_runs_are_the_exact_variant_and_other_hashes_are_unchanged():
    tiny = load_profile("tiny")
    exact_runs = _committed("at2po_exact")
    assert len(exact_runs) >= 21
    for folder in exact_runs:
        seed = int(folder.name.removeprefix("seed"))
        recorded = json.loads((folder / "DONE.json").read_text())["config_hash"]
        assert recorded in same_run_hashes(resolve_run(tiny, "at2po_exact", seed))
        # ...and not the authors' AT2PO: another configuration
        assert recorded not in same_run_hashes(resolve_run(tiny, "at2po", seed))
    for method in ("grpo", "tree_grpo", "ablation_entropy_tree", "credit_child_mean_node_value"):
        for folder in _committed(method):
            seed = int(folder.name.removeprefix("seed"))
            recorded = json.loads((folder / "DONE.json").read_text())["config_hash"]
            assert recorded in same_run_hashes(resolve_run(tiny, method, seed)), folder


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
