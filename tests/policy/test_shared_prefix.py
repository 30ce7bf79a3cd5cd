"""Leaf log-probs with shared prefixes computed once (at2po_lib.policy.shared_prefix): the packed
layout counted by hand on a small tree, and log-probs, entropies and gradients equal to the
per-row computation (at2po_lib.trainer.trainer.policy_position_logps) to fp32 rounding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import Qwen3Config, Qwen3ForCausalLM

from at2po_lib.policy.shared_prefix import pack_rows, shared_prefix_logps
from at2po_lib.trainer.trainer import policy_position_logps

PAD = 0


def _model(seed: int = 0) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    return Qwen3ForCausalLM(config).train()


def _trl_layout(rows: list[tuple[list[int], list[int], list[int]]]):
    """TRL's layout of (prompt, completion, scored 0/1 per completion token) rows: prompts
    left-padded, completions right-padded; returns ids, attention mask, scored positions."""
    p = max(len(prompt) for prompt, _, _ in rows)
    t = max(len(completion) for _, completion, _ in rows)
    ids, mask, scored = [], [], []
    for prompt, completion, score in rows:
        left, right = p - len(prompt), t - len(completion)
        ids.append([PAD] * left + prompt + completion + [PAD] * right)
        mask.append([0] * left + [1] * (len(prompt) + len(completion)) + [0] * right)
        scored.append(score + [0] * right)
    return torch.tensor(ids), torch.tensor(mask), torch.tensor(scored)


# A tree of one prompt: A and B share the prompt and the first turn (3 tokens), A and B differ
# after it; C shares only the prompt. D is another prompt's one-turn answer.
PROMPT = [5, 6, 7]
TREE = [
    (PROMPT, [10, 11, 12, 13, 14], [1, 1, 1, 1, 1]),  # A: path 3 + 4 = 7 tokens
    (PROMPT, [10, 11, 12, 15, 16], [1, 1, 1, 0, 1]),  # B: shares A's first 6 (prompt + 10 11 12)
    (PROMPT, [20, 21], [1, 1]),  # C: shares the prompt
    ([8, 9], [30, 31, 32], [0, 1, 1]),  # D: another prompt, path 2 + 2 = 4
]


def test_the_packed_layout_counts_each_shared_token_once():
    ids, mask, scored = _trl_layout(TREE)
    # Paths run to the token before each row's last scored token: A 7, B 7, C 4, D 4 tokens.
    wide = pack_rows(ids, mask, scored, width=13)
    assert wide.real_tokens == 7 + 7 + 4 + 4
    # Distinct: A's 7, B's own 15 (it shares 6 with A), C's 20 (it shares the prompt), D's 4.
    assert wide.distinct_tokens == 7 + 1 + 1 + 4
    assert [tuple(c.input_ids.shape) for c in wide.calls] == [(1, 13)]
    assert wide.labels.numel() == int(scored.sum())
    # At the default capacity (the longest path, 7) A + B would need 8: every row stands alone,
    # first-fit decreasing puts C and D (4 + 4 > 7) apart too, and the 4-token segments (below
    # CALL_FILL of 7) take a call of their own.
    tight = pack_rows(ids, mask, scored)
    assert [tuple(c.input_ids.shape) for c in tight.calls] == [(2, 7), (2, 4)]
    assert tight.distinct_tokens == tight.real_tokens == tight.slots == 22
    # At 9 the tree fits (A 7 + B's 1 + C's 1) and D takes a segment, and a call, of its own.
    nine = pack_rows(ids, mask, scored, width=9)
    assert [tuple(c.input_ids.shape) for c in nine.calls] == [(1, 9), (1, 4)]


def test_a_wide_segment_shares_the_tree_and_attends_along_paths_only():
    ids, mask, scored = _trl_layout(TREE)
    packed = pack_rows(ids, mask, scored, width=13)
    (call,) = packed.calls
    allowed = call.attention_bias[0, 0] == 0  # (W, W)
    tokens = call.input_ids[0].tolist()
    positions = call.position_ids[0].tolist()
    # Every slot attends exactly its path so far: as many keys as its position + 1.
    assert allowed.sum(dim=1).tolist() == [p + 1 for p in positions]
    # D's tokens see nothing of the tree, and the tree's nothing of D.
    d_slots = [i for i, tok in enumerate(tokens) if tok in (8, 9, 30, 31)]
    tree_slots = [i for i in range(13) if i not in d_slots]
    assert not allowed[d_slots][:, tree_slots].any()
    assert not allowed[tree_slots][:, d_slots].any()
    # B's token 15 attends the prompt and 10 11 12 (shared with A) and itself, not A's 13.
    b15 = tokens.index(15)
    assert {tokens[k] for k in torch.nonzero(allowed[b15]).flatten().tolist()} == {
        5,
        6,
        7,
        10,
        11,
        12,
        15,
    }


def _logps_and_grads(fn, model, ids, mask, scored, advantages, **kwargs):
    model.zero_grad()
    logps, entropies = fn(model, ids, mask, scored, 0.7, compute_entropy=True, **kwargs)
    (logps * advantages).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    return logps.detach(), entropies, grads


@pytest.mark.parametrize("width", [0, 13, 64])
def test_log_probs_and_gradients_equal_the_per_row_computation(width):
    model = _model()
    ids, mask, scored = _trl_layout(TREE)
    advantages = torch.randn(scored.shape, generator=torch.Generator().manual_seed(1))
    rows = _logps_and_grads(policy_position_logps, model, ids, mask, scored, advantages)
    packed = _logps_and_grads(
        shared_prefix_logps, model, ids, mask, scored, advantages, width=width
    )
    torch.testing.assert_close(packed[0], rows[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(packed[1], rows[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(packed[2], rows[2], atol=1e-5, rtol=1e-4)
    assert (packed[0][scored == 0] == 0).all()


@st.composite
def _forests(draw):
    """Rows that grow from a few prompts by random shared prefixes (tree-like)."""
    rows = []
    for _ in range(draw(st.integers(1, 3))):
        prompt = draw(st.lists(st.integers(1, 39), min_size=1, max_size=5))
        trunk = draw(st.lists(st.integers(1, 39), min_size=0, max_size=6))
        for _ in range(draw(st.integers(1, 3))):
            cut = draw(st.integers(0, len(trunk)))
            tail = draw(st.lists(st.integers(1, 39), min_size=1, max_size=5))
            completion = trunk[:cut] + tail
            score = draw(
                st.lists(st.integers(0, 1), min_size=len(completion), max_size=len(completion))
            )
            rows.append((prompt, completion, score))
    return rows


@settings(max_examples=25, deadline=None)
@given(rows=_forests(), width=st.sampled_from([0, 16, 200]))
def test_any_forest_gives_the_per_row_log_probs(rows, width):
    model = _model(seed=3).eval()
    ids, mask, scored = _trl_layout(rows)
    with torch.no_grad():
        expected, _ = policy_position_logps(model, ids, mask, scored, 1.0)
        got, _ = shared_prefix_logps(model, ids, mask, scored, 1.0, width=width)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=0)
    packed = pack_rows(ids, mask, scored, width=width)
    assert packed.distinct_tokens <= packed.real_tokens
