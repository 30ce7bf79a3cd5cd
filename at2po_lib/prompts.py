r"""Prompt templates of the search agent: what the model is told, how search results are shown.

docs/method.md §1: "The instruction sits in a *system* message; the question is the user message
(a ``?`` is appended if missing). Search-R1 (the older standard) uses ``<information>``
instead of ``<result>``, a plain ``<answer> … </answer>``, and puts the instruction in the
user message. Support both formats." The project writes its own instruction wording with the
same structure; a user can load any template file.

Built-in templates (YAML files in ``at2po_lib/templates/``):

- ``atpo``: instruction in a system message, ``<think>``/``<search>``/``<result>``, final
  ``<answer> The final answer is \[ \boxed{…} \] </answer>``; an invalid action ends the branch.
  Paper vs code: docs/method.md describes a system instruction plus a user question, which is what
  this template builds; the authors' ``data_process/*.py`` actually writes a *single* system
  message holding the instruction, the text ``\nuser\n`` and the question.
- ``searchr1``: instruction and question in one user message, ``<information>``, plain
  ``<answer> … </answer>``; an invalid action gets a corrective message and a retry.
- ``tiny``: a one-line instruction for the toy policy (small context, word-level tokenizer):
  ``<search>``/``<result>`` with a plain ``<answer>`` and no ``<think>`` (a model trained from
  scratch has nothing to think with, and every instruction word costs context).

Observations (docs/method.md §1: "Top-3 passages, each rendered with its title") are rendered from
wiki-18 documents ``{"id", "contents"}`` where contents is ``"Title"\ntext``:
``Doc 1(Title: Paris) Paris is the capital …`` (Search-R1's rendering), one document a line,
inside the template's observation tags. The authors' code renders ``Page 1: <contents>``
instead; a template's ``doc_format`` can reproduce either.

    >>> t = get_template("atpo")
    >>> build_messages(t, "who wrote hamlet")[1]
    {'role': 'user', 'content': 'who wrote hamlet?'}
"""

from __future__ import annotations

import dataclasses
import functools
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import yaml

AnswerStyle = Literal["boxed", "plain"]
InvalidActionPolicy = Literal["end", "retry"]

BUILTIN_TEMPLATES = ("atpo", "searchr1", "tiny")
_DOC_FIELDS = {"index", "title", "raw_title", "text", "contents", "id"}


class TemplateError(ValueError):
    """A template file or value that does not validate; the message names the source."""


@dataclass(frozen=True)
class PromptTemplate:
    """One agent format: instruction, tags, observation rendering and invalid-action policy."""

    name: str
    """Short identifier, recorded with every result."""
    system: str | None
    """System message, or None for no system message (Search-R1, tiny)."""
    user: str
    """User message; ``{question}`` is replaced by the question (with ``?`` appended)."""
    observation: str
    r"""Observation text appended after a search call; ``{docs}`` is replaced by the rendered
    documents. Holds the tags and their surrounding newlines, e.g. ``" <result>\n{docs}\n</result>"``."""
    observation_open: str
    """Opening observation tag: ``<result>`` (authors) or ``<information>`` (Search-R1)."""
    observation_close: str
    """Closing observation tag: ``</result>`` or ``</information>``."""
    doc_format: str
    """One document; placeholders ``{index}`` (1-based), ``{title}`` (enclosing quotes
    removed), ``{raw_title}`` (first line verbatim), ``{text}``, ``{contents}``, ``{id}``."""
    doc_separator: str
    """Text between two rendered documents."""
    empty_result_text: str
    """Rendered in place of the documents when a search returns nothing."""
    answer_style: AnswerStyle
    r"""``boxed``: the prediction is the last ``\boxed{}`` inside ``<answer>``; ``plain``: the
    whole stripped answer."""
    tool_limit_notice: str
    """Inserted (loss mask 0) when the model calls the tool after the limit (6 calls)."""
    invalid_action_message: str
    """Corrective observation for an invalid action when ``on_invalid_action == "retry"``."""
    on_invalid_action: InvalidActionPolicy
    """``end`` the branch as a leaf (authors' code) or ``retry`` after the corrective message
    (Search-R1)."""
    description: str = ""
    """Optional free text."""

    def __post_init__(self) -> None:
        _validate(self, source=f"template {self.name!r}")


_REQUIRED = [f.name for f in dataclasses.fields(PromptTemplate) if f.name != "description"]
_ALLOWED = {f.name for f in dataclasses.fields(PromptTemplate)}


def _placeholders(fmt: str) -> set[str]:
    """Named ``{fields}`` of a format string (raises ValueError on a malformed one)."""
    return {name for _, name, _, _ in string.Formatter().parse(fmt) if name is not None}


def _validate(t: PromptTemplate, source: str) -> None:
    """Check types and placeholders; every error names ``source``."""
    for name in _REQUIRED:
        value = getattr(t, name)
        if name == "system":
            if value is not None and not isinstance(value, str):
                raise TemplateError(f"{source}: field 'system' must be a string or null")
        elif not isinstance(value, str):
            raise TemplateError(f"{source}: field {name!r} must be a string, got {type(value).__name__}")
    if t.answer_style not in ("boxed", "plain"):
        raise TemplateError(f"{source}: answer_style must be 'boxed' or 'plain', got {t.answer_style!r}")
    if t.on_invalid_action not in ("end", "retry"):
        raise TemplateError(
            f"{source}: on_invalid_action must be 'end' or 'retry', got {t.on_invalid_action!r}"
        )
    # user/observation are filled with str.replace (instructions may hold \boxed{} braces),
    # so only the one placeholder each is checked.
    for name, marker in (("user", "{question}"), ("observation", "{docs}")):
        count = getattr(t, name).count(marker)
        if count != 1:
            raise TemplateError(f"{source}: field {name!r} must contain {marker} exactly once, found {count}")
    try:
        doc_fields = _placeholders(t.doc_format)
    except ValueError as err:
        raise TemplateError(f"{source}: field 'doc_format' is not a valid format string: {err}") from err
    if not doc_fields <= _DOC_FIELDS:
        raise TemplateError(f"{source}: doc_format placeholders {sorted(doc_fields - _DOC_FIELDS)} unknown; allowed {sorted(_DOC_FIELDS)}")
    if not t.observation_open or not t.observation_close:
        raise TemplateError(f"{source}: observation tags must be non-empty")
    opened = t.observation.find(t.observation_open)
    closed = t.observation.find(t.observation_close)
    docs_at = t.observation.find("{docs}")
    if not (0 <= opened < docs_at < closed):
        raise TemplateError(
            f"{source}: observation must contain {t.observation_open!r}, then {{docs}}, then {t.observation_close!r}"
        )


def template_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> PromptTemplate:
    """Build a template from a mapping; unknown or missing fields are errors naming ``source``."""
    if not isinstance(data, Mapping):
        raise TemplateError(f"{source}: a template must be a mapping of fields, got {type(data).__name__}")
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise TemplateError(f"{source}: unknown template field(s) {unknown}; allowed {sorted(_ALLOWED)}")
    missing = [name for name in _REQUIRED if name not in data]
    if missing:
        raise TemplateError(f"{source}: missing template field(s) {missing}")
    try:
        return PromptTemplate(**dict(data))
    except TemplateError as err:
        # Re-raise with the file name instead of the template name.
        raise TemplateError(str(err).replace(f"template {data.get('name')!r}", source, 1)) from None


def _read_template_file(path: Path) -> PromptTemplate:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise TemplateError(f"{path}: not valid YAML: {err}") from err
    return template_from_dict(data, source=str(path))


def get_template(name_or_path: str | Path | PromptTemplate) -> PromptTemplate:
    """A built-in template by name (``atpo``, ``searchr1``, ``tiny``) or a YAML file by path.

    A ``PromptTemplate`` passes through unchanged, so callers can accept either.
    """
    if isinstance(name_or_path, PromptTemplate):
        return name_or_path
    key = str(name_or_path)
    if key in BUILTIN_TEMPLATES:
        return _builtin_template(key)
    path = Path(key)
    if not path.is_file():
        raise TemplateError(
            f"template {key!r} is neither a built-in ({', '.join(BUILTIN_TEMPLATES)}) nor an existing YAML file"
        )
    return _read_template_file(path)


@functools.lru_cache(maxsize=None)
def _builtin_template(key: str) -> PromptTemplate:
    """Built-ins are read once; templates are frozen, so sharing one object is safe."""
    text = resources.files("at2po_lib").joinpath("templates", f"{key}.yaml").read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:  # a broken built-in is a packaging bug
        raise TemplateError(f"built-in template {key}.yaml: not valid YAML: {err}") from err
    return template_from_dict(data, source=f"built-in template {key}.yaml")


# ----------------------------------------------------------------------------- messages


def normalize_question(question: str) -> str:
    """Strip the question and append ``?`` when missing (authors' and Search-R1's data code)."""
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}")
    stripped = question.strip()
    if not stripped:
        raise ValueError("question is empty")
    return stripped if stripped.endswith("?") else stripped + "?"


def build_messages(template: PromptTemplate | str, question: str) -> list[dict[str, str]]:
    """Chat messages for one question: ``[system?, user]`` as ``{"role", "content"}`` dicts."""
    t = get_template(template)
    # str.replace, not str.format: the instruction may hold braces (\boxed{}).
    user = t.user.replace("{question}", normalize_question(question))
    messages = [] if t.system is None else [{"role": "system", "content": t.system}]
    messages.append({"role": "user", "content": user})
    return messages


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The chat prompt as ids, ending with the assistant header (``add_generation_prompt``):
    the exact ids the rollout starts from and the warm-start demonstrations are trained on."""
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                            return_dict=True)
    return list(encoded["input_ids"])


# ----------------------------------------------------------------------------- observations


def split_title(contents: str) -> tuple[str, str]:
    """Split wiki-18 ``contents`` (``"Title"\ntext``) into (title, text).

    The title is the first line with one pair of enclosing double quotes removed (wiki-18
    quotes most titles, not all); the text is everything after the first newline, stripped.
    Contents without a newline are taken as text with an empty title, so a passage in another
    format is still shown (Search-R1 would instead take the whole string as the title).
    """
    if not isinstance(contents, str):
        raise TypeError(f"document contents must be a string, got {type(contents).__name__}")
    if "\n" not in contents:
        return "", contents.strip()
    raw_title, text = contents.split("\n", 1)
    return _unquote(raw_title.strip()), text.strip()


def _unquote(title: str) -> str:
    if len(title) >= 2 and title.startswith('"') and title.endswith('"'):
        return title[1:-1]
    return title


def render_document(template: PromptTemplate | str, doc: Mapping[str, Any], index: int) -> str:
    """One document through ``doc_format``; ``index`` is 1-based."""
    t = get_template(template)
    if "contents" not in doc:
        raise ValueError(f"document {doc.get('id', '?')!r} has no 'contents' field")
    contents = doc["contents"]
    title, text = split_title(contents)
    raw_title = contents.split("\n", 1)[0] if "\n" in contents else ""
    return t.doc_format.format(
        index=index, title=title, raw_title=raw_title, text=text, contents=contents, id=doc.get("id", "")
    )


def render_observation(template: PromptTemplate | str, docs: Sequence[Mapping[str, Any]]) -> str:
    """The observation appended after a search call: the top-k documents inside the tags.

    ``docs`` are ``{"id", "contents"}`` dicts in rank order (the retriever's top-k, k=3 in the
    paper). An empty list renders the template's ``empty_result_text``.
    """
    t = get_template(template)
    if docs:
        body = t.doc_separator.join(render_document(t, d, i) for i, d in enumerate(docs, start=1))
    else:
        body = t.empty_result_text
    return t.observation.replace("{docs}", body)


def tool_limit_notice(template: PromptTemplate | str) -> str:
    """Text inserted (loss mask 0) when a search is requested after the tool-call limit."""
    return get_template(template).tool_limit_notice


def invalid_action_message(template: PromptTemplate | str) -> str:
    """Corrective observation used when the template's policy is ``retry``."""
    return get_template(template).invalid_action_message
