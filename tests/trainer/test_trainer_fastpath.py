"""The trainer's fast path (issue #16) and DAPO's dynamic sampling, on real smoke-size steps.

- ``policy_position_logps`` (log-probs of the policy's tokens only) equals TRL's fused head over
  every position: values, entropies and gradients.
- A real step with the new default (policy positions, the rollout's recorded old log-probs)
  gives the records of the old path (every position, old log-probs recomputed by TRL):
  loss, gradient norm, entropy, KL, clip fractions equal to rel 1e-4 (float32 sums in a
  different order), and the same parameters after the step (1e-6).
- DAPO's dynamic sampling runs inside a real training step (it never did before: the check
  ran inside ``policy_for_generation()``, which had put the model in eval mode).

Same real pipeline as ``test_trainer.py`` (TinyWorld, BM25, the smoke Qwen3, TRL); the rewards
are test rewards so an untrained policy gets a signal.
"""

from __future__ import annotations

import math

import pytest
import torch

from at2po_lib.config.profile import load_profile
from at2po_lib.record import run_folder
from at2po_lib.trainer.batch import group_has_signal
from at2po_lib.trainer.callbacks import WALL_TIME_KEYS
from at2po_lib.study.run import build_trainer
from at2po_lib.trainer.trainer import policy_position_logps

pytestmark = [pytest.mark.slow, pytest.mark.integration]

OLD_PATH = {"loss_logp_positions": "all", "loss_old_logps": "recompute"}


def parity_reward(response: str, golden) -> float:
    """Differs between leaves of an untrained policy (tests only)."""
    return float(len(response) % 2)


def constant_reward(response: str, golden) -> float:
    """Every leaf of every prompt the same: every group degenerate (tests only)."""
    return 1.0


def smoke_profile(**train):
    return load_profile(
        "smoke",
        {
            "train": {
                "eval_every": 0,
                "final_eval": False,
                "progress_bar": False,
                "save_every": 0,
                "max_steps": 1,
                **train,
            }
        },
    )


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    import os

    results = tmp_path_factory.mktemp("results")
    old = os.environ.get("AT2PO_RESULTS")
    os.environ["AT2PO_RESULTS"] = str(results)
    yield results
    if old is None:
        os.environ.pop("AT2PO_RESULTS", None)
    else:
        os.environ["AT2PO_RESULTS"] = old


def _trainer(method: str, name: str, overrides=None, reward_fn=parity_reward, **train):
    cfg = smoke_profile(**train)
    run = run_folder.run_dir(cfg.name, name, 0)
    run_folder.clear_run(run)
    return build_trainer(cfg, method, 0, run, overrides, reward_fn=reward_fn), run


# ------------------------------------------------------------------ policy-position log-probs
def test_policy_positions_equal_trls_fused_head(outputs):
    trainer, _ = _trainer("at2po", "fastpath_unit")
    assert (trainer.logp_positions, trainer.old_logps_source) == ("policy", "rollout")
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 200, (5, 6), generator=g)
    completion = torch.randint(3, 200, (5, 9), generator=g)
    lengths = torch.tensor([9, 2, 7, 1, 5])
    completion_mask = (torch.arange(9)[None] < lengths[:, None]).long()
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[0, :2] = 0  # a left-padded prompt
    positions = completion_mask.clone()
    positions[0, 3:5] = 0  # an observation inside a row
    positions[3] = 0  # a row with nothing to score
    ids = torch.cat([prompt, completion], 1)
    attention = torch.cat([prompt_mask, completion_mask], 1)
    scored = positions.bool()
    model = trainer.model

    ref, ref_entropy, _ = trainer._get_per_token_logps_and_entropies(
        model, ids, attention, 9, compute_entropy=True
    )
    (ref * positions).sum().backward()
    ref_grad = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    for chunk_rows in (0, 2):
        logps, entropy = policy_position_logps(
            model, ids, attention, positions, trainer.temperature, chunk_rows, compute_entropy=True
        )
        torch.testing.assert_close(logps[scored], ref[scored], atol=1e-5, rtol=0)
        torch.testing.assert_close(entropy[scored], ref_entropy[scored], atol=1e-5, rtol=0)
        assert bool((logps[~scored] == 0).all()) and bool((entropy[~scored] == 0).all())
        logps.sum().backward()
        for name, p in model.named_parameters():
            if name in ref_grad:
                torch.testing.assert_close(p.grad, ref_grad[name], atol=1e-5, rtol=1e-4)
        model.zero_grad()
    # nothing to score: zeros, and still a graph to backpropagate through
    logps, _ = policy_position_logps(
        model, ids, attention, torch.zeros_like(positions), trainer.temperature
    )
    assert logps.requires_grad and bool((logps == 0).all())
    logps.sum().backward()


def test_explicit_policy_positions_refused_where_unsupported(outputs):
    trainer, _ = _trainer("at2po", "fastpath_refuse")
    trainer.args.loss_logp_positions = "policy"
    trainer.model.config.final_logit_softcapping = 30.0
    try:
        with pytest.raises(ValueError, match="rescales its logits"):
            trainer._resolve_logp_positions()
        trainer.args.loss_logp_positions = "auto"
        assert trainer._resolve_logp_positions() == "all"
    finally:
        trainer.model.config.final_logit_softcapping = None


# --------------------------------------------------------------------- old path vs new path
def _comparable(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in WALL_TIME_KEYS}


@pytest.mark.parametrize("method", ["at2po", "grpo"])  # turn loss; token loss with KL (ref)
def test_new_default_step_equals_the_old_path(outputs, method):
    rows, params = {}, {}
    for name, overrides in (("new", None), ("old", OLD_PATH)):
        trainer, run = _trainer(method, f"fastpath_{method}_{name}", overrides)
        trainer.train()
        rows[name] = _comparable(run_folder.read_jsonl(run.metrics)[0])
        params[name] = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    new, old = rows["new"], rows["old"]
    assert new.keys() == old.keys()
    assert old["grad_norm"] > 0 and math.isfinite(new["loss"])
    for key, value in old.items():
        if isinstance(value, float):
            assert new[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
        else:
            assert new[key] == value, key
    for name, p in params["old"].items():
        torch.testing.assert_close(params["new"][name], p, atol=1e-6, rtol=0)


def test_old_logps_come_from_the_rollout(outputs):
    """With the HF backend TRL's extra no-grad forward is skipped: the old log-probs the loss
    gets are the rollout's record on the policy's tokens."""
    trainer, _ = _trainer("at2po", "fastpath_old_logps")
    passes = []
    parent = type(trainer).__mro__[1]._get_per_token_logps_and_entropies

    def counting(self, model, *args, **kwargs):
        passes.append(torch.is_grad_enabled())
        return parent(self, model, *args, **kwargs)

    seen = []
    original = trainer._generate_and_score_completions

    def capture(inputs):
        out = original(inputs)
        seen.append(out)
        return out

    trainer._generate_and_score_completions = capture
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(trainer).__mro__[1], "_get_per_token_logps_and_entropies", counting)
        trainer.train()
    assert passes == []  # neither TRL's old-log-prob pass nor the "all"-positions loss ran
    (out,) = seen
    mask = (out["completion_mask"] * out["tool_mask"]).bool()
    torch.testing.assert_close(
        out["old_per_token_logps"][mask], out["sampling_per_token_logps"][mask]
    )
    assert bool((out["old_per_token_logps"][~mask] == 0).all())


# --------------------------------------------------------------------- DAPO dynamic sampling
class _CountingAgent:
    def __init__(self, agent):
        self.agent, self.batches = agent, []

    def sample(self, policy, rows, args, seed):
        batch = self.agent.sample(policy, rows, args, seed)
        self.batches.append(batch)
        return batch


def test_dapo_dynamic_sampling_runs_in_a_real_step(outputs):
    # every group degenerate: all rounds are used, none kept, the records say so
    trainer, run = _trainer("dapo", "dapo_all_equal", reward_fn=constant_reward)
    counting = trainer.agent = _CountingAgent(trainer.agent)
    trainer.train()
    row = run_folder.read_jsonl(run.metrics)[0]
    rounds = trainer.args.dynamic_sampling_rounds
    assert len(counting.batches) == rounds > 1
    assert row["rollout/dynamic_sampling_rounds"] == rounds
    assert row["rollout/dynamic_sampling_kept"] == 0.0

    # test rewards that vary: the records show the share of first-round groups with signal
    trainer, run = _trainer("dapo", "dapo_parity", reward_fn=parity_reward)
    counting = trainer.agent = _CountingAgent(trainer.agent)
    trainer.train()
    row = run_folder.read_jsonl(run.metrics)[0]
    first = counting.batches[0]
    groups = len(set(first.group))
    kept = sum(group_has_signal(first, g) for g in range(groups)) / groups
    assert row["rollout/dynamic_sampling_kept"] == pytest.approx(kept)
    assert row["rollout/dynamic_sampling_rounds"] == len(counting.batches)
    assert (row["rollout/dynamic_sampling_rounds"] > 1) == (kept < 1)


def test_update_threads_apply_to_the_update_only(outputs):
    """train.update_num_threads (a profile key) reaches the trainer and holds for the loss only."""
    seen = []
    trainer, _ = _trainer("gspo", "update_threads", update_num_threads=1)
    assert trainer.args.update_num_threads == 1
    compute_loss = trainer._compute_loss

    def recording(model, inputs):
        seen.append(torch.get_num_threads())
        return compute_loss(model, inputs)

    trainer._compute_loss = recording
    before = torch.get_num_threads()
    trainer.train()
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before
