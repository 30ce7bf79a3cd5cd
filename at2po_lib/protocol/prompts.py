r"""Prompt templates of the search agent: what the model is told, how search results are shown.

docs/method.md §1. The authors' rows are **one system message** holding the instruction, the
text ``\nuser\n`` and the question (``data_process/hotpotqa_multihop_train.py``,
``make_prefix``; a ``?`` is appended when the question has none); there is no user turn.
Search-R1 (the older standard) puts the instruction and the question in one *user* message,
wraps observations in ``<information>`` and uses a plain ``<answer> … </answer>``. Both are
supported; the project writes its own instruction wording with the same structure, and a user
can load any template file.

Built-in templates (YAML files in ``at2po_lib/templates/``):

- ``atpo``: one system message (instruction, ``\nuser\n``, question), ``<think>``/``<search>``/
  ``<result>``, final ``<answer> The final answer is \[ \boxed{…} \] </answer>``; turns stop at
  ``</search>`` or EOS; an invalid action ends the branch.
- ``searchr1``: instruction and question in one user message, ``<information>``, plain
  ``<answer> … </answer>``; turns stop at ``</search>``, ``</answer>`` or EOS (Search-R1's
  ``generation.py``); an invalid action gets a corrective message and a retry.
- ``tiny``: the ``atpo`` structure (one system message, same stops and node rules) with a
  one-line instruction for the toy policy (small context, word-level tokenizer): ``<search>``/
  ``<result>`` with a plain ``<answer>`` and no ``<think>`` (a model trained from scratch has
  nothing to think with, and every instruction word costs context).

Observations (docs/method.md §1) are rendered from wiki-18 documents ``{"id", "contents"}``
where contents is ``"Title"\ntext``. The authors' tool (``search_tool.py``, ``execute`` and
``_format_results``) removes ``"`` from the query, drops passages whose stripped contents repeat
an earlier one, cuts each to 1,000 characters and writes ``Page i: <contents>`` lines, or
``No search results found.``; the ``atpo`` template does the same (``strip_query_quotes``,
``dedupe_passages``, ``max_passage_chars``, ``doc_format``). Search-R1 renders
``Doc i(Title: …) text`` and cleans nothing (``searchr1``).

    >>> t = get_template("atpo")
    >>> [m["role"] for m in build_messages(t, "who wrote hamlet")]
    ['system']
    >>> build_messages(t, "who wrote hamlet")[0]["content"].endswith("\nuser\nwho wrote hamlet?")
    True
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

from ..config.choices import BUILTIN_TEMPLATES

AnswerStyle = Literal["boxed", "plain"]
InvalidActionPolicy = Literal["end", "retry"]

_DOC_FIELDS = {"index", "title", "raw_title", "text", "contents", "id"}


class TemplateError(ValueError):
    """A template file or value that does not validate; the message names the source."""


@dataclass(frozen=True)
class PromptTemplate:
    """One agent format: instruction, tags, observation rendering and invalid-action policy."""

    name: str
    """Short identifier, recorded with every result."""
    system: str | None
    """System message, or None for none (Search-R1). ``{question}`` in it is replaced by the
    question (the authors' and the tiny format: instruction and question in this one message)."""
    user: str | None
    """User message, or None for no user turn (the authors' format). Exactly one of ``system``
    and ``user`` holds ``{question}``, once; it is replaced by the question (``?`` appended)."""
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
    stops: tuple[str, ...] = ("</search>",)
    """Strings that end a turn besides EOS. Authors' code: the tool tags only (``</search>``),
    so a final answer runs on to EOS, which is generated and trained; Search-R1 also stops at
    ``</answer>``."""
    strip_query_quotes: bool = True
    """Remove ``"`` from a query before it is searched (authors' ``search_tool.py``)."""
    dedupe_passages: bool = True
    """Drop a passage whose stripped contents equal an earlier one's (authors' tool)."""
    max_passage_chars: int = 1000
    """Cut each passage's contents to this many characters before rendering (authors' tool:
    1,000); 0 keeps them whole (Search-R1)."""

    def __post_init__(self) -> None:
        if isinstance(self.stops, list):  # YAML lists; the dataclass is frozen and hashable
            object.__setattr__(self, "stops", tuple(self.stops))
        _validate(self, source=f"template {self.name!r}")


_OPTIONAL = {"description", "stops", "strip_query_quotes", "dedupe_passages", "max_passage_chars"}
_REQUIRED = [f.name for f in dataclasses.fields(PromptTemplate) if f.name not in _OPTIONAL]
_ALLOWED = {f.name for f in dataclasses.fields(PromptTemplate)}


def _placeholders(fmt: str) -> set[str]:
    """Named ``{fields}`` of a format string (raises ValueError on a malformed one)."""
    return {name for _, name, _, _ in string.Formatter().parse(fmt) if name is not None}


def _validate(t: PromptTemplate, source: str) -> None:
    """Check types and placeholders; every error names ``source``."""
    for name in _REQUIRED:
        value = getattr(t, name)
        if name in ("system", "user"):
            if value is not None and not isinstance(value, str):
                raise TemplateError(f"{source}: field {name!r} must be a string or null")
        elif not isinstance(value, str):
            raise TemplateError(
                f"{source}: field {name!r} must be a string, got {type(value).__name__}"
            )
    if t.answer_style not in ("boxed", "plain"):
        raise TemplateError(
            f"{source}: answer_style must be 'boxed' or 'plain', got {t.answer_style!r}"
        )
    if t.on_invalid_action not in ("end", "retry"):
        raise TemplateError(
            f"{source}: on_invalid_action must be 'end' or 'retry', got {t.on_invalid_action!r}"
        )
    if t.system is None and t.user is None:
        raise TemplateError(
            f"{source}: 'system' and 'user' are both null; one must hold {{question}}"
        )
    # system/user/observation are filled with str.replace (instructions may hold \boxed{}
    # braces), so only the one placeholder each is checked.
    questions = sum((getattr(t, name) or "").count("{question}") for name in ("system", "user"))
    if questions != 1:
        raise TemplateError(
            f"{source}: 'system' and 'user' together must contain {{question}} "
            f"exactly once, found {questions}"
        )
    count = t.observation.count("{docs}")
    if count != 1:
        raise TemplateError(
            f"{source}: field 'observation' must contain {{docs}} exactly once, found {count}"
        )
    _validate_tool_options(t, source)
    try:
        doc_fields = _placeholders(t.doc_format)
    except ValueError as err:
        raise TemplateError(
            f"{source}: field 'doc_format' is not a valid format string: {err}"
        ) from err
    if not doc_fields <= _DOC_FIELDS:
        raise TemplateError(
            f"{source}: doc_format placeholders {sorted(doc_fields - _DOC_FIELDS)} unknown; allowed {sorted(_DOC_FIELDS)}"
        )
    if not t.observation_open or not t.observation_close:
        raise TemplateError(f"{source}: observation tags must be non-empty")
    opened = t.observation.find(t.observation_open)
    closed = t.observation.find(t.observation_close)
    docs_at = t.observation.find("{docs}")
    if not (0 <= opened < docs_at < closed):
        raise TemplateError(
            f"{source}: observation must contain {t.observation_open!r}, then {{docs}}, then {t.observation_close!r}"
        )


def _validate_tool_options(t: PromptTemplate, source: str) -> None:
    if not isinstance(t.stops, tuple) or not all(isinstance(x, str) and x for x in t.stops):
        raise TemplateError(
            f"{source}: 'stops' must be a list of non-empty strings, got {t.stops!r}"
        )
    if "</search>" not in t.stops:
        raise TemplateError(
            f"{source}: 'stops' must include '</search>' (a search turn ends there)"
        )
    for name in ("strip_query_quotes", "dedupe_passages"):
        if not isinstance(getattr(t, name), bool):
            raise TemplateError(f"{source}: {name!r} must be true or false")
    chars = t.max_passage_chars
    if isinstance(chars, bool) or not isinstance(chars, int) or chars < 0:
        raise TemplateError(f"{source}: 'max_passage_chars' must be an integer >= 0, got {chars!r}")


def template_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> PromptTemplate:
    """Build a template from a mapping; unknown or missing fields are errors naming ``source``."""
    if not isinstance(data, Mapping):
        raise TemplateError(
            f"{source}: a template must be a mapping of fields, got {type(data).__name__}"
        )
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise TemplateError(
            f"{source}: unknown template field(s) {unknown}; allowed {sorted(_ALLOWED)}"
        )
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
    text = (
        resources.files("at2po_lib")
        .joinpath("templates", f"{key}.yaml")
        .read_text(encoding="utf-8")
    )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:  # a broken built-in is a packaging bug
        raise TemplateError(f"built-in template {key}.yaml: not valid YAML: {err}") from err
    return template_from_dict(data, source=f"built-in template {key}.yaml")


# ----------------------------------------------------------------------------- messages


def template_texts(template: PromptTemplate | str) -> list[str]:
    """The fixed texts a template writes into a trajectory (its system and user messages, the
    observation format, the tool-limit notice, the invalid-action message): what a tokenizer
    trained from scratch on a world's texts must also see."""
    template = get_template(template)
    texts = (
        template.system,
        template.user,
        template.observation,
        template.tool_limit_notice,
        template.invalid_action_message,
    )
    return [text for text in texts if text]


def normalize_question(question: str) -> str:
    """Strip the question and append ``?`` when missing (authors' and Search-R1's data code)."""
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}")
    stripped = question.strip()
    if not stripped:
        raise ValueError("question is empty")
    return stripped if stripped.endswith("?") else stripped + "?"


def build_messages(template: PromptTemplate | str, question: str) -> list[dict[str, str]]:
    """Chat messages for one question as ``{"role", "content"}`` dicts: ``[system]`` (authors'
    format, tiny), ``[user]`` (Search-R1) or ``[system, user]`` (a user template)."""
    t = get_template(template)
    q = normalize_question(question)
    # str.replace, not str.format: the instruction may hold braces (\boxed{}).
    return [
        {"role": role, "content": text.replace("{question}", q)}
        for role, text in (("system", t.system), ("user", t.user))
        if text is not None
    ]


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The chat prompt as ids, ending with the assistant header (``add_generation_prompt``):
    the exact ids the rollout starts from and the warm-start demonstrations are trained on."""
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True
    )
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
        index=index,
        title=title,
        raw_title=raw_title,
        text=text,
        contents=contents,
        id=doc.get("id", ""),
    )


def clean_query(template: PromptTemplate | str, query: str) -> str:
    """The query as the tool searches it: ``"`` removed when the template says so (authors'
    ``search_tool.py``, ``execute``), then stripped."""
    t = get_template(template)
    return (query.replace('"', "") if t.strip_query_quotes else query).strip()


def clean_passages(
    template: PromptTemplate | str, docs: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The documents as the tool shows them: contents stripped, repeats dropped
    (``dedupe_passages``) and each cut to ``max_passage_chars`` characters (authors'
    ``search_tool.py``, ``_extract_and_format_results`` and ``_format_results``), rank order
    kept. Documents with empty contents are dropped as the authors' tool drops them."""
    t = get_template(template)
    if not (t.dedupe_passages or t.max_passage_chars):
        return [dict(d) for d in docs]
    out, seen = [], set()
    for doc in docs:
        if "contents" not in doc:
            raise ValueError(f"document {doc.get('id', '?')!r} has no 'contents' field")
        contents = str(doc["contents"]).strip()
        if not contents or (t.dedupe_passages and contents in seen):
            continue
        seen.add(contents)
        cut = contents[: t.max_passage_chars] if t.max_passage_chars else contents
        out.append({**doc, "contents": cut})
    return out


def render_observation(template: PromptTemplate | str, docs: Sequence[Mapping[str, Any]]) -> str:
    """The observation appended after a search call: the cleaned documents inside the tags.

    ``docs`` are ``{"id", "contents"}`` dicts in rank order (the retriever's top-k, k=3 in the
    paper), cleaned by :func:`clean_passages`. No document left renders the template's
    ``empty_result_text``.
    """
    t = get_template(template)
    docs = clean_passages(t, docs)
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
