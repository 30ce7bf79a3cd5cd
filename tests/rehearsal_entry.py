"""Run under ``accelerate launch`` by tests/test_rehearsal.py: the rehearsal's first part.

The same ``at2po_lib.study.run.train`` that ``at2po train`` calls, with two test-only
additions ``at2po train`` cannot take: a reward that differs between the leaves of a random
policy (so the first step has a gradient to all-reduce; the paper's reward gives every leaf of
an untrained policy -1 and every advantage 0), and a crash (what ``--resume`` must continue):
``--crash first-step`` (the default) right after the first rollout step's checkpoint was saved,
``--crash end`` when training ends, after the last checkpoint and before the final evaluation,
``--crash mid-step`` during the second rollout step, after the first one's checkpoint and 3 of
the second's updates (so a resume must redo updates that had run), ``--crash none`` never (the
uninterrupted run).

``--resume`` continues a killed run with the same reward (``at2po train --resume`` would score
the resumed steps with the paper's reward, which gives every leaf of a random policy -1).

    accelerate launch --multi_gpu --num_processes 2 tests/rehearsal_entry.py [--crash end] --set ...
    accelerate launch --multi_gpu --num_processes 2 tests/rehearsal_entry.py --resume --set ...
"""

from __future__ import annotations

import sys

from transformers import TrainerCallback

from at2po_lib.cli.train import split_overrides
from at2po_lib.study.run import train
from at2po_lib.util.process_group import process_group_left_at_end


class Crash(RuntimeError):
    pass


class CrashAfterSave(TrainerCallback):
    """Raises on every process once the checkpoint of global step ``step`` is saved."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Crash(f"rehearsal: crash after the checkpoint of global step {self.step}")


class CrashAfterUpdate(TrainerCallback):
    """Raises on every process once update ``step`` (a global step past the last checkpoint)
    has run: what a kill during a rollout step leaves."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Crash(f"rehearsal: crash during a step, after update {self.step}")


class CrashAtTrainEnd(TrainerCallback):
    """Raises on every process when training ends: the last checkpoint is saved, the final
    evaluation and ``DONE.json`` are not written."""

    def on_train_end(self, args, state, control, **kwargs):
        raise Crash(f"rehearsal: crash after the last checkpoint (global step {state.global_step})")


def length_parity_reward(response: str, golden) -> float:
    """Differs between the leaves of a random policy (tests only)."""
    return float(len(response) % 2)


def main(argv: list[str]) -> int:
    texts = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    mode = argv[argv.index("--crash") + 1] if "--crash" in argv else "first-step"
    resume = "--resume" in argv
    if resume:
        mode = "none"
    profile_overrides, trainer_overrides = split_overrides(texts)
    updates_per_step = 8  # the rehearsal profile: prompts_per_step 8 / mini_batch_prompts 1
    callbacks = {
        "first-step": [CrashAfterSave(updates_per_step)],
        "end": [CrashAtTrainEnd()],
        "mid-step": [CrashAfterUpdate(updates_per_step + 3)],
        "none": [],
    }
    if mode not in callbacks:
        raise SystemExit(f"--crash {mode!r}: one of {sorted(callbacks)}")
    try:
        with process_group_left_at_end():  # as `at2po train` does (at2po_lib.cli.main)
            train(
                "rehearsal",
                "at2po",
                0,
                force=not resume,
                resume=resume,
                profile_overrides=profile_overrides,
                trainer_overrides=trainer_overrides,
                reward_fn=length_parity_reward,
                callbacks=callbacks[mode],
            )
    except Crash as crash:
        print(crash, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
