"""What each Table 1 row spends per step (at2po_lib/reporting/budget.py), on hand-made runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from at2po_lib.method.tree import TreeArrays
from at2po_lib.record.tree_files import save_trees
from at2po_lib.reporting.budget import budget_display, budget_table, generated_tokens_per_prompt


def _tree(tokens: list[int], duplicate_of: list[int]) -> TreeArrays:
    """Root 0 with one shared turn 1 and two leaves 2, 3 under it (AT2PO's shape, one round)."""
    parent = np.array([-1, 0, 1, 1])
    return TreeArrays(
        parent,
        np.zeros(4),
        np.array([0.0, 0.0, 1.0, 0.0]),
        node_arrays={
            "num_tokens": np.array(tokens, dtype=float),
            "duplicate_of": np.array(duplicate_of, dtype=float),
        },
    )


def _metrics(method: str, seed: int, leaves: float, per_trajectory: list[float]) -> list[dict]:
    return [
        {
            "method": method,
            "seed": seed,
            "step": i + 1,
            "rollout/leaves_per_prompt": leaves,
            "completions/mean_length": length,
        }
        for i, length in enumerate(per_trajectory)
    ]


def test_a_tree_generates_its_shared_turns_once_and_trains_them_per_leaf(tmp_path):
    run = tmp_path / "at2po" / "seed0"
    (run / "trees").mkdir(parents=True)
    # 10 shared tokens + 5 + 7 on the leaves; node 3 duplicates 2 (not generated again)
    save_trees([_tree([0, 10, 5, 7], [-1, -1, -1, -1])], run / "trees" / "step0001.npz")
    save_trees([_tree([0, 10, 5, 5], [-1, -1, -1, 2])], run / "trees" / "step0002.npz")
    assert generated_tokens_per_prompt(run) == pytest.approx((22 + 15) / 2)

    chain = tmp_path / "grpo" / "seed0"
    chain.mkdir(parents=True)
    metrics = pd.DataFrame(
        _metrics("at2po", 0, 2, [16.0, 14.0]) + _metrics("grpo", 0, 3, [4.0, 6.0])
    )
    finished = pd.DataFrame({"method": ["at2po", "grpo"], "seed": [0, 0], "path": [run, chain]})
    table = budget_table(
        metrics, finished, prompts_per_step=4, methods=["grpo", "at2po"]
    ).set_index("method")
    # at2po: 4 prompts x 2 leaves = 8 trajectories; trained 8 x mean(16, 14) = 120 tokens a step;
    # generated 4 prompts x 18.5 distinct tokens = 74
    assert table.loc["at2po", "trajectories"] == 8
    assert table.loc["at2po", "trained_tokens"] == pytest.approx(120)
    assert table.loc["at2po", "generated_tokens"] == pytest.approx(74)
    # grpo's chains generate what they train: 12 trajectories x 5 tokens
    assert table.loc["grpo", "trained_tokens"] == pytest.approx(60)
    assert table.loc["grpo", "generated_tokens"] == pytest.approx(60)
    shown = budget_display(table.reset_index())
    assert shown.loc["AT2PO", "generated tokens / step"] == "74"
    assert shown.loc["GRPO", "generated from"].startswith("chains")


def test_a_tree_run_without_saved_trees_leaves_generated_tokens_empty(tmp_path):
    run = tmp_path / "tree_grpo" / "seed0"
    run.mkdir(parents=True)
    assert generated_tokens_per_prompt(run) is None
    metrics = pd.DataFrame(_metrics("tree_grpo", 0, 4, [10.0]))
    finished = pd.DataFrame({"method": ["tree_grpo"], "seed": [0], "path": [run]})
    table = budget_table(metrics, finished, prompts_per_step=2, methods=["tree_grpo"])
    assert table["trained_tokens"].item() == pytest.approx(80)
    assert np.isnan(table["generated_tokens"].item())
    assert budget_display(table).loc["Tree-GRPO", "generated tokens / step"] == "–"


def test_records_without_rollout_counts_give_an_empty_table(tmp_path):
    metrics = pd.DataFrame([{"method": "grpo", "seed": 0, "step": 1, "loss": 0.1}])
    finished = pd.DataFrame({"method": ["grpo"], "seed": [0], "path": [tmp_path]})
    assert budget_table(metrics, finished, 4, ["grpo"]).empty
