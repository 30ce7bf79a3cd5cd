"""AT2POTrainer on the smoke profile (CPU): every method trains, the advantages that reach the
loss are credit's, and a killed-and-resumed run ends with the records of an uninterrupted one.

The smoke warm start is nearly untrained (it answers nothing right), so the tests give the
rollout a reward with variance across leaves — the parity of the response's length — to make
the policy gradient non-zero; everything else is the real pipeline (TinyWorld, BM25, the tiny
Qwen3, TRL).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from at2po_lib.method import credit, outcome
from at2po_lib.method.tree import Forest
from at2po_lib.record.tree_files import load_trees
from at2po_lib.policy.strategies import TURN_LABELS
from at2po_lib.config.profile import load_profile
from at2po_lib.record import run_folder
from at2po_lib.trainer.callbacks import WALL_TIME_KEYS
from at2po_lib.trainer.resolve import batch_geometry, resolve_run, trainer_fields
from at2po_lib.study.run import build_trainer, train

# Marks per test: the arithmetic runs in the fast loop; the tests that build a trainer on
# the smoke artefacts are integration tests, and those that train for > ~5 s are slow.


def parity_reward(response: str, golden) -> float:
    """A reward that differs between leaves of an untrained policy (tests only)."""
    return float(len(response) % 2)


def smoke_profile(**train):
    cfg = load_profile(
        "smoke",
        {
            "train": {
                "eval_every": 0,
                "final_eval": False,
                "progress_bar": False,
                "save_every": 0,
                **train,
            }
        },
    )
    return cfg


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Results go to a temporary folder; artefacts (world, index, warm start) are shared with
    the checkout's smoke artefacts so they are built once."""
    import os

    results = tmp_path_factory.mktemp("results")
    old = os.environ.get("AT2PO_RESULTS")
    os.environ["AT2PO_RESULTS"] = str(results)
    yield results
    if old is None:
        os.environ.pop("AT2PO_RESULTS", None)
    else:
        os.environ["AT2PO_RESULTS"] = old


# ----------------------------------------------------------------------------- geometry
def test_batch_geometry_matches_method_md_section_9():
    # 64 prompts x 22 leaves on 8 GPUs, mini-batch 8 prompts, micro-batches of 2 rows:
    # 8*22/8 = 22 rows per update per GPU -> GA 11; 64/8 = 8 updates per step -> spg 88.
    geo = batch_geometry(64, 8, 22, world_size=8, micro_batch_rows=2)
    assert (
        geo.updates_per_step,
        geo.per_device_train_batch_size,
        geo.gradient_accumulation_steps,
        geo.steps_per_generation,
    ) == (8, 2, 11, 88)
    # whole update per micro-batch on one CPU: 4 prompts x 8 leaves = 32 rows, 2 updates
    geo = batch_geometry(8, 4, 8)
    assert (geo.per_device_train_batch_size, geo.steps_per_generation) == (32, 2)
    with pytest.raises(ValueError, match="whole prompt groups"):
        batch_geometry(6, 2, 8, world_size=4)


def test_presets_resolve_on_the_profiles():
    tiny = load_profile("tiny")
    fields = trainer_fields(tiny, "at2po", 0, world_size=1)
    assert fields["epsilon"] == 3e-3 and fields["loss_level"] == "turn"
    assert fields["max_steps"] == tiny.train.max_steps * (
        tiny.train.prompts_per_step // tiny.train.mini_batch_prompts
    )
    grpo = trainer_fields(tiny, "grpo", 0, world_size=1)
    assert grpo["num_generations"] == tiny.rollout.chains and grpo["beta"] == 1e-3
    paper = resolve_run(load_profile("paper-qwen3-4b"), "aepo", 0, world_size=8)
    assert paper.trainer["num_generations"] == 16 and paper.rollout.aepo_initial == 8
    assert (
        trainer_fields(load_profile("paper-qwen3-4b"), "at2po", 0, world_size=8)[
            "steps_per_generation"
        ]
        % 8
        == 0
    )


# ------------------------------------------------------------------------ every method
TRAINED = ["grpo", "dapo", "gspo", "tree_grpo", "aepo", "at2po", "ablation_atpo_loss"]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("method", TRAINED)
def test_every_method_takes_smoke_steps(outputs, method):
    cfg = smoke_profile(max_steps=1)
    run = run_folder.run_dir(cfg.name, method, 0)
    run_folder.clear_run(run)
    trainer = build_trainer(cfg, method, 0, run, reward_fn=parity_reward)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    rows = run_folder.read_jsonl(run.metrics)
    assert [r["step"] for r in rows] == [1]
    row = rows[0]
    assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
    assert row["grad_norm"] > 0
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, f"{method}: no parameter changed"
    # the trainer recomputes the sampler's log-probs (same temperature) before the update
    assert row["sampling/logp_abs_diff"] < 1e-3
    assert row["rollout/leaves_per_prompt"] == trainer.num_generations
    # TRL's metric names as TRL logs them (docs: GRPOTrainer "Logged metrics"), never renamed
    assert {"clip_ratio/region_mean", "completions/mean_length", "num_tokens"} <= set(row)
    assert 0.0 <= row["rollout/answered"] <= 1.0  # the agent's finish reasons reach the record
    if method == "grpo":
        assert "kl" in row  # GRPO's KL term against the warm start
    # both ratio levels' clipped shares of the same update, at the method's clip range
    assert 0.0 <= row["clip_ratio/token_level"] <= 1.0
    assert 0.0 <= row["clip_ratio/turn_level"] <= 1.0
    level = trainer.args.loss_level
    if level in ("token", "turn"):  # what the loss clipped is its own level's share
        assert row[f"clip_ratio/{level}_level"] == pytest.approx(row["clip_ratio/region_mean"])
    # and at GRPO's 0.2 where the method's range is another (issue #48: the reading depends on it)
    if (trainer.args.epsilon, trainer.args.epsilon_high) != (0.2, 0.2):
        assert 0.0 <= row["clip_ratio/turn_level_eps0.2"] <= 1.0
        assert 0.0 <= row["clip_ratio/token_level_eps0.2"] <= 1.0
    else:
        assert "clip_ratio/turn_level_eps0.2" not in row
    # the first (= last) step's trees are kept, every node with its entropy summaries and
    # its decision label
    trees = load_trees(run.trees / "step0001.npz")
    assert len({t.prompt_id for t in trees}) == cfg.train.prompts_per_step
    for tree in trees:
        assert {
            "entropy_exact_max",
            "entropy_exact_first",
            "entropy_nll_max",
            "entropy_nll_first",
            "entropy_exact",
            "entropy_nll",
            "num_tokens",
        } <= set(tree.node_arrays)
        # TinyWorld questions carry their plan: every turn gets a plan label
        assert all(r["decision"] in (*TURN_LABELS, "root") for r in tree.records)
        inner = tree.parent >= 0
        assert (
            tree.node_arrays["entropy_exact_max"][inner]
            >= tree.node_arrays["entropy_exact"][inner] - 1e-9
        ).all()
    # how far softmax credit sits from the child mean (chains: the root's children only)
    assert 0.0 <= row["credit/weight_dev_nll"] < 0.5


# --------------------------------------------------------------- advantages reach the loss
class _Capture:
    def __init__(self, trainer):
        self.generated, self.loss_inputs = [], []
        gen, loss = trainer._generate_and_score_completions, trainer._compute_loss

        def gen_wrapper(inputs):
            out = gen(inputs)
            self.generated.append((out, trainer.last_rollout))
            return out

        def loss_wrapper(model, inputs):
            self.loss_inputs.append(inputs)
            return loss(model, inputs)

        trainer._generate_and_score_completions = gen_wrapper
        trainer._compute_loss = loss_wrapper


def _expected_advantages(batch, method_args) -> torch.Tensor:
    turn_node = torch.full((len(batch), max(map(len, batch.turn_node))), -1)
    for i, nodes in enumerate(batch.turn_node):
        turn_node[i, : len(nodes)] = torch.tensor(nodes)
    if method_args.credit_advantage == "vanilla":
        adv = outcome.grpo_advantages(
            torch.tensor(batch.reward, dtype=torch.float64), torch.tensor(batch.group)
        )
        return torch.where(turn_node >= 0, adv[:, None], 0.0).float()
    forest = Forest.from_trees(batch.trees, dtype=torch.float64)
    return credit.batch_token_advantages(
        forest,
        turn_node,
        torch.tensor(batch.row_tree),
        method_args.credit_value,
        method_args.credit_advantage,
    ).float()


@pytest.mark.integration
@pytest.mark.parametrize("method", ["at2po", "grpo"])
def test_advantages_reaching_the_loss_are_credits(outputs, method):
    cfg = smoke_profile(max_steps=1)
    run = run_folder.run_dir(cfg.name, f"capture_{method}", 0)
    run_folder.clear_run(run)
    trainer = build_trainer(cfg, method, 0, run, reward_fn=parity_reward)
    capture = _Capture(trainer)
    trainer.train()
    ((generated, batch),) = capture.generated
    expected = _expected_advantages(batch, trainer.args)
    width = generated["advantages"].shape[1]
    assert torch.allclose(
        generated["advantages"][:, : expected.shape[1]], expected[:, :width], atol=1e-6
    )
    assert expected.abs().sum() > 0  # the parity reward gives a signal
    # every row the loss saw is a generated row with the same advantages (TRL shuffles rows)
    gen_rows = {
        tuple(ids.tolist()): adv
        for ids, adv in zip(generated["completion_ids"], generated["advantages"])
    }
    seen = 0
    for inputs in capture.loss_inputs:
        for ids, adv in zip(inputs["completion_ids"], inputs["advantages"]):
            assert torch.equal(gen_rows[tuple(ids.tolist())], adv)
            seen += 1
    assert seen == len(batch)
    # observation tokens (tool_mask 0) carry no advantage
    obs = generated["tool_mask"] == 0
    assert bool((generated["advantages"][obs & (generated["completion_mask"] == 1)] == 0).all())


# --------------------------------------------------------------------------- resume
class _Kill(Exception):
    pass


class _KillAfterStep:
    """Raise once the metrics row of rollout step ``step`` was written (a crash mid-run)."""

    def __init__(self, step: int):
        from transformers import TrainerCallback

        outer = self

        class _Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "reward" in logs and state.global_step == outer.global_step:
                    raise _Kill()

        self.step = step
        self.global_step = None
        self.callback = _Callback()


def _comparable(rows):
    return [{k: v for k, v in r.items() if k not in WALL_TIME_KEYS} for r in rows]


@pytest.mark.slow
@pytest.mark.integration
def test_killed_and_resumed_run_matches_uninterrupted(outputs):
    overrides = {
        "train": {
            "max_steps": 4,
            "save_every": 2,
            "eval_every": 2,
            "val_questions": 2,
            "val_datasets": ["tiny_hotpotqa"],
            "final_eval": False,
            "progress_bar": False,
        }
    }
    straight = train(
        "smoke", "at2po", 0, force=True, profile_overrides=overrides, reward_fn=parity_reward
    )
    expected_metrics = run_folder.read_jsonl(straight.run.metrics)
    expected_eval = run_folder.read_jsonl(straight.run.eval)
    assert [r["step"] for r in expected_metrics] == [1, 2, 3, 4]
    assert sorted({r["step"] for r in expected_eval}) == [0, 2, 4]
    run_folder.clear_run(straight.run)

    # killed after step 3's record was written; the last complete checkpoint is step 2
    kill = _KillAfterStep(3)
    kill.global_step = 3 * 2  # 2 updates per step on the smoke profile
    with pytest.raises(_Kill):
        train(
            "smoke",
            "at2po",
            0,
            force=True,
            profile_overrides=overrides,
            callbacks=[kill.callback],
            reward_fn=parity_reward,
        )
    run = straight.run
    from at2po_lib.util.staging import staging_path

    unfinished = run_folder.RunDir(
        staging_path(run.root)
    )  # a killed run stays in its staging folder
    assert [r["step"] for r in run_folder.read_jsonl(unfinished.metrics)] == [1, 2, 3]
    assert not unfinished.done.exists() and not run.done.exists()
    resumed = train(
        "smoke", "at2po", 0, resume=True, profile_overrides=overrides, reward_fn=parity_reward
    )
    assert resumed.status == "resumed"
    got_metrics, got_eval = run_folder.read_jsonl(run.metrics), run_folder.read_jsonl(run.eval)
    assert [r["step"] for r in got_metrics] == [1, 2, 3, 4]
    assert _approx_rows(_comparable(got_metrics), _comparable(expected_metrics))
    assert _approx_rows(_comparable(got_eval), _comparable(expected_eval))
    # a finished run with the same configuration is skipped
    again = train("smoke", "at2po", 0, profile_overrides=overrides, reward_fn=parity_reward)
    assert again.status == "skipped"


@pytest.mark.slow
@pytest.mark.integration
def test_a_study_continues_a_killed_run_from_its_checkpoint(outputs):
    """`at2po study` is the multi-session command: a run killed at a session's end must resume,
    not start over (the study at revision 0c35b88 restarted it)."""
    from at2po_lib.study.tables import run_study, study_plan

    overrides = {
        "train": {
            "max_steps": 4,
            "save_every": 2,
            "eval_every": 2,
            "val_questions": 2,
            "val_datasets": ["tiny_hotpotqa"],
            "final_eval": False,
            "progress_bar": False,
        }
    }
    kill = _KillAfterStep(3)
    kill.global_step = 3 * 2  # 2 updates per step on the smoke profile
    with pytest.raises(_Kill):
        train(
            "smoke",
            "grpo",
            0,
            force=True,
            profile_overrides=overrides,
            callbacks=[kill.callback],
            reward_fn=parity_reward,
        )
    (planned,) = study_plan("smoke", "1", [0], ["grpo"], overrides=overrides)
    assert (planned.state, planned.detail) == ("resumes", "from step 2")
    (result,) = run_study("smoke", "1", [0], ["grpo"], overrides=overrides)
    assert result.status == "resumed"
    meta = json.loads(result.run.meta.read_text())
    # the checkpoint of rollout step 2 (global step 4), not a fresh start
    assert meta["resumed_from"] == "checkpoints/checkpoint-4"
    assert [r["step"] for r in run_folder.read_jsonl(result.run.metrics)] == [1, 2, 3, 4]
    (again,) = run_study("smoke", "1", [0], ["grpo"], overrides=overrides)
    assert again.status == "skipped"
    assert study_plan("smoke", "1", [0], ["grpo"], overrides=overrides)[0].state == "finished"


def _approx_rows(got, expected, rel=1e-5) -> bool:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.keys() == e.keys(), g.keys() ^ e.keys()
        for key in g:
            if isinstance(e[key], float):
                assert g[key] == pytest.approx(e[key], rel=rel, abs=1e-7), key
            else:
                assert g[key] == e[key], key
    return True


@pytest.mark.integration
def test_chunked_log_probs_equal_the_padded_batch(outputs):
    """Length-sorted, trimmed chunks give the log-probs and entropies of TRL's padded batch."""
    cfg = smoke_profile(max_steps=1)
    trainer = build_trainer(cfg, "at2po", 0, run_folder.run_dir(cfg.name, "chunks", 0))
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 200, (5, 6), generator=generator)
    completion = torch.randint(3, 200, (5, 9), generator=generator)
    lengths = torch.tensor([9, 2, 7, 1, 5])  # right padding after these many tokens
    completion_mask = (torch.arange(9)[None] < lengths[:, None]).long()
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[0, :2] = 0  # a left-padded prompt
    ids = torch.cat([prompt, completion], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    trainer.args.loss_chunk_rows = 0
    ref_logps, ref_ent, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, mask, 9, compute_entropy=True
    )
    trainer.args.loss_chunk_rows = 2
    logps, ent, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, mask, 9, compute_entropy=True
    )
    real = completion_mask.bool()
    assert torch.allclose(logps[real], ref_logps[real], atol=1e-5)
    assert torch.allclose(ent[real], ref_ent[real], atol=1e-5)
    assert bool((logps[~real] == 0).all())


@pytest.mark.slow  # evaluates and writes the report: ~7 s of CPU
@pytest.mark.integration
def test_study_cli_applies_set_overrides_to_every_run(outputs):
    """``at2po study --set`` reaches each run's resolved config, its per-question outcomes and
    the report written afterwards (react: evaluation only, so this takes seconds)."""
    import pandas as pd
    import yaml

    from at2po_lib.cli import study
    from at2po_lib.record.outcomes import read_outcomes

    assert (
        study.main(
            [
                "--profile",
                "smoke",
                "--table",
                "1",
                "--seeds",
                "0",
                "--methods",
                "react",
                "--set",
                "eval.max_questions=2",
                "--force",
            ]
        )
        == 0
    )
    run = run_folder.run_dir("smoke", "react", 0)
    record = yaml.safe_load(run.config.read_text())
    assert record["settings"]["eval"]["max_questions"] == 2
    assert record["sources"]["set"] == {"eval.max_questions": 2}
    outcomes = read_outcomes(run.outcomes)
    assert outcomes.groupby("dataset").size().eq(2).all()
    table = pd.read_csv(outputs / "smoke" / "tables" / "table1.csv")
    ours = table[(table["source"] == "ours") & (table["method"] == "react")]
    assert set(ours[~ours["column"].str.contains("avg")]["n_questions"]) == {2}


class _KillAtTrainEnd:
    """Raise when training ends: the last checkpoint is written, the run is not finished."""

    def __init__(self):
        from transformers import TrainerCallback

        class _Callback(TrainerCallback):
            def on_train_end(self, args, state, control, **kwargs):
                raise _Kill()

        self.callback = _Callback()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("through_train_loop", [False, True], ids=["loaded", "train-loop"])
def test_a_run_killed_after_its_last_checkpoint_resumes_without_another_update(
    outputs, monkeypatch, through_train_loop
):
    """Resuming from the checkpoint of the last step trains nothing more: the records and the
    checkpoint's step equal the uninterrupted run's (an extra update used to follow). Both
    ways: the weights loaded without ``train()`` (one process, DDP), and through ``train()``
    (the DeepSpeed way, forced here: no DeepSpeed on CPU), where the epoch guard stops it."""
    from at2po_lib.study import run as run_module

    if through_train_loop:
        monkeypatch.setattr(run_module, "_loads_without_training", lambda trainer: False)
    overrides = {
        "train": {
            "max_steps": 2,
            "save_every": 2,
            "eval_every": 2,
            "val_questions": 2,
            "val_datasets": ["tiny_hotpotqa"],
            "final_eval": True,
            "progress_bar": False,
        }
    }
    straight = train(
        "smoke", "grpo", 0, force=True, profile_overrides=overrides, reward_fn=parity_reward
    )
    expected = run_folder.read_jsonl(straight.run.metrics)
    expected_outcomes = straight.run.outcomes.read_text()
    run_folder.clear_run(straight.run)
    with pytest.raises(_Kill):
        train(
            "smoke",
            "grpo",
            0,
            force=True,
            profile_overrides=overrides,
            callbacks=[_KillAtTrainEnd().callback],
            reward_fn=parity_reward,
        )
    resumed = train(
        "smoke", "grpo", 0, resume=True, profile_overrides=overrides, reward_fn=parity_reward
    )
    assert resumed.status == "resumed"
    got = run_folder.read_jsonl(resumed.run.metrics)
    assert [r["step"] for r in got] == [1, 2]
    assert _approx_rows(_comparable(got), _comparable(expected))
    checkpoints = sorted(p.name for p in resumed.run.checkpoints.glob("checkpoint-*"))
    assert checkpoints[-1] == "checkpoint-4"  # 2 steps x 2 updates: no checkpoint-5
    state = json.loads(
        (resumed.run.checkpoints / "checkpoint-4" / "trainer_state.json").read_text()
    )
    assert state["global_step"] == 4
    # the final evaluation is the uninterrupted run's model's, question by question
    assert resumed.run.outcomes.read_text() == expected_outcomes


@pytest.mark.slow
@pytest.mark.integration
def test_a_study_resumes_a_run_killed_after_its_last_checkpoint_without_another_update(outputs):
    """`at2po study` resumes such a run itself (``resume=True``) and goes through the same
    path: it ends at max_steps (a study's grpo/seed1 used to end at step 5 of 4)."""
    from at2po_lib.study.tables import run_study, study_plan

    overrides = {
        "train": {
            "max_steps": 2,
            "save_every": 2,
            "eval_every": 0,
            "final_eval": True,
            "progress_bar": False,
        }
    }
    with pytest.raises(_Kill):
        train(
            "smoke",
            "grpo",
            1,
            force=True,
            profile_overrides=overrides,
            callbacks=[_KillAtTrainEnd().callback],
        )
    (planned,) = study_plan("smoke", "1", [1], ["grpo"], overrides=overrides)
    assert (planned.state, planned.detail) == ("resumes", "from step 2")
    (result,) = run_study("smoke", "1", [1], ["grpo"], overrides=overrides)
    assert result.status == "resumed"
    assert json.loads(result.run.meta.read_text())["resumed_from"] == "checkpoints/checkpoint-4"
    checkpoints = sorted(p.name for p in result.run.checkpoints.glob("checkpoint-*"))
    assert checkpoints[-1] == "checkpoint-4"  # 2 steps x 2 updates: no checkpoint-5
    state = json.loads((result.run.checkpoints / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == state["max_steps"] == 4
    assert [r["step"] for r in run_folder.read_jsonl(result.run.metrics)] == [1, 2]
    assert result.run.outcomes.is_file()
