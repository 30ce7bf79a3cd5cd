"""Per-process records of a multi-process run: which prompts each process rolled out and a
digest of its weights after each rollout step (``<run>/ranks/rank<R>.jsonl``).

Diagnostic, not configuration: on when ``AT2PO_RANK_RECORDS=1`` (the rehearsal sets it), so a
run's config hash does not change with it. Data parallelism holds when the processes saw
different prompts and, after the all-reduced updates, hold bit-identical weights (the same
``weights_sha256``). Hashing every weight costs a pass over the model on every process: meant
for small models (under ZeRO-3 each process holds only a shard, so digests differ by design).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from transformers import TrainerCallback

ENV_FLAG = "AT2PO_RANK_RECORDS"


def enabled() -> bool:
    return os.environ.get(ENV_FLAG, "") in {"1", "true", "yes"}


def weights_digest(model) -> str:
    """SHA-256 over every parameter's bytes, in ``named_parameters`` order."""
    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        digest.update(name.encode())
        digest.update(param.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class RankRecord(TrainerCallback):
    """Appends one row per rollout step to ``<folder>/rank<R>.jsonl`` on every process."""

    def __init__(self, trainer, folder: Path):
        self.trainer, self.folder = trainer, Path(folder)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        updates = self.trainer.updates_per_step
        if state.global_step % updates:
            return
        acc = self.trainer.accelerator
        row = {
            "rollout_step": state.global_step // updates,
            "global_step": state.global_step,
            "rank": acc.process_index,
            "world_size": acc.num_processes,
            "prompt_ids": list(getattr(self.trainer, "last_rollout_ids", [])),
            "weights_sha256": weights_digest(acc.unwrap_model(model or self.trainer.model)),
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"rank{acc.process_index}.jsonl", "a") as handle:
            handle.write(json.dumps(row) + "\n")
