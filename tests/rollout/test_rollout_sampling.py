"""Sampling maths of the rollout: tempered log-probs, nucleus, exact and top-k entropies."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.rollout.sampling import SamplingSpec, nucleus_filter, sample_step


def test_nucleus_keeps_the_token_that_crosses_p():
    # probs 0.5, 0.3, 0.15, 0.05; top_p 0.7: mass before each = 0, 0.5, 0.8, 0.95
    # -> keep tokens whose mass-before < 0.7: the first two (0.5 + 0.3 crosses 0.7).
    lp = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]]))
    kept = torch.isfinite(nucleus_filter(lp, 0.7))
    assert kept.tolist() == [[False, True, False, True]]
    assert torch.isfinite(nucleus_filter(lp, 1.0)).all()


def test_logp_is_log_softmax_at_the_temperature():
    torch.manual_seed(0)
    logits = torch.randn(5, 11)
    spec = SamplingSpec(temperature=0.5)
    step = sample_step(logits, spec, torch.Generator().manual_seed(1))
    ref = torch.log_softmax(logits / 0.5, dim=-1)
    assert torch.allclose(step.logp, ref.gather(1, step.token_ids[:, None]).squeeze(1))
    # exact entropy of the tempered distribution
    assert torch.allclose(step.entropy, -(ref.exp() * ref).sum(-1), atol=1e-6)


def test_greedy_takes_argmax_with_temperature_one_logps():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    step = sample_step(logits, SamplingSpec(temperature=0.0))
    assert step.token_ids.tolist() == [1, 0]
    ref = torch.log_softmax(logits, -1)
    assert torch.allclose(step.logp, ref[[0, 1], [1, 0]])


def test_topk_entropy_hand_computed():
    # uniform over 4 tokens: each p = 1/4; top-2 entropy = -2 * (1/4) * log(1/4) = 0.5 * log 4
    step = sample_step(torch.zeros(1, 4), SamplingSpec(temperature=1.0, topk_entropy_k=2))
    assert step.topk_entropy.item() == pytest.approx(0.5 * math.log(4), rel=1e-6)
    assert step.entropy.item() == pytest.approx(math.log(4), rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(top_p=st.floats(0.05, 1.0), seed=st.integers(0, 10_000))
def test_samples_stay_inside_the_nucleus(top_p, seed):
    torch.manual_seed(seed)
    logits = torch.randn(8, 13) * 3
    spec = SamplingSpec(temperature=0.8, top_p=top_p)
    step = sample_step(logits, spec, torch.Generator().manual_seed(seed))
    allowed = torch.isfinite(nucleus_filter(torch.log_softmax(logits / 0.8, -1), top_p))
    assert allowed.gather(1, step.token_ids[:, None]).all()
    assert (step.logp <= 0).all() and (step.entropy >= -1e-6).all()


def test_bad_spec_is_rejected():
    with pytest.raises(ValueError, match="top_p"):
        SamplingSpec(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingSpec(temperature=-1.0)
