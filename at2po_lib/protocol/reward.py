r"""Answer extraction, the EM/F1 metrics and the two training rewards (docs/method.md §4).

docs/method.md §4:

- "SQuAD normalisation: lowercase, drop punctuation, drop articles (a|an|the), collapse spaces."
- "Exact match (EM) = 1 if the normalised prediction equals any normalised golden answer."
- "Prediction = content of the **last** ``\boxed{…}`` inside the last ``<answer>`` (authors'
  code); Search-R1: the stripped content of the last ``<answer>…</answer>`` of the response."
- "Training reward (authors' code): −1 if the format check fails (unbalanced think tags, not
  exactly one answer, search/result out of order, no ``\boxed{}``), else EM (0 or 1)."

Paper/code notes kept visible:

- The authors' extractor reads the *first* ``<answer>`` block; their format check demands
  exactly one, so training is unaffected. Without the check (validation) we read the last one,
  as docs/method.md states.
- The authors' reward returns EM when F1 > 0 and 0 otherwise; since EM = 1 implies F1 > 0,
  that is EM itself, which is what :func:`atpo_reward` returns.
- F1 follows the authors' (and FlashRAG's / HotpotQA's) rule that a yes/no/noanswer
  prediction or golden answer only scores when the two are equal.
- Search-R1's reward functions receive prompt + response; their extractor returns None unless
  the text holds **two or more** answer blocks, because the instruction's own example
  (``<answer> Beijing </answer>``) is the first. Our functions take the response only;
  ``includes_prompt=True`` restores Search-R1's convention.

Responses are text decoded with ``skip_special_tokens=True`` (the authors strip a trailing EOS
string before extracting).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

GoldenAnswers = str | Sequence[str]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_YES_NO = ("yes", "no", "noanswer")


# ----------------------------------------------------------------------------- metrics


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(golden_answers: GoldenAnswers) -> list[str]:
    if isinstance(golden_answers, str):
        return [golden_answers]
    answers = list(golden_answers)
    for i, answer in enumerate(answers):
        if not isinstance(answer, str):
            raise TypeError(
                f"golden answer {i} must be a string, got {type(answer).__name__}: {answer!r}"
            )
    return answers


def exact_match(prediction: str | None, golden_answers: GoldenAnswers) -> float:
    """1.0 if the normalised prediction equals any normalised golden answer, else 0.0.

    A missing prediction (None) scores 0.
    """
    answers = _as_list(golden_answers)
    if prediction is None:
        return 0.0
    normalized = normalize_answer(prediction)
    return float(any(normalize_answer(g) == normalized for g in answers))


def _token_f1(prediction: str, golden: str) -> float:
    pred, gold = normalize_answer(prediction), normalize_answer(golden)
    if (pred in _YES_NO or gold in _YES_NO) and pred != gold:
        return 0.0
    pred_tokens, gold_tokens = pred.split(), gold.split()
    overlap = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    # F1 = 2PR/(P+R) with P = overlap/|pred|, R = overlap/|gold|.
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, golden_answers: GoldenAnswers) -> float:
    """Token-level SQuAD F1, maximised over the golden answers (None scores 0)."""
    answers = _as_list(golden_answers)
    if prediction is None:
        return 0.0
    return max((_token_f1(prediction, g) for g in answers), default=0.0)


# ----------------------------------------------------------------------------- extraction


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{…}`` in ``text``, braces balanced; None if there is none.

    ``\boxed{a {b} c}`` gives ``a {b} c``. An unclosed last ``\boxed{`` gives None (the
    authors' code then fails with "find box error" and scores −1).
    """
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    content_start = start + len("\\boxed{")
    for pos in range(content_start - 1, len(text)):
        char = text[pos]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[content_start:pos]
    return None


_OPEN, _CLOSE = "<answer>", "</answer>"


def _answer_blocks(text: str) -> list[str]:
    """The contents of ``<answer>…</answer>`` blocks, left to right: exactly what
    ``re.finditer(r"<answer>(.*?)</answer>", text, re.DOTALL)`` finds, in linear time.

    The regex retries the lazy ``.*?`` from every ``<answer>`` when no ``</answer>`` follows,
    which is quadratic (a 160 kB response of unclosed tags took 47 s). Here each search for a
    closing tag starts where the last one ended, and the scan stops at the first opening tag
    with no closing tag after it (no later one can have one either).
    """
    blocks: list[str] = []
    pos = 0
    while True:
        start = text.find(_OPEN, pos)
        if start < 0:
            return blocks
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            return blocks
        blocks.append(text[start + len(_OPEN) : end])
        pos = end + len(_CLOSE)


def extract_answer(response: str, require_boxed: bool = False) -> str | None:
    r"""The authors' prediction: the last ``\boxed{}`` inside the last ``<answer>…</answer>``.

    Without a ``\boxed{}`` in that block the stripped block content is returned, unless
    ``require_boxed`` (the authors' evaluation, where a missing box scores 0). None when the
    response holds no complete answer block.
    """
    blocks = _answer_blocks(response)
    if not blocks:
        return None
    boxed = last_boxed(blocks[-1])
    if boxed is not None:
        return boxed.strip()
    return None if require_boxed else blocks[-1].strip()


def search_r1_extract_answer(response: str, includes_prompt: bool = False) -> str | None:
    """Search-R1's prediction: the stripped content of the last ``<answer>…</answer>``.

    ``includes_prompt=True`` means ``response`` is prompt + response, as Search-R1's reward
    sees it; then at least two answer blocks are required (the first is the instruction's
    example), else None.
    """
    blocks = _answer_blocks(response)
    if len(blocks) < (2 if includes_prompt else 1):
        return None
    return blocks[-1].strip()


def extract_prediction(response: str, answer_style: str = "boxed") -> str | None:
    """The prediction under a template's ``answer_style`` (``boxed`` or ``plain``).

    ``boxed`` follows the authors' evaluation (a missing box is no prediction); ``plain`` is
    Search-R1's extractor. Pass ``template.answer_style``.
    """
    if answer_style == "boxed":
        return extract_answer(response, require_boxed=True)
    if answer_style == "plain":
        return search_r1_extract_answer(response)
    raise ValueError(f"answer_style must be 'boxed' or 'plain', got {answer_style!r}")


# ----------------------------------------------------------------------------- authors' reward


def _search_result_order(text: str, open_obs: str, close_obs: str) -> str | None:
    """Reason string if some ``<search>`` is not followed by ``</search>``, then an observation."""
    cursor = 0
    while (search_at := text.find("<search>", cursor)) >= 0:
        search_end = text.find("</search>", search_at)
        obs_at = text.find(open_obs, search_at)
        obs_end = text.find(close_obs, obs_at) if obs_at >= 0 else -1
        if -1 in (search_end, obs_at, obs_end):
            return "search/result tags are incomplete"
        if not search_at < search_end < obs_at < obs_end:
            return "search/result tags are in the wrong order"
        cursor = obs_end
    return None


def format_check(
    response: str, observation_tags: tuple[str, str] = ("<result>", "</result>")
) -> tuple[bool, str]:
    r"""The authors' format check of a whole response; returns (ok, reason).

    Fails when: ``<think>`` and ``</think>`` counts differ or are zero; there is not exactly one
    ``<answer>`` and one ``</answer>``; a ``<search>`` is not followed by ``</search>`` and
    then an observation block; ``</answer>`` precedes ``<answer>``; the answer holds no
    ``\boxed{`` and ``}``. A response that used the tool beyond its limit (the 7th call gets a
    notice, no ``<result>``) therefore fails, as in the authors' code.
    """
    opens, closes = response.count("<think>"), response.count("</think>")
    if opens != closes:
        return False, "<think> and </think> are not paired"
    if opens == 0:
        return False, "no <think> section"
    if response.count("<answer>") != 1 or response.count("</answer>") != 1:
        return False, "not exactly one <answer> and one </answer>"
    order_problem = _search_result_order(response, *observation_tags)
    if order_problem:
        return False, order_problem
    answer_at, answer_end = response.find("<answer>"), response.find("</answer>")
    if answer_at > answer_end:
        return False, "</answer> comes before <answer>"
    content = response[answer_at:answer_end]
    if "\\boxed{" not in content or "}" not in content:
        return False, "answer has no \\boxed{}"
    return True, "format is correct"


@dataclass(frozen=True)
class RewardOutcome:
    """A scored response: the training reward plus what it was computed from."""

    score: float
    exact_match: float
    f1: float
    answer: str | None
    reason: str


def atpo_score(
    response: str,
    golden_answers: GoldenAnswers,
    check_format: bool = True,
    observation_tags: tuple[str, str] = ("<result>", "</result>"),
) -> RewardOutcome:
    r"""The authors' training reward with its parts: −1 on a bad format or no ``\boxed{}``, else EM.

    ``check_format=False`` is the authors' validation mode: the format check is skipped, but a
    response whose answer cannot be extracted still scores −1 (EM 0).
    """
    if check_format:
        ok, reason = format_check(response, observation_tags)
        if not ok:
            return RewardOutcome(-1.0, 0.0, 0.0, None, f"bad format: {reason}")
    answer = extract_answer(response, require_boxed=True)
    if answer is None:
        return RewardOutcome(-1.0, 0.0, 0.0, None, "no answer with a \\boxed{} could be extracted")
    em = exact_match(answer, golden_answers)
    f1 = f1_score(answer, golden_answers)
    return RewardOutcome(
        em, em, f1, answer, "correct answer" if em else "wrong answer, good format"
    )


def atpo_reward(response: str, golden_answers: GoldenAnswers, check_format: bool = True) -> float:
    r"""−1 if the format check fails or no ``\boxed{}`` answer exists, else EM (0 or 1)."""
    return atpo_score(response, golden_answers, check_format=check_format).score


# ----------------------------------------------------------------------------- Search-R1 reward

_ASSISTANT_MARKER = re.compile(r"<\|im_start\|>assistant\s*")


def searchr1_sequence_check(
    response: str, observation_tag: str = "information", includes_prompt: bool = False
) -> tuple[bool, str]:
    """Search-R1's strict layout check; returns (valid, reason).

    The response must read ``<think>…</think>`` then either ``<search>…</search>
    <information>…</information>`` and another think section, repeated, or ``<answer>…</answer>``
    to end, with only whitespace between tags and after the answer. ``includes_prompt=True``
    checks only what follows the first ``<|im_start|>assistant`` marker (Search-R1's input),
    which must then be present.
    """
    content = response
    if includes_prompt:
        marker = _ASSISTANT_MARKER.search(response)
        if marker is None:
            return False, "missing assistant marker"
        content = response[marker.end() :]
    tags = ("think", "search", observation_tag, "answer")
    for tag in tags:
        if content.count(f"<{tag}>") != content.count(f"</{tag}>"):
            return False, f"unbalanced <{tag}> tags"
    # Allowed moves: (state, tag) -> next state.
    moves = {
        ("start", "<think>"): "think",
        ("after_obs", "<think>"): "think",
        ("think", "</think>"): "after_think",
        ("after_think", "<search>"): "search",
        ("search", "</search>"): "after_search",
        ("after_search", f"<{observation_tag}>"): "obs",
        ("obs", f"</{observation_tag}>"): "after_obs",
        ("after_think", "<answer>"): "answer",
        ("answer", "</answer>"): "end",
    }
    inside = {"think", "search", "obs", "answer"}
    splitter = re.compile("(</?(?:" + "|".join(re.escape(t) for t in tags) + ")>)")
    state = "start"
    for part in splitter.split(content):
        if splitter.fullmatch(part):
            if (state, part) not in moves:
                return False, f"unexpected tag {part} in state {state}"
            state = moves[(state, part)]
        elif part.strip() and state not in inside:
            return False, f"unexpected text {part.strip()[:40]!r} in state {state}"
    if state != "end":
        return False, f"incomplete sequence, ended in state {state}"
    return True, "valid sequence"


def retrieval_hit(
    response: str, golden_answers: GoldenAnswers, observation_tag: str = "information"
) -> bool:
    """True if some normalised golden answer is a substring of some normalised observation block."""
    blocks = re.findall(
        rf"<{re.escape(observation_tag)}>(.*?)</{re.escape(observation_tag)}>", response, re.DOTALL
    )
    normalized_blocks = [normalize_answer(b) for b in blocks]
    return any(
        normalize_answer(g) in b for g in _as_list(golden_answers) for b in normalized_blocks
    )


def searchr1_format_reward(
    response: str,
    golden_answers: GoldenAnswers,
    structure_format_score: float = 0.2,
    final_format_score: float = 0.1,
    retrieval_score: float = 0.0,
    format_score: float = 0.0,
    score: float = 1.0,
    observation_tag: str = "information",
    includes_prompt: bool = False,
) -> float:
    """Search-R1's format-aware EM reward (``qa_em_format.compute_score_em``), case by case.

    Defaults are the values of Search-R1's ``v0.3/train_*_format.sh`` scripts (0.2, 0.1, 0).
    With ``valid`` = :func:`searchr1_sequence_check`, ``hit`` = :func:`retrieval_hit`:

    ==================  ==========================================  ======================
    prediction          valid layout                                invalid layout
    ==================  ==========================================  ======================
    none extracted      structure_format_score + retrieval_score·hit  0
    EM correct          score                                       score − structure_format_score
    EM wrong            structure_format_score + retrieval_score·hit  final_format_score
    ==================  ==========================================  ======================

    ``format_score`` is accepted for signature parity: Search-R1 passes it but its format-aware
    reward never uses it (it is the wrong-answer score of the plain ``qa_em`` reward).
    """
    del format_score  # unused by Search-R1's format-aware reward; see docstring
    valid, _ = searchr1_sequence_check(response, observation_tag, includes_prompt)
    answer = search_r1_extract_answer(response, includes_prompt=includes_prompt)
    correct = answer is not None and exact_match(answer, golden_answers) == 1.0
    if valid:
        if correct:
            return score
        hit = retrieval_hit(response, golden_answers, observation_tag)
        return structure_format_score + (retrieval_score if hit else 0.0)
    if correct:
        return score - structure_format_score
    return final_format_score if answer is not None else 0.0
