"""The running example's rule (at2po_lib.analysis.running_example): it finds the decision turn
on the hand-made tree, never a leaf, and says why when nothing qualifies."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from at2po_lib.analysis.running_example import (
    MIN_ENTROPY,
    choose_running_example,
    pick_odds,
    round_scores,
    teaching_tree,
    teaching_tree_before_expansion,
)
from at2po_lib.method.expansion import select_entropy
from at2po_lib.method.examples import example_tree


def test_teaching_tree_picks_its_decision_turn_not_the_uncertain_leaf():
    before = teaching_tree_before_expansion()
    leaf_5 = 5
    assert before.is_leaf[leaf_5] and before.entropy[leaf_5] == before.entropy.max()
    picks = select_entropy(before.entropy, before.parent, before.is_leaf, k=1, alpha=0.001)
    assert picks.tolist() == [2]  # the second hop's search, the most uncertain *inner* turn
    example = choose_running_example([teaching_tree()])
    assert example.found and (example.node, example.resample) == (2, 10)
    assert "follow" in example.why and "early" in example.why and "lowered" in example.why


def test_rule_prefers_the_larger_change_and_skips_certain_or_unchanged_turns():
    base = teaching_tree()
    flat = replace(base, leaf_reward=np.where(np.isfinite(base.leaf_reward), 1.0, np.nan))
    none = choose_running_example([flat])
    assert not none.found and "changed the outcome" in none.why and "1 re-sampled" in none.why
    certain = replace(
        base, entropy=np.where(np.arange(base.num_nodes) == 2, MIN_ENTROPY / 2, base.entropy)
    )
    assert not choose_running_example([certain]).found
    # the qualifying tree is found wherever it sits among others
    example = choose_running_example([flat, certain, base])
    assert example.found and example.tree_index == 2


def test_no_resampled_turns_is_said_plainly():
    example = choose_running_example([example_tree()])
    assert not example.found and "no tree holds a re-sampled turn" in example.why
    assert example.highlight() == {}


def tied_teaching_tree():
    """The hand-made tree with turn 8 as uncertain as turn 2 (H = 0.60): a tie that round 1
    broke in turn 2's favour (K = 1 of 7 candidates: 0, 1, 2, 4, 6, 7, 8)."""
    base = teaching_tree()
    return replace(base, entropy=np.where(np.arange(base.num_nodes) == 8, 0.60, base.entropy))


def test_pick_odds_by_hand():
    odds = pick_odds(teaching_tree(), 2, 10)
    assert (odds["round"], odds["candidates"], odds["picks"]) == (1, 7, 1)
    assert odds["uniform_chance"] == pytest.approx(1 / 7)
    assert odds["tied_with"] == [] and not odds["tie_break"]
    tied = pick_odds(tied_teaching_tree(), 2, 10)
    assert tied["tied_with"] == [8] and tied["tie_break"]  # 8 tied and was left unpicked
    with pytest.raises(ValueError, match="not a re-sample"):
        pick_odds(teaching_tree(), 1, 10)


def test_rule_prefers_an_untied_pick_and_says_a_tie():
    alone = choose_running_example([tied_teaching_tree()])
    assert alone.found and alone.tied_with == (8,)
    assert "entropy tie" in alone.why and "0 without a tie" in alone.why
    both = choose_running_example([tied_teaching_tree(), teaching_tree()])
    assert both.tree_index == 1 and both.tied_with == () and "no tie" in both.why
    table = round_scores(tied_teaching_tree(), 1, 0.001)
    assert table.loc[2, "entropy ties"] == 1 and table.loc[8, "entropy ties"] == 1
    assert table.loc[1, "entropy ties"] == 0 and table.loc[5, "entropy ties"] == 0  # 5: a leaf
