"""Scripted demonstrations: real retriever observations, chat-format tokenisation, loss masks."""

from __future__ import annotations

import os

import pytest

from at2po_lib.config.profile import load_profile
from at2po_lib.policy.demos import (
    Demo,
    Segment,
    build_sft_examples,
    format_answer,
    hop_plan,
    script_demo,
    script_demos,
    tokenize_demo,
    uses_think,
)
from at2po_lib.protocol.prompts import prompt_ids
from at2po_lib.protocol.prompts import build_messages, get_template, render_observation
from at2po_lib.protocol.reward import extract_prediction


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Smoke TinyWorld, its BM25 retriever, training rows and a tokenizer trained on them."""
    root = tmp_path_factory.mktemp("demos")
    old = os.environ.get("AT2PO_ARTIFACTS")
    os.environ["AT2PO_ARTIFACTS"] = str(root / "artifacts")
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.policy.sft_data import tokenizer_texts
    from at2po_lib.retrieval.indexes import build_retriever
    from at2po_lib.tinyworld.build import ensure_world, read_corpus, read_rows

    cfg = load_profile("smoke")
    files = ensure_world(cfg)
    retriever = build_retriever(cfg)
    rows = read_rows(files, "tiny_musique", "train")[:6] + read_rows(files, "tiny_nq", "train")[:4]
    demos = script_demos(rows, "tiny", retriever)
    tok = train_tokenizer(tokenizer_texts(read_corpus(files), demos), 800)
    yield {"cfg": cfg, "retriever": retriever, "rows": rows, "demos": demos, "tok": tok}
    if old is None:
        os.environ.pop("AT2PO_ARTIFACTS", None)
    else:
        os.environ["AT2PO_ARTIFACTS"] = old


def test_observations_are_the_retrievers_top3_rendered(world):
    for row, demo in zip(world["rows"], world["demos"]):
        queries, _, _ = hop_plan(row)
        hits = world["retriever"].search(queries, topk=3)
        expected = [render_observation("tiny", [h["document"] for h in hs]) for hs in hits]
        assert demo.observations == expected
        observation_segments = [s.text for s in demo.segments if not s.trainable]
        assert observation_segments == expected
        # Model turns: one search per hop, in order, then the answer.
        model_turns = [s.text for s in demo.segments if s.trainable]
        assert model_turns[:-1] == [f"<search> {q} </search>" for q in queries]
        assert model_turns[-1] == f"<answer> {row['golden_answers'][0]} </answer>"


def test_mask_is_zero_on_prompt_and_observations_and_one_on_model_tokens(world):
    tok = world["tok"]
    for demo in world["demos"]:
        example = tokenize_demo(demo, tok)
        ids, mask = example["input_ids"], example["assistant_masks"]
        assert len(ids) == len(mask)
        n_prompt = len(prompt_ids(tok, demo.messages))
        assert ids[:n_prompt] == prompt_ids(tok, demo.messages)
        assert set(mask[:n_prompt]) == {0}
        # Walk the segments: each one's ids carry its own mask value.
        pos = n_prompt
        for segment in demo.segments:
            piece = tok.encode(segment.text, add_special_tokens=False)
            assert ids[pos : pos + len(piece)] == piece
            assert set(mask[pos : pos + len(piece)]) == {int(segment.trainable)}
            pos += len(piece)
        assert ids[pos:] == [tok.eos_token_id] and mask[pos:] == [1]
        # Decoding the mask-0 tokens after the prompt gives back exactly the observations.
        masked_text = tok.decode([i for i, m in zip(ids[n_prompt:], mask[n_prompt:]) if m == 0])
        assert masked_text == "".join(demo.observations)
        # And the mask-1 tokens hold every tag the model must write, no <result>.
        model_text = tok.decode([i for i, m in zip(ids, mask) if m == 1], skip_special_tokens=True)
        assert (
            "<search>" in model_text and "<answer>" in model_text and "<result>" not in model_text
        )


def test_prompt_matches_the_chat_template(world):
    tok, demo = world["tok"], world["demos"][0]
    text = tok.apply_chat_template(demo.messages, tokenize=False, add_generation_prompt=True)
    assert tok.decode(prompt_ids(tok, demo.messages)) == text
    assert demo.messages == build_messages("tiny", world["rows"][0]["question"])


def test_multihop_demos_search_once_per_hop(world):
    for row, demo in zip(world["rows"], world["demos"]):
        searches = sum(s.text.startswith("<search>") for s in demo.segments)
        assert searches == row["metadata"]["hops"] == len(row["metadata"]["hop_queries"])


def test_answer_formats_parse_back_with_the_reward_extractor():
    atpo, tiny = get_template("atpo"), get_template("tiny")
    assert uses_think(atpo) and not uses_think(tiny)
    assert extract_prediction(format_answer(atpo, "New Rato"), "boxed") == "New Rato"
    assert extract_prediction(format_answer(tiny, "New Rato"), "plain") == "New Rato"


def test_atpo_template_demo_has_think_sections_and_boxed_answer(world):
    row = world["rows"][0]
    queries, _, _ = hop_plan(row)
    demo = script_demo(row, "atpo", world["retriever"].search(queries, topk=3))
    turns = [s.text for s in demo.segments if s.trainable]
    assert all(t.startswith("<think>") for t in turns)
    assert "\\boxed{" in turns[-1]
    assert all(o.startswith(" <result>\n") for o in demo.observations)


def test_supported_flag_and_filtering():
    demo = Demo(
        "x",
        [{"role": "user", "content": "q?"}],
        [
            Segment("<search> a </search>", True),
            Segment(" <result> b </result> ", False),
            Segment("<answer> c </answer>", True),
        ],
        "c",
        supported=False,
    )
    from at2po_lib.policy.tokenizer import train_tokenizer

    tok = train_tokenizer(["a b c q user assistant"] * 3, 400)
    kept, stats = build_sft_examples([demo], tok, max_length=1000)
    assert (kept, stats.unsupported) == ([], 1)
    kept, stats = build_sft_examples([demo], tok, max_length=1000, require_supported=False)
    assert len(kept) == 1 and stats.kept == 1
    kept, stats = build_sft_examples([demo], tok, max_length=5, require_supported=False)
    assert (kept, stats.too_long) == ([], 1)


def test_bad_rows_raise_clear_errors(world):
    row = dict(world["rows"][0])
    row["metadata"] = {**row["metadata"], "hop_answers": ["only one"] * 9}
    with pytest.raises(ValueError, match="hop_answers"):
        hop_plan(row)
    with pytest.raises(ValueError, match="metadata"):
        hop_plan({"id": "r1", "question": "q", "golden_answers": ["a"]})
    with pytest.raises(ValueError, match="results"):
        script_demo(world["rows"][0], "tiny", [])


def test_strategy_plans_shape_the_demonstration(world):
    """A stop plan answers after its searches with the last value read; a repeat plan searches
    the previous query again and sees the same observation twice."""

    from at2po_lib.policy.strategies import REPEAT, STOP, StrategyPlan

    row = next(r for r in world["rows"] if len(r["metadata"]["hop_queries"]) >= 3)
    queries, answers, _ = hop_plan(row)
    hits = world["retriever"].search(queries, topk=3)
    stop = StrategyPlan(STOP, 1, (queries[0],), (0,), answers[0])
    demo = script_demo(row, "tiny", hits, stop)
    turns = [s.text for s in demo.segments if s.trainable]
    assert turns == [f"<search> {queries[0]} </search>", f"<answer> {answers[0]} </answer>"]
    assert demo.strategy == STOP and demo.answer == answers[0]
    repeat = StrategyPlan(REPEAT, 2, (queries[0], queries[1], queries[1]), (0, 1, 1), answers[1])
    demo = script_demo(row, "tiny", hits, repeat)
    turns = [s.text for s in demo.segments if s.trainable]
    assert turns[1] == turns[2] == f"<search> {queries[1]} </search>"
    assert demo.observations[1] == demo.observations[2]
    assert demo.strategy == REPEAT
    # script_demos takes one plan per row and refuses a count mismatch
    with pytest.raises(ValueError, match="strategy plans"):
        script_demos(world["rows"], "tiny", world["retriever"], plans=[stop])


def test_a_demo_is_exactly_what_the_rollout_produces_for_the_same_turns(world):
    """Issue #22: demonstrations hold the rollout's format: one system message, the tool's
    observations, and the final answer followed by EOS, trained (mask 1)."""
    import dataclasses

    from at2po_lib.rollout.agent import Sampler, SearchEnv
    from at2po_lib.rollout.stand_ins import ScriptedBackend
    from at2po_lib.rollout.trees import rollout

    tok, row, retriever = world["tok"], world["rows"][0], world["retriever"]
    (demo,) = script_demos([row], "tiny", retriever, topk=retriever.default_topk)
    model_turns = [s.text for s in demo.segments if s.trainable]
    model_turns[-1] += tok.eos_token  # the rollout's final turn runs to EOS

    def script(context, rng):
        return model_turns[script.calls.__next__()]

    script.calls = iter(range(len(model_turns)))
    cfg = dataclasses.replace(
        world["cfg"].rollout, max_response_tokens=4000, max_prompt_tokens=1000
    )
    sampler = Sampler(SearchEnv(tok, "tiny", world["retriever"], cfg), ScriptedBackend(tok, script))
    (tree,) = rollout(
        sampler, [row["question"]], [row["golden_answers"]], expansion="chain", num_leaves=1
    )
    traj = tree.trajectory(tree.leaves()[0], tok.decode, lambda text: None)
    example = tokenize_demo(demo, tok)
    assert example["input_ids"] == traj.prompt_ids + traj.completion_ids
    assert example["assistant_masks"] == [0] * len(traj.prompt_ids) + traj.sampled_mask
    assert example["input_ids"][-1] == tok.eos_token_id and example["assistant_masks"][-1] == 1
    assert build_messages("tiny", row["question"])[0]["role"] == "system"
    assert tree.nodes[tree.leaves()[0]].finish_reason == "answer"
