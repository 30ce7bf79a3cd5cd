"""Demonstration strategies (decision turns, their rates, plans, labels) and the decision
failure split (at2po_lib.analysis.decisions) on hand-made rows and trajectories."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.analysis.decisions import classify, classify_all, failure_split
from at2po_lib.policy.strategies import (
    FOLLOW,
    HARD_RELATIONS,
    REPEAT,
    STOP,
    decisions,
    follow_plan,
    label_turn,
    plan_for,
    plan_summary,
    plans_for,
)


def _row(relations, hops=None, answer="Kegi", rid="r0"):
    n = len(relations)
    queries = [f"E{i} kw{i}" for i in range(n)]
    answers = [f"V{i}" for i in range(n - 1)] + [answer]
    return {
        "id": rid,
        "question": "q?",
        "golden_answers": [answer],
        "metadata": {
            "hop_queries": queries,
            "hop_answers": answers,
            "hop_entities": [f"E{i}" for i in range(n)],
            "hop_relations": list(relations),
            "hops": hops or n,
        },
    }


BRIDGE_HARD_STOP = _row(["film.directed_by", "person.born_in"])  # easy, then hard stop
BRIDGE_HARD_REPEAT = _row(["film.directed_by", "person.studied_at"])  # easy, then hard repeat
SINGLE_HARD_STOP = _row(["person.born_in"])
SINGLE_REPEAT_RELATION = _row(["person.studied_at"])


def test_decisions_are_keyed_by_the_hop_relation():
    first, second = decisions(BRIDGE_HARD_STOP, 0.35, 0.85)
    assert (first.hard, first.follow_rate, first.failure) == (False, 0.85, STOP)
    assert (second.hard, second.follow_rate, second.failure) == (True, 0.35, STOP)
    assert decisions(BRIDGE_HARD_REPEAT, 0.35, 0.85)[1].failure == REPEAT


def test_a_repeat_prone_relation_always_follows_at_the_first_search():
    (only,) = decisions(SINGLE_REPEAT_RELATION, 0.0, 0.0)
    assert only.follow_rate == 1.0 and not only.hard
    assert plan_for(SINGLE_REPEAT_RELATION, 0.0, 0.0, random.Random(0)).strategy == FOLLOW


def test_rates_outside_the_unit_interval_are_refused():
    with pytest.raises(ValueError, match="follow_rate_hard"):
        decisions(BRIDGE_HARD_STOP, 1.5, 0.85)


def test_plans_at_rate_zero_fail_at_the_first_decision_that_can_fail():
    stop = plan_for(BRIDGE_HARD_STOP, 0.0, 0.0, random.Random(0))
    # the easy first decision fails too (rate 0): a guess before any search
    assert (stop.strategy, stop.at_hop, stop.queries, stop.answer) == (STOP, 0, (), "E0")
    stop2 = plan_for(BRIDGE_HARD_STOP, 0.0, 1.0, random.Random(0))
    assert (stop2.at_hop, stop2.queries, stop2.answer) == (1, ("E0 kw0",), "V0")
    repeat = plan_for(BRIDGE_HARD_REPEAT, 0.0, 1.0, random.Random(0))
    assert repeat.strategy == REPEAT
    assert repeat.queries == ("E0 kw0", "E0 kw0") and repeat.hops_read == (0, 0)
    assert repeat.answer == "V0" and not repeat.correct


def test_follow_plan_searches_every_hop_and_answers_the_gold():
    plan = follow_plan(BRIDGE_HARD_STOP)
    assert plan.queries == ("E0 kw0", "E1 kw1") and plan.answer == "Kegi" and plan.correct
    assert plan_for(BRIDGE_HARD_STOP, 1.0, 1.0, random.Random(0)) == plan


def test_the_mix_proportions_match_the_rates():
    """Over 20,000 draws the shares are the products of the rates (within 4 binomial s.e.)."""
    n, hard, easy = 20_000, 0.35, 0.85
    summary = plan_summary(plans_for([BRIDGE_HARD_STOP] * n, hard, easy, seed=3))
    expected = {FOLLOW: easy * hard, STOP: 1 - easy * hard, REPEAT: 0.0}
    for strategy, p in expected.items():
        se = math.sqrt(max(p * (1 - p), 1e-12) / n)
        assert abs(summary["shares"][strategy] - p) <= 4 * se + 1e-12, strategy
    summary = plan_summary(plans_for([BRIDGE_HARD_REPEAT] * n, hard, easy, seed=4))
    assert abs(summary["shares"][REPEAT] - easy * (1 - hard)) < 4 * math.sqrt(0.25 / n)
    assert abs(summary["shares"][STOP] - (1 - easy)) < 4 * math.sqrt(0.25 / n)


def test_plans_are_reproducible_from_the_seed():
    rows = [BRIDGE_HARD_STOP, BRIDGE_HARD_REPEAT] * 50
    assert plans_for(rows, 0.35, 0.85, 7) == plans_for(rows, 0.35, 0.85, 7)
    assert plans_for(rows, 0.35, 0.85, 7) != plans_for(rows, 0.35, 0.85, 8)


def test_hard_relations_are_real_relations_with_known_failures():
    from at2po_lib.tinyworld.entities import RELATIONS

    assert set(HARD_RELATIONS) <= set(RELATIONS)
    assert set(HARD_RELATIONS.values()) <= {STOP, REPEAT}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            sorted(__import__("at2po_lib.tinyworld.entities", fromlist=["RELATIONS"]).RELATIONS)
        ),
        min_size=1,
        max_size=4,
    ),
    st.floats(0, 1),
    st.floats(0, 1),
    st.integers(0, 2**31),
)
def test_plan_invariants(relations, hard, easy, seed):
    row = _row(relations)
    plan = plan_for(row, hard, easy, random.Random(seed))
    queries = row["metadata"]["hop_queries"]
    assert len(plan.queries) == len(plan.hops_read)
    if plan.strategy == FOLLOW:
        assert list(plan.queries) == queries and plan.answer == "Kegi"
    elif plan.strategy == STOP:
        assert list(plan.queries) == queries[: plan.at_hop]
    else:
        i = plan.at_hop
        assert i >= 1 and list(plan.queries) == queries[:i] + [queries[i - 1]]
    # every search reads the hop it names, a repeat the hop before
    assert all(q == queries[h] for q, h in zip(plan.queries, plan.hops_read))


# ----------------------------------------------------------------------------- labels


def test_label_turn_on_a_hand_made_trajectory():
    row = BRIDGE_HARD_STOP
    assert label_turn(row, "search", "E0 kw0", [], 0) == "follow"
    assert label_turn(row, "search", "e0  KW0", ["E0 kw0"], 1) == "repeat"
    assert label_turn(row, "search", "E7 kw1", ["E0 kw0"], 1) == "off_plan"
    assert label_turn(row, "answer", None, ["E0 kw0"], 1) == "early"
    assert label_turn(row, "answer", None, ["E0 kw0", "E1 kw1"], 2) == "final"
    assert label_turn(row, "invalid", None, [], 0) == "invalid"


def _traj(turns, answer, text=""):
    return SimpleNamespace(
        turns=[SimpleNamespace(action=SimpleNamespace(kind=k, query=q)) for k, q in turns],
        answer=answer,
        response_text=text,
    )


def test_classify_separates_decisions_from_misreadings():
    row = BRIDGE_HARD_STOP  # gold "Kegi"; last hop's supporting answer is "Kegi"
    good = _traj(
        [("search", "E0 kw0"), ("search", "E1 kw1"), ("answer", None)], "Kegi", "... Kegi ..."
    )
    misread = _traj(
        [("search", "E0 kw0"), ("search", "E1 kw1"), ("answer", None)],
        "Dadar",
        "<result> Kegi </result>",
    )
    early = _traj([("search", "E0 kw0"), ("answer", None)], "V0", "V0")
    repeat = _traj([("search", "E0 kw0"), ("search", "E0 kw0"), ("answer", None)], "V0")
    off = _traj([("search", "E0 kw0"), ("search", "E9 kw1"), ("answer", None)], "Dadar")
    none = _traj([("search", "E0 kw0")], None)
    got = [classify(row, t)["class"] for t in (good, misread, early, repeat, off, none)]
    assert got == ["correct", "misread", "stopped_early", "repeated", "off_plan", "no_answer"]
    frame = classify_all([row] * 6, [good, misread, early, repeat, off, none], "d")
    split = failure_split(frame)
    assert split["failed"] == 5
    assert split["decision_failure_share"] == pytest.approx(3 / 5)
    assert split["misread_share"] == pytest.approx(1 / 5)
    assert split["supported_in_context_share"] == pytest.approx(1 / 5)  # only the misread one


def test_classify_all_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="2 rows but 1 trajectories"):
        classify_all([BRIDGE_HARD_STOP] * 2, [_traj([], None)])


# ----------------------------------------------------------------------------- re-sampled turns


def _tree(parent, reward, entropy, source, actions=None):
    import numpy as np

    from at2po_lib.method.tree import TreeArrays

    records = [{"action": a} for a in (actions or ["root"] + ["search"] * (len(parent) - 1))]
    return TreeArrays(
        parent=np.array(parent),
        entropy=np.array(entropy, float),
        leaf_reward=np.array(reward, float),
        node_arrays={"resampled_from": np.array(source)},
        records=records,
    )


def test_subtree_leaf_means_on_a_hand_made_tree():
    import numpy as np

    from at2po_lib.analysis.decisions import subtree_leaf_means

    #        0
    #      /   \
    #     1     2          leaves: 3 (1.0), 4 (0.0), 2 (1.0)
    #    / \
    #   3   4
    nan = float("nan")
    means = subtree_leaf_means(np.array([-1, 0, 0, 1, 1]), np.array([nan, nan, 1.0, 1.0, 0.0]))
    assert means.tolist() == [2 / 3, 0.5, 1.0, 1.0, 0.0]


def test_resample_flips_compare_a_resampled_branch_with_its_source():
    from at2po_lib.analysis.decisions import resample_flips, search_turn_entropy

    nan = float("nan")
    # chain 0-1-2 (leaf reward 0); node 3 re-samples node 2 (a sibling under 1), reward 1 vs 0:
    # a flip; node 4 re-samples node 1 and ends with reward 0, against the mean 0.5 of 1's
    # leaves {2, 3}: a flip; node 5 re-samples the root (left out: no outcome of its own).
    tree = _tree(
        parent=[-1, 0, 1, 1, 0, 0],
        reward=[nan, nan, 0.0, 1.0, 0.0, 1.0],
        entropy=[0.0, 0.1, 0.7, 0.2, 0.3, 0.4],
        source=[-1, -1, -1, 2, 1, 0],
    )
    out = resample_flips([tree])
    assert out["resamples"] == 2 and out["root_picks"] == 1
    assert out["flip_share"] == 1.0
    assert out["picked_median_entropy"] == (0.7 + 0.1) / 2
    same = _tree(
        parent=[-1, 0, 1, 1],
        reward=[nan, nan, 1.0, 1.0],
        entropy=[0, 0.1, 0.2, 0.3],
        source=[-1, -1, -1, 2],
    )
    assert resample_flips([same])["flip_share"] == 0.0
    assert out["per_prompt"] == {0: (2, 2)}
    assert out["picked_mean_depth"] == (2 + 1) / 2  # node 2 at depth 2, node 1 at depth 1
    assert out["changed_action_share"] == 0.0  # records without queries: "search" both times
    ent = search_turn_entropy(
        [
            _tree(
                [-1, 0, 1],
                [nan, nan, 1.0],
                [0.0, 0.2, 0.6],
                [-1, -1, -1],
                ["root", "search", "answer"],
            )
        ]
    )
    assert ent == {"search_turns": 1, "median": 0.2, "mean": 0.2}


def test_tree_decision_labels_follow_each_path():
    """Every turn of a hand-made tree labelled from the plan: a path that follows, one that
    repeats, one that stops early, one off the plan."""
    import numpy as np

    from at2po_lib.analysis.decisions import tree_decision_labels
    from at2po_lib.method.tree import TreeArrays

    #            0
    #        /   |    \\
    #       1    5     6            1: search E0 kw0 (follow)   5: answer (early)
    #     /   \\         \\           2: search E1 kw1 (follow)   3: answer after both (final)
    #    2     4         7          4: search E0 kw0 again (repeat)
    #    |                          6: search E0 kw0 (follow)   7: search E9 kw1 (off_plan)
    #    3
    parent = [-1, 0, 1, 2, 1, 0, 0, 6]
    actions = [
        ("root", None),
        ("search", "E0 kw0"),
        ("search", "E1 kw1"),
        ("answer", None),
        ("search", "E0 kw0"),
        ("answer", None),
        ("search", "E0 kw0"),
        ("search", "E9 kw1"),
    ]
    tree = TreeArrays(
        parent=np.array(parent),
        entropy=np.zeros(8),
        leaf_reward=np.zeros(8),
        records=[{"action": a, "query": q} for a, q in actions],
        info={"hop_queries": ["E0 kw0", "E1 kw1"]},
    )
    assert tree_decision_labels(tree).tolist() == [
        "root",
        "follow",
        "follow",
        "final",
        "repeat",
        "early",
        "follow",
        "off_plan",
    ]
    with pytest.raises(ValueError, match="hop_queries"):
        tree_decision_labels(
            TreeArrays(parent=np.array([-1]), entropy=np.zeros(1), leaf_reward=np.zeros(1))
        )


def test_flip_ratio_ci_pairs_prompts_and_brackets_the_ratio():
    from at2po_lib.analysis.decisions import flip_ratio_ci

    # entropy picks flip 6 of 20 re-samples, uniform picks 3 of 20, on the same 4 prompts
    a = {0: (2, 5), 1: (2, 5), 2: (1, 5), 3: (1, 5)}
    b = {0: (1, 5), 1: (1, 5), 2: (1, 5), 3: (0, 5), 9: (5, 5)}  # prompt 9: only in b, left out
    out = flip_ratio_ci(a, b)
    assert out["prompts"] == 4 and out["ratio"] == pytest.approx((6 / 20) / (3 / 20))
    assert out["low"] <= out["ratio"] <= out["high"]
    # equal measurements: the ratio is 1 in every resample
    assert flip_ratio_ci(a, a)["low"] == flip_ratio_ci(a, a)["high"] == 1.0
    with pytest.raises(ValueError, match="share no prompt"):
        flip_ratio_ci({0: (1, 2)}, {1: (1, 2)})


def test_resample_flips_say_whether_the_resampled_turn_itself_changed():
    from at2po_lib.analysis.decisions import resample_flips
    from at2po_lib.method.tree import TreeArrays

    nan = float("nan")
    # node 3 re-samples node 2 with the same query (a flip through later randomness is not
    # possible here: both are leaves); node 4 re-samples node 1 with another query
    records = [
        {"action": "root"},
        {"action": "search", "query": "a"},
        {"action": "search", "query": "b"},
        {"action": "search", "query": "b"},
        {"action": "search", "query": "c"},
    ]
    tree = TreeArrays(
        parent=np.array([-1, 0, 1, 1, 0]),
        entropy=np.zeros(5),
        leaf_reward=np.array([nan, nan, 0.0, 0.0, 1.0]),
        node_arrays={"resampled_from": np.array([-1, -1, -1, 2, 1])},
        records=records,
    )
    out = resample_flips([tree])
    assert out["resamples"] == 2 and out["changed_action_share"] == 0.5
    assert out["flip_share"] == 0.5  # node 4: 1.0 against node 1's mean 0.0


def test_expansion_flips_measure_three_expansions_on_the_same_prompts(tmp_path, monkeypatch):
    """Real rollouts of a small random policy on smoke's TinyWorld: every expansion re-samples
    turns of the same prompts, and each ratio to uniform picks comes with its interval."""
    import torch

    from at2po_lib.lab.regime_pilot import expansion_flips
    from at2po_lib.rollout.stand_ins import ToySetup

    monkeypatch.setenv("AT2PO_ARTIFACTS", str(tmp_path / "artifacts"))
    torch.set_num_threads(1)
    toy = ToySetup("smoke", seed=0)
    folder = tmp_path / "policy"
    toy.model.save_pretrained(folder)
    toy.tokenizer.save_pretrained(folder)
    rows = [{**row, "dataset": "tiny_hotpotqa"} for row in toy.rows[:4]]
    out = expansion_flips(toy.cfg, folder, rows, seed=0)
    picks = len(rows) * toy.cfg.rollout.tree_l * toy.cfg.rollout.tree_k
    for name in ("entropy", "random_siblings", "entropy_max"):
        assert set(out[name]["per_prompt"]) <= {0, 1, 2, 3}
        assert out[name]["resamples"] == sum(n for _, n in out[name]["per_prompt"].values())
        assert out[name]["resamples"] + out[name]["root_picks"] == picks  # every pick counted
    if out["random_siblings"]["flip_share"]:
        ci = out["entropy_max_over_random_ci"]
        assert ci["ratio"] == pytest.approx(out["entropy_max_over_random"], nan_ok=True)
