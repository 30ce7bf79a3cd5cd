"""Trainer pieces that need no model: config subclass, presets, records, credit wiring, plots."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.record import run_folder
from at2po_lib.method.presets import (
    METHODS,
    TABLE1_METHODS,
    TABLE2_METHODS,
    format_methods,
    get_method,
    list_methods,
)


# ----------------------------------------------------------------------------- presets
# Behaviour, not a copy of the preset table: each preset is resolved on a profile into an
# ``AT2POConfig``, and the config is run through the real loss and credit code on small hand-made
# batches. What is measured (ratio level, advantage kind, clip window) must be what the method
# requires (docs/method.md §6–§8); the exact values may change without touching these tests.
TOKEN_RATIO = {
    "grpo",
    "grpo_tree_budget",
    "dapo",
    "tree_grpo",
    "aepo",
    "aepo_paper",
    "ablation_random_tree_grpo",
}
SEQUENCE_RATIO = {"gspo"}
OUTCOME_ADVANTAGE = {
    "grpo",
    "grpo_tree_budget",
    "dapo",
    "gspo",
    "aepo",
    "aepo_paper",
    "ablation_random_tree_grpo",
    "ablation_atpo_loss",
    "ablation_entropy_tree",
}
TRAINED = [m.name for m in list_methods() if m.trains]


@pytest.fixture(scope="module")
def specs():
    """Every trained preset resolved on the ``tiny`` profile (one CPU process)."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.trainer.resolve import resolve_run

    tiny = load_profile("tiny")
    return {name: resolve_run(tiny, name, 0, world_size=1) for name in TRAINED}


@pytest.fixture(scope="module")
def configs(specs, tmp_path_factory):
    """Each preset's ``AT2POConfig``."""
    out = tmp_path_factory.mktemp("cfg")
    return {name: spec.training_args(out) for name, spec in specs.items()}


def _loss(cfg, delta, advantage=1.0):
    """The preset's policy loss (as the trainer calls it) on one row of two turns: model tokens
    0-1 and 4-5, observation 2-3; log π − log π_old = ``delta``. Returns (loss, stats, ∇logp)."""
    import torch

    from at2po_lib.method.loss import LossBatch, loss_diagnostics, policy_loss
    from at2po_lib.trainer.trainer import one_thread_loss

    old = torch.full((1, 6), -2.0, dtype=torch.float64)
    logp = (old + torch.tensor([delta], dtype=torch.float64)).requires_grad_(True)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])
    options, inputs = cfg.loss_options(), dict(ref_logp=old, token_entropy=torch.ones_like(old))
    advantages = torch.tensor([advantage], dtype=torch.float64)
    batch = LossBatch(logp, old, advantages, mask, **inputs)
    loss = one_thread_loss(
        lambda x: policy_loss(LossBatch(x, old, advantages, mask, **inputs), options), logp
    )
    stats = loss_diagnostics(batch, options)
    loss.backward()
    return loss, stats, logp.grad[0]


def measured_ratio_level(cfg) -> str:
    """Token ratios inside the clip window differ within turn 1; the gradient of a token is
    proportional to the ratio it is weighted by, so equal gradients reveal a shared ratio."""
    grad = _loss(cfg, [1e-3, -1e-3, 0.0, 0.0, 2e-3, 0.0])[2]
    same = lambda a, b: abs(float(grad[a] - grad[b])) < 1e-6  # noqa: E731 (KL adds ~1e-7)
    if not same(0, 1):
        return "token"
    return "sequence" if same(0, 4) else "turn"


def measured_advantage(cfg) -> str:
    """On the hand batch below: ``turn`` when the two turns of a row get different advantages,
    ``prompt`` when every row carries its GRPO-normalised reward, ``tree`` otherwise."""
    from at2po_lib.trainer.batch import token_advantages

    batch = _hand_batch()
    adv = token_advantages(
        batch, cfg.credit_advantage, getattr(cfg, "credit_value", "entropy_softmax")
    )
    if abs(float(adv[0, 0] - adv[0, 4])) > 1e-6:
        return "turn"
    vanilla = token_advantages(batch, "vanilla")
    return "prompt" if bool((adv - vanilla).abs().max() < 1e-6) else "tree"


def behaviour(spec, cfg) -> tuple[str, str, str]:
    return spec.rollout.expansion, measured_advantage(cfg), measured_ratio_level(cfg)


@pytest.mark.parametrize("name", TRAINED)
def test_each_preset_uses_the_ratio_level_its_method_requires(configs, name):
    expected = "token" if name in TOKEN_RATIO else "sequence" if name in SEQUENCE_RATIO else "turn"
    assert measured_ratio_level(configs[name]) == expected


@pytest.mark.parametrize("name", TRAINED)
def test_each_preset_uses_the_advantage_its_method_requires(configs, name):
    expected = "prompt" if name in OUTCOME_ADVANTAGE else "tree" if name == "tree_grpo" else "turn"
    assert measured_advantage(configs[name]) == expected


@pytest.mark.parametrize("name", TRAINED)
def test_each_preset_rolls_out_its_leaf_budget(specs, configs, name):
    """Trees (random, entropy) grow M + L·K leaves with L·K > 0 re-sampled; chains sample
    ``rollout.chains`` chains (docs/method.md §5, §8); TRL groups exactly that many rows."""
    rollout, cfg = specs[name].rollout, configs[name]
    assert cfg.num_generations == rollout.leaves_per_prompt()
    if rollout.expansion in ("random", "entropy"):
        assert rollout.tree_l * rollout.tree_k > 0
        assert cfg.num_generations == rollout.tree_m + rollout.tree_l * rollout.tree_k
    elif rollout.expansion == "chain":
        assert cfg.num_generations == rollout.chains


def test_turn_and_sequence_ratios_clip_a_one_percent_drift_token_ratios_do_not(configs):
    """Length-normalised ratios stay near 1, so GSPO/ATPO clip in a window of ~1e-3 while
    token-level methods keep ε ≈ 0.2 (docs/method.md §7, §8): a 1 % drift of every token
    binds the clip of the first kind only."""
    drift = [0.01, 0.01, 0.0, 0.0, 0.01, 0.01]
    for name, cfg in configs.items():
        clipped = _loss(cfg, drift)[1]["clip_frac"] > 0
        assert clipped == (measured_ratio_level(cfg) != "token"), name


def test_clip_higher_and_entropy_balanced_clipping(configs):
    """DAPO and the AEPO paper's variant clip higher (a ratio of 1.25 with A > 0 is not
    clipped, GRPO's 0.2 clips it); AEPO as the authors ran it clips at 0.2 / 0.2 like GRPO
    (issue #22), and its entropy-balanced clip keeps the gradient of a clipped token, where
    DAPO's plain clip zeroes it (docs/method.md §8)."""
    import math

    up = [math.log(1.25)] * 2 + [0.0] * 2 + [math.log(1.25)] * 2
    for name in ("grpo", "tree_grpo", "aepo"):
        assert _loss(configs[name], up)[1]["clip_frac_high"] == 1.0, name
    for name in ("dapo", "aepo_paper"):
        assert _loss(configs[name], up)[1]["clip_frac"] == 0.0, name
    far = [math.log(1.5)] * 2 + [0.0] * 2 + [math.log(1.5)] * 2
    assert _loss(configs["dapo"], far)[2].abs().max() == 0
    for name in ("aepo", "aepo_paper"):
        assert _loss(configs[name], far)[2][[0, 1, 4, 5]].abs().min() > 0, name
    assert _loss(configs["aepo"], up)[2][[0, 1, 4, 5]].abs().min() > 0  # clipped, still a gradient


def test_aepo_resolves_to_the_authors_script_and_the_paper_variant_is_an_option():
    """AEPO_qwen3_4B.sh: clip_ratio 0.2/0.2, entropy-balanced clipping, and (entropy_coeff 0)
    no entropy-aware advantage; the AEPO paper's variant adds clip-higher and the 0.2 term."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.trainer.resolve import resolve_run, trainer_fields

    paper = load_profile("paper-qwen3-4b")
    spec = resolve_run(paper, "aepo", 0, world_size=8)
    aepo = spec.trainer
    assert (aepo["epsilon"], aepo["epsilon_high"]) == (0.2, 0.2)
    assert aepo["loss_entropy_balanced_clip"] is True and aepo["loss_entropy_aware_adv"] == 0.0
    assert spec.rollout.expansion == "aepo" and aepo["num_generations"] == 16
    variant = trainer_fields(paper, "aepo_paper", 0, world_size=8)
    assert (variant["epsilon"], variant["epsilon_high"]) == (0.2, 0.28)
    assert variant["loss_entropy_aware_adv"] == 0.2 and variant["loss_entropy_balanced_clip"]
    assert "aepo_paper" not in TABLE1_METHODS


def test_table2_steps_1_2_use_the_authors_random_mode_and_tree_grpo_its_own(specs):
    assert [specs[n].rollout.expansion for n in TABLE2_METHODS] == [
        "random_siblings",
        "random_siblings",
        "entropy",
        "entropy",
    ]
    assert specs["tree_grpo"].rollout.expansion == "random"


def test_table2_adds_one_component_per_step(specs, configs):
    """GRPO on a random tree → + turn loss → + entropy expansion → + turn-wise credit (= at2po),
    each step changing exactly one measured behaviour (docs/method.md §10)."""
    steps = [behaviour(specs[name], configs[name]) for name in TABLE2_METHODS]
    assert steps[0] == ("random_siblings", "prompt", "token")
    changed = [[i for i in range(3) if a[i] != b[i]] for a, b in zip(steps, steps[1:])]
    assert changed == [[2], [0], [1]]
    assert steps[-1] == behaviour(specs["at2po"], configs["at2po"]) == ("entropy", "turn", "turn")


def test_table3_grid_varies_only_the_credit(specs, configs):
    """Every value mode × advantage mode once, all on AT2PO's rollout and loss; the
    (entropy_softmax, node_value) cell gives AT2PO's own advantages (docs/method.md §6)."""
    import torch

    from at2po_lib.method.credit import ADVANTAGE_MODES, VALUE_MODES
    from at2po_lib.trainer.batch import token_advantages

    grid = {
        (configs[n].credit_value, configs[n].credit_advantage)
        for n in configs
        if n.startswith("credit_")
    }
    assert grid == {(v, a) for v in VALUE_MODES for a in ADVANTAGE_MODES}
    at2po = configs["at2po"]
    for name in (n for n in configs if n.startswith("credit_")):
        cfg = configs[name]
        assert (specs[name].rollout.expansion, measured_ratio_level(cfg)) == ("entropy", "turn")
        assert (cfg.epsilon, cfg.epsilon_high, cfg.loss_aggregation) == (
            at2po.epsilon,
            at2po.epsilon_high,
            at2po.loss_aggregation,
        ), name
    cell = configs["credit_entropy_softmax_node_value"]
    assert torch.equal(
        token_advantages(_hand_batch(), cell.credit_advantage, cell.credit_value),
        token_advantages(_hand_batch(), at2po.credit_advantage, at2po.credit_value),
    )


def test_table1_lists_react_first_and_every_method_once():
    assert TABLE1_METHODS[0] == "react" and not get_method("react").trains
    assert len(set(TABLE1_METHODS)) == len(TABLE1_METHODS)
    assert {"grpo", "dapo", "gspo", "tree_grpo", "aepo", "at2po"} <= set(TABLE1_METHODS)


def test_listing_and_unknown_names():
    listing = format_methods()
    assert all(name in listing for name in METHODS)
    with pytest.raises(KeyError, match="did you mean at2po"):
        get_method("at2p0")


# ------------------------------------------------------------------------ config class
def test_config_checks_its_choices_and_derives_trls_loss_type(tmp_path):
    from at2po_lib.trainer.at2po_config import TRL_LOSS_TYPES, AT2POConfig

    common = dict(
        output_dir=str(tmp_path), report_to=[], per_device_train_batch_size=44, num_generations=22
    )
    assert AT2POConfig(**common).loss_type == "grpo"  # seq-mean-token-mean, the default
    for aggregation, loss_type in TRL_LOSS_TYPES.items():
        assert AT2POConfig(loss_aggregation=aggregation, **common).loss_type == loss_type
    with pytest.raises(ValueError, match="contradicts loss_aggregation"):
        AT2POConfig(loss_aggregation="token-mean", loss_type="grpo", **common)
    with pytest.raises(ValueError, match="loss_aggregation"):
        AT2POConfig(loss_aggregation="seq-mean-token-sum", **common)
    with pytest.raises(ValueError, match="loss_level"):
        AT2POConfig(loss_level="word", **common)
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction"):
        AT2POConfig(vllm_importance_sampling_correction=True, **common)
    with pytest.raises(ValueError, match="mask_truncated_completions.*does not end in EOS"):
        AT2POConfig(mask_truncated_completions=True, **common)


# ----------------------------------------------------------------------------- records
def test_jsonl_append_read_truncate(tmp_path):
    path = tmp_path / "m.jsonl"
    for step in range(5):
        run_folder.append_jsonl(path, {"step": step, "reward": step / 10, "bad": float("nan")})
    rows = run_folder.read_jsonl(path)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0]["bad"] is None  # NaN is not JSON: stored as null
    assert run_folder.truncate_jsonl(path, 2) == 3
    assert [r["step"] for r in run_folder.read_jsonl(path)] == [0, 1, 2]
    # a torn last line (killed mid-write) is skipped; a bad line elsewhere is an error
    with path.open("a") as fh:
        fh.write('{"step": 3, "rew')
    assert len(run_folder.read_jsonl(path)) == 3
    path.write_text('{"step": 0}\nnot json\n{"step": 1}\n')
    with pytest.raises(ValueError, match="line 2"):
        run_folder.read_jsonl(path)


def test_recorder_keeps_every_logged_metric_under_its_logged_name(tmp_path):
    from types import SimpleNamespace

    from at2po_lib.trainer.callbacks import MetricsRecorder

    path = tmp_path / "metrics.jsonl"
    recorder = MetricsRecorder(path, updates_per_step=4, start_time=0.0)
    state = SimpleNamespace(is_world_process_zero=True, global_step=8)
    logs = {
        "reward": 0.5,
        "clip_ratio/region_mean": 0.1,
        "rollout/turns_mean": 2.5,
        "completions/mean_length": 40.0,
        "kl": None,
        "step": 99,
    }
    recorder.on_log(None, state, None, logs=logs)
    recorder.on_log(None, state, None, logs={"train_loss": 1.0})  # the final summary: no row
    (row,) = run_folder.read_jsonl(path)
    assert row["step"] == 2 and row["global_step"] == 8  # the recorder's own fields win
    assert {
        k: row[k]
        for k in (
            "reward",
            "clip_ratio/region_mean",
            "rollout/turns_mean",
            "completions/mean_length",
        )
    } == {
        k: logs[k]
        for k in (
            "reward",
            "clip_ratio/region_mean",
            "rollout/turns_mean",
            "completions/mean_length",
        )
    }
    assert "kl" not in row and row["wall_time"] > 0


def test_committed_study_records_load_under_the_logged_names():
    from at2po_lib.record.reading import load_training_records

    metrics, _ = load_training_records("tiny", ["grpo"], [0])
    if metrics.empty:
        pytest.skip("no committed tiny/grpo/seed0 run")
    assert {"clip_ratio/region_mean", "rollout/turns_mean", "rollout/seconds"} <= set(metrics)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=20), st.integers(-1, 60))
def test_truncate_keeps_exactly_rows_up_to_step(tmp_path_factory, steps, cut):
    path = tmp_path_factory.mktemp("t") / "x.jsonl"
    for s in steps:
        run_folder.append_jsonl(path, {"step": s})
    run_folder.truncate_jsonl(path, cut)
    assert [r["step"] for r in run_folder.read_jsonl(path)] == [s for s in steps if s <= cut]


def test_only_marked_checkpoints_count(tmp_path):
    folder = tmp_path / "checkpoints"
    for step in (2, 4, 6):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
    run_folder.mark_checkpoint_complete(folder / "checkpoint-2", step=1)
    run_folder.mark_checkpoint_complete(folder / "checkpoint-4", step=2)
    # checkpoint-6 was being written when the run died: no marker
    assert run_folder.latest_complete_checkpoint(folder).name == "checkpoint-4"
    removed = run_folder.remove_incomplete_checkpoints(folder)
    assert [p.name for p in removed] == ["checkpoint-6"]
    assert (
        json.loads((folder / "checkpoint-4" / run_folder.COMPLETE_MARKER).read_text())["step"] == 2
    )


def test_finished_run_is_recognised_by_config_hash(tmp_path):
    run = run_folder.RunDir(tmp_path / "run")
    run.root.mkdir()
    h = run_folder.config_hash({"a": 1, "b": [1, 2]})
    assert h == run_folder.config_hash({"b": [1, 2], "a": 1})  # key order does not matter
    assert not run_folder.is_finished(run, h)
    run_folder.mark_finished(run, h, wall_time=1.0)
    assert run_folder.is_finished(run, h)
    assert not run_folder.is_finished(run, run_folder.config_hash({"a": 2}))
    run_folder.clear_run(run)
    assert not run.done.exists()


# ----------------------------------------------------------------------------- reporting
def _synthetic_records():
    import pandas as pd

    metrics = pd.DataFrame(
        [
            {
                "method": m,
                "seed": s,
                "step": t,
                "reward": 0.1 * t + s,
                "entropy": 1.0 - 0.1 * t,
                "clip_ratio/region_mean": 0.01,
            }
            for m in ("grpo", "at2po")
            for s in (0, 1)
            for t in range(1, 5)
        ]
    )
    evals = pd.DataFrame(
        [
            {"method": m, "seed": 0, "step": t, "dataset": "tiny_hotpotqa", "em": 0.3 + 0.05 * t}
            for m in ("grpo", "at2po")
            for t in (0, 2, 4)
        ]
    )
    return metrics, evals


def test_plots_return_figures_without_writing(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from at2po_lib.reporting.curves import plot_figure3, plot_training_curves, plot_validation_em

    monkeypatch.chdir(tmp_path)
    metrics, evals = _synthetic_records()
    fig, axes = plot_training_curves(metrics, ["reward", "entropy", "missing"])
    assert len(axes) == 2  # unknown columns are skipped
    assert [line.get_label() for line in axes[0].get_lines()] == ["grpo", "at2po"]
    # mean over the two seeds: reward at step 1 = (0.1 + 1.1) / 2 = 0.6
    assert axes[0].get_lines()[0].get_ydata()[0] == pytest.approx(0.6)
    fig, axes = plot_figure3(metrics, evals, "tiny_hotpotqa")
    assert len(axes) == 2
    with pytest.raises(ValueError, match="no validation rows"):
        plot_validation_em(evals, "tiny_nq")
    assert list(tmp_path.iterdir()) == []


def test_start_end_table_by_hand():
    import pandas as pd

    from at2po_lib.reporting.curves import format_start_end, start_end_table

    # 8 steps per run: window = 8 // 4 = 2 steps at each end
    rows = [
        {"method": "grpo", "seed": seed, "step": t, "entropy": float(t + seed)}
        for seed in (0, 1)
        for t in range(1, 9)
    ]
    rows += [{"method": "at2po", "seed": 0, "step": t, "entropy": 1.0} for t in range(1, 3)]
    table = start_end_table(pd.DataFrame(rows), ["entropy", "missing"])
    grpo = table.set_index("method").loc["grpo"]
    # seed 0: start mean(1, 2) = 1.5, end mean(7, 8) = 7.5; seed 1: 2.5 and 8.5
    assert (grpo["start"], grpo["end"], grpo["change"]) == pytest.approx((2.0, 8.0, 6.0))
    # the change is the same in both seeds: a zero-width interval (paired within seed)
    assert (grpo["change_low"], grpo["change_high"]) == pytest.approx((6.0, 6.0))
    assert grpo["start_low"] < 2.0 < grpo["start_high"] and grpo["seeds"] == 2
    at2po = table.set_index("method").loc["at2po"]
    assert (
        at2po["seeds"] == 1
        and pd.isna(at2po["change_low"])
        and list(table["metric"]) == ["entropy", "entropy"]
    )
    shown = format_start_end(table)
    assert shown.loc["grpo", ("entropy", "change")] == "+6.000 [+6.000, +6.000]"
    assert shown.loc["at2po", ("entropy", "start")] == "1.000"  # one seed: no interval
    assert shown.loc["grpo", ("", "seeds")] == 2
    # AT2PO's change (0, one seed) minus GRPO's (6): -6, no interval with one AT2PO seed
    versus = start_end_table(pd.DataFrame(rows), ["entropy"], baseline="grpo")
    assert versus.set_index("method").loc["at2po", "vs_baseline"] == pytest.approx(-6.0)
    shown = format_start_end(versus)
    assert shown.loc["at2po", ("entropy", "change vs grpo")] == "-6.000"
    assert shown.loc["grpo", ("entropy", "change vs grpo")] == "–"
    # a metric one method's runs never recorded: no row for it, no error
    rows += [{"method": "gspo", "seed": 0, "step": t, "entropy": float("nan")} for t in (1, 2)]
    partial = start_end_table(pd.DataFrame(rows), ["entropy"])
    assert list(partial["method"]) == ["grpo", "at2po"]


def test_table1_frame_mean_and_std_over_seeds():
    import pandas as pd

    from at2po_lib.reporting.curves import table1_frame

    finals = pd.DataFrame(
        [
            {"method": "grpo", "seed": 0, "dataset": "tiny_nq", "em": 0.40},
            {"method": "grpo", "seed": 1, "dataset": "tiny_nq", "em": 0.50},
            {"method": "at2po", "seed": 0, "dataset": "tiny_nq", "em": 0.60},
        ]
    )
    table = table1_frame(finals)
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
    tree0 = {
        "parent": np.array([-1, 0, 0, 1, 1]),
        "entropy": np.array([0, 1.0, 0.5, 0.2, 0.9]),
        "leaf_reward": np.array([nan, nan, 1.0, 1.0, 0.0]),
    }
    tree1 = {
        "parent": np.array([-1, 0, 0]),
        "entropy": np.array([0, 0.3, 0.4]),
        "leaf_reward": np.array([nan, 0.0, 0.0]),
    }
    # completion layout: turn tokens (node id) and observation tokens (-1)
    turn_node = [[1, 1, -1, -1, 3, 3], [1, 1, -1, -1, 4], [2, 2, 2], [1, 1], [2]]
    return RolloutBatch(
        prompt_ids=[[0]] * 5,
        completion_ids=[[5] * len(t) for t in turn_node],
        sampled_mask=[[int(n >= 0) for n in t] for t in turn_node],
        turn_node=turn_node,
        old_logps=[[0.0] * len(t) for t in turn_node],
        reward=[1.0, 0.0, 1.0, 0.0, 0.0],
        row_tree=[0, 0, 0, 1, 1],
        row_leaf=[3, 4, 2, 1, 2],
        group=[0, 0, 0, 1, 1],
        trees=[tree0, tree1],
        num_turns=[2, 2, 1, 1, 1],
        num_tool_calls=[1, 1, 0, 0, 0],
    )


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

    from at2po_lib.method import credit
    from at2po_lib.trainer.batch import token_advantages

    batch = _hand_batch()
    adv = token_advantages(batch, "node_value", "entropy_softmax")
    v = credit.node_values(
        batch.trees[0].parent, batch.trees[0].entropy, batch.trees[0].leaf_reward, "entropy_softmax"
    )
    # every token of a turn carries its node's value; node 1 is shared by rows 0 and 1
    assert adv[0, 0].item() == pytest.approx(float(v[1])) and adv[1, 1].item() == pytest.approx(
        float(v[1])
    )
    assert adv[0, 4].item() == pytest.approx(float(v[3])) and adv[2, 2].item() == pytest.approx(
        float(v[2])
    )
    # leaf values normalised in tree 0: rewards (1, 1, 0) -> mean 2/3, population std 0.4714
    assert float(v[4]) == pytest.approx((0 - 2 / 3) / 0.471404, abs=1e-4)
    assert torch.all(adv[3:] == 0)  # tree 1: equal rewards -> zero values everywhere


def test_tree_grpo_groups_by_prompt_and_by_tree():
    from at2po_lib.method import outcome
    from at2po_lib.trainer.batch import token_advantages

    import torch

    batch = _hand_batch()
    adv = token_advantages(batch, "tree_grpo")
    rewards = torch.tensor(batch.reward, dtype=torch.float64)
    # each tree of the batch is one of Tree-GRPO's trees (here one per prompt)
    expected = outcome.tree_grpo_advantages(
        rewards, torch.tensor(batch.row_tree), torch.tensor(batch.group)
    )
    assert adv[:, 0].double().tolist() == pytest.approx(expected.tolist(), abs=1e-6)


def test_dynamic_sampling_helpers_keep_whole_groups():
    from at2po_lib.trainer.batch import group_has_signal, select_groups

    batch = _hand_batch()
    assert group_has_signal(batch, 0) and not group_has_signal(batch, 1)
    picked = select_groups([(batch, 1), (batch, 0)])  # reorder: prompt 1 first
    assert picked.group == [0, 0, 1, 1, 1]
    assert picked.row_tree == [0, 0, 1, 1, 1] and len(picked.trees) == 2
    assert picked.reward == [0.0, 0.0, 1.0, 0.0, 1.0]
    assert picked.finish_reason == []  # the hand batch has none: none is invented
    from dataclasses import replace

    reasons = ["answer", "turn_length", "answer", "invalid", "answer"]
    picked = select_groups(
        [(replace(batch, finish_reason=reasons), 1), (replace(batch, finish_reason=reasons), 0)]
    )
    assert picked.finish_reason == ["invalid", "answer", "answer", "turn_length", "answer"]
    mixed = select_groups([(batch, 1), (replace(batch, finish_reason=reasons), 0)])
    assert mixed.finish_reason == []  # partly known: dropped rather than misaligned


def test_validation_skips_step_0_unless_asked(tmp_path):
    """The authors' scripts set val_before_train=False: no validation before the first update
    by default; the periodic checks still run."""
    import types

    import pandas as pd

    from at2po_lib.config.profile import TrainConfig, load_profile
    from at2po_lib.trainer.callbacks import GreedyValidation

    assert TrainConfig().val_before_train is False
    assert load_profile("paper-qwen3-4b").train.val_before_train is False
    assert load_profile("paper-qwen3-4b").train.val_questions is None  # the full sets
    frame = pd.DataFrame(
        [
            {
                "dataset": "d",
                "group": "multi",
                "n": 1,
                "em": 0.5,
                "f1": 0.5,
                "mean_turns": 1.0,
                "mean_tool_calls": 1.0,
            }
        ]
    )
    for before in (False, True):
        calls = []
        cb = GreedyValidation(
            tmp_path / f"eval{before}.jsonl",
            lambda: calls.append(1) or frame,
            every=2,
            updates_per_step=1,
            before_train=before,
        )
        state = types.SimpleNamespace(global_step=0, max_steps=4, is_world_process_zero=True)
        cb.on_train_begin(None, state, None)
        assert len(calls) == int(before)
        state.global_step = 2
        cb.on_step_end(None, state, None)
        assert len(calls) == int(before) + 1


def test_the_trainer_runs_the_loss_and_its_diagnostics_on_one_thread_with_the_same_gradient():
    """``loss_and_diagnostics`` (issue #49 item 4): the definition's value and gradient, the
    diagnostics of the same inputs, forward and backward on LOSS_THREADS threads whatever the
    update's thread count, which is restored."""
    import torch

    from at2po_lib.method import loss as method_loss
    from at2po_lib.trainer import trainer as trainer_module

    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 12, generator=g, dtype=torch.float64) * 3
    logp = old + 0.01 * torch.randn(4, 12, generator=g, dtype=torch.float64)
    mask = (torch.rand(4, 12, generator=g) < 0.7).long()
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    seen = []
    real = method_loss.policy_loss

    def watched(*args, **kwargs):
        seen.append(torch.get_num_threads())
        out = real(*args, **kwargs)
        out.register_hook(lambda grad: seen.append(("backward", torch.get_num_threads())))
        return out

    direct = logp.clone().requires_grad_(True)
    expected = real(method_loss.LossBatch(direct, old, adv, mask))
    expected.backward()
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        trainer_module.policy_loss = watched
        x = logp.clone().requires_grad_(True)
        loss, stats = trainer_module.loss_and_diagnostics(method_loss.LossBatch(x, old, adv, mask))
        loss.backward()
        assert torch.get_num_threads() == 2
    finally:
        trainer_module.policy_loss = real
        torch.set_num_threads(previous)
    assert seen == [trainer_module.LOSS_THREADS, ("backward", trainer_module.LOSS_THREADS)]
    assert loss.item() == expected.item()
    assert torch.equal(x.grad, direct.grad)
    own = {k: v for k, v in stats.items() if not k.endswith("_eps0.2")}
    assert own == method_loss.loss_diagnostics(method_loss.LossBatch(logp, old, adv, mask))
    # the clipped shares had the range been GRPO's 0.2 (issue #48), beside the run's own range
    at_reference = method_loss.loss_diagnostics(
        method_loss.LossBatch(logp, old, adv, mask),
        method_loss.LossOptions(eps_low=0.2, eps_high=0.2),
    )
    assert stats["clip_frac_token_eps0.2"] == at_reference["clip_frac_token"]
    assert stats["clip_frac_turn_eps0.2"] == at_reference["clip_frac_turn"]
