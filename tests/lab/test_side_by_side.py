"""Notebook 04's "try this" (at2po_lib.lab.side_by_side): the paired difference and the
seeds' differences by hand, knobs refused before any process, and a real side-by-side
retraining of two smoke runs in two processes."""

from __future__ import annotations

import pandas as pd
import pytest

from at2po_lib.lab.side_by_side import (
    load_side_by_side,
    paired_difference,
    retrain_side_by_side,
    seed_differences,
)
from at2po_lib.util.errors import ProfileError


def _outcomes(rows):
    return pd.DataFrame(rows, columns=["method", "seed", "dataset", "group", "question_id", "em"])


def test_the_paired_difference_is_the_mean_over_shared_questions_with_a_t_interval():
    frame = _outcomes(
        [
            ("at2po", 0, "d", "multihop", "q1", 1.0),
            ("at2po", 0, "d", "multihop", "q2", 0.0),
            ("at2po", 0, "d", "multihop", "q3", 1.0),
            ("at2po", 0, "d", "multihop", "q4", 1.0),  # grpo has no q4: left out
            ("at2po", 0, "d", "singlehop", "s1", 0.0),  # another group: left out
            ("grpo", 0, "d", "multihop", "q1", 0.0),
            ("grpo", 0, "d", "multihop", "q2", 0.0),
            ("grpo", 0, "d", "multihop", "q3", 1.0),
            ("grpo", 0, "d", "singlehop", "s1", 1.0),
        ]
    )
    got = paired_difference(frame, "at2po", "grpo")
    # differences (points) 100, 0, 0: mean 33.33, sd 57.735, sem 33.333, t(0.975, 2) = 4.3027
    assert got["questions"] == 3
    assert got["diff"] == pytest.approx(100 / 3)
    assert got["high"] - got["diff"] == pytest.approx(4.302653 * 100 / 3, rel=1e-5)
    assert got["diff"] - got["low"] == pytest.approx(got["high"] - got["diff"])
    everything = paired_difference(frame, "at2po", "grpo", group=None)
    assert everything["questions"] == 4  # s1 joins: -100
    assert everything["diff"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="share 0 evaluated questions"):
        paired_difference(frame, "at2po", "dapo")


def test_seed_differences_pair_the_seeds_both_methods_recorded():
    frame = _outcomes(
        [
            ("at2po", 0, "d", "multihop", "q1", 1.0),
            ("at2po", 0, "d", "multihop", "q2", 1.0),
            ("at2po", 1, "d", "multihop", "q1", 0.0),
            ("at2po", 1, "d", "multihop", "q2", 1.0),
            ("at2po", 2, "d", "multihop", "q1", 1.0),  # no grpo seed 2
            ("grpo", 0, "d", "multihop", "q1", 0.0),
            ("grpo", 0, "d", "multihop", "q2", 1.0),
            ("grpo", 1, "d", "multihop", "q1", 1.0),
            ("grpo", 1, "d", "multihop", "q2", 1.0),
        ]
    )
    got = seed_differences(frame, "at2po", "grpo")
    assert got.to_dict() == {0: pytest.approx(50.0), 1: pytest.approx(-50.0)}
    assert seed_differences(frame, "at2po", "aepo").empty


@pytest.mark.parametrize(
    ("knobs", "error", "message"),
    [
        ({"tree_alpha": 0.2}, ValueError, "expected section.key"),
        ({"rollout.tree_alpa": 0.2}, ProfileError, "tree_alpa"),
        ({"rollout.temperature": -1}, ProfileError, "temperature"),
    ],
)
def test_a_bad_knob_is_refused_before_any_process(isolated_outputs, knobs, error, message):
    with pytest.raises(error, match=message):
        retrain_side_by_side("smoke", knobs, progress=False)
    assert not (isolated_outputs / "results" / "executed").exists()


@pytest.mark.slow  # two smoke trainings in two processes
@pytest.mark.integration
def test_two_methods_retrain_side_by_side_and_compare_on_the_same_questions(isolated_outputs):
    result = retrain_side_by_side(
        "smoke", {"train.max_steps": 1, "train.eval_every": 0}, seed=7, progress=False
    )
    assert result.results == isolated_outputs / "results" / "executed" / "smoke" / "try"
    metrics, evals, outcomes = load_side_by_side(result, "smoke")
    assert set(metrics["method"]) == {"at2po", "grpo"}
    assert set(metrics["seed"]) == {7}
    # both runs answered the same test questions: a paired difference exists
    difference = paired_difference(outcomes, "at2po", "grpo", group=None)
    assert difference["questions"] == outcomes[outcomes["method"] == "grpo"].shape[0]
    assert difference["low"] <= difference["diff"] <= difference["high"]
    # the recorded runs folder was not touched
    assert not (isolated_outputs / "results" / "runs").exists()
