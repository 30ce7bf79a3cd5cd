"""The vLLM backend. vLLM is not installed in the CPU environment: the engine test skips there;
the pure helper is tested everywhere."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from at2po_lib.rollout.vllm_backend import request_seeds, topk_entropy, vllm_available


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
