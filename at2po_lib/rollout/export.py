r"""Rollout trees at the boundary: arrays, tidy tables, training rows.

The rollout grows :class:`~.structures.RolloutTree` objects (nodes with token ids, the shape
the agent loop needs). Everything downstream uses two things made here:

- :func:`tree_arrays`: the tree as a :class:`at2po_lib.method.tree.TreeArrays`, the project's one
  tree type (credit, trainer, drawings and files use it)::

      parent, entropy, leaf_reward  (N,)  the credit arrays (entropy by rollout.entropy_estimate;
                                          leaf_reward NaN on non-leaf nodes)
      prompt_id                           the caller's prompt id (RolloutTree.prompt_index)
      node_arrays:
        entropy_nll      (N,) float64  mean sampled-token NLL of the turn (authors' estimate)
        entropy_exact    (N,) float64  mean exact entropy of the turn (paper's -sum p log p)
        entropy_exact_max, entropy_exact_first, entropy_nll_max, entropy_nll_first
                         (N,) float64  the largest and the first sampled token's value of
                                       each estimate (a one-token decision is diluted in
                                       the turn's mean; root 0)
        turn_start       (N,) int64    turn span [turn_start, turn_end) in completion coordinates
        turn_end         (N,) int64    (root: 0, 0)
        expansion_round  (N,) int64    0 for the initial chains, 1..L for expansions
        depth            (N,) int64
        num_tokens, num_obs_tokens, tool_calls, duplicate_of,
        resampled_from                                     (N,) int64
      records: per node text, action, query, answer, finish_reason (root: the question);
               ``decision`` where the caller knows the question's plan (:func:`with_decisions`)
      info: question, golden_answers, entropy_estimate

  ``is_leaf`` is :attr:`TreeArrays.is_leaf` (childless nodes). :func:`at2po_lib.record.tree_files.
  save_trees` / :func:`~at2po_lib.record.tree_files.load_trees` store them (``.npz`` + JSON, no pickle).
- :func:`training_rows`: one row per leaf (its root→leaf path), the token ids the trainer needs::

      prompt_ids, completion_ids, sampled_mask (1 = sampled token), turn_node (node id per
      completion token, -1 on observation tokens), old_logps (log-prob at the sampling
      temperature, 0 where the mask is 0), token_entropy (exact entropy of the sampling
      distribution per token, 0 where the mask is 0, NaN from vLLM; AEPO's entropy-aware
      advantage can use it), reward, tree_id (position of the tree in the batch),
      prompt_id (the caller's prompt id), leaf_node

:func:`tree_table` gives one pandas row per node (prompt_id, node, parent, depth, round,
entropy_nll, entropy_exact, text, action, query, answer, reward, ...); :func:`tree_summary`
gives per-batch numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ..method.tree import TreeArrays
from ..policy.strategies import label_tree_turns
from .structures import ROOT, RolloutTree
from .trees import node_entropy

_INT_NODE_FIELDS = ("expansion_round", "depth", "tool_calls", "duplicate_of", "resampled_from")


def tree_arrays(
    tree: RolloutTree, entropy_estimate: str = "sampled_nll", turn_entropy: str = "mean"
) -> TreeArrays:
    """The tree as :class:`~at2po_lib.method.tree.TreeArrays` (module docstring)."""
    nodes = tree.nodes
    reward = np.array([n.reward if n.is_leaf else np.nan for n in nodes], dtype=np.float64)
    node_arrays = {
        "entropy_nll": np.array([n.entropy_nll for n in nodes], dtype=np.float64),
        "entropy_exact": np.array([n.entropy_exact for n in nodes], dtype=np.float64),
        "turn_start": np.array([n.start if n.id != ROOT else 0 for n in nodes], dtype=np.int64),
        "turn_end": np.array([n.end if n.id != ROOT else 0 for n in nodes], dtype=np.int64),
        "num_tokens": np.array([n.num_sampled for n in nodes], dtype=np.int64),
        "num_obs_tokens": np.array([len(n.obs_ids) for n in nodes], dtype=np.int64),
        **{
            name: np.array([getattr(n, name) for n in nodes], dtype=np.int64)
            for name in _INT_NODE_FIELDS
        },
    }
    for estimate, name in (("exact", "entropy_exact"), ("sampled_nll", "entropy_nll")):
        summary = np.array(
            [n.token_entropy_summary(estimate) if n.id != ROOT else (0.0, 0.0) for n in nodes],
            dtype=np.float64,
        ).reshape(len(nodes), 2)  # (N, 2)
        node_arrays[f"{name}_max"], node_arrays[f"{name}_first"] = summary[:, 0], summary[:, 1]
    records = [node_record(tree, n.id) for n in nodes]
    return TreeArrays(
        parent=np.array([n.parent for n in nodes], dtype=np.int64),
        entropy=np.asarray(node_entropy(tree, entropy_estimate, turn_entropy), dtype=np.float64),
        leaf_reward=reward,
        prompt_id=int(tree.prompt_index),
        node_arrays=node_arrays,
        records=records,
        info={
            "question": tree.question,
            "golden_answers": list(tree.golden_answers),
            "entropy_estimate": entropy_estimate,
            "turn_entropy": turn_entropy,
        },
    )


def with_decisions(arrays: TreeArrays, row: Mapping[str, Any]) -> TreeArrays:
    """``arrays`` with a ``decision`` in every node's record: the turn's ground-truth label
    from the question's plan (:func:`at2po_lib.policy.strategies.label_tree_turns`: ``follow``,
    ``repeat``, ``off_plan``, ``final``, ``early``, ``invalid``; ``root``), or its action kind
    when ``row`` has no plan."""
    records = [dict(r) for r in arrays.records]
    labels = label_tree_turns(
        row,
        arrays.parent.tolist(),
        [r.get("action") for r in records],
        [r.get("query") for r in records],
    )
    for record, label in zip(records, labels):
        record["decision"] = label
    return dataclasses.replace(arrays, records=records)


def node_record(tree: RolloutTree, node_id: int) -> dict[str, Any]:
    """The text of one node as JSON-able fields (the root's text is the question)."""
    n = tree.nodes[node_id]
    return {
        "text": tree.question if n.id == ROOT else n.text,
        "action": getattr(n.action, "kind", "root" if n.id == ROOT else None),
        "query": getattr(n.action, "query", None),
        "answer": getattr(n.action, "answer", None),
        "finish_reason": n.finish_reason or None,
    }


def training_rows(trees: Sequence[RolloutTree]) -> list[dict[str, Any]]:
    """One training row per leaf of every tree (module docstring), trees in order."""
    rows = []
    for tree_id, tree in enumerate(trees):
        for leaf in tree.leaves():
            completion, mask, turn_node, logps, entropies = [], [], [], [], []
            for n in (tree.nodes[i] for i in tree.path(leaf)):
                own = n.sampled_mask  # 0 on a tool-limit notice inside the turn
                completion += n.token_ids + n.obs_ids
                mask += own + [0] * len(n.obs_ids)
                turn_node += [n.id if m else -1 for m in own] + [-1] * len(n.obs_ids)
                logps += list(n.logps) + [0.0] * len(n.obs_ids)
                entropies += list(n.entropies) + [0.0] * len(n.obs_ids)
            rows.append(
                {
                    "prompt_ids": list(tree.prompt_ids),
                    "completion_ids": completion,
                    "sampled_mask": mask,
                    "turn_node": turn_node,
                    "old_logps": logps,
                    "token_entropy": entropies,
                    "reward": float(tree.nodes[leaf].reward),
                    "tree_id": tree_id,
                    "prompt_id": tree.prompt_index,
                    "leaf_node": leaf,
                }
            )
    return rows


def recompute_gap(model, rows, temperature: float, device: str, limit: int = 4) -> float:
    """Largest |recorded logp - full-forward logp| over the model tokens of the first ``limit``
    training rows (:func:`training_rows`): the rollout's recorded log-probabilities checked against
    one forward pass of ``model`` over each whole row, at the sampling temperature."""
    gap = 0.0
    for row in rows[:limit]:
        ids = torch.tensor([row["prompt_ids"] + row["completion_ids"]], device=device)
        with torch.no_grad():
            lp = torch.log_softmax(model(ids).logits[0].float() / temperature, dim=-1)
        p = len(row["prompt_ids"])
        for t, (tok, m, old) in enumerate(
            zip(row["completion_ids"], row["sampled_mask"], row["old_logps"])
        ):
            if m:
                gap = max(gap, abs(lp[p + t - 1, tok].item() - old))
    return gap


def tree_records(tree: RolloutTree, tree_id: int = 0) -> list[dict[str, Any]]:
    """One dict per node (the rows of :func:`tree_table`)."""
    records = []
    for n in tree.nodes:
        action = n.action
        records.append(
            {
                "tree_id": tree_id,
                "prompt_id": tree.prompt_index,
                "node": n.id,
                "parent": n.parent,
                "depth": n.depth,
                "round": n.expansion_round,
                "entropy_nll": n.entropy_nll,
                "entropy_exact": n.entropy_exact,
                "num_tokens": n.num_sampled,
                "num_obs_tokens": len(n.obs_ids),
                "text": n.text if n.id != ROOT else tree.question,
                "action": getattr(action, "kind", "root" if n.id == ROOT else None),
                "query": getattr(action, "query", None),
                "answer": getattr(action, "answer", None),
                "is_leaf": n.is_leaf,
                "finish_reason": n.finish_reason or None,
                "reward": n.reward if n.is_leaf else np.nan,
                "tool_calls": n.tool_calls,
            }
        )
    return records


def trajectory_table(trajectory, decode) -> pd.DataFrame:
    """One row per segment of a trajectory: each model turn (mask 1) and each observation /
    notice / corrective message (mask 0), with its token count and text (``decode(ids)``)."""
    records, start = [], 0
    ids, mask, turn_ids = trajectory.completion_ids, trajectory.sampled_mask, trajectory.turn_ids
    for end in range(1, len(ids) + 1):
        if end == len(ids) or mask[end] != mask[start] or turn_ids[end] != turn_ids[start]:
            turn = trajectory.turns[turn_ids[start]] if mask[start] else None
            records.append(
                {
                    "segment": "turn" if mask[start] else "environment",
                    "tokens": end - start,
                    "loss_mask": mask[start],
                    "action": getattr(turn.action, "kind", None) if turn else None,
                    "entropy_nll": turn.entropy_nll if turn else None,
                    "entropy_exact": turn.entropy_exact if turn else None,
                    "text": decode(ids[start:end]),
                }
            )
            start = end
    return pd.DataFrame.from_records(records)


def tree_table(trees: Sequence[RolloutTree]) -> pd.DataFrame:
    """A tidy table: one row per node of every tree."""
    return pd.DataFrame.from_records([r for i, t in enumerate(trees) for r in tree_records(t, i)])


def _distinct(tree: RolloutTree, kind: str, field: str) -> set[str]:
    return {
        getattr(n.action, field) for n in tree.nodes[1:] if getattr(n.action, "kind", "") == kind
    }


def tree_summary(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """Per-batch numbers: leaves, distinct queries/answers, correct share, tokens.

    ``*_per_tree`` averages over trees; ``*_per_prompt`` over prompts, pooling the trees that
    share a ``prompt_index`` (Tree-GRPO's ``random`` expansion grows several trees per prompt,
    so only the per-prompt numbers compare rollout methods at one leaf budget).
    """
    leaves = [t.nodes[i] for t in trees for i in t.leaves()]
    distinct_q = [len(_distinct(t, "search", "query")) for t in trees]
    distinct_a = [len(_distinct(t, "answer", "answer")) for t in trees]
    by_prompt: dict[int, list[RolloutTree]] = {}
    for t in trees:
        by_prompt.setdefault(t.prompt_index, []).append(t)
    prompt_q = [
        len(set().union(*(_distinct(t, "search", "query") for t in group)))
        for group in by_prompt.values()
    ]
    prompt_a = [
        len(set().union(*(_distinct(t, "answer", "answer") for t in group)))
        for group in by_prompt.values()
    ]
    rewards = np.array([n.reward for n in leaves], dtype=float)
    generated = float(sum(n.num_sampled for t in trees for n in t.nodes if n.duplicate_of < 0))
    return {
        "trees": len(trees),
        "prompts": len(by_prompt),
        "leaves_per_tree": len(leaves) / max(len(trees), 1),
        "leaves_per_prompt": len(leaves) / max(len(by_prompt), 1),
        "nodes_per_tree": sum(len(t.nodes) for t in trees) / max(len(trees), 1),
        "distinct_queries_per_tree": float(np.mean(distinct_q)) if trees else 0.0,
        "distinct_answers_per_tree": float(np.mean(distinct_a)) if trees else 0.0,
        "distinct_queries_per_prompt": float(np.mean(prompt_q)) if trees else 0.0,
        "distinct_answers_per_prompt": float(np.mean(prompt_a)) if trees else 0.0,
        "correct_leaf_share": float(np.mean(rewards > 0)) if rewards.size else float("nan"),
        "mean_reward": float(np.nanmean(rewards)) if rewards.size else float("nan"),
        "generated_tokens": generated,
        "generated_tokens_per_leaf": generated / max(len(leaves), 1),
    }


def prompt_summary(trees: Sequence[RolloutTree]) -> "pd.DataFrame":
    """One row per prompt (the trees sharing a ``prompt_index`` pooled, as Tree-GRPO's several
    trees per prompt must be): ``distinct_queries``, ``distinct_answers``,
    ``correct_leaf_share``, ``generated_tokens_per_leaf`` — the per-prompt values whose means
    :func:`tree_summary` reports, so that a comparison can carry intervals over prompts."""
    by_prompt: dict[int, list[RolloutTree]] = {}
    for t in trees:
        by_prompt.setdefault(t.prompt_index, []).append(t)
    rows = []
    for prompt, group in by_prompt.items():
        leaves = [t.nodes[i] for t in group for i in t.leaves()]
        rewards = np.array([n.reward for n in leaves], dtype=float)
        generated = sum(n.num_sampled for t in group for n in t.nodes if n.duplicate_of < 0)
        rows.append(
            {
                "prompt": prompt,
                "trees": len(group),
                "leaves": len(leaves),
                "distinct_queries": len(
                    set().union(*(_distinct(t, "search", "query") for t in group))
                ),
                "distinct_answers": len(
                    set().union(*(_distinct(t, "answer", "answer") for t in group))
                ),
                "correct_leaf_share": float(np.mean(rewards > 0)) if rewards.size else float("nan"),
                "generated_tokens_per_leaf": generated / max(len(leaves), 1),
            }
        )
    return pd.DataFrame.from_records(rows)
