"""The running example's rule (at2po_lib.analysis.running_example): it finds the decision turn
on the hand-made tree, never a leaf, and says why when nothing qualifies."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from at2po_lib.analysis.running_example import (MIN_ENTROPY, choose_running_example,
                                                teaching_tree, teaching_tree_before_expansion)
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
    certain = replace(base, entropy=np.where(np.arange(base.num_nodes) == 2, MIN_ENTROPY / 2,
                                             base.entropy))
    assert not choose_running_example([certain]).found
    # the qualifying tree is found wherever it sits among others
    example = choose_running_example([flat, certain, base])
    assert example.found and example.tree_index == 2


def test_no_resampled_turns_is_said_plainly():
    example = choose_running_example([example_tree()])
    assert not example.found and "no tree holds a re-sampled turn" in example.why
    assert example.highlight() == {}
