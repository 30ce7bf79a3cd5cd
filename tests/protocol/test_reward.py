"""Metrics, answer extraction and both training rewards on hand-made responses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.protocol.reward import (
    atpo_reward,
    atpo_score,
    exact_match,
    extract_answer,
    extract_prediction,
    f1_score,
    format_check,
    last_boxed,
    normalize_answer,
    retrieval_hit,
    search_r1_extract_answer,
    searchr1_format_reward,
    searchr1_sequence_check,
)

# ----------------------------------------------------------------------------- metrics


@pytest.mark.parametrize(
    "text, expected",
    [
        # lower -> "the  eiffel-tower!" ; punctuation -> "the  eiffeltower" ; article; spaces.
        ("The  Eiffel-Tower!", "eiffeltower"),
        ("An apple a day", "apple day"),
        # Articles only as whole words: "theory" and "another" stay.
        ("theory of another", "theory of another"),
        ("  Wilhelm   Conrad\tRöntgen ", "wilhelm conrad röntgen"),
        ("", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match():
    assert exact_match("the Paris", ["paris"]) == 1.0
    assert exact_match("Paris.", "paris") == 1.0  # a str golden answer is one answer
    assert exact_match("Paris, France", ["Paris"]) == 0.0
    assert exact_match("Dai Yongge", ["Xiu Li Dai", "Dai Yongge"]) == 1.0
    assert exact_match(None, ["Paris"]) == 0.0
    assert exact_match("x", []) == 0.0


def test_exact_match_rejects_non_string_answers():
    with pytest.raises(TypeError, match="golden answer 0"):
        exact_match("1", [1])  # type: ignore[list-item]


def test_f1_hand_computed():
    # pred "barack obama", gold "obama": overlap 1, P = 1/2, R = 1/1, F1 = 2*.5*1/1.5 = 2/3.
    assert f1_score("Barack Obama", ["Obama"]) == pytest.approx(2 / 3)
    # Max over golden answers: the second matches exactly.
    assert f1_score("Barack Obama", ["Michelle Obama", "barack obama"]) == pytest.approx(1.0)
    # pred "a b c" normalises to "b c" (article dropped); gold "b c d": overlap 2,
    # P = 2/2, R = 2/3, F1 = 2*1*(2/3)/(1 + 2/3) = 0.8.
    assert f1_score("a b c", ["b c d"]) == pytest.approx(0.8)
    assert f1_score("Lyon", ["Paris"]) == 0.0
    assert f1_score(None, ["Paris"]) == 0.0


def test_f1_yes_no_rule():
    # Plain SQuAD F1 would give 2*(1)(1/3)/(4/3) = 0.5; yes/no only score when equal.
    assert f1_score("yes", ["yes it is"]) == 0.0
    assert f1_score("yes", ["Yes"]) == 1.0


@settings(max_examples=200, deadline=None)
@given(pred=st.text(max_size=30), golds=st.lists(st.text(max_size=30), min_size=1, max_size=4))
def test_metric_properties(pred, golds):
    em, f1 = exact_match(pred, golds), f1_score(pred, golds)
    assert em in (0.0, 1.0) and 0.0 <= f1 <= 1.0
    # An exact match has F1 1 unless the normalised strings are empty or the yes/no rule applies.
    if em == 1.0 and normalize_answer(pred):
        assert f1 == pytest.approx(1.0)


# ----------------------------------------------------------------------------- extraction


def test_last_boxed_nested_and_last():
    assert last_boxed(r"\boxed{a {b} c}") == "a {b} c"
    assert last_boxed(r"\boxed{first} then \boxed{second}") == "second"
    assert last_boxed(r"\boxed{unclosed {x}") is None
    assert last_boxed("no box") is None


def test_extract_answer_authors_convention():
    response = (
        r"<think> t </think> <answer> draft \boxed{Lyon} </answer> "
        r"<answer> The final answer is \[ \boxed{Paris {France}} \] </answer>"
    )
    assert extract_answer(response) == "Paris {France}"
    # The last \boxed inside the last answer block.
    assert extract_answer(r"<answer> \boxed{a} or \boxed{b} </answer>") == "b"
    # No box: the stripped block, unless a box is required.
    assert extract_answer("<answer> Paris </answer>") == "Paris"
    assert extract_answer("<answer> Paris </answer>", require_boxed=True) is None
    assert extract_answer("no answer here") is None
    assert extract_answer("<answer> unclosed") is None


def test_search_r1_extract_answer():
    assert (
        search_r1_extract_answer("<answer> a </answer> x <answer>\n Paris \n</answer>") == "Paris"
    )
    assert search_r1_extract_answer("<answer></answer>") == ""
    assert search_r1_extract_answer("nothing") is None
    # With the prompt included, the instruction's example answer is the first block.
    assert search_r1_extract_answer("e.g. <answer> Beijing </answer>", includes_prompt=True) is None
    assert (
        search_r1_extract_answer(
            "e.g. <answer> Beijing </answer> ... <answer> Paris </answer>", includes_prompt=True
        )
        == "Paris"
    )


def test_extract_prediction_by_style():
    response = r"<answer> The final answer is \[ \boxed{Paris} \] </answer>"
    assert extract_prediction(response, "boxed") == "Paris"
    assert extract_prediction(response, "plain") == r"The final answer is \[ \boxed{Paris} \]"
    with pytest.raises(ValueError):
        extract_prediction(response, "other")


# ----------------------------------------------------------------------------- authors' reward

GOOD = (
    "<think> I need the capital. </think> <search> capital of France </search>"
    " <result>\nDoc 1(Title: Paris) Paris is the capital of France.\n</result>"
    r" <think> Found it. </think> <answer> The final answer is \[ \boxed{Paris} \] </answer>"
)


@pytest.mark.parametrize(
    "response, reason",
    [
        (GOOD.replace("<think> Found it. </think>", "<think> Found it."), "not paired"),
        ("<answer> \\boxed{Paris} </answer>", "no <think>"),
        (GOOD.replace("</answer>", "</answer> <answer> x </answer>"), "exactly one"),
        (
            GOOD.replace(
                " <result>\nDoc 1(Title: Paris) Paris is the capital of France.\n</result>", ""
            ),
            "incomplete",
        ),
        (GOOD.replace("</search>", "").replace("</result>", "</result> </search>"), "wrong order"),
        (GOOD.replace(r"\[ \boxed{Paris} \]", "Paris"), "boxed"),
        ("<think> t </think> </answer> <answer> \\boxed{x}", "before"),
    ],
)
def test_format_check_failures(response, reason):
    ok, why = format_check(response)
    assert not ok and reason in why


def test_format_check_ok_and_observation_tags():
    assert format_check(GOOD) == (True, "format is correct")
    searchr1_style = GOOD.replace("<result>", "<information>").replace(
        "</result>", "</information>"
    )
    assert not format_check(searchr1_style)[0]
    assert format_check(searchr1_style, ("<information>", "</information>"))[0]


def test_atpo_reward_cases():
    assert atpo_reward(GOOD, ["Paris"]) == 1.0  # good format, correct
    assert atpo_reward(GOOD, ["Lyon"]) == 0.0  # good format, wrong
    assert (
        atpo_reward(GOOD.replace("<think> Found it. </think>", "<think> Found it."), ["Paris"])
        == -1.0
    )
    no_box = GOOD.replace(r"\[ \boxed{Paris} \]", "Paris")
    assert atpo_reward(no_box, ["Paris"]) == -1.0  # correct but unboxed: format failure
    # A boxed-looking but unclosed box passes the loose check yet cannot be extracted: −1.
    unclosed = GOOD.replace(r"\boxed{Paris}", r"\boxed{{Paris}")
    assert format_check(unclosed)[0]
    assert atpo_reward(unclosed, ["Paris"]) == -1.0


def test_atpo_score_validation_mode():
    two_answers = GOOD + r" <answer> \boxed{Paris} </answer>"
    assert atpo_score(two_answers, "Paris").score == -1.0
    outcome = atpo_score(two_answers, "Paris", check_format=False)
    assert (outcome.score, outcome.exact_match, outcome.answer) == (1.0, 1.0, "Paris")
    assert atpo_score("<answer> Paris </answer>", "Paris", check_format=False).score == -1.0


# ----------------------------------------------------------------------------- Search-R1 reward

VALID_R1 = (
    "<think> a </think> <search> capital of france </search>"
    "\n\n<information>Doc 1(Title: Paris) Paris is the capital of France.</information>\n\n"
    "<think> b </think> <answer> {answer} </answer>"
)
SCORES = dict(structure_format_score=0.2, final_format_score=0.1, retrieval_score=0.1)


@pytest.mark.parametrize(
    "response, golden, expected",
    [
        (VALID_R1.replace("{answer}", "Paris"), ["Paris"], 1.0),  # valid, correct
        (
            VALID_R1.replace("{answer}", "Lyon"),
            ["Paris"],
            0.3,
        ),  # valid, wrong, retrieval hit: 0.2+0.1
        (VALID_R1.replace("{answer}", "Lyon"), ["Marseille"], 0.2),  # valid, wrong, no hit
        ("<answer> Paris </answer>", ["Paris"], 0.8),  # invalid (no think), correct: 1 − 0.2
        ("<answer> Lyon </answer>", ["Paris"], 0.1),  # invalid, wrong
        ("no answer at all", ["Paris"], 0.0),  # invalid, nothing extracted
    ],
)
def test_searchr1_format_reward_cases(response, golden, expected):
    assert searchr1_format_reward(response, golden, **SCORES) == pytest.approx(expected)


def test_searchr1_format_reward_valid_but_unextracted_with_prompt():
    # Search-R1 sees prompt + response; a prompt without an example answer leaves one block,
    # so nothing is extracted: valid layout gives 0.2 + 0.1 (the passage holds "Paris").
    text = "<|im_start|>user\nQuestion?<|im_start|>assistant\n" + VALID_R1.replace(
        "{answer}", "Paris"
    )
    assert searchr1_format_reward(text, ["Paris"], includes_prompt=True, **SCORES) == pytest.approx(
        0.3
    )
    with_example = (
        "<|im_start|>user\ne.g. <answer> Beijing </answer><|im_start|>assistant\n"
        + VALID_R1.replace("{answer}", "Paris")
    )
    assert searchr1_format_reward(with_example, ["Paris"], includes_prompt=True, **SCORES) == 1.0


def test_searchr1_defaults_are_the_v03_script_values():
    # 0.2 structure, 0.1 final, 0 retrieval: valid + wrong = 0.2, invalid + wrong = 0.1.
    assert searchr1_format_reward(VALID_R1.replace("{answer}", "Lyon"), ["Paris"]) == pytest.approx(
        0.2
    )
    assert searchr1_format_reward("<answer> Lyon </answer>", ["Paris"]) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "response, reason",
    [
        ("<think> a </think> <answer> x </answer> trailing", "unexpected text"),
        (
            "<think> a </think> <search> q </search> <information> i </information> <answer> x </answer>",
            "unexpected tag <answer>",
        ),
        ("<think> a <answer> x </answer>", "unbalanced <think>"),
        ("<think> a </think>", "incomplete"),
        ("stray <think> a </think> <answer> x </answer>", "unexpected text"),
    ],
)
def test_searchr1_sequence_check_failures(response, reason):
    valid, why = searchr1_sequence_check(response)
    assert not valid and reason in why


def test_searchr1_sequence_check_valid_and_marker():
    assert searchr1_sequence_check(VALID_R1.replace("{answer}", "x")) == (True, "valid sequence")
    assert (
        searchr1_sequence_check("<think> a </think> <answer> x </answer>", includes_prompt=True)[1]
        == "missing assistant marker"
    )
    result_style = VALID_R1.replace("information>", "result>").replace("{answer}", "x")
    assert searchr1_sequence_check(result_style, observation_tag="result")[0]


def test_retrieval_hit():
    assert retrieval_hit(VALID_R1, ["the Paris"])
    assert not retrieval_hit(VALID_R1, ["Lyon"])
    assert not retrieval_hit("<answer> Paris </answer>", ["Paris"])


# -- answer blocks: linear scan, same result as the regex it replaces ------------------------

_REFERENCE_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["<answer>", "</answer>", "a", " ", "\\boxed{x}", "<", ">", "answer"]),
        max_size=30,
    ).map("".join)
)
def test_answer_blocks_equal_the_regex(text):
    from at2po_lib.protocol.reward import _answer_blocks

    assert _answer_blocks(text) == [m.group(1) for m in _REFERENCE_BLOCK.finditer(text)]


def test_unclosed_answer_tags_give_no_prediction_and_earlier_blocks_still_count():
    from at2po_lib.protocol.reward import _answer_blocks

    unclosed = "<answer>" * 20_000  # quadratic for the regex (seconds); a linear scan here
    assert extract_answer(unclosed) is None and search_r1_extract_answer(unclosed) is None
    text = "<answer>first</answer> then <answer>\\boxed{two}</answer>" + "<answer>" * 1000
    assert _answer_blocks(text) == ["first", "\\boxed{two}"]
    assert extract_answer(text) == "two"
