"""parse_action: hand-made turns for each rule, and a 10,000-example fuzz that it never raises."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from at2po_lib.protocol.actions import Action, parse_action


@pytest.mark.parametrize(
    "text, kind, value",
    [
        # A well-formed search turn.
        (
            "<think> I need the capital. </think> <search> capital of France </search>",
            "search",
            "capital of France",
        ),
        # A well-formed answer turn.
        ("<think> done </think> <answer> Paris </answer>", "answer", "Paris"),
        # The first closing tag decides: the answer closes before the search.
        ("<answer> Paris </answer> <search> more </search>", "answer", "Paris"),
        ("<search> q1 </search> <answer> Paris </answer>", "search", "q1"),
        # Only the first complete action counts (the rest of the turn is ignored).
        ("<search> first </search> <search> second </search>", "search", "first"),
        # Content starts at the last opening tag before the closing tag (authors' rindex).
        ("<search> a <search> b </search>", "search", "b"),
        # Tags inside <think> count too (a stop-string generator would stop there).
        ("<think> maybe <search> x </search> </think>", "search", "x"),
        # An empty answer is still an answer: the branch ends and the reward judges it.
        ("<answer></answer>", "answer", ""),
        # Multi-line content is kept, stripped.
        ("<search>\n line one\n line two \n</search>", "search", "line one\n line two"),
    ],
)
def test_valid_actions(text, kind, value):
    action = parse_action(text)
    assert action.kind == kind
    assert (action.query if kind == "search" else action.answer) == value
    assert action.reason == ""


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "no <search> or <answer> tag"),
        ("just thinking out loud", "no <search> or <answer> tag"),
        ("<search>   </search>", "empty search query"),
        ("<search> cut by the length limit", "<search> is never closed"),
        ("<answer> cut", "<answer> is never closed"),
        ("text </search>", "</search> without a preceding <search>"),
        ("</answer><answer> x </answer>", "</answer> without a preceding <answer>"),
        # Upper-case tags are not tags.
        ("<SEARCH> q </SEARCH>", "no <search> or <answer> tag"),
    ],
)
def test_invalid_actions(text, reason):
    action = parse_action(text)
    assert action.kind == "invalid"
    assert reason in action.reason
    assert action.query is None and action.answer is None


def test_end_marks_the_deciding_closing_tag():
    text = "<think> t </think> <search> q </search> trailing junk"
    action = parse_action(text)
    assert text[: action.end].endswith("</search>")
    assert text[action.end :] == " trailing junk"
    assert parse_action("no tags").end == len("no tags")


def test_boxed_template_answer():
    text = r"<answer> The final answer is \[ \boxed{Paris} \] </answer>"
    assert parse_action(text, "atpo").answer == "Paris"
    # Plain templates (and no template) keep the whole content.
    assert parse_action(text, "searchr1").answer == r"The final answer is \[ \boxed{Paris} \]"
    assert parse_action(text).content == r"The final answer is \[ \boxed{Paris} \]"
    # A boxed template without a box falls back to the content.
    assert parse_action("<answer> Paris </answer>", "atpo").answer == "Paris"


def test_answer_is_terminal():
    assert parse_action("<answer> x </answer>").is_terminal
    assert not parse_action("<search> x </search>").is_terminal


def test_non_string_is_a_type_error():
    with pytest.raises(TypeError):
        parse_action(None)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- fuzz

FRAGMENTS = [
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<result>",
    "</result>",
    "<information>",
    "</information>",
    "<search",
    "search>",
    "</",
    "<",
    ">",
    "\\boxed{",
    "}",
    "{",
    " ",
    "\n",
    "Paris",
    "q",
    # Whole actions, so that searches and answers are common among the generated turns.
    "<search> q </search>",
    "<search></search>",
    "<answer> Paris </answer>",
    "<answer> \\[ \\boxed{a{b}} \\] </answer>",
    "<think> t </think>",
]
turn_text = st.lists(st.one_of(st.text(max_size=8), st.sampled_from(FRAGMENTS)), max_size=14).map(
    "".join
)


@pytest.mark.slow  # 10000 hypothesis examples (46 s measured)
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=turn_text, template=st.sampled_from([None, "atpo", "searchr1", "tiny"]))
def test_fuzz_never_raises_and_classifies_once(text, template):
    action = parse_action(text, template)
    event(action.kind)  # --hypothesis-show-statistics shows the mix of kinds
    assert isinstance(action, Action)
    assert action.kind in {"search", "answer", "invalid"}
    # Exactly one kind: the payload fields agree with the kind.
    assert (action.query is not None) == (action.kind == "search")
    assert (action.answer is not None) == (action.kind == "answer")
    assert (action.reason != "") == (action.kind == "invalid")
    assert 0 <= action.end <= len(text)
    if action.kind == "search":
        assert action.query == action.query.strip() != ""
        assert "</search>" not in action.query and "<search>" not in action.query
        assert text[: action.end].endswith("</search>")
        # Nothing closed before the deciding tag.
        assert "</answer>" not in text[: action.end]
    if action.kind == "answer":
        assert "</answer>" not in action.content and "</search>" not in text[: action.end]
        assert text[: action.end].endswith("</answer>")


@settings(max_examples=300, deadline=None)
@given(query=st.text(min_size=1).filter(lambda q: q.strip() and "<" not in q and ">" not in q))
def test_search_query_round_trip(query):
    action = parse_action(f"<think> plan </think> <search>{query}</search>")
    assert action.kind == "search" and action.query == query.strip()


_NO_ANGLE = st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=40)


@given(before=_NO_ANGLE, query=_NO_ANGLE, after_open=_NO_ANGLE)
def test_last_tag_content_takes_the_last_search_block(before, query, after_open):
    """The authors' _extract_content: text between the last </search> and the last <search>
    before it; None when either tag is missing. Never raises for a string."""
    from at2po_lib.protocol.actions import last_tag_content

    text = f"{before}<search> first </search>{after_open}<search>{query}</search>"
    assert last_tag_content(text, "search") == query.strip()
    assert last_tag_content(before + query, "search") is None
    assert last_tag_content(f"{before}{query}</search>", "search") is None
