"""Decoding near its floor (issue #62): the lean forward is bit-identical to the model's, the
length-sorted prefill chunks and the once-per-distinct-prompt prefill change no token, greedy or
sampled with the same seed, against the padded batch they replace."""

from __future__ import annotations

import json

import pytest
import torch

from at2po_lib.rollout.agent import turn_stops
from at2po_lib.rollout.backends import GROUPED_ATTENTION, HFBackend, grouped_attention
from at2po_lib.rollout.backends import attention_implementation, make_backend
from at2po_lib.rollout.kvcache import BatchCache
from at2po_lib.rollout.flops import causal_pairs, rollout_flops, token_costs
from at2po_lib.rollout.lean import lean_forward_for
from at2po_lib.rollout.packing import CHUNK_TOKENS, chunk_cost, plan_chunks, unique_rows
from at2po_lib.rollout.sampling import SamplingSpec
from at2po_lib.rollout.stand_ins import tag_biased_policy
from at2po_lib.rollout.trees import rollout, rollout_chains
from at2po_lib.rollout.turns import TurnRequest
from at2po_lib.policy.tokenizer import train_tokenizer

STOPS = ("</search>", "</answer>")


@pytest.fixture(scope="module")
def tokenizer(fixtures_dir):
    torch.set_num_threads(1)
    lines = (fixtures_dir / "wiki18_sample.jsonl").read_text().splitlines()[:150]
    return train_tokenizer([json.loads(x)["contents"] for x in lines], vocab_size=500)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tag_biased_policy(
        tokenizer, seed=0, tag_bias={"<search>": 1.0, "</search>": 2.0, "</answer>": 1.0}
    )


@pytest.fixture(scope="module")
def contexts(tokenizer, fixtures_dir):
    lines = (fixtures_dir / "wiki18_sample.jsonl").read_text().splitlines()[150:158]
    # two length classes far apart: the planner cuts them into separate chunks
    sizes = [30, 35, 32, 300, 310, 33, 290, 31]
    return [tokenizer.encode(json.loads(x)["contents"][:n]) for x, n in zip(lines, sizes)]


def _caches(backend, contexts):
    cache = BatchCache(
        [None] * len(contexts),
        backend.num_layers,
        backend.num_kv_heads,
        backend.head_dim,
        max(map(len, contexts)) + 1,
        backend.dtype,
        backend.device,
    )
    return cache


@torch.inference_mode()
def test_lean_forward_is_bit_identical_to_the_model(model, tokenizer, contexts):
    """Prefill of padded rows, then a decode step: the same logits and the same keys/values,
    bit for bit (torch.equal), as ``model(...)`` with the grouped attention."""
    lean = lean_forward_for(model, grouped_attention)
    assert lean is not None
    plain = HFBackend(model, tokenizer, SamplingSpec(), STOPS, lean=False)
    out = {}
    for name, forward in (("model", None), ("lean", lean)):
        plain.lean = forward
        cache = _caches(plain, contexts)
        with attention_implementation(model, GROUPED_ATTENTION):
            first = plain._forward_pending(cache, contexts, [0] * len(contexts))
            step = torch.full((len(contexts), 1), 7)
            positions = torch.tensor([[len(c)] for c in contexts])
            second = plain._forward(cache, step, torch.ones_like(step, dtype=torch.bool), positions)
        keys = [layer.keys.clone() for layer in cache.layers]
        out[name] = (first, second, keys)
    for a, b in zip(out["model"][:2], out["lean"][:2]):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(out["model"][2], out["lean"][2]))


def test_lean_forward_declines_what_it_does_not_replicate(model):
    class NotQwen3(torch.nn.Module):
        config = model.config

    assert lean_forward_for(NotQwen3(), grouped_attention) is None


def test_plan_chunks_by_hand():
    """Two length classes: short rows together, long rows together, each row once, in order;
    one class: one chunk; ``max_rows`` caps a chunk."""
    new = [5, 200, 6, 210, 4]
    chunks = plan_chunks(new, [0] * 5, max_rows=8)
    assert sorted(chunks) == [[0, 2, 4], [1, 3]]
    assert plan_chunks([10, 11, 10], [0, 0, 0], max_rows=8) == [[0, 1, 2]]
    capped = plan_chunks([10] * 5, [0] * 5, max_rows=2)
    assert sorted(r for c in capped for r in c) == list(range(5))
    assert max(map(len, capped)) <= 2
    wide = plan_chunks([CHUNK_TOKENS // 2] * 3 + [2 * CHUNK_TOKENS], [0] * 4, max_rows=8)
    assert sorted(map(len, wide)) == [1, 1, 2]  # at most CHUNK_TOKENS positions; a long row alone
    # the split is taken because it is cheaper in the cost model
    one = chunk_cost(5, 210, 0)
    two = chunk_cost(3, 6, 0) + chunk_cost(2, 210, 0)
    assert two < one


def test_unique_rows_by_hand():
    firsts, owner = unique_rows([[1, 2], [3], [1, 2], [1, 2], [3, 4]])
    assert firsts == [0, 1, 4]
    assert owner == [0, 1, 0, 0, 2]


def _turns(model, tokenizer, contexts, new: bool, temperature: float):
    backend = HFBackend(
        model,
        tokenizer,
        SamplingSpec(temperature=temperature),
        STOPS,
        seed=5,
        lean=new,
        packed_prefill=new,
        fused_prefill=new,
    )
    first = backend.generate_turns([TurnRequest(c, 10) for c in contexts])
    obs = tokenizer.encode(" <result> some passage text </result> ")
    # a second turn whose pending tokens differ in length row by row (some rows start afresh)
    second = backend.generate_turns(
        [
            TurnRequest(c + r.token_ids + obs * (1 + i % 3), 8, r.prefix if i % 2 else None)
            for i, (c, r) in enumerate(zip(contexts, first))
        ]
    )
    return first + second, backend.stats


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_packed_prefill_changes_no_token(model, tokenizer, contexts, temperature):
    """The same turns, token for token, greedy and sampled with the same seed (the draw order
    is kept), log-probs within fp32 rounding; fewer padded positions run."""
    old, old_stats = _turns(model, tokenizer, contexts, False, temperature)
    new, new_stats = _turns(model, tokenizer, contexts, True, temperature)
    for a, b in zip(old, new):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logps, b.logps)) < 1e-5
        assert a.prefix.length == b.prefix.length
    assert old_stats.prefill_tokens == new_stats.prefill_tokens
    assert new_stats.forward_calls > old_stats.forward_calls  # the chunks ran separately


def test_a_repeated_prompt_is_prefilled_once(model, tokenizer, contexts):
    backend = HFBackend(model, tokenizer, SamplingSpec(), STOPS)
    prompts = [contexts[0], contexts[3], contexts[0], contexts[0]]
    prefixes = backend.prefill(prompts)
    assert prefixes[0] is prefixes[2] is prefixes[3]
    assert backend.stats.prefill_tokens == len(contexts[0]) - 1 + len(contexts[3]) - 1
    old = HFBackend(model, tokenizer, SamplingSpec(), STOPS, packed_prefill=False).prefill(prompts)
    for a, b in zip(prefixes, old):
        assert a.length == b.length
        assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(a.keys, b.keys))


def _answers(toy, new: bool, greedy: bool, repeat: int = 1):
    cfg = toy.cfg.rollout
    questions = [row["question"] for row in toy.rows[:8] for _ in range(repeat)]
    backend = make_backend(
        toy.model,
        toy.tokenizer,
        cfg,
        turn_stops(toy.template),
        seed=3,
        greedy=greedy,
        lean=new,
        packed_prefill=new,
        fused_prefill=new,
    )
    trajectories = rollout_chains(toy.sampler(cfg, backend), questions)
    return [t.completion_ids for t in trajectories]


@pytest.mark.parametrize("greedy,repeat", [(True, 1), (False, 4)])
def test_answers_before_and_after_token_for_token(smoke_toy, greedy, repeat):
    """Greedy answers of a set of questions, and sampled ones with each question asked k = 4
    times (the sampled metric's batch) with the same seed: the same tokens before and after."""
    assert _answers(smoke_toy, False, greedy, repeat) == _answers(smoke_toy, True, greedy, repeat)


def _grown_trees(toy, new: bool, seed: int, **backend_options) -> list[list]:
    """Node token ids of entropy trees grown for six questions, on the path before issue #62
    (``new`` False) or after it."""
    cfg = toy.cfg.rollout
    backend = make_backend(
        toy.model,
        toy.tokenizer,
        cfg,
        turn_stops(toy.template),
        seed=seed,
        lean=new,
        packed_prefill=new,
        fused_prefill=new,
        **backend_options,
    )
    grown = rollout(
        toy.sampler(cfg, backend, seed=seed),
        [row["question"] for row in toy.rows[:6]],
        None,
        expansion="entropy",
    )
    return [[n.token_ids for n in t.nodes] for t in grown]


def test_tree_rollout_before_and_after(smoke_toy):
    assert _grown_trees(smoke_toy, False, seed=1) == _grown_trees(smoke_toy, True, seed=1)


def test_token_costs_by_hand(model):
    """The tag-biased stand-in: hidden 32, 2 layers, 4 heads of 8, 2 KV heads, FFN 64."""
    costs = token_costs(model.config)
    per_layer = 32 * 32 + 2 * 32 * 16 + 32 * 32 + 3 * 32 * 64
    assert costs.per_token == 2 * 2 * per_layer
    assert costs.per_pair == 4 * 2 * 4 * 8
    assert costs.per_logit_row == 2 * 32 * model.config.vocab_size
    assert causal_pairs(0, 3) == 1 + 2 + 3
    assert causal_pairs(10, 2) == 11 + 12


def test_attention_pairs_count_every_real_token_once(model, tokenizer, contexts):
    """A row fed its context from position 0, then each sampled token but its last: the pairs
    of one causal sequence of ``len(context) + generated - 1`` tokens, padding not counted."""
    for new in (False, True):
        backend = HFBackend(
            model,
            tokenizer,
            SamplingSpec(),
            STOPS,
            seed=2,
            lean=new,
            packed_prefill=new,
            fused_prefill=new,
        )
        results = backend.generate_turns([TurnRequest(c, 9) for c in contexts])
        expected = sum(
            causal_pairs(0, len(c) + len(r.token_ids) - 1) for c, r in zip(contexts, results)
        )
        assert backend.stats.attention_pairs == expected
        flops = rollout_flops(model.config, backend.stats)
        costs = token_costs(model.config)
        tokens = backend.stats.prefill_tokens + backend.stats.decode_tokens
        assert tokens == sum(len(c) + len(r.token_ids) - 1 for c, r in zip(contexts, results))
        assert flops == pytest.approx(
            tokens * costs.per_token
            + expected * costs.per_pair
            + backend.stats.generated_tokens * costs.per_logit_row
        )


@pytest.mark.parametrize("greedy", [True, False])
def test_round_sessions_join_in_chunks_without_changing_a_token(smoke_toy, greedy):
    """``decode_grouping = round``: the rows resumed together join in length-sorted chunks; the
    same trees, token for token, as one padded join."""
    options = {"greedy": greedy, "grouping": "round"}
    before = _grown_trees(smoke_toy, False, seed=4, **options)
    assert before == _grown_trees(smoke_toy, True, seed=4, **options)


def _session_turns(model, tokenizer, contexts, new: bool):
    backend = HFBackend(
        model,
        tokenizer,
        SamplingSpec(temperature=1.0),
        STOPS,
        seed=6,
        grouping="round",
        lean=new,
        packed_prefill=new,
        fused_prefill=new,
    )
    capacity = max(map(len, contexts)) + 20
    turns = []
    with backend.open_session([TurnRequest(c, 8) for c in contexts], capacity) as session:
        while finished := session.next_turns():
            for row, result in finished:
                turns.append((row, result.token_ids, result.logps))
                session.close(row)
    return turns, backend.stats.forward_calls


def test_a_session_join_of_rows_far_apart_in_length_runs_in_chunks(model, tokenizer, contexts):
    """The first join of a round session holds every row (30 to 310 tokens): it runs in
    chunks, and every row samples the same tokens with the same seed."""
    old, old_calls = _session_turns(model, tokenizer, contexts, False)
    new, new_calls = _session_turns(model, tokenizer, contexts, True)
    assert [(row, tokens) for row, tokens, _ in old] == [(row, tokens) for row, tokens, _ in new]
    for (_, _, a), (_, _, b) in zip(old, new):
        assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5
    assert new_calls > old_calls


@torch.inference_mode()
def test_chunks_copied_into_the_decode_cache_hold_each_rows_own_columns(model, tokenizer, contexts):
    """A turn call's chunks write straight into the decode cache (``copy_rows_from``): each
    row's columns there are, bit for bit, the prefix its own chunk computed (``extract``)."""
    backend = HFBackend(model, tokenizer, SamplingSpec(), STOPS)
    half = [c[: len(c) // 2] for c in contexts]
    prefixes = backend.prefill(half)
    pending = [c[len(h) - 1 :] for c, h in zip(contexts, half)]
    cached = [p.length for p in prefixes]
    chunks = backend._chunks(pending, cached)
    assert len(chunks) > 1
    with backend._decoding():
        cache, logits = backend._start_batch(prefixes, pending, cached, max_new=4)
        direct = cache.extract(counts=[c + len(p) for c, p in zip(cached, pending)])
        extended, reference = backend._prefill_chunks(prefixes, pending, cached, chunks)
    assert torch.equal(logits, reference)
    for a, b in zip(direct, extended):
        assert a.length == b.length
        assert all(torch.equal(x, y) for x, y in zip(a.keys + a.values, b.keys + b.values))
