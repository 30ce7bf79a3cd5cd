"""Trainer pieces that need no model: config subclass, presets, records, credit wiring, plots."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.trainer import records
from at2po_lib.trainer.methods import (METHODS, TABLE1_METHODS, TABLE2_METHODS, format_methods,
                                       get_method)


# ----------------------------------------------------------------------------- presets
def test_table1_methods_follow_method_md_section_8():
    assert TABLE1_METHODS == ("react", "grpo", "dapo", "gspo", "tree_grpo", "aepo", "at2po")
    assert not get_method("react").trains
    grpo = get_method("grpo").overrides
    assert (grpo["tree_expansion"], grpo["loss_level"], grpo["epsilon"], grpo["beta"]) == \
        ("chain", "token", 0.2, 1e-3)
    dapo = get_method("dapo").overrides
    assert (dapo["epsilon"], dapo["epsilon_high"], dapo["loss_type"]) == (0.2, 0.28, "dapo")
    assert dapo["tree_dynamic_sampling"]
    gspo = get_method("gspo").overrides
    assert (gspo["loss_level"], gspo["epsilon"], gspo["epsilon_high"]) == ("sequence", 3e-4, 4e-4)
    assert get_method("tree_grpo").overrides["credit_advantage"] == "tree_grpo"
    aepo = get_method("aepo").overrides
    assert aepo["loss_entropy_balanced_clip"] and aepo["loss_entropy_aware_adv"] == 0.2
    at2po = get_method("at2po").overrides
    assert (at2po["tree_expansion"], at2po["credit_value"], at2po["credit_advantage"],
            at2po["loss_level"], at2po["epsilon"], at2po["epsilon_high"]) == \
        ("entropy", "entropy_softmax", "node_value", "turn", 3e-3, 4e-3)


def test_table2_adds_one_component_per_step():
    steps = [get_method(name).overrides for name in TABLE2_METHODS]
    keys = ("tree_expansion", "credit_advantage", "loss_level")
    rows = [tuple(s.get(k) for k in keys) for s in steps]
    assert rows == [("random", "vanilla", "token"), ("random", "vanilla", "turn"),
                    ("entropy", "vanilla", "turn"), ("entropy", "node_value", "turn")]


def test_table3_grid_and_listing():
    grid = [name for name in METHODS if name.startswith("credit_")]
    assert len(grid) == 16  # 4 value modes x 4 advantage modes
    assert get_method("credit_entropy_softmax_node_value").overrides["credit_advantage"] == \
        "node_value"
    listing = format_methods()
    assert all(name in listing for name in METHODS)
    with pytest.raises(KeyError, match="did you mean at2po"):
        get_method("at2p0")


# ------------------------------------------------------------------------ config class
def test_config_derives_leaves_per_prompt(tmp_path):
    from at2po_lib.trainer.config import AT2POConfig

    common = dict(output_dir=str(tmp_path), report_to=[], per_device_train_batch_size=44)
    # paper tree: M + L*K = 10 + 2*6 = 22 leaves per prompt
    assert AT2POConfig(**common).num_generations == 22
    assert AT2POConfig(tree_expansion="chain", num_generations=4, **common).num_generations == 4
    with pytest.raises(ValueError, match="contradicts the tree"):
        AT2POConfig(num_generations=16, **common)
    with pytest.raises(ValueError, match="loss_level"):
        AT2POConfig(loss_level="word", **common)
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction"):
        AT2POConfig(vllm_importance_sampling_correction=True, **common)


# ----------------------------------------------------------------------------- records
def test_jsonl_append_read_truncate(tmp_path):
    path = tmp_path / "m.jsonl"
    for step in range(5):
        records.append_jsonl(path, {"step": step, "reward": step / 10, "bad": float("nan")})
    rows = records.read_jsonl(path)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0]["bad"] is None  # NaN is not JSON: stored as null
    assert records.truncate_jsonl(path, 2) == 3
    assert [r["step"] for r in records.read_jsonl(path)] == [0, 1, 2]
    # a torn last line (killed mid-write) is skipped; a bad line elsewhere is an error
    with path.open("a") as fh:
        fh.write('{"step": 3, "rew')
    assert len(records.read_jsonl(path)) == 3
    path.write_text('{"step": 0}\nnot json\n{"step": 1}\n')
    with pytest.raises(ValueError, match="line 2"):
        records.read_jsonl(path)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=20), st.integers(-1, 60))
def test_truncate_keeps_exactly_rows_up_to_step(tmp_path_factory, steps, cut):
    path = tmp_path_factory.mktemp("t") / "x.jsonl"
    for s in steps:
        records.append_jsonl(path, {"step": s})
    records.truncate_jsonl(path, cut)
    assert [r["step"] for r in records.read_jsonl(path)] == [s for s in steps if s <= cut]


def test_only_marked_checkpoints_count(tmp_path):
    folder = tmp_path / "checkpoints"
    for step in (2, 4, 6):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
    records.mark_checkpoint_complete(folder / "checkpoint-2", step=1)
    records.mark_checkpoint_complete(folder / "checkpoint-4", step=2)
    # checkpoint-6 was being written when the run died: no marker
    assert records.latest_complete_checkpoint(folder).name == "checkpoint-4"
    removed = records.remove_incomplete_checkpoints(folder)
    assert [p.name for p in removed] == ["checkpoint-6"]
    assert json.loads((folder / "checkpoint-4" / records.COMPLETE_MARKER).read_text())["step"] == 2


def test_finished_run_is_recognised_by_config_hash(tmp_path):
    run = records.RunDir(tmp_path / "run")
    run.root.mkdir()
    h = records.config_hash({"a": 1, "b": [1, 2]})
    assert h == records.config_hash({"b": [1, 2], "a": 1})  # key order does not matter
    assert not records.is_finished(run, h)
    records.mark_finished(run, h, wall_time=1.0)
    assert records.is_finished(run, h)
    assert not records.is_finished(run, records.config_hash({"a": 2}))
    records.clear_run(run)
    assert not run.done.exists()


# ----------------------------------------------------------------------------- reporting
def _synthetic_records():
    import pandas as pd

    metrics = pd.DataFrame([{"method": m, "seed": s, "step": t, "reward": 0.1 * t + s,
                             "entropy": 1.0 - 0.1 * t, "clip_frac": 0.01}
                            for m in ("grpo", "at2po") for s in (0, 1) for t in range(1, 5)])
    evals = pd.DataFrame([{"method": m, "seed": 0, "step": t, "dataset": "tiny_hotpotqa",
                           "em": 0.3 + 0.05 * t} for m in ("grpo", "at2po") for t in (0, 2, 4)])
    return metrics, evals


def test_plots_return_figures_without_writing(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from at2po_lib import reporting

    monkeypatch.chdir(tmp_path)
    metrics, evals = _synthetic_records()
    fig, axes = reporting.plot_training_curves(metrics, ["reward", "entropy", "missing"])
    assert len(axes) == 2  # unknown columns are skipped
    assert [line.get_label() for line in axes[0].get_lines()] == ["grpo", "at2po"]
    # mean over the two seeds: reward at step 1 = (0.1 + 1.1) / 2 = 0.6
    assert axes[0].get_lines()[0].get_ydata()[0] == pytest.approx(0.6)
    fig, axes = reporting.plot_figure3(metrics, evals, "tiny_hotpotqa")
    assert len(axes) == 2
    with pytest.raises(ValueError, match="no validation rows"):
        reporting.plot_validation_em(evals, "tiny_nq")
    assert list(tmp_path.iterdir()) == []


def test_table1_frame_mean_and_std_over_seeds():
    import pandas as pd

    from at2po_lib import reporting

    finals = pd.DataFrame([
        {"method": "grpo", "seed": 0, "dataset": "tiny_nq", "em": 0.40},
        {"method": "grpo", "seed": 1, "dataset": "tiny_nq", "em": 0.50},
        {"method": "at2po", "seed": 0, "dataset": "tiny_nq", "em": 0.60},
    ])
    table = reporting.table1_frame(finals)
    # mean 45.0, sample std of (40, 50) = 7.07
    assert table.loc["grpo", "tiny_nq"] == "45.0 ± 7.1"
    assert table.loc["at2po", "tiny_nq"] == "60.0"
    assert list(table.index) == ["grpo", "at2po"] and table.loc["grpo", "seeds"] == 2


# ------------------------------------------------------------------------ credit wiring
def _hand_batch():
    """Two prompts. Prompt 0: a tree root -> {1 -> {3 (r=1), 4 (r=0)}, 2 (r=1)}; rows are the
    leaves 3, 4, 2. Prompt 1: two chains (nodes 1, 2), rewards 0 and 0 (no signal)."""
    import numpy as np

    from at2po_lib.trainer.batch import RolloutBatch

    nan = np.nan
    tree0 = {"parent": np.array([-1, 0, 0, 1, 1]), "entropy": np.array([0, 1.0, 0.5, 0.2, 0.9]),
             "leaf_reward": np.array([nan, nan, 1.0, 1.0, 0.0])}
    tree1 = {"parent": np.array([-1, 0, 0]), "entropy": np.array([0, 0.3, 0.4]),
             "leaf_reward": np.array([nan, 0.0, 0.0])}
    # completion layout: turn tokens (node id) and observation tokens (-1)
    turn_node = [[1, 1, -1, -1, 3, 3], [1, 1, -1, -1, 4], [2, 2, 2], [1, 1], [2]]
    return RolloutBatch(
        prompt_ids=[[0]] * 5, completion_ids=[[5] * len(t) for t in turn_node],
        completion_mask=[[int(n >= 0) for n in t] for t in turn_node], turn_node=turn_node,
        old_logps=[[0.0] * len(t) for t in turn_node], reward=[1.0, 0.0, 1.0, 0.0, 0.0],
        row_tree=[0, 0, 0, 1, 1], row_leaf=[3, 4, 2, 1, 2], group=[0, 0, 0, 1, 1],
        trees=[tree0, tree1], num_turns=[2, 2, 1, 1, 1], num_tool_calls=[1, 1, 0, 0, 0])


def test_token_advantages_vanilla_is_grpo_per_prompt():
    from at2po_lib.trainer.batch import token_advantages

    adv = token_advantages(_hand_batch(), "vanilla")
    # prompt 0 rewards (1, 0, 1): mean 2/3, unbiased std sqrt(1/3) = 0.5774
    # -> (1 - 2/3) / 0.5774 = 0.5774 and (0 - 2/3) / 0.5774 = -1.1547
    assert adv[0, 0].item() == pytest.approx(0.57735, abs=1e-4)
    assert adv[1, 4].item() == pytest.approx(-1.15470, abs=1e-4)
    assert adv[0, 2].item() == 0.0 and adv[0, 3].item() == 0.0  # observation tokens
    assert adv.shape == (5, 6) and adv[3:].abs().sum() == 0  # prompt 1: all-equal rewards


def test_token_advantages_turnwise_match_credit():
    import torch

    from at2po_lib import credit
    from at2po_lib.trainer.batch import token_advantages

    batch = _hand_batch()
    adv = token_advantages(batch, "node_value", "entropy_softmax")
    v = credit.node_values(batch.trees[0]["parent"], batch.trees[0]["entropy"],
                           batch.trees[0]["leaf_reward"], "entropy_softmax")
    # every token of a turn carries its node's value; node 1 is shared by rows 0 and 1
    assert adv[0, 0].item() == pytest.approx(float(v[1])) and adv[1, 1].item() == pytest.approx(float(v[1]))
    assert adv[0, 4].item() == pytest.approx(float(v[3])) and adv[2, 2].item() == pytest.approx(float(v[2]))
    # leaf values normalised in tree 0: rewards (1, 1, 0) -> mean 2/3, population std 0.4714
    assert float(v[4]) == pytest.approx((0 - 2 / 3) / 0.471404, abs=1e-4)
    assert torch.all(adv[3:] == 0)  # tree 1: equal rewards -> zero values everywhere


def test_tree_grpo_uses_root_subtrees_as_trees():
    from at2po_lib import credit
    from at2po_lib.trainer.batch import token_advantages

    import torch

    batch = _hand_batch()
    adv = token_advantages(batch, "tree_grpo")
    rewards = torch.tensor(batch.reward, dtype=torch.float64)
    # subtrees of prompt 0: rows 0, 1 under node 1, row 2 under node 2
    expected = credit.tree_grpo_advantages(rewards, torch.tensor([1, 1, 2, 1, 2]),
                                           torch.tensor(batch.group))
    assert adv[:, 0].double().tolist() == pytest.approx(expected.tolist(), abs=1e-6)


def test_dynamic_sampling_helpers_keep_whole_groups():
    from at2po_lib.trainer.batch import group_has_signal, select_groups

    batch = _hand_batch()
    assert group_has_signal(batch, 0) and not group_has_signal(batch, 1)
    picked = select_groups([(batch, 1), (batch, 0)])  # reorder: prompt 1 first
    assert picked.group == [0, 0, 1, 1, 1]
    assert picked.row_tree == [0, 0, 1, 1, 1] and len(picked.trees) == 2
    assert picked.reward == [0.0, 0.0, 1.0, 0.0, 1.0]
