"""Prompt templates: built-ins load, user files validate, messages and observations render."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from at2po_lib.prompts import (
    BUILTIN_TEMPLATES,
    PromptTemplate,
    TemplateError,
    build_messages,
    get_template,
    invalid_action_message,
    render_observation,
    split_title,
    tool_limit_notice,
)

FIXTURES = Path(__file__).parent / "fixtures"
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
    t = get_template("atpo")
    assert t.system is not None and t.user == "{question}"
    for tag in ("<think>", "<search>", "<result>", "<answer>", "\\boxed{"):
        assert tag in t.system
    assert (t.observation_open, t.observation_close) == ("<result>", "</result>")
    assert t.answer_style == "boxed" and t.on_invalid_action == "end"


def test_searchr1_structure():
    t = get_template("searchr1")
    assert t.system is None
    assert "<information>" in t.user and "{question}" in t.user
    assert t.answer_style == "plain" and t.on_invalid_action == "retry"


def test_tiny_is_short():
    # The tiny policy has a small context: the instruction stays under 25 words.
    t = get_template("tiny")
    assert len(t.user.split()) < 25
    assert t.system is None


def test_build_messages_system_and_question_mark():
    messages = build_messages("atpo", "  who wrote hamlet ")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == "who wrote hamlet?"
    # An existing question mark is not doubled.
    assert build_messages("atpo", "who wrote hamlet?")[1]["content"] == "who wrote hamlet?"


def test_build_messages_searchr1_single_user_message():
    messages = build_messages("searchr1", "capital of france")
    assert len(messages) == 1 and messages[0]["role"] == "user"
    assert "Question: capital of france?" in messages[0]["content"]


def test_build_messages_question_with_braces_is_not_formatted():
    # str.format would choke on braces inside a question; replace leaves them alone.
    assert build_messages("atpo", "what is {x}")[1]["content"] == "what is {x}?"


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
    assert rendered == '\n\n<information>Doc 1(Title: "Paris") Paris is the capital of France.</information>\n\n'


def test_render_observation_real_wiki18_top3():
    docs = wiki18_docs(3)
    rendered = render_observation("searchr1", docs)
    assert rendered.count("Doc ") >= 3 and "Doc 3(Title: " in rendered
    title, text = split_title(docs[0]["contents"])
    assert text in rendered and title in rendered
    assert f"Page 1: {docs[0]['contents']}" in render_observation("atpo", docs)


def test_render_observation_empty():
    assert render_observation("atpo", []) == f" <result>\n{get_template('atpo').empty_result_text}\n</result>"


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
    return yaml.safe_load((Path(__import__("at2po_lib").__file__).parent / "templates" / "atpo.yaml").read_text())


def test_user_file_loads(tmp_path):
    data = _atpo_dict() | {"name": "mine", "doc_format": "Page {index}: {contents}"}
    template = get_template(_write(tmp_path, data))
    assert template.name == "mine"
    assert render_observation(template, DOCS[:1]) == ' <result>\nPage 1: "Paris"\nParis is the capital of France.\n</result>'


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
        ({"user": "no placeholder"}, "question"),
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
