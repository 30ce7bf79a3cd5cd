r"""Rollout trees as arrays, tidy tables, training rows, and the ``trees.pkl`` file.

Per tree, :func:`tree_arrays` gives numpy arrays over nodes (node 0 = root)::

    parent           (N,) int64    parent id, -1 for the root
    entropy          (N,) float64  H(n) by rollout.entropy_estimate (root 0)
    entropy_nll      (N,) float64  mean sampled-token NLL of the turn (authors' estimate)
    entropy_exact    (N,) float64  mean exact entropy of the turn (paper's -sum p log p)
    turn_start       (N,) int64    turn span [turn_start, turn_end) in completion coordinates
    turn_end         (N,) int64    (root: 0, 0)
    expansion_round  (N,) int64    0 for the initial chains, 1..L for expansions
    depth            (N,) int64
    is_leaf          (N,) bool
    reward           (N,) float64  leaf reward, NaN on non-leaf nodes
    leaf_reward      (N,) float64  the same array under the name at2po_lib.credit reads

:func:`training_rows` gives one row per leaf (its root→leaf path)::

    prompt_ids, completion_ids, completion_mask (1 = sampled token), turn_node (node id per
    completion token, -1 on observation tokens), old_logps (log-prob at the sampling
    temperature, 0 where the mask is 0), token_entropy (exact entropy of the sampling
    distribution per token, 0 where the mask is 0, NaN from vLLM; AEPO's entropy-aware
    advantage can use it), reward, tree_id (position of the tree in the batch),
    prompt_id (the caller's prompt id), leaf_node

:func:`tree_table` gives one pandas row per node (prompt_id, node, parent, depth, round,
entropy_nll, entropy_exact, text, action, query, answer, reward, ...).

``trees.pkl`` (:func:`save_trees` / :func:`load_trees`) is a pickled dict::

    {"format": "at2po-rollout-trees/1",
     "meta": {...},                      # profile, seed, expansion, git revision, ...
     "trees": [ {**tree_arrays(tree),    # parent / entropy / leaf_reward / ...
                 "tree_id", "prompt_id", "question", "golden_answers",
                 "rows": training_rows of this tree,
                 "table": list of tree_table records of this tree} ]}

``at2po_lib.credit.load_trees`` reads it directly (it uses ``parent``, ``entropy`` and
``leaf_reward`` of each entry of ``"trees"``).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .structures import ROOT, RolloutTree

if TYPE_CHECKING:
    import pandas as pd

FORMAT = "at2po-rollout-trees/1"


def tree_arrays(tree: RolloutTree, entropy_estimate: str = "sampled_nll") -> dict[str, np.ndarray]:
    """The node arrays of one tree (module docstring)."""
    from .trees import node_entropy

    nodes = tree.nodes
    is_leaf = np.array([n.is_leaf for n in nodes], dtype=bool)
    reward = np.array([n.reward if n.is_leaf else np.nan for n in nodes], dtype=np.float64)
    return {
        "parent": np.array([n.parent for n in nodes], dtype=np.int64),
        "entropy": node_entropy(tree, entropy_estimate),
        "entropy_nll": np.array([n.entropy_nll for n in nodes], dtype=np.float64),
        "entropy_exact": np.array([n.entropy_exact for n in nodes], dtype=np.float64),
        "turn_start": np.array([n.start if n.id != ROOT else 0 for n in nodes], dtype=np.int64),
        "turn_end": np.array([n.end if n.id != ROOT else 0 for n in nodes], dtype=np.int64),
        "expansion_round": np.array([n.expansion_round for n in nodes], dtype=np.int64),
        "depth": np.array([n.depth for n in nodes], dtype=np.int64),
        "is_leaf": is_leaf,
        "reward": reward,
        "leaf_reward": reward.copy(),
    }


def training_rows(trees: Sequence[RolloutTree]) -> list[dict[str, Any]]:
    """One training row per leaf of every tree (module docstring), trees in order."""
    rows = []
    for tree_id, tree in enumerate(trees):
        for leaf in tree.leaves():
            completion, mask, turn_node, logps, entropies = [], [], [], [], []
            for n in (tree.nodes[i] for i in tree.path(leaf)):
                completion += n.token_ids + n.obs_ids
                mask += [1] * len(n.token_ids) + [0] * len(n.obs_ids)
                turn_node += [n.id] * len(n.token_ids) + [-1] * len(n.obs_ids)
                logps += list(n.logps) + [0.0] * len(n.obs_ids)
                entropies += list(n.entropies) + [0.0] * len(n.obs_ids)
            rows.append({
                "prompt_ids": list(tree.prompt_ids), "completion_ids": completion,
                "completion_mask": mask, "turn_node": turn_node, "old_logps": logps,
                "token_entropy": entropies,
                "reward": float(tree.nodes[leaf].reward), "tree_id": tree_id,
                "prompt_id": tree.prompt_index, "leaf_node": leaf,
            })
    return rows


def tree_records(tree: RolloutTree, tree_id: int = 0) -> list[dict[str, Any]]:
    """One dict per node (the rows of :func:`tree_table`)."""
    records = []
    for n in tree.nodes:
        action = n.action
        records.append({
            "tree_id": tree_id, "prompt_id": tree.prompt_index, "node": n.id, "parent": n.parent,
            "depth": n.depth, "round": n.expansion_round,
            "entropy_nll": n.entropy_nll, "entropy_exact": n.entropy_exact,
            "num_tokens": len(n.token_ids), "num_obs_tokens": len(n.obs_ids),
            "text": n.text if n.id != ROOT else tree.question,
            "action": getattr(action, "kind", "root" if n.id == ROOT else None),
            "query": getattr(action, "query", None), "answer": getattr(action, "answer", None),
            "is_leaf": n.is_leaf, "finish_reason": n.finish_reason or None,
            "reward": n.reward if n.is_leaf else np.nan, "tool_calls": n.tool_calls,
        })
    return records


def trajectory_table(trajectory, decode) -> pd.DataFrame:
    """One row per segment of a trajectory: each model turn (mask 1) and each observation /
    notice / corrective message (mask 0), with its token count and text (``decode(ids)``)."""
    import pandas as pd

    records, start = [], 0
    ids, mask, turn_ids = trajectory.completion_ids, trajectory.completion_mask, trajectory.turn_ids
    for end in range(1, len(ids) + 1):
        if end == len(ids) or mask[end] != mask[start] or turn_ids[end] != turn_ids[start]:
            turn = trajectory.turns[turn_ids[start]] if mask[start] else None
            records.append({
                "segment": "turn" if mask[start] else "environment", "tokens": end - start,
                "loss_mask": mask[start], "action": getattr(turn.action, "kind", None) if turn else None,
                "entropy_nll": turn.entropy_nll if turn else None,
                "entropy_exact": turn.entropy_exact if turn else None,
                "text": decode(ids[start:end]),
            })
            start = end
    return pd.DataFrame.from_records(records)


def tree_table(trees: Sequence[RolloutTree]) -> pd.DataFrame:
    """A tidy table: one row per node of every tree."""
    import pandas as pd

    return pd.DataFrame.from_records(
        [r for i, t in enumerate(trees) for r in tree_records(t, i)])


def tree_summary(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """Per-batch numbers: leaves, distinct queries/answers per tree, correct share, tokens."""
    leaves = [t.nodes[i] for t in trees for i in t.leaves()]
    distinct_q = [len({n.action.query for n in t.nodes[1:] if getattr(n.action, "kind", "") == "search"})
                  for t in trees]
    distinct_a = [len({n.action.answer for n in t.nodes[1:] if getattr(n.action, "kind", "") == "answer"})
                  for t in trees]
    rewards = np.array([n.reward for n in leaves], dtype=float)
    return {
        "trees": len(trees),
        "leaves_per_tree": len(leaves) / max(len(trees), 1),
        "nodes_per_tree": sum(len(t.nodes) for t in trees) / max(len(trees), 1),
        "distinct_queries_per_tree": float(np.mean(distinct_q)) if trees else 0.0,
        "distinct_answers_per_tree": float(np.mean(distinct_a)) if trees else 0.0,
        "correct_leaf_share": float(np.mean(rewards > 0)) if rewards.size else float("nan"),
        "mean_reward": float(np.nanmean(rewards)) if rewards.size else float("nan"),
        "generated_tokens": float(sum(len(n.token_ids) for t in trees for n in t.nodes
                                      if n.duplicate_of < 0)),
        "generated_tokens_per_leaf": float(sum(len(n.token_ids) for t in trees for n in t.nodes
                                               if n.duplicate_of < 0)) / max(len(leaves), 1),
    }


def save_trees(trees: Sequence[RolloutTree], path: str | Path, meta: dict[str, Any] | None = None,
               entropy_estimate: str = "sampled_nll") -> Path:
    """Write ``trees.pkl`` (format in the module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = training_rows(trees)
    entries = []
    for tree_id, tree in enumerate(trees):
        entry: dict[str, Any] = tree_arrays(tree, entropy_estimate)
        entry.update(tree_id=tree_id, prompt_id=tree.prompt_index, question=tree.question,
                     golden_answers=list(tree.golden_answers),
                     rows=[r for r in rows if r["tree_id"] == tree_id],
                     table=tree_records(tree, tree_id))
        entries.append(entry)
    payload = {"format": FORMAT, "meta": dict(meta or {}, entropy_estimate=entropy_estimate),
               "trees": entries}
    with path.open("wb") as fh:
        pickle.dump(payload, fh)
    return path


def load_trees(path: str | Path) -> dict[str, Any]:
    """Read a ``trees.pkl`` written by :func:`save_trees`; checks the format tag."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trees file not found: {path}")
    with path.open("rb") as fh:
        payload = pickle.load(fh)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path}: not an {FORMAT} file (found {found!r})")
    return payload
