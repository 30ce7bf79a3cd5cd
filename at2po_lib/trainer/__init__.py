"""RL training of AT2PO and its baselines on TRL's ``GRPOTrainer`` (docs/method.md §5–§9).

Modules: :mod:`.config` (``AT2POConfig``, a ``GRPOConfig`` subclass), :mod:`.trainer`
(``AT2POTrainer``, a ``GRPOTrainer`` subclass), :mod:`.batch` (training rows and
their per-token advantages), :mod:`.agent` (tree rollouts as training rows),
:mod:`.methods` (named presets: Table 1–3), :mod:`.records` (run folders, metrics, resume),
:mod:`.callbacks` (records and progress), :mod:`.resolve` (profile + preset → one
:class:`RunSpec`), :mod:`.run` (``train``: one run with its records), :mod:`.table1` (the
Table 1 study). Their command lines are in :mod:`at2po_lib.cli`.

    from at2po_lib.trainer import train
    result = train("tiny", "at2po", seed=0)      # records in result.run.root

Names are imported lazily: ``import at2po_lib.trainer`` does not load torch or trl.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AT2POConfig": ".config", "AT2POTrainer": ".trainer", "RolloutBatch": ".batch",
    "token_advantages": ".batch", "SearchAgent": ".agent",
    "METHODS": ".methods", "Method": ".methods", "get_method": ".methods",
    "list_methods": ".methods", "TABLE1_METHODS": ".methods", "TABLE2_METHODS": ".methods",
    "RunDir": ".records", "run_dir": ".records",
    "train": ".run", "TrainResult": ".run", "build_training_args": ".run",
    "batch_geometry": ".run", "RunSpec": ".resolve", "resolve_run": ".resolve",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'at2po_lib.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
