"""Rollouts of the multi-turn search agent: chains, trees, AEPO branching (docs/method.md §1, §5, §8).

    from at2po_lib.rollout import rollout_trees, rollout_chains, training_rows

    trees = rollout_trees(model, tokenizer, "tiny", retriever, questions, golden, cfg.rollout)
    rows = training_rows(trees)          # one row per leaf, ids never re-tokenised

Modules: :mod:`.structures` (Turn, Trajectory, Node, RolloutTree), :mod:`.sampling`
(temperature / top-p sampling, log-probs, entropies), :mod:`.kvcache` (per-sequence KV
prefixes, the batched turn cache), :mod:`.backends` (Hugging Face turn generator),
:mod:`.vllm_backend` (vLLM), :mod:`.agent` (environment and turn loop, greedy chains),
:mod:`.trees` (chains, random and entropy-guided expansion), :mod:`.aepo` (AEPO's online
branching), :mod:`.export` (trees as :class:`at2po_lib.forest.TreeArrays`, tidy tables,
training rows; files: ``at2po_lib.forest.save_trees``), :mod:`.toy` (stand-ins for tests
and benchmarks). Tree figures: :mod:`at2po_lib.reporting.trees`.

Names are imported lazily so ``import at2po_lib.rollout`` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Turn": ".structures", "Trajectory": ".structures", "Node": ".structures",
    "RolloutTree": ".structures",
    "SamplingSpec": ".sampling",
    "HFBackend": ".backends", "TurnRequest": ".backends", "TurnResult": ".backends",
    "make_backend": ".backends",
    "SearchEnv": ".agent", "rollout_chains": ".agent", "default_reward_fn": ".agent",
    "STOP_SEQUENCES": ".agent", "turn_stops": ".agent",
    "rollout_trees": ".trees", "select_entropy": ".trees", "select_random": ".trees",
    "expansion_scores": ".trees", "equalize_leaves": ".trees",
    "rollout_aepo": ".aepo",
    "tree_arrays": ".export", "tree_table": ".export", "training_rows": ".export",
    "tree_summary": ".export", "save_trees": "..forest", "load_trees": "..forest",
    "TreeArrays": "..forest",
    "trajectory_table": ".export",
    "rollout": ".trees",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'at2po_lib.rollout' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
