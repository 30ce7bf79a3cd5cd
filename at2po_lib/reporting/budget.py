r"""What each Table 1 row spends per training step: trajectories, generated and trained tokens.

A method's score is only comparable with another's at a known budget. Per step of ``P``
prompts (the profile's ``train.prompts_per_step``), for each run:

- **trajectories** = P · leaves per prompt (``rollout/leaves_per_prompt``: M + L·K leaves of
  AT2PO's tree, the chains of GRPO; ``grpo_tree_budget`` samples as many chains as AT2PO has
  leaves);
- **trained tokens** = trajectories · policy tokens per trajectory (``completions/mean_length``,
  tool outputs excluded): what the loss sees. A tree's leaves share their prefixes, so a shared
  turn is trained once per leaf below it;
- **generated tokens**: what the policy sampled. A chain generates each token once, so a chain
  method generates exactly what it trains. A tree generates a shared turn once: the sum of the
  policy tokens of its distinct nodes (``num_tokens`` where ``duplicate_of < 0``), read from the
  trees a run saved (its first and last rollout step); runs without saved
  trees leave it empty.

Each number is the mean over the run's steps (generated tokens of a tree: over its saved steps),
then over seeds; nothing here is an interval, the spread over seeds is small next to the
differences between methods and is not read as a claim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..method.presets import METHODS
from ..record.tree_files import load_trees
from .labels import method_label

TRAJECTORIES = "rollout/leaves_per_prompt"
TOKENS_PER_TRAJECTORY = "completions/mean_length"


def generated_tokens_per_prompt(run: Path) -> float | None:
    """Mean over the trees a run saved (``<run>/trees/step*.npz``) of the policy tokens of a
    tree's distinct nodes; ``None`` when the run saved none."""
    files = sorted((Path(run) / "trees").glob("step*.npz"))
    totals = []
    for path in files:
        for tree in load_trees(path):
            nodes = tree.node_arrays
            distinct = np.asarray(nodes["duplicate_of"]) < 0
            totals.append(float(np.asarray(nodes["num_tokens"])[distinct].sum()))
    return float(np.mean(totals)) if totals else None


def run_budget(metrics: pd.DataFrame, run: Path, method: str, prompts_per_step: int) -> dict:
    """One run's budget per step (module docstring); ``metrics`` holds that run's rows."""
    trajectories = prompts_per_step * metrics[TRAJECTORIES]
    trained = float((trajectories * metrics[TOKENS_PER_TRAJECTORY]).mean())
    if METHODS[method].expansion == "chain":
        generated, source = trained, "chains: generated = trained"
    else:
        per_prompt = generated_tokens_per_prompt(run)
        generated = None if per_prompt is None else prompts_per_step * per_prompt
        source = "distinct tree nodes, saved steps" if per_prompt is not None else "not recorded"
    return {
        "trajectories": float(trajectories.mean()),
        "trained_tokens": trained,
        "generated_tokens": generated,
        "generated_from": source,
    }


def budget_table(
    metrics: pd.DataFrame, finished: pd.DataFrame, prompts_per_step: int, methods: Sequence[str]
) -> pd.DataFrame:
    """One row per method of ``methods`` with finished runs: seeds, then the mean over seeds of
    :func:`run_budget` (``generated_tokens`` over the seeds that recorded it, ``generated_seeds``
    of them). ``metrics``: :func:`.records.load_training_records`' frame (``method``, ``seed``,
    one row per step); ``finished``: the finished runs (``method``, ``seed``, ``path``)."""
    rows = []
    if not {TRAJECTORIES, TOKENS_PER_TRAJECTORY} <= set(metrics.columns):
        methods = ()  # records without the rollout's counts: nothing to read
    for method in methods:
        runs = finished[finished["method"] == method]
        per_run = []
        for run in runs.itertuples():
            steps = metrics[(metrics["method"] == method) & (metrics["seed"] == run.seed)]
            if len(steps) and steps[TRAJECTORIES].notna().all():
                per_run.append(run_budget(steps, Path(run.path), method, prompts_per_step))
        if not per_run:
            continue
        frame = pd.DataFrame(per_run)
        generated = frame["generated_tokens"].dropna()
        rows.append(
            {
                "method": method,
                "seeds": len(frame),
                "trajectories": frame["trajectories"].mean(),
                "trained_tokens": frame["trained_tokens"].mean(),
                "generated_tokens": generated.mean() if len(generated) else np.nan,
                "generated_seeds": len(generated),
                "generated_from": frame["generated_from"].mode().iloc[0],
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "method",
            "seeds",
            "trajectories",
            "trained_tokens",
            "generated_tokens",
            "generated_seeds",
            "generated_from",
        ],
    )


def budget_display(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the report shows it: method labels, whole numbers, per step."""
    shown = table.copy()
    shown["method"] = shown["method"].map(method_label)
    for column in ("trajectories", "trained_tokens", "generated_tokens"):
        shown[column] = shown[column].map(lambda v: "–" if np.isnan(v) else f"{v:,.0f}")
    shown["generated_from"] = [
        f"{source} ({n} of {s} seeds)" if n and n < s else source
        for source, n, s in zip(shown["generated_from"], shown["generated_seeds"], shown["seeds"])
    ]
    return (
        shown.drop(columns="generated_seeds")
        .rename(
            columns={
                "trajectories": "trajectories / step",
                "trained_tokens": "trained tokens / step",
                "generated_tokens": "generated tokens / step",
                "generated_from": "generated from",
            }
        )
        .set_index("method")
    )
