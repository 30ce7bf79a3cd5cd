"""Where AT2POTrainer leans on TRL 1.16's (and transformers') private methods, one test each that
fails if the call order it relies on changes (issue #46 item 4; the list is in the trainer's
docstring, "Private methods it overrides"). One real smoke training step (GRPO: a reference
model, so both of TRL's no-grad log-prob passes; 2 updates a step; a checkpoint) is traced once.
"""

from __future__ import annotations

import os

import pytest
import torch
from trl import GRPOTrainer

from at2po_lib.config.profile import load_profile
from at2po_lib.record import run_folder
from at2po_lib.study.run import build_trainer
from at2po_lib.trainer.trainer import AT2POTrainer

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _reward(response: str, golden) -> float:
    return float(len(response) % 2)  # varies between leaves of the untrained smoke policy


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """The calls of one rollout step, in order: (event, detail)."""
    old_results = os.environ.get("AT2PO_RESULTS")
    os.environ["AT2PO_RESULTS"] = str(tmp_path_factory.mktemp("results"))
    events: list[tuple[str, str]] = []
    patch = pytest.MonkeyPatch()

    def wrap(cls, name, detail=lambda self, *a, **k: ""):
        original = getattr(cls, name)

        def traced(self, *args, **kwargs):
            tag = f"{cls.__name__}.{name}"
            events.append((tag, detail(self, *args, **kwargs)))
            try:
                return original(self, *args, **kwargs)
            finally:
                events.append((tag + ":end", ""))

        patch.setattr(cls, name, traced)

    def which_model(self, model, *args, **kwargs):
        grad = "grad" if torch.is_grad_enabled() else "no_grad"
        return f"{'ref' if model is self.ref_model else 'policy'},{grad}"

    for name in (
        "_run_epoch",
        "_generate_and_score_completions",
        "_rollout",
        "_compute_loss",
        "_save_checkpoint",
    ):
        wrap(AT2POTrainer, name)
    wrap(AT2POTrainer, "_get_per_token_logps_and_entropies", which_model)
    wrap(GRPOTrainer, "_get_per_token_logps_and_entropies", which_model)
    try:
        cfg = load_profile(
            "smoke",
            {
                "train": {
                    "eval_every": 0,
                    "final_eval": False,
                    "progress_bar": False,
                    "save_every": 1,
                    "max_steps": 1,
                }
            },
        )
        run = run_folder.run_dir(cfg.name, "grpo", 0)
        run_folder.clear_run(run)
        trainer = build_trainer(cfg, "grpo", 0, run, reward_fn=_reward)
        planned = trainer._parent_scoring_passes()
        updates = trainer.updates_per_step
        accumulation = trainer.args.gradient_accumulation_steps
        trainer.train()
    finally:
        patch.undo()
        if old_results is None:
            os.environ.pop("AT2PO_RESULTS", None)
        else:
            os.environ["AT2PO_RESULTS"] = old_results
    return {"events": events, "planned": planned, "updates": updates, "accumulation": accumulation}


def _names(events) -> list[str]:
    return [name for name, _ in events]


def _span(events, name: str) -> tuple[int, int]:
    names = _names(events)
    return names.index(name), names.index(name + ":end")


def test_rollout_func_runs_inside_generate_and_score_completions_once(trace):
    """TRL 1.16 calls ``rollout_func`` (AT2POTrainer._rollout) from inside
    ``_generate_and_score_completions``, once per generation batch; the override relies on it to
    hand the rollout's extras (trees, credits) to its own post-processing."""
    events = trace["events"]
    start, end = _span(events, "AT2POTrainer._generate_and_score_completions")
    rollouts = [i for i, n in enumerate(_names(events)) if n == "AT2POTrainer._rollout"]
    assert len(rollouts) == 1 and start < rollouts[0] < end
    assert _names(events).count("AT2POTrainer._generate_and_score_completions") == 1


def test_the_parents_no_grad_passes_come_in_the_order_the_trainer_queues(trace):
    """During TRL's scoring, ``_get_per_token_logps_and_entropies`` is called once per no-grad
    pass, old log-probs (the policy) before reference log-probs (the reference model): the
    order ``_parent_scoring_passes`` predicts and the override pops from."""
    events = trace["events"]
    start, end = _span(events, "AT2POTrainer._generate_and_score_completions")
    calls = [
        detail
        for name, detail in events[start:end]
        if name == "AT2POTrainer._get_per_token_logps_and_entropies"
    ]
    expected = {"old": "policy,no_grad", "ref": "ref,no_grad"}
    assert [name for name, _ in trace["planned"]] == ["old", "ref"]
    assert calls == [expected[name] for name, _ in trace["planned"]]


def test_compute_loss_runs_once_per_micro_batch_after_the_scoring(trace):
    """TRL's ``compute_loss`` hands every micro-batch to ``_compute_loss`` (the ATPO loss
    replaces TRL's there): updates x accumulation calls, all after the scoring, with gradients."""
    events = trace["events"]
    _, scored = _span(events, "AT2POTrainer._generate_and_score_completions")
    losses = [i for i, n in enumerate(_names(events)) if n == "AT2POTrainer._compute_loss"]
    assert len(losses) == trace["updates"] * trace["accumulation"]
    assert all(i > scored for i in losses)


def test_run_epoch_wraps_the_step_and_the_checkpoint_follows_its_updates(trace):
    """transformers' ``_run_epoch`` (where the trainer stops a resumed run at max_steps) wraps
    the whole step; ``_save_checkpoint`` (where a full disk is reported) comes after the last
    update of the rollout step, inside it."""
    events = trace["events"]
    start, end = _span(events, "AT2POTrainer._run_epoch")
    names = _names(events)
    saves = [i for i, n in enumerate(names) if n == "AT2POTrainer._save_checkpoint"]
    losses = [i for i, n in enumerate(names) if n == "AT2POTrainer._compute_loss"]
    assert saves and all(start < i < end for i in saves)
    assert saves[-1] > losses[-1]
