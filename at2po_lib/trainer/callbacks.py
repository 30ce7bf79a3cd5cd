r"""Trainer callbacks that write a run's records (``records.RunDir``) and show its progress.

All act on the main process only and hook TRL/transformers' callback events, so the training
loop stays TRL's:

- :class:`MetricsRecorder` (``on_log``): one ``metrics.jsonl`` row per rollout step, from the
  metrics TRL and :class:`AT2POTrainer` log (TRL logs every ``logging_steps`` optimizer steps,
  which the run sets to the updates of one rollout step).
- :class:`GreedyValidation` (``on_train_begin`` / ``on_step_end``): greedy EM per dataset on the
  validation questions at step 0 and every ``eval_every`` rollout steps → ``eval.jsonl``.
- :class:`CheckpointMarker` (``on_save``): the COMPLETE marker once TRL's save returned.
- :class:`StepProgress`: a progress bar over rollout steps with reward, entropy and time left.

A *rollout step* (``step`` in every record) is ``global_step // updates_per_step``: one batch of
rollouts, the paper's unit ("240 training steps").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from transformers import TrainerCallback

from . import records

METRIC_KEYS: dict[str, str] = {
    # record name: TRL / AT2POTrainer log key
    "reward": "reward",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "entropy": "entropy",
    "clip_frac_low": "clip_ratio/low_mean",
    "clip_frac_high": "clip_ratio/high_mean",
    "clip_frac": "clip_ratio/region_mean",
    "kl": "kl",
    "approx_kl": "approx_kl",
    "ratio_mean": "ratio_mean",
    "turn_kl_entropy": "turn_kl_entropy",
    "single_turn_rows": "single_turn_rows",
    "turns_per_trajectory": "rollout/turns_mean",
    "tool_calls_per_trajectory": "rollout/tool_calls_mean",
    "leaves_per_prompt": "rollout/leaves_per_prompt",
    "tree_nodes": "rollout/tree_nodes_mean",
    "model_tokens_per_trajectory": "completions/mean_length",
    "num_tokens": "num_tokens",
    "dynamic_sampling_rounds": "rollout/dynamic_sampling_rounds",
    "dynamic_sampling_kept": "rollout/dynamic_sampling_kept",
    "adv_abs_mean": "advantages/abs_mean",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "sampling_logp_diff": "sampling/logp_abs_diff",
    "rollout_time": "rollout/seconds",
    "step_time": "step_time",
}
"""What ``metrics.jsonl`` keeps (absent keys are skipped; e.g. ``kl`` only with a KL term)."""

WALL_TIME_KEYS = ("rollout_time", "step_time", "wall_time", "eval_time")
"""Record fields that measure time (excluded when comparing two runs' records)."""


def rollout_step(global_step: int, updates_per_step: int) -> int:
    return global_step // max(updates_per_step, 1)


class MetricsRecorder(TrainerCallback):
    """Append one row per logged rollout step to ``metrics.jsonl``."""

    def __init__(self, path: Path, updates_per_step: int, start_time: float | None = None):
        self.path = path
        self.updates_per_step = updates_per_step
        self.start_time = start_time if start_time is not None else time.time()
        self.last: dict[str, Any] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "reward" not in logs:
            return  # evaluation logs and the final train summary carry no rollout metrics
        row: dict[str, Any] = {"step": rollout_step(state.global_step, self.updates_per_step),
                               "global_step": state.global_step}
        for name, key in METRIC_KEYS.items():
            if key in logs and logs[key] is not None:
                row[name] = logs[key]
        row["wall_time"] = time.time() - self.start_time
        records.append_jsonl(self.path, row)
        self.last = row


class GreedyValidation(TrainerCallback):
    """Greedy validation EM per dataset at step 0 and every ``every`` rollout steps.

    ``evaluate() -> pandas.DataFrame`` (per-dataset rows with ``dataset``, ``group``, ``n``,
    ``em``, ``f1``, ``mean_turns``) is supplied by the run (``run.Validator``: it takes the
    trainer's current policy and shards questions over processes), so this callback knows
    nothing about models, retrievers or datasets. It runs on every process (generation may
    need collective weight gathering); the main process writes the rows.
    """

    def __init__(self, path: Path, evaluate: Callable[[], Any], every: int,
                 updates_per_step: int):
        self.path = path
        self.evaluate = evaluate
        self.every = every
        self.updates_per_step = updates_per_step
        self.last: dict[str, float] = {}

    def _run(self, step: int, state) -> None:
        start = time.perf_counter()
        frame = self.evaluate()
        seconds = time.perf_counter() - start
        if not state.is_world_process_zero:
            return
        for rec in frame.to_dict("records"):
            row = {"step": step, "dataset": rec["dataset"], "group": rec.get("group"),
                   "n": rec.get("n"), "em": rec.get("em"), "f1": rec.get("f1"),
                   "mean_turns": rec.get("mean_turns"),
                   "mean_tool_calls": rec.get("mean_tool_calls"), "eval_time": seconds}
            records.append_jsonl(self.path, row)
            self.last[str(rec["dataset"])] = float(rec.get("em"))

    def on_train_begin(self, args, state, control, **kwargs):
        if self.every > 0 and state.global_step == 0:
            self._run(0, state)

    def on_step_end(self, args, state, control, **kwargs):
        if self.every <= 0 or state.global_step % self.updates_per_step:
            return
        step = rollout_step(state.global_step, self.updates_per_step)
        if step % self.every == 0 or state.global_step >= state.max_steps:
            self._run(step, state)


class CheckpointMarker(TrainerCallback):
    """Mark ``checkpoint-N`` complete once TRL's save has returned (see ``records``)."""

    def __init__(self, checkpoints: Path, updates_per_step: int):
        self.checkpoints = checkpoints
        self.updates_per_step = updates_per_step

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = self.checkpoints / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            records.mark_checkpoint_complete(
                folder, global_step=state.global_step,
                step=rollout_step(state.global_step, self.updates_per_step))


class StepProgress(TrainerCallback):
    """A tqdm bar over rollout steps: reward, entropy, latest validation EM, time left."""

    def __init__(self, total_steps: int, updates_per_step: int, description: str = "",
                 validation: GreedyValidation | None = None):
        self.total = total_steps
        self.updates_per_step = updates_per_step
        self.description = description
        self.validation = validation
        self.bar = None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=self.description, unit="step",
                            initial=rollout_step(state.global_step, self.updates_per_step))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs or "reward" not in logs:
            return
        step = rollout_step(state.global_step, self.updates_per_step)
        self.bar.update(max(step - self.bar.n, 0))
        postfix = {"reward": f"{logs['reward']:.3f}"}
        if logs.get("entropy") is not None:
            postfix["entropy"] = f"{logs['entropy']:.3f}"
        if self.validation is not None and self.validation.last:
            em = sum(self.validation.last.values()) / len(self.validation.last)
            postfix["val_em"] = f"{em:.3f}"
        self.bar.set_postfix(postfix, refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
