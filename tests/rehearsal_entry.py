"""Run under ``accelerate launch`` by tests/test_rehearsal.py: the rehearsal's first part.

The same ``at2po_lib.trainer.run.train`` that ``at2po train`` calls, with two test-only
additions ``at2po train`` cannot take: a reward that differs between the leaves of a random
policy (so the first step has a gradient to all-reduce; the paper's reward gives every leaf of
an untrained policy -1 and every advantage 0), and a crash right after the first rollout
step's checkpoint was saved (what ``--resume`` must continue).

    accelerate launch --multi_gpu --num_processes 2 tests/rehearsal_entry.py --set ...
"""

from __future__ import annotations

import sys

from transformers import TrainerCallback

from at2po_lib.cli.train import split_overrides
from at2po_lib.trainer.run import train


class Crash(RuntimeError):
    pass


class CrashAfterSave(TrainerCallback):
    """Raises on every process once the checkpoint of global step ``step`` is saved."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Crash(f"rehearsal: crash after the checkpoint of global step {self.step}")


def length_parity_reward(response: str, golden) -> float:
    """Differs between the leaves of a random policy (tests only)."""
    return float(len(response) % 2)


def main(argv: list[str]) -> int:
    texts = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    profile_overrides, trainer_overrides = split_overrides(texts)
    updates_per_step = 8  # the rehearsal profile: prompts_per_step 8 / mini_batch_prompts 1
    try:
        train("rehearsal", "at2po", 0, force=True, profile_overrides=profile_overrides,
              trainer_overrides=trainer_overrides, reward_fn=length_parity_reward,
              callbacks=[CrashAfterSave(updates_per_step)])
    except Crash as crash:
        print(crash, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
