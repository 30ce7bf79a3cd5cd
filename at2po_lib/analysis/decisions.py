r"""Where a policy's trajectories go wrong: at a decision turn, or in reading a passage.

Every trajectory of a TinyWorld question is compared with the question's plan
(``metadata.hop_queries`` / ``hop_answers``) turn by turn (:func:`at2po_lib.policy.strategies.label_turn`)
and put in exactly one class:

=================  ==========================================================================
``correct``        the answer is right (EM 1)
``misread``        every hop was searched and the last hop's supporting answer string was in
                   an observation, yet the answer is wrong: the policy read the wrong fact
``stopped_early``  it answered before searching every hop (a stop decision)
``repeated``       it searched a query it had searched before (a search decision)
``off_plan``       it searched something that is not the plan's next query, no repeat
                   (a search decision: wrong bridge, mangled name)
``no_answer``      it ended without an answer (length, tool limit, invalid action)
=================  ==========================================================================

The first three failure classes after ``misread`` are *decision* failures: what the policy
searched for and when it stopped. :func:`failure_split` reports, among failed trajectories,
the share of each, and the share that had the supporting passages in context.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..method.tree import node_depths
from ..policy.demos import script_demos, tokenize_demo
from ..policy.model import load_policy
from ..policy.strategies import STOP, decisions, label_tree_turns, label_turn
from ..retrieval.indexes import build_retriever
from ..protocol.reward import exact_match
from ..tinyworld.build import ensure_world, read_rows

DECISION_FAILURES = ("stopped_early", "repeated", "off_plan")
CLASSES = ("correct", "misread", *DECISION_FAILURES, "no_answer")


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def classify(row: Mapping[str, Any], trajectory: Any) -> dict[str, Any]:
    """The class of one trajectory (see the module docstring) and its turn labels."""
    meta = row["metadata"]
    plan = [_norm(q) for q in meta["hop_queries"]]
    labels, searched, done = [], [], 0
    for turn in trajectory.turns:
        kind = getattr(turn.action.kind, "value", turn.action.kind)
        label = label_turn(row, str(kind), turn.action.query, searched, done)
        labels.append(label)
        if str(kind) == "search":
            q = _norm(turn.action.query or "")
            if done < len(plan) and q == plan[done]:
                done += 1
            searched.append(turn.action.query or "")
    em = (
        float(exact_match(trajectory.answer or "", row["golden_answers"]))
        if trajectory.answer
        else 0.0
    )
    last_answer = _norm(meta["hop_answers"][-1])
    supported = last_answer in _norm(trajectory.response_text)
    if em:
        cls = "correct"
    elif trajectory.answer is None:
        cls = "no_answer"
    elif "repeat" in labels:
        cls = "repeated"
    elif "off_plan" in labels:
        cls = "off_plan"
    elif done < len(plan):
        cls = "stopped_early"
    else:
        cls = "misread"
    return {
        "class": cls,
        "em": em,
        "supported_in_context": supported,
        "hops": len(plan),
        "hops_searched": done,
        "turn_labels": labels,
    }


def classify_all(
    rows: Sequence[Mapping[str, Any]], trajectories: Sequence[Any], dataset: str | None = None
) -> pd.DataFrame:
    """One row per trajectory: ``id``, ``dataset``, ``class``, ``em``, ``supported_in_context`` …"""
    if len(rows) != len(trajectories):
        raise ValueError(f"{len(rows)} rows but {len(trajectories)} trajectories")
    records = []
    for row, traj in zip(rows, trajectories):
        rec = classify(row, traj)
        rec["turn_labels"] = " ".join(rec["turn_labels"])
        records.append(
            {"id": row.get("id"), "dataset": dataset or row["metadata"].get("dataset"), **rec}
        )
    return pd.DataFrame.from_records(records)


def failure_split(frame: pd.DataFrame) -> dict[str, Any]:
    """Among failed trajectories: the share of each failure class, of decision failures, and
    of those that had the last hop's supporting answer in context."""
    failed = frame[frame["class"] != "correct"]
    n = len(failed)
    share = {c: (float((failed["class"] == c).mean()) if n else 0.0) for c in CLASSES[1:]}
    return {
        "trajectories": len(frame),
        "failed": n,
        "decision_failure_share": float(failed["class"].isin(DECISION_FAILURES).mean())
        if n
        else 0.0,
        "misread_share": share["misread"],
        "supported_in_context_share": float(failed["supported_in_context"].mean()) if n else 0.0,
        "class_shares": share,
    }


# ----------------------------------------------------------------------------- tree turns


def tree_decision_labels(tree: Any) -> np.ndarray:
    """(N,) the :func:`~at2po_lib.policy.strategies.label_turn` label of every node of a tree
    (``root`` for the root): what the turn decided, read from the node's record (``action``,
    ``query``) and the queries on its path, against the plan in ``tree.info["hop_queries"]``.
    Parents precede children (node ids in creation order), so one pass carries each path's
    queries down."""
    plan = tree.info.get("hop_queries")
    if not plan:
        raise ValueError(
            f"tree of prompt {tree.prompt_id}: info has no hop_queries (grow it "
            "with at2po_lib.analysis.study_trees.grow_trees)"
        )
    row = {"metadata": {"hop_queries": list(plan)}}
    records = [tree.records[n] if n < len(tree.records) else {} for n in range(tree.num_nodes)]
    return np.array(
        label_tree_turns(
            row,
            tree.parent.tolist(),
            [r.get("action") for r in records],
            [r.get("query") for r in records],
        ),
        dtype=object,
    )


# ----------------------------------------------------------------------------- re-sampled turns


def subtree_leaf_means(parent: np.ndarray, leaf_reward: np.ndarray) -> np.ndarray:
    """(N,) mean final reward of the leaves under each node (a leaf: its own reward).

    Sums flow from the deepest level up, one ``np.add.at`` per level."""
    n = len(parent)
    is_leaf = np.bincount(parent[parent >= 0], minlength=n) == 0
    total = np.where(is_leaf, np.nan_to_num(leaf_reward), 0.0)
    count = is_leaf.astype(float)
    depth = np.zeros(n, dtype=int)
    for i in range(1, n):  # parents precede children (ids in creation order)
        depth[i] = depth[parent[i]] + 1
    for d in range(int(depth.max()), 0, -1):
        level = np.flatnonzero(depth == d)
        np.add.at(total, parent[level], total[level])
        np.add.at(count, parent[level], count[level])
    return total / np.maximum(count, 1)


def resample_flips(trees: Sequence[Any]) -> dict[str, Any]:
    """How often re-sampling a picked turn changes the outcome.

    For every expansion chain whose first node x re-samples a picked node n
    (``node_arrays["resampled_from"]``; picks of the root are left out: the root has no
    outcome of its own), x's branch *flips* when the mean final reward of the leaves under x
    differs from that under n (with L = 1, one leaf each). Returns the share of flips, the
    number of re-samples, the picked turns' median entropy (``entropy`` of the tree), how
    often the re-sampled turn itself took another action (search vs answer, another query or
    answer; ``records``), and the picked turns' mean depth: a re-sample redraws every turn
    after it too, so an early pick can flip through later turns alone."""
    flips, picked_entropy, root_picks, per_prompt = [], [], 0, {}
    changed, depths = [], []
    for tree in trees:
        source = np.asarray(tree.node_arrays.get("resampled_from", []))
        if source.size == 0:
            continue
        means = subtree_leaf_means(np.asarray(tree.parent), np.asarray(tree.leaf_reward, float))
        new = np.flatnonzero(source >= 0)
        root_picks += int((source[new] == 0).sum())
        new = new[source[new] > 0]
        flips.append(np.abs(means[new] - means[source[new]]) > 1e-9)
        picked_entropy.append(np.asarray(tree.entropy, float)[source[new]])
        records = list(getattr(tree, "records", None) or [])
        if records:
            changed += [
                _turn_action(records[x]) != _turn_action(records[n])
                for x, n in zip(new, source[new])
            ]
        depths.append(node_depths(tree.parent).numpy()[source[new]])
        counts = per_prompt.setdefault(int(tree.prompt_id), [0, 0])
        counts[0] += int(flips[-1].sum())
        counts[1] += int(flips[-1].size)
    flipped = np.concatenate(flips) if flips else np.zeros(0, bool)
    entropy = np.concatenate(picked_entropy) if picked_entropy else np.zeros(0)
    return {
        "resamples": int(flipped.size),
        "flip_share": float(flipped.mean()) if flipped.size else float("nan"),
        "root_picks": root_picks,
        "picked_median_entropy": float(np.median(entropy)) if entropy.size else float("nan"),
        "changed_action_share": float(np.mean(changed)) if changed else float("nan"),
        "picked_mean_depth": (
            float(np.concatenate(depths).mean()) if depths and flipped.size else float("nan")
        ),
        "per_prompt": {k: tuple(v) for k, v in sorted(per_prompt.items())},
    }


def _turn_action(record: dict[str, Any]) -> tuple:
    """What a turn did, as compared between a re-sample and its source."""
    return (record.get("action"), record.get("query"), record.get("answer"))


def flip_ratio_ci(
    a: dict[int, tuple[int, int]],
    b: dict[int, tuple[int, int]],
    confidence: float = 0.95,
    n_resamples: int = 4000,
    seed: int = 0,
) -> dict[str, float]:
    """share_a / share_b of flipped re-samples (``resample_flips(...)["per_prompt"]``: prompt ->
    (flips, re-samples)) with a bootstrap interval over the prompts both measured, resampled
    together (paired: the same prompts under both expansions)."""
    prompts = sorted(set(a) & set(b))
    if not prompts:
        raise ValueError("flip_ratio_ci: the two measurements share no prompt")
    counts = np.array([[*a[p], *b[p]] for p in prompts], dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = counts[rng.integers(0, len(prompts), size=(n_resamples, len(prompts)))].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (draws[:, 0] / draws[:, 1]) / (draws[:, 2] / draws[:, 3])
    total = counts.sum(axis=0)
    tail = (1 - confidence) / 2
    finite = ratios[np.isfinite(ratios)]
    low, high = np.quantile(finite, [tail, 1 - tail]) if finite.size else (np.nan, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):  # no flips on a side: NaN, not a warning
        ratio = float((total[0] / total[1]) / (total[2] / total[3]))
    return {"ratio": ratio, "low": float(low), "high": float(high), "prompts": len(prompts)}


def search_turn_entropy(trees: Sequence[Any]) -> dict[str, float]:
    """Median and mean entropy of the trees' search turns (``records[i]["action"] == "search"``)."""
    values = [
        float(tree.entropy[i])
        for tree in trees
        for i, rec in enumerate(tree.records)
        if i > 0 and rec.get("action") == "search"
    ]
    arr = np.asarray(values)
    return {
        "search_turns": int(arr.size),
        "median": float(np.median(arr)) if arr.size else float("nan"),
        "mean": float(arr.mean()) if arr.size else float("nan"),
    }


# ----------------------------------------------------------------------------- calibration


def decision_calibration(
    cfg,
    policy,
    datasets: Sequence[str] = ("tiny_hotpotqa", "tiny_2wiki", "tiny_musique", "tiny_nq"),
    rows_per_dataset: int = 80,
    split: str = "train",
) -> pd.DataFrame:
    """Teacher-forced P(``<answer>`` opens the turn) at every decision of perfect
    demonstrations of the evaluation world's ``split`` rows, against the rate the demonstration
    mix trains (``1 - follow_rate`` for ``stop`` decisions, 0 for ``repeat`` ones, whose
    failure is a search). One row per kind of decision: ``easy``/``hard-stop``/``hard-repeat``
    at the first search (``hop0``) or a later one, and ``final`` (after the last hop: always an
    answer)."""
    files = ensure_world(cfg)
    retriever = build_retriever(cfg, build=False)
    model, tokenizer = load_policy(policy, cfg.policy.dtype)
    model.eval()
    answer_id = tokenizer.convert_tokens_to_ids("<answer>")
    records = []
    for name in datasets:
        rows = read_rows(files, name, split)[:rows_per_dataset]
        for row, demo in zip(
            rows, script_demos(rows, cfg.policy.template, retriever, topk=cfg.retrieval.topk)
        ):
            ex = tokenize_demo(demo, tokenizer)
            ids, mask = ex["input_ids"], ex["assistant_masks"]
            starts = [i for i in range(1, len(ids)) if mask[i] and not mask[i - 1]]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, [s - 1 for s in starts]]
            p_answer = torch.softmax(logits.float(), -1)[:, answer_id].tolist()
            decs = decisions(row, cfg.sft.follow_rate_hard, cfg.sft.follow_rate_easy)
            for k, p in enumerate(p_answer):
                if k < len(decs):
                    d = decs[k]
                    kind = ("hard-" + d.failure) if d.hard else "easy"
                    trained = (1 - d.follow_rate) if d.failure == STOP else 0.0
                    where = "hop0" if k == 0 else "later"
                else:
                    kind, trained, where = "final", 1.0, ""
                if not cfg.sft.strategy_mix and kind != "final":
                    trained = 0.0  # perfect demonstrations never stop early
                records.append(
                    {"decision": kind, "where": where, "p_answer": p, "trained_rate": trained}
                )
    frame = pd.DataFrame.from_records(records)
    return frame.groupby(["decision", "where"], as_index=False).agg(
        n=("p_answer", "size"),
        mean_p_answer=("p_answer", "mean"),
        share_above_half=("p_answer", lambda p: float((p > 0.5).mean())),
        trained_rate=("trained_rate", "mean"),
    )
