"""What one turn of model output asks the environment to do: search, answer, or nothing valid.

docs/method.md §1: "Turn. The model generates until it closes a tool call (``</search>``) or ends
(EOS / ``</answer>``)." … "Invalid action (no well-formed tag): Search-R1 appends a fixed
corrective message and lets the model try again; the authors' code ends the branch as a leaf."

Semantics of :func:`parse_action` on the text of one turn:

1. **The first closing action tag decides.** Whichever of ``</search>`` and ``</answer>``
   appears first ends the action; everything after it (``Action.end`` onwards) is ignored.
   This is what a generator that stops at those strings produces.
2. **The content runs from the last matching opening tag before it** (``<search> a <search> b
   </search>`` queries ``b``). A closing tag with no opening tag before it is invalid.
3. A search whose stripped query is empty is **invalid**; an answer may be empty (the branch
   ends either way and the reward judges it).
4. Tags are case-sensitive and count wherever they appear, inside ``<think>`` too: a
   stop-string generator cannot tell, and neither reference does.
5. Anything else (no closing action tag, e.g. a turn cut by the length limit) is invalid, with
   ``Action.reason`` saying why. The function never raises for a string.

How the references do it, and where this differs:

- Search-R1 (``search_r1/llm_agent/generation.py``) cuts the turn after the first
  ``</search>`` if there is one, else after the first ``</answer>``, then takes the first
  complete ``<search>…</search>`` or ``<answer>…</answer>`` block (a non-greedy regex). On
  well-nested turns this is rule 1 with the same content. Differences: Search-R1 prefers a
  ``</search>`` even when an ``</answer>`` closed earlier; its content starts at the *first*
  opening tag (``a <search> b``); an empty query is sent to the retriever.
- The authors' code (``vllm_rollout_with_tools_tree_offline.py``) stops generation at
  ``</search>`` only and takes the text between the last ``<search>`` and that ``</search>``
  (:func:`last_tag_content`); an empty query ends the branch. An answer simply ends with EOS,
  so a model that wrote ``</answer>`` and then searched searches there. The rollout
  (:mod:`at2po_lib.rollout.agent`) does exactly that: what follows a turn is decided by the
  stop it ended on (``</search>``: :func:`last_tag_content`; EOS: the branch ends), and
  :func:`parse_action` only names the turn's action for records and for Search-R1's retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .prompts import PromptTemplate, get_template
from .reward import last_boxed

ActionKind = Literal["search", "answer", "invalid"]
_ACTION_TAGS = ("search", "answer")


@dataclass(frozen=True)
class Action:
    """The parsed action of one turn."""

    kind: ActionKind
    """``search``, ``answer`` or ``invalid``."""
    query: str | None = None
    """Stripped search query (kind ``search`` only)."""
    answer: str | None = None
    """The answer (kind ``answer`` only): the stripped tag content, or for a template with
    ``answer_style: boxed`` the last ``\\boxed{}`` inside it when there is one."""
    content: str | None = None
    """Stripped content of the deciding tag, whatever the kind (None when no tag decided)."""
    reason: str = ""
    """Why the action is invalid (empty otherwise)."""
    end: int = 0
    """Index just after the deciding closing tag (also for an invalid empty query or a
    closing tag without opening tag); ``len(text)`` when no closing tag exists. Text after it
    is not part of the turn's action (a rollout may cut the turn there)."""

    @property
    def is_terminal(self) -> bool:
        """An answer ends the trajectory; a search continues it; invalid depends on policy."""
        return self.kind == "answer"


def _first_closing_tag(text: str) -> tuple[str, int] | None:
    """(tag name, position) of the earliest ``</search>`` or ``</answer>``; None if neither."""
    found = [(text.find(f"</{tag}>"), tag) for tag in _ACTION_TAGS]
    found = [(pos, tag) for pos, tag in found if pos >= 0]
    if not found:
        return None
    pos, tag = min(found)
    return tag, pos


def last_tag_content(text: str, tag: str) -> str | None:
    """Stripped text between the last ``</tag>`` and the last ``<tag>`` before it, None when
    either is missing (the authors' ``_extract_content``, applied here to the turn's own text)."""
    close_at = text.rfind(f"</{tag}>")
    if close_at < 0:
        return None
    open_at = text.rfind(f"<{tag}>", 0, close_at)
    if open_at < 0:
        return None
    return text[open_at + len(tag) + 2 : close_at].strip()


def _no_action_reason(text: str) -> str:
    for tag in _ACTION_TAGS:
        if f"<{tag}>" in text:
            return f"<{tag}> is never closed by </{tag}>"
    return "no <search> or <answer> tag"


def parse_action(text: str, template: PromptTemplate | str | None = None) -> Action:
    """Classify one turn's text as a search, an answer or an invalid action (see module doc).

    ``template`` only changes ``Action.answer`` for boxed templates. Never raises for a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"turn text must be a string, got {type(text).__name__}")
    closing = _first_closing_tag(text)
    if closing is None:
        return Action("invalid", reason=_no_action_reason(text), end=len(text))
    tag, close_at = closing
    open_tag = f"<{tag}>"
    open_at = text.rfind(open_tag, 0, close_at)
    end = close_at + len(f"</{tag}>")
    if open_at < 0:
        return Action("invalid", reason=f"</{tag}> without a preceding {open_tag}", end=end)
    content = text[open_at + len(open_tag) : close_at].strip()
    if tag == "search":
        if not content:
            return Action("invalid", content=content, reason="empty search query", end=end)
        return Action("search", query=content, content=content, end=end)
    return Action("answer", answer=_answer_value(content, template), content=content, end=end)


def _answer_value(content: str, template: PromptTemplate | str | None) -> str:
    if template is None or get_template(template).answer_style != "boxed":
        return content
    boxed = last_boxed(content)
    return content if boxed is None else boxed.strip()
