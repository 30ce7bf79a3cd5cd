"""The Hugging Face turn backend on a real tiny Qwen3: KV-prefix reuse, log-probs, entropies,
stop rules. Every check compares against a plain full forward pass of the same model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from host_syncs import counted_syncs

from at2po_lib.config.profile import PolicyConfig
from at2po_lib.policy.model import build_policy
from at2po_lib.policy.tokenizer import train_tokenizer
from at2po_lib.rollout.backends import HFBackend, grouped_attention
from at2po_lib.rollout.decoding import decode_dtype, decode_grouping
from at2po_lib.rollout.kvcache import BatchCache
from at2po_lib.rollout.turns import TurnRequest
from at2po_lib.rollout.sampling import SamplingSpec
from at2po_lib.rollout.stand_ins import tag_biased_policy

STOPS = ("</search>", "</answer>")


@pytest.fixture(scope="module")
def tokenizer(fixtures_dir):
    torch.set_num_threads(1)  # a tiny model on shared cores: one thread is fastest
    lines = (fixtures_dir / "wiki18_sample.jsonl").read_text().splitlines()[:150]
    return train_tokenizer([json.loads(x)["contents"] for x in lines], vocab_size=500)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tag_biased_policy(
        tokenizer, seed=0, tag_bias={"<search>": 1.0, "</search>": 2.0, "</answer>": 1.0}
    )


@pytest.fixture(scope="module")
def contexts(tokenizer, fixtures_dir):
    lines = (fixtures_dir / "wiki18_sample.jsonl").read_text().splitlines()[150:156]
    # different lengths on purpose: rows are left-padded against each other
    return [tokenizer.encode(json.loads(x)["contents"][: 40 + 25 * i]) for i, x in enumerate(lines)]


def full_logps(model, ids: list[int], start: int, tokens: list[int], temperature: float = 1.0):
    """log_softmax(logits / T) of ``tokens`` placed at ``ids[start:]``, by one plain forward."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return [lp[start - 1 + i, t].item() for i, t in enumerate(tokens)], lp


def test_two_turns_and_a_branch_match_a_full_recompute(model, tokenizer, contexts):
    backend = HFBackend(
        model, tokenizer, SamplingSpec(temperature=0.7), STOPS, seed=3, compact_below=0.9
    )
    first = backend.generate_turns([TurnRequest(c, 12) for c in contexts])
    obs = tokenizer.encode(" <result> some passage text </result> ")
    second_req = [TurnRequest(c + r.token_ids + obs, 10, r.prefix) for c, r in zip(contexts, first)]
    second = backend.generate_turns(second_req)
    # A branch: re-sample turn 2 from its context with the (longer) prefix of turn 2's result.
    branch_req = [TurnRequest(q.context, 10, r.prefix) for q, r in zip(second_req, second)]
    branch = backend.generate_turns(branch_req)
    for ctx, r1, q2, r2, r3 in zip(contexts, first, second_req, second, branch):
        assert r2.prefix.length == len(q2.context) + len(r2.token_ids) - 1
        ids = q2.context + r2.token_ids
        ref1, _ = full_logps(model, ids, len(ctx), r1.token_ids, 0.7)
        ref2, _ = full_logps(model, ids, len(q2.context), r2.token_ids, 0.7)
        ref3, _ = full_logps(model, q2.context + r3.token_ids, len(q2.context), r3.token_ids, 0.7)
        for ref, got in ((ref1, r1.logps), (ref2, r2.logps), (ref3, r3.logps)):
            assert max(abs(a - b) for a, b in zip(ref, got)) < 1e-5


def test_cache_reuse_is_invisible_in_tokens_and_logps(model, tokenizer, contexts):
    """Greedy, with and without KV reuse: same tokens, same log-probs (1e-5), fewer prefill
    tokens with reuse."""
    outs = {}
    for keep in (True, False):
        backend = HFBackend(model, tokenizer, SamplingSpec(temperature=0.0), STOPS, keep_cache=keep)
        first = backend.generate_turns([TurnRequest(c, 8) for c in contexts])
        req = [
            TurnRequest(c + r.token_ids + [5, 6, 7], 8, r.prefix) for c, r in zip(contexts, first)
        ]
        outs[keep] = (first, backend.generate_turns(req), backend.stats.prefill_tokens)
    for a, b in zip(outs[True][0] + outs[True][1], outs[False][0] + outs[False][1]):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logps, b.logps)) < 1e-5
    assert outs[True][2] < outs[False][2]


def test_compaction_does_not_change_results(model, tokenizer, contexts):
    results = []
    for compact in (0.0, 1.01):  # never / whenever a row is done
        backend = HFBackend(
            model, tokenizer, SamplingSpec(temperature=0.0), STOPS, compact_below=compact
        )
        first = backend.generate_turns([TurnRequest(c, 14) for c in contexts])
        req = [TurnRequest(c + r.token_ids + [9, 9], 6, r.prefix) for c, r in zip(contexts, first)]
        results.append([(r.token_ids, r.logps) for r in first + backend.generate_turns(req)])
    for (ta, la), (tb, lb) in zip(*results):
        assert ta == tb and max(abs(x - y) for x, y in zip(la, lb)) < 1e-5


def test_exact_entropy_equals_direct_computation(model, tokenizer, contexts):
    backend = HFBackend(model, tokenizer, SamplingSpec(temperature=0.7), STOPS, seed=1)
    (res,) = backend.generate_turns([TurnRequest(contexts[2], 10)])
    _, lp = full_logps(model, contexts[2] + res.token_ids, len(contexts[2]), res.token_ids, 0.7)
    start = len(contexts[2]) - 1
    direct = [
        -(lp[start + i].exp() * lp[start + i]).sum().item() for i in range(len(res.token_ids))
    ]
    assert max(abs(a - b) for a, b in zip(direct, res.entropies)) < 1e-5
    # the authors' estimate: mean sampled-token NLL (not equal to the exact mean in general)
    assert all(lp_ <= 0 for lp_ in res.logps)


def test_turn_stops_at_tag_tokens_and_budget(model, tokenizer, contexts):
    backend = HFBackend(model, tokenizer, SamplingSpec(temperature=1.0), STOPS, seed=0)
    stop_ids = {tokenizer.convert_tokens_to_ids(t) for t in STOPS} | {tokenizer.eos_token_id}
    results = backend.generate_turns([TurnRequest(c, 9) for c in contexts * 4])
    for r in results:
        assert 1 <= len(r.token_ids) <= 9
        assert not stop_ids & set(r.token_ids[:-1])  # nothing after a stop token
        assert r.stopped == (r.token_ids[-1] in stop_ids)


def test_multi_token_stop_string(tokenizer, contexts):
    """A stop string spanning two tokens ends the turn at the token that completes it (same
    seed, so both runs draw the same tokens up to there)."""
    plain = build_policy(
        PolicyConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
        ),
        tokenizer,
        seed=4,
    ).eval()
    spec = SamplingSpec(temperature=1.0)
    (free,) = HFBackend(plain, tokenizer, spec, (), seed=7).generate_turns(
        [TurnRequest(contexts[0], 16)]
    )
    pieces = [tokenizer.decode([t]) for t in free.token_ids]
    candidates = [
        i
        for i in range(2, len(pieces))
        if (pieces[i - 1] + pieces[i]) not in tokenizer.decode(free.token_ids[:i])
        and len(tokenizer.encode(pieces[i - 1] + pieces[i], add_special_tokens=False)) > 1
    ]
    assert candidates, f"no usable stop string in {pieces}"
    k = candidates[0]
    backend = HFBackend(plain, tokenizer, spec, (pieces[k - 1] + pieces[k],), seed=7)
    assert backend.stop_strings
    (cut,) = backend.generate_turns([TurnRequest(contexts[0], 16)])
    assert cut.token_ids == free.token_ids[: k + 1] and cut.stopped


def test_grouped_attention_equals_eager_formula():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.zeros(2, 1, 3, 5)
    mask[0, :, :, 0] = torch.finfo(torch.float32).min
    out, _ = grouped_attention(None, q, k, v, mask, scaling=8**-0.5)
    # eager reference: repeat each kv head for its 2 query heads
    kr, vr = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    ref = torch.softmax(q @ kr.transpose(2, 3) * 8**-0.5 + mask, -1) @ vr
    assert torch.allclose(out, ref.transpose(1, 2), atol=1e-6)


def test_sdpa_and_grouped_attention_give_the_same_logps(model, tokenizer, contexts):
    results = []
    for attention in ("at2po_grouped", "sdpa"):
        backend = HFBackend(
            model, tokenizer, SamplingSpec(temperature=0.0), STOPS, attention=attention
        )
        results.append(backend.generate_turns([TurnRequest(c, 6) for c in contexts]))
    for a, b in zip(*results):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logps, b.logps)) < 1e-5


def _plain_model(tokenizer, dtype=torch.float32):
    return (
        build_policy(
            PolicyConfig(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                intermediate_size=64,
            ),
            tokenizer,
            seed=4,
        )
        .eval()
        .to(dtype)
    )


def _syncs_of_a_call(backend, contexts, budget):
    with counted_syncs() as counts:
        results = backend.generate_turns([TurnRequest(c, budget) for c in contexts])
    # the precondition of the count: every row ran its whole budget (no stop)
    assert all(len(r.token_ids) == budget and not r.stopped for r in results)
    return sum(counts.values())


def test_one_host_sync_per_decode_step(tokenizer, contexts):
    """Greedy rows that never stop: a call of 14 steps reads back from the device exactly 10
    more times than a call of 4 steps (one read a step; the call's set-up and its final
    copy-out cost the same in both). A multi-token stop string is matched on the device."""
    plain = _plain_model(tokenizer)
    backend = HFBackend(
        plain, tokenizer, SamplingSpec(temperature=0.0), ("never once",), compact_below=0.0
    )
    assert backend.stop_strings  # matched by the automaton, not by decoding
    short, long = (_syncs_of_a_call(backend, contexts, n) for n in (4, 14))
    assert long - short == 10


def test_host_counts_give_the_same_prefixes_as_the_valid_mask(tokenizer, contexts):
    """The copy-out with the lengths the host tracked equals the one that reads them from the
    cache's validity mask, and releasing the buffers layer by layer changes no value."""
    backend = HFBackend(_plain_model(tokenizer), tokenizer, SamplingSpec(temperature=0.0), STOPS)
    first = backend.generate_turns([TurnRequest(c, 5) for c in contexts])
    requests = [TurnRequest(c + r.token_ids + [7, 8], 3, r.prefix) for c, r in zip(contexts, first)]
    prefixes = [backend.usable_prefix(r) for r in requests]
    cached = [p.length for p in prefixes]
    cache = BatchCache(
        prefixes,
        backend.num_layers,
        backend.num_kv_heads,
        backend.head_dim,
        10,
        backend.dtype,
        backend.device,
    )
    pending = [r.context[c:] for r, c in zip(requests, cached)]
    backend._forward_pending(cache, pending, cached)
    from_mask = cache.extract()
    from_host = cache.extract(counts=[c + len(p) for c, p in zip(cached, pending)], release=True)
    assert all(layer.key_buffer is None for layer in cache.layers)
    for a, b in zip(from_mask, from_host):
        assert a.length == b.length
        assert all(torch.equal(x, y) for x, y in zip(a.keys + a.values, b.keys + b.values))


def test_decode_dtype_choices():
    assert decode_dtype("auto", "float32", "cpu") == "float32"  # the toy's rollouts stay fp32
    assert decode_dtype("auto", "bfloat16", "cpu") == "bfloat16"
    assert decode_dtype("auto", "float32", "cuda") == "bfloat16"
    assert decode_dtype("auto", "float32", "cuda", bf16_supported=False) == "float32"
    assert decode_dtype("auto", "float16", "cuda") == "float16"
    assert decode_dtype("model", "float32", "cuda") == "float32"
    assert decode_dtype("bfloat16", "float32", "cpu") == "bfloat16"
    with pytest.raises(ValueError, match="rollout.decode_dtype='bf16'"):
        decode_dtype("bf16", "float32", "cpu")
    assert decode_grouping("auto", "cpu") == "turn" and decode_grouping("auto", "cuda") == "round"
    with pytest.raises(ValueError, match="rollout.decode_grouping='rows'"):
        decode_grouping("rows", "cpu")


def test_a_bf16_model_on_cpu_decodes_in_bf16_and_an_fp32_one_in_fp32(tokenizer, contexts):
    for dtype in (torch.bfloat16, torch.float32):
        backend = HFBackend(
            _plain_model(tokenizer, dtype), tokenizer, SamplingSpec(temperature=1.0), STOPS, seed=2
        )
        assert backend.dtype == dtype
        (result,) = backend.generate_turns([TurnRequest(contexts[1], 6)])
        assert result.prefix.keys[0].dtype == dtype
        assert all(math.isfinite(x) for x in result.logps + result.entropies)


def test_a_bf16_rollout_of_fp32_weights_leaves_the_weights_untouched(tokenizer, contexts):
    """decode_dtype=bfloat16 on fp32 weights: a bf16 KV cache, log-probs near the fp32 ones,
    and afterwards every parameter is the same fp32 tensor with the same values (tied
    embedding and head still one parameter)."""
    model = _plain_model(tokenizer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    storage = {name: p.data_ptr() for name, p in model.named_parameters()}
    fp32 = HFBackend(model, tokenizer, SamplingSpec(temperature=0.0), STOPS)
    bf16 = HFBackend(model, tokenizer, SamplingSpec(temperature=0.0), STOPS, dtype="bfloat16")
    (a,) = fp32.generate_turns([TurnRequest(contexts[0], 6)])
    (b,) = bf16.generate_turns([TurnRequest(contexts[0], 6)])
    assert b.prefix.keys[0].dtype == torch.bfloat16 and a.prefix.keys[0].dtype == torch.float32
    assert abs(a.logps[0] - b.logps[0]) < 0.1
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and p.data_ptr() == storage[name]
        assert torch.equal(p, before[name])
    assert model.lm_head.weight is model.model.embed_tokens.weight
