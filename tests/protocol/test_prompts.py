"""Prompt templates: built-ins load, user files validate, messages and observations render."""

from __future__ import annotations

import dataclasses

import json
from pathlib import Path

import pytest
import yaml

from at2po_lib.config.choices import BUILTIN_TEMPLATES
from at2po_lib.protocol.prompts import (
    PromptTemplate,
    TemplateError,
    build_messages,
    get_template,
    invalid_action_message,
    render_observation,
    split_title,
    template_texts,
    tool_limit_notice,
)

FIXTURES = Path(__file__).parent.parent / "fixtures"
DOCS = [
    {"id": "1", "contents": '"Paris"\nParis is the capital of France.'},
    {"id": "2", "contents": '"Lyon"\nLyon is a city in France.'},
]


def wiki18_docs(k: int) -> list[dict]:
    with (FIXTURES / "wiki18_sample.jsonl").open() as handle:
        return [json.loads(next(handle)) for _ in range(k)]


@pytest.mark.parametrize("name", BUILTIN_TEMPLATES)
def test_builtin_templates_load(name):
    template = get_template(name)
    assert isinstance(template, PromptTemplate)
    assert template.name == name
    assert get_template(template) is template


def test_atpo_structure():
    # the authors' make_prefix: one system message, instruction + "\nuser\n" + question
    t = get_template("atpo")
    assert t.user is None and t.system.endswith("\nuser\n{question}")
    assert t.stops == ("</search>",)
    for tag in ("<think>", "<search>", "<result>", "<answer>", "\\boxed{"):
        assert tag in t.system
    assert (t.observation_open, t.observation_close) == ("<result>", "</result>")
    assert t.answer_style == "boxed" and t.on_invalid_action == "end"


def test_searchr1_structure():
    t = get_template("searchr1")
    assert t.system is None
    assert "<information>" in t.user and "{question}" in t.user
    assert t.answer_style == "plain" and t.on_invalid_action == "retry"
    assert t.stops == ("</search>", "</answer>")  # Search-R1's generation.py
    assert not (t.strip_query_quotes or t.dedupe_passages or t.max_passage_chars)


def test_tiny_is_short_with_the_atpo_structure():
    # The tiny policy has a small context: the instruction stays under 25 words; structure,
    # stops and cleaning are the authors' (one system message, no user turn).
    t = get_template("tiny")
    assert len(t.system.split()) < 25 and "{question}" in t.system
    assert t.user is None and t.stops == ("</search>",)
    assert t.strip_query_quotes and t.dedupe_passages and t.max_passage_chars == 1000


@pytest.mark.parametrize("name", ["atpo", "tiny"])
def test_build_messages_one_system_message_and_question_mark(name):
    messages = build_messages(name, "  who wrote hamlet ")
    assert [m["role"] for m in messages] == ["system"]
    assert messages[0]["content"].endswith("who wrote hamlet?")
    # An existing question mark is not doubled.
    assert build_messages(name, "who wrote hamlet?")[0]["content"].endswith("who wrote hamlet?")
    assert not build_messages(name, "who wrote hamlet?")[0]["content"].endswith("??")


def test_a_user_template_may_keep_system_and_user_messages():
    data = {
        f.name: getattr(get_template("atpo"), f.name) for f in dataclasses.fields(PromptTemplate)
    }
    data.update(system="instruction", user="{question}", name="two")
    messages = build_messages(PromptTemplate(**data), "q")
    assert messages == [
        {"role": "system", "content": "instruction"},
        {"role": "user", "content": "q?"},
    ]


def test_build_messages_searchr1_single_user_message():
    messages = build_messages("searchr1", "capital of france")
    assert len(messages) == 1 and messages[0]["role"] == "user"
    assert "Question: capital of france?" in messages[0]["content"]


def test_build_messages_question_with_braces_is_not_formatted():
    # str.format would choke on braces inside a question; replace leaves them alone.
    assert build_messages("atpo", "what is {x}")[0]["content"].endswith("\nwhat is {x}?")


def test_build_messages_rejects_empty_question():
    with pytest.raises(ValueError, match="empty"):
        build_messages("atpo", "   ")


def test_split_title():
    assert split_title('"Paris"\nParis is nice.') == ("Paris", "Paris is nice.")
    assert split_title("Absalon\nAbsalon was a bishop.") == ("Absalon", "Absalon was a bishop.")
    assert split_title("no newline here") == ("", "no newline here")
    # Only the first newline separates title and text.
    assert split_title('"T"\na\nb') == ("T", "a\nb")


def test_render_observation_atpo():
    # the authors' rendering: "Page i: " + the raw wiki-18 contents ("Title"\ntext)
    rendered = render_observation("atpo", DOCS)
    assert rendered == (
        ' <result>\nPage 1: "Paris"\nParis is the capital of France.\n'
        'Page 2: "Lyon"\nLyon is a city in France.\n</result>'
    )


def test_render_observation_searchr1_keeps_raw_title():
    rendered = render_observation("searchr1", DOCS[:1])
    assert (
        rendered
        == '\n\n<information>Doc 1(Title: "Paris") Paris is the capital of France.</information>\n\n'
    )


def test_render_observation_real_wiki18_top3():
    docs = wiki18_docs(3)
    rendered = render_observation("searchr1", docs)
    assert rendered.count("Doc ") >= 3 and "Doc 3(Title: " in rendered
    title, text = split_title(docs[0]["contents"])
    assert text in rendered and title in rendered
    assert f"Page 1: {docs[0]['contents']}" in render_observation("atpo", docs)


def test_observation_cleaning_as_the_authors_tool():
    """Repeated passages dropped (after stripping), each cut to 1,000 characters, numbered
    after the de-duplication; Search-R1 cleans nothing."""
    long = {"id": "3", "contents": '"Long"\n' + "x" * 1500}
    docs = [DOCS[0], {"id": "9", "contents": "  " + DOCS[0]["contents"] + " "}, long]
    rendered = render_observation("atpo", docs)
    assert rendered.count("Page ") == 2 and 'Page 2: "Long"' in rendered
    page2 = rendered.split("Page 2: ", 1)[1].rsplit("\n</result>", 1)[0]
    assert page2 == long["contents"][:1000] and len(page2) == 1000
    assert render_observation("searchr1", docs).count("Doc ") == 3
    assert "x" * 1500 in render_observation("searchr1", docs)


def test_clean_query_strips_double_quotes_for_the_authors_format():
    from at2po_lib.protocol.prompts import clean_query

    assert clean_query("atpo", ' "Paris" capital ') == "Paris capital"
    assert clean_query("tiny", '""') == ""
    assert clean_query("searchr1", '"Paris"') == '"Paris"'


def test_render_observation_empty():
    assert (
        render_observation("atpo", [])
        == f" <result>\n{get_template('atpo').empty_result_text}\n</result>"
    )


def test_render_observation_missing_contents():
    with pytest.raises(ValueError, match="contents"):
        render_observation("atpo", [{"id": "7"}])


def test_notices_differ_per_template():
    assert tool_limit_notice("atpo") and tool_limit_notice("searchr1")
    assert "<search>" in invalid_action_message("searchr1")


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _atpo_dict() -> dict:
    return yaml.safe_load(
        (Path(__import__("at2po_lib").__file__).parent / "templates" / "atpo.yaml").read_text()
    )


def test_user_file_loads(tmp_path):
    data = _atpo_dict() | {"name": "mine", "doc_format": "Page {index}: {contents}"}
    template = get_template(_write(tmp_path, data))
    assert template.name == "mine"
    assert (
        render_observation(template, DOCS[:1])
        == ' <result>\nPage 1: "Paris"\nParis is the capital of France.\n</result>'
    )


def test_user_file_unknown_field_names_file(tmp_path):
    path = _write(tmp_path, _atpo_dict() | {"colour": "red"})
    with pytest.raises(TemplateError, match=r"custom\.yaml.*unknown.*colour"):
        get_template(path)


def test_user_file_missing_field_names_file(tmp_path):
    data = _atpo_dict()
    del data["observation_close"]
    with pytest.raises(TemplateError, match=r"custom\.yaml.*missing.*observation_close"):
        get_template(_write(tmp_path, data))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"system": "no placeholder"}, "question"),
        ({"user": "{question} again"}, "exactly once, found 2"),
        ({"system": None, "user": None}, "both null"),
        ({"stops": ["</answer>"]}, "stops"),
        ({"stops": "</search>"}, "stops"),
        ({"max_passage_chars": -1}, "max_passage_chars"),
        ({"dedupe_passages": "yes"}, "dedupe_passages"),
        ({"observation": "<result></result>"}, "docs"),
        ({"answer_style": "fancy"}, "answer_style"),
        ({"on_invalid_action": "explode"}, "on_invalid_action"),
        ({"doc_format": "{nope}"}, "nope"),
        ({"observation": "{docs} <result></result>"}, "observation"),
    ],
)
def test_user_file_bad_values_name_file(tmp_path, change, message):
    with pytest.raises(TemplateError, match=message) as info:
        get_template(_write(tmp_path, _atpo_dict() | change))
    assert "custom.yaml" in str(info.value)


def test_unknown_template_name():
    with pytest.raises(TemplateError, match="neither a built-in"):
        get_template("no-such-template")


def test_bad_yaml_names_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed")
    with pytest.raises(TemplateError, match="broken.yaml"):
        get_template(path)


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_template_texts_are_the_fixed_texts_a_template_writes(name):
    """A tokenizer trained from scratch sees them; a message the template lacks (the authors'
    format has no user turn) is left out, not passed on as None."""
    template = get_template(name)
    texts = template_texts(name)
    assert all(isinstance(t, str) and t for t in texts)
    assert template.tool_limit_notice in texts and template.invalid_action_message in texts
    for message in (template.system, template.user):
        assert (message in texts) == bool(message)
