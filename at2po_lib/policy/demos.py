r"""Scripted demonstrations for the warm start: TinyWorld training rows turned into complete
agent trajectories in the profile's prompt and tag format, with observations from the *real*
retriever, tokenised turn by turn with a loss mask.

A demonstration of a k-hop row (``metadata.hop_queries = [q_1 … q_k]``) is, for the ``tiny``
template (no ``<think>`` section)::

    <prompt via the chat template>              mask 0   (one system message: instruction + question)
    <search> q_1 </search>                      mask 1   (model turn 1)
     <result> top-3 of search(q_1) </result>    mask 0   (observation, rendered by protocol/prompts.py)
    <search> q_2 </search>                      mask 1
     <result> … </result>                       mask 0
    …
    <answer> golden </answer><|im_end|>         mask 1   (final turn, then eos, as the rollout
                                                         runs an answer to EOS and trains it)

Templates whose instruction mentions ``<think>`` (``atpo``, ``searchr1``) get a short scripted
reasoning section before each action, and ``boxed`` templates wrap the answer as
``The final answer is \[ \boxed{…} \]``.

Token ids, not text (docs/method.md §1): every segment is encoded on its own and the ids are
concatenated, exactly as the rollout appends a sampled turn and then the encoded observation;
a demonstration is never decoded and re-encoded as a whole. Byte-level BPE never merges across
a segment boundary, so the ids equal what the rollout would hold for the same text.

A hop is *supported* when its answer string appears in that hop's observation; by default
only demonstrations whose every hop is supported are kept, so the warm start learns to copy
facts from results rather than to recall them (docs/toy_scale.md: a model that can memorise stops
searching).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol.prompts import (
    PromptTemplate,
    build_messages,
    clean_query,
    get_template,
    prompt_ids,
    render_observation,
)
from .strategies import StrategyPlan, follow_plan


@dataclass(frozen=True)
class Segment:
    """A piece of a trajectory: ``trainable`` marks model-written text (loss mask 1)."""

    text: str
    trainable: bool


@dataclass
class Demo:
    """One scripted trajectory: the chat prompt plus alternating model/observation segments."""

    row_id: str
    messages: list[dict[str, str]]
    segments: list[Segment]
    answer: str
    supported: bool
    """Every hop's answer appears in that hop's observation."""
    observations: list[str] = field(default_factory=list)
    strategy: str = "follow"
    """The :mod:`.strategies` strategy the demonstration took (``follow``, ``stop``, ``repeat``)."""


def uses_think(template: PromptTemplate) -> bool:
    """A template asks for ``<think>`` sections when its instruction mentions the tag."""
    return "<think>" in (template.system or "") + (template.user or "")


def format_answer(template: PromptTemplate, answer: str) -> str:
    r"""The final answer block in the template's style (``boxed`` or ``plain``)."""
    if template.answer_style == "boxed":
        return f"<answer> The final answer is \\[ \\boxed{{{answer}}} \\] </answer>"
    return f"<answer> {answer} </answer>"


def _row_field(row: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in row:
        raise ValueError(f"{where}: missing field {key!r}")
    return row[key]


def hop_plan(row: Mapping[str, Any]) -> tuple[list[str], list[str], str]:
    """``(hop_queries, hop_answers, final_answer)`` of a TinyWorld row, validated."""
    where = f"row {row.get('id', '?')!r}"
    meta = _row_field(row, "metadata", where)
    queries = list(_row_field(meta, "hop_queries", f"{where}.metadata"))
    answers = list(_row_field(meta, "hop_answers", f"{where}.metadata"))
    golden = _row_field(row, "golden_answers", where)
    if not queries:
        raise ValueError(f"{where}: metadata.hop_queries is empty")
    if len(answers) != len(queries):
        raise ValueError(f"{where}: {len(queries)} hop_queries but {len(answers)} hop_answers")
    if not golden or not isinstance(golden[0], str):
        raise ValueError(f"{where}: golden_answers must be a non-empty list of strings")
    return [str(q) for q in queries], [str(a) for a in answers], golden[0]


def script_demo(
    row: Mapping[str, Any],
    template: PromptTemplate | str,
    hits_per_hop: Sequence[Sequence[Mapping[str, Any]]],
    plan: StrategyPlan | None = None,
) -> Demo:
    """Build the trajectory of one row from the retriever's results for its hop queries.

    Args:
        row: a FlashRAG row with ``metadata.hop_queries`` / ``hop_answers``.
        template: the prompt template (name or object).
        hits_per_hop: ``retriever.search(hop_queries)`` — per hop, the ranked
            ``{"document": {"id", "contents"}, "score"}`` hits.
        plan: what the demonstration does (:mod:`.strategies`); None follows the whole
            plan. A repeated query reads its hop's hits again; an early answer ends it.
    """
    t = get_template(template)
    queries, hop_answers, answer = hop_plan(row)
    if len(hits_per_hop) != len(queries):
        raise ValueError(
            f"row {row.get('id')!r}: {len(queries)} hops but {len(hits_per_hop)} results"
        )
    plan = plan or follow_plan(row)
    think = uses_think(t)
    segments: list[Segment] = []
    observations: list[str] = []
    supported = True
    for step, (query, hop) in enumerate(zip(plan.queries, plan.hops_read)):
        reason = ""
        if think:
            reason = (
                f"<think> I need to look up {query}. </think>\n"
                if step == 0
                else f"<think> The result says {hop_answers[plan.hops_read[step - 1]]}. "
                f"Next I need {query}. </think>\n"
            )
        segments.append(Segment(f"{reason}<search> {query} </search>", True))
        observation = render_observation(t, [h["document"] for h in hits_per_hop[hop]])
        observations.append(observation)
        segments.append(Segment(observation, False))
        supported &= hop_answers[hop].lower() in observation.lower()
    answer = plan.answer
    last_read = hop_answers[plan.hops_read[-1]] if plan.hops_read else answer
    reason = (
        f"<think> The result says {last_read}. So the answer is {answer}. </think>\n"
        if think
        else ""
    )
    segments.append(Segment(reason + format_answer(t, answer), True))
    return Demo(
        str(row.get("id", "")),
        build_messages(t, row["question"]),
        segments,
        answer,
        supported,
        observations,
        plan.strategy,
    )


def script_demos(
    rows: Sequence[Mapping[str, Any]],
    template: PromptTemplate | str,
    retriever,
    topk: int = 3,
    plans: Sequence[StrategyPlan] | None = None,
) -> list[Demo]:
    """Demonstrations for many rows with one batched ``retriever.search`` call (``plans``: one
    :class:`~.strategies.StrategyPlan` per row, None: every row follows its plan)."""
    if plans is not None and len(plans) != len(rows):
        raise ValueError(f"{len(plans)} strategy plans for {len(rows)} rows")
    hop_plans = [hop_plan(row) for row in rows]
    # searched as the rollout's tool searches them (the template's query cleaning)
    queries = [clean_query(template, q) for qs, _, _ in hop_plans for q in qs]
    hits = retriever.search(queries, topk=topk) if queries else []
    if len(hits) != len(queries):
        raise ValueError(f"retriever returned {len(hits)} result lists for {len(queries)} queries")
    demos, start = [], 0
    for row, (qs, _, _) in zip(rows, hop_plans):
        demos.append(
            script_demo(
                row,
                template,
                hits[start : start + len(qs)],
                None if plans is None else plans[len(demos)],
            )
        )
        start += len(qs)
    return demos


def tokenize_demo(demo: Demo, tokenizer) -> dict[str, list[int]]:
    """``{"input_ids", "assistant_masks"}``: prompt and observations 0, model turns and eos 1.

    Each segment is encoded separately (never the joined text); the final model turn is followed
    by the eos id (``<|im_end|>``), which the model must learn to emit.
    """
    ids = prompt_ids(tokenizer, demo.messages)
    mask = [0] * len(ids)
    for segment in demo.segments:
        piece = tokenizer.encode(segment.text, add_special_tokens=False)
        ids += piece
        mask += [int(segment.trainable)] * len(piece)
    ids.append(tokenizer.eos_token_id)
    mask.append(1)
    return {"input_ids": ids, "assistant_masks": mask}


@dataclass
class DemoStats:
    """What happened to the rows on the way to training sequences."""

    rows: int = 0
    kept: int = 0
    unsupported: int = 0
    too_long: int = 0
    max_length: int = 0
    mean_length: float = 0.0


def build_sft_examples(
    demos: Iterable[Demo], tokenizer, max_length: int, require_supported: bool = True
) -> tuple[list[dict[str, list[int]]], DemoStats]:
    """Tokenise demonstrations; drop unsupported ones (optional) and any longer than
    ``max_length`` tokens (rather than truncating a trajectory mid-turn)."""
    examples, stats = [], DemoStats()
    for demo in demos:
        stats.rows += 1
        if require_supported and not demo.supported:
            stats.unsupported += 1
            continue
        example = tokenize_demo(demo, tokenizer)
        if len(example["input_ids"]) > max_length:
            stats.too_long += 1
            continue
        examples.append(example)
    stats.kept = len(examples)
    if examples:
        lengths = [len(e["input_ids"]) for e in examples]
        stats.max_length, stats.mean_length = max(lengths), sum(lengths) / len(lengths)
    return examples, stats
