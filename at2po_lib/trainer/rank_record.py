"""Per-process records of a multi-process run: which prompts each process rolled out and a
digest of its weights after each rollout step (``<run>/ranks/rank<R>.jsonl``).

Diagnostic, not configuration: on when ``AT2PO_RANK_RECORDS=1`` (the rehearsal sets it), so a
run's config hash does not change with it. Data parallelism holds when the processes saw
different prompts and, after the all-reduced updates, hold bit-identical weights (the same
``weights_sha256``). Hashing every weight costs a pass over the model on every process: meant
for small models. Under ZeRO-3 each module keeps only an empty placeholder per parameter (the
values live in the ranks' partitions), so the digest gathers the full parameters first with
DeepSpeed's own ``GatheredParameters``: a collective, which every process reaches at the same
step (the callback runs on all of them).
"""

from __future__ import annotations

import hashlib
import json
import contextlib
import os
from pathlib import Path
from typing import ContextManager

from transformers import TrainerCallback

# Imported inside the functions that use them: deepspeed; optional, present only where ZeRO runs.

ENV_FLAG = "AT2PO_RANK_RECORDS"


def enabled() -> bool:
    return os.environ.get(ENV_FLAG, "") in {"1", "true", "yes"}


def weights_digest(model) -> str:
    """SHA-256 over every parameter's full values, in ``named_parameters`` order (ZeRO-3
    partitions gathered first: :func:`gathered`)."""
    digest = hashlib.sha256()
    named = list(model.named_parameters())
    with gathered([param for _, param in named]):
        for name, param in named:
            digest.update(name.encode())
            digest.update(param.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def is_zero3_partitioned(param) -> bool:
    """Whether ZeRO-3 has partitioned ``param`` (DeepSpeed tags such a parameter ``ds_id``)."""
    return hasattr(param, "ds_id")


def gathered(params: list) -> ContextManager:
    """Inside it, ZeRO-3-partitioned ``params`` hold their full values (DeepSpeed's
    ``GatheredParameters``, read-only: nothing is scattered back); a no-op otherwise."""
    partitioned = [p for p in params if is_zero3_partitioned(p)]
    if not partitioned:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None)


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
