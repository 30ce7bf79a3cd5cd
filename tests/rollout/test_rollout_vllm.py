"""The vLLM backend. vLLM is not installed in the CPU environment: the engine test skips there;
the pure helpers are tested everywhere, and the rollout's queue on the stand-in of
tests/vllm_standin.py (whose step engine ends a turn as many steps after it joined as it has
tokens, as a continuously batched engine does; tests/test_engines_vllm.py runs it on vLLM)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

import vllm_standin
from at2po_lib.rollout.agent import Sampler, SearchEnv, turn_stops
from at2po_lib.rollout.backends import make_backend
from at2po_lib.rollout.trees import rollout, rollout_chains
from at2po_lib.rollout.turns import TurnRequest
from at2po_lib.rollout.vllm_backend import (
    ColocatedEngine,
    request_seeds,
    topk_entropy,
    vllm_available,
)
from at2po_lib.rollout.vllm_queue import turn_seed


@pytest.fixture(scope="module")
def toy(smoke_toy):
    return smoke_toy  # tests/conftest.py: one smoke ToySetup per module


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny profile's shipped warm start, its world and retriever, and 6 test questions:
    a policy whose greedy chains call the search tool (a random one's repeat one token)."""
    import torch

    from at2po_lib.config.profile import load_profile
    from at2po_lib.evaluation.greedy import load_eval_rows
    from at2po_lib.policy.model import load_policy
    from at2po_lib.protocol.prompts import get_template
    from at2po_lib.retrieval.indexes import build_retriever
    from at2po_lib.study.run import policy_path

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AT2PO_ARTIFACTS", str(tmp_path_factory.mktemp("artifacts")))
        torch.set_num_threads(1)
        cfg = load_profile("tiny")
        model, tokenizer = load_policy(policy_path(cfg))
        rows = [
            row
            for name in ("tiny_hotpotqa", "tiny_2wiki", "tiny_nq")
            for row in load_eval_rows(cfg, name, 2)
        ]
        yield SimpleNamespace(
            cfg=cfg,
            model=model.eval(),
            tokenizer=tokenizer,
            template=get_template(cfg.policy.template),
            retriever=build_retriever(cfg),
            questions=[row["question"] for row in rows],
            golden=[list(row["golden_answers"]) for row in rows],
        )


def _engine(toy, monkeypatch):
    """A stand-in engine answering with the toy's policy."""
    vllm_standin.install(monkeypatch)
    return vllm_standin.LLM.wrapping(toy.model, toy.tokenizer)


def _backend(toy, llm, grouping: str = "auto", expansion: str = "entropy", **kwargs):
    cfg = replace(toy.cfg.rollout, backend="vllm", decode_grouping=grouping, expansion=expansion)
    return make_backend(llm, toy.tokenizer, cfg, turn_stops(toy.template), **kwargs), cfg


def _turn_of(request_id: str) -> int:
    return int(request_id.rsplit("-", 1)[1])


def test_request_seeds_are_a_pure_function_of_run_seed_and_call():
    """Issue #22: per-request SamplingParams seeds from (seed, call, position): reruns and
    resumes repeat them, another --seed (another rollout seed) changes them, and identical
    contexts of one call get different seeds."""
    a = request_seeds(1234, 0, 22)
    assert a == request_seeds(1234, 0, 22) and len(set(a)) == 22
    assert a[:5] == request_seeds(1234, 0, 5)  # a request's seed does not depend on the batch size
    assert request_seeds(1234, 1, 22) != a and request_seeds(1235, 0, 22) != a
    assert all(0 <= x < 2**31 for x in a) and request_seeds(7, 0, 0) == []


def test_topk_entropy_uses_the_k_best_entries():
    # probs 0.5, 0.25, 0.125 (+ a sampled token ranked lower, 0.01): k = 2 keeps 0.5 and 0.25
    step = {i: SimpleNamespace(logprob=math.log(p)) for i, p in enumerate([0.125, 0.5, 0.01, 0.25])}
    expected = -(0.5 * math.log(0.5) + 0.25 * math.log(0.25))
    assert topk_entropy(step, 2) == pytest.approx(expected)


@pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")
def test_vllm_turns_match_the_hf_backend_greedy(tmp_path):  # pragma: no cover - needs a GPU
    import torch

    from at2po_lib.config.profile import PolicyConfig
    from at2po_lib.policy.model import build_policy, save_policy
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.rollout.backends import HFBackend
    from at2po_lib.rollout.turns import TurnRequest
    from at2po_lib.rollout.sampling import SamplingSpec
    from at2po_lib.rollout.vllm_backend import VLLMBackend

    tok = train_tokenizer(["the capital of avaria is belmont"] * 20, vocab_size=300)
    model = build_policy(
        PolicyConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
        ),
        tok,
    )
    save_policy(model, tok, tmp_path / "m")
    spec = SamplingSpec(temperature=0.0)
    ctx = [tok.encode("the capital of")]
    hf = HFBackend(
        model.to("cuda" if torch.cuda.is_available() else "cpu"), tok, spec, ("</search>",)
    ).generate_turns([TurnRequest(ctx[0], 8)])
    from at2po_lib.config.profile import load_profile
    from at2po_lib.rollout.vllm_backend import build_engine

    engine = build_engine(
        tmp_path / "m",
        load_profile("smoke"),
        gpu_memory_utilization=0.2,
        max_model_len=256,
        enforce_eager=True,
    )
    vb = VLLMBackend(engine, tok, spec, ("</search>",))
    out = vb.generate_turns([TurnRequest(ctx[0], 8)])
    assert out[0].token_ids == hf[0].token_ids


def test_turn_seeds_are_a_pure_function_of_seed_queue_row_and_turn():
    keys = [(q, r, t) for q in range(2) for r in range(6) for t in range(3)]
    seeds = [turn_seed(1234, *key) for key in keys]
    assert seeds == [turn_seed(1234, *key) for key in keys] and len(set(seeds)) == len(keys)
    assert turn_seed(1235, 0, 0, 0) != seeds[0] and all(0 <= x < 2**31 for x in seeds)


def test_the_queue_answers_greedily_as_one_generate_call_per_turn_depth(tiny, monkeypatch):
    """Greedy chains of 6 test questions (the tiny warm start): the queue (one per round) gives every turn's ids, log-probs,
    actions and answers of the old path (one ``generate`` per turn depth), without a
    ``generate`` call; later turns join the engine while first turns still run; greedy requests
    carry no seed and ask for the sampled token's log-prob only."""
    runs = {}
    for grouping in ("auto", "turn"):
        llm = _engine(tiny, monkeypatch)
        backend, cfg = _backend(tiny, llm, grouping, greedy=True)
        env = SearchEnv(tiny.tokenizer, tiny.template, tiny.retriever, cfg)
        trajectories = rollout_chains(Sampler(env, backend), tiny.questions, tiny.golden)
        runs[backend.grouping] = (trajectories, llm, backend)
    (queued, llm, backend), (per_turn, old_llm, _) = runs["round"], runs["turn"]
    for a, b in zip(queued, per_turn):
        assert (a.completion_ids, a.logps, a.finish_reason) == (
            b.completion_ids,
            b.logps,
            b.finish_reason,
        )
        assert [t.action.kind for t in a.turns] == [t.action.kind for t in b.turns]
    depth = max(len(t.turns) for t in per_turn)
    assert depth > 1 and old_llm.generate_calls == depth  # the old path: one call a depth
    assert llm.generate_calls == 0 and backend.sessions == 1
    requests, ended = llm.llm_engine.requests, llm.llm_engine.ended
    first_turns_end = max(ended[rid] for rid, *_ in requests if _turn_of(rid) == 0)
    assert min(added for rid, _, _, added in requests if _turn_of(rid) > 0) < first_turns_end
    assert all(p.seed is None and p.logprobs == 0 for _, _, p, _ in requests)


def test_sampled_queue_trees_repeat_with_their_seed_and_change_with_another(toy, monkeypatch):
    """AT2PO's entropy trees sampled through the queue: one queue per round (M chains, then L
    expansion rounds), every request its own seed, the same trees from the same seed and other
    trees from another."""
    questions, golden = toy.questions(3)

    def grow(seed: int):
        llm = _engine(toy, monkeypatch)
        backend, cfg = _backend(toy, llm, seed=seed)
        trees = rollout(
            toy.sampler(cfg, backend, seed=seed), questions, golden, expansion="entropy"
        )
        return [[n.token_ids for n in t.nodes] for t in trees], llm, backend, cfg

    first, llm, backend, cfg = grow(3)
    assert backend.grouping == "round" and backend.sessions == 1 + cfg.tree_l
    assert llm.generate_calls == 0
    seeds = [p.seed for _, _, p, _ in llm.llm_engine.requests]
    assert None not in seeds and len(set(seeds)) == len(seeds)
    assert grow(3)[0] == first
    assert grow(4)[0] != first


def test_topk_logprobs_are_asked_for_aepo_only(toy, monkeypatch):
    """Only AEPO reads top-k entropies: its backend asks vLLM for ``topk_entropy_k`` log-probs
    a token, the others for the sampled token's (and record NaN); AEPO refuses a backend that
    records none (NaN entropies would make every chain branch)."""
    llm = _engine(toy, monkeypatch)
    tree, _ = _backend(toy, llm)
    aepo, _ = _backend(toy, llm, expansion="aepo")
    assert not tree.records_topk and tree.sampling_params(4).logprobs == 0
    assert aepo.records_topk and aepo.sampling_params(4).logprobs == aepo.sampling.topk_entropy_k
    turn = tree.generate_turns([TurnRequest(toy.tokenizer.encode("the capital of"), 4)])[0]
    assert turn.token_ids and all(math.isnan(v) for v in turn.topk_entropies)
    assert all(math.isfinite(v) for v in turn.logps)
    questions, golden = toy.questions(1)
    with pytest.raises(ValueError, match="top-k entropies"):
        rollout(toy.sampler(backend=tree), questions, golden, expansion="aepo")


def test_a_tensor_parallel_group_keeps_one_generate_call_per_turn_depth(toy, monkeypatch):
    """The ranks of a TP group must submit identical requests: the colocated engine offers no
    queue there, ``auto`` falls back to ``turn`` and ``round`` is refused naming why."""
    llm = _engine(toy, monkeypatch)
    generation = SimpleNamespace(llm=llm, tensor_parallel_size=2, tp_group=None)
    engine = ColocatedEngine(generation, all_gather=lambda obj: [obj, obj], group_rank=0)
    assert engine.step_engine is None
    assert _backend(toy, engine)[0].grouping == "turn"
    with pytest.raises(ValueError, match="tensor-parallel"):
        _backend(toy, engine, "round")
    single = ColocatedEngine(SimpleNamespace(llm=llm, tensor_parallel_size=1, tp_group=None))
    assert single.step_engine is llm.llm_engine and _backend(toy, single)[0].grouping == "round"


def test_a_failed_round_aborts_the_requests_still_running(toy, monkeypatch):
    llm = _engine(toy, monkeypatch)
    backend, _ = _backend(toy, llm)
    ids = toy.tokenizer.encode("the capital of")
    requests = [TurnRequest(ids, n) for n in (1, 6, 9)]
    with pytest.raises(RuntimeError, match="boom"):
        with backend.open_session(requests) as session:
            assert session.next_turns()
            with pytest.raises(ValueError, match="not waiting"):
                session.resume(99, ids, 2)
            running = len(llm.llm_engine.running)
            raise RuntimeError("boom")
    assert running >= 1 and not llm.llm_engine.running
    assert len(llm.llm_engine.aborted) == running
    with pytest.raises(ValueError, match="max_new_tokens=0"):  # refused while being queued
        with backend.open_session([TurnRequest(ids, 3), TurnRequest(ids, 0)]):
            pass
    assert not llm.llm_engine.running and len(llm.llm_engine.aborted) == running + 1
