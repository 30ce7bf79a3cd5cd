"""Tests for the policy loss the trainer calls (``at2po_lib.method.loss.policy_loss``) and the
diagnostics it logs beside it (``loss_diagnostics``): hand cases, special cases between ratio
levels, gradients of the stop-gradient form, masking, clip fractions (against an independent
computation on random inputs), AEPO options, the diagnostics, the authors' per-row loop and the
simulated policy change."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.analysis.policy_change import clip_fraction_by_level, simulate_policy_change
from at2po_lib.method.loss import (
    AGGREGATIONS,
    LossOptions,
    importance_ratios,
    LossBatch,
    loss_diagnostics,
    policy_loss,
    ratio_units,
)


def loss_and_stats(logp, old, adv, mask, turn_ids=None, ref_logp=None, token_entropy=None, **kw):
    """(loss, diagnostics) as the trainer computes them: ``policy_loss`` and, beside it,
    ``loss_diagnostics`` of the same inputs, with ``kw`` as the :class:`LossOptions`."""
    options = LossOptions(**kw)
    batch = LossBatch(logp, old, adv, mask, turn_ids, ref_logp, token_entropy)
    return policy_loss(batch, options), loss_diagnostics(batch, options)


LOSSES = {"definition": loss_and_stats}
"""The loss the trainer runs, returning (loss, metrics)."""


@pytest.fixture(autouse=True)
def _float64():
    """Float64 keeps hand-computed comparisons tight; restored after each test."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _grad(loss_fn, logp):
    x = logp.clone().requires_grad_(True)
    loss, metrics = loss_fn(x)
    (g,) = torch.autograd.grad(loss, x)
    return loss.detach(), g, metrics


def random_batch(seed, b=3, t=16, scale=0.01):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3
    logp = old + scale * torch.randn(b, t, generator=g)
    mask = (torch.rand(b, t, generator=g) < 0.7).long()
    adv = torch.randn(b, generator=g)
    return logp, old, adv, mask


# ------------------------------------------------------------------------------------------
# Ratio units and ratios
# ------------------------------------------------------------------------------------------
def test_ratio_units_from_mask_runs():
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1]])
    # runs: row 0 -> {0,1}, {3}; row 1 -> {1,2,3}
    assert ratio_units(mask, "turn").tolist() == [0, 0, 1, 2, 2, 2]
    assert ratio_units(mask, "sequence").tolist() == [0, 0, 0, 1, 1, 1]
    assert ratio_units(mask, "token").tolist() == [0, 1, 2, 3, 4, 5]


def test_ratio_units_from_ids_group_by_id():
    mask = torch.tensor([[1, 1, 0, 1, 1]])
    ids = torch.tensor([[4, 4, -1, 9, 4]])  # id 4 appears twice, non-contiguously: one turn
    assert ratio_units(mask, "turn", ids).tolist() == [0, 0, 1, 0]
    bad = torch.tensor([[4, -1, -1, 9, 4]])
    for loss in (
        lambda: ratio_units(mask, "turn", bad),
        lambda: loss_and_stats(
            torch.zeros(1, 5), torch.zeros(1, 5), torch.ones(1), mask, turn_ids=bad
        ),
    ):
        with pytest.raises(ValueError, match=r"turn_ids\[0, 1\]"):
            loss()


def test_geometric_and_product_turn_ratios_by_hand():
    # one turn of two tokens with log-ratios 0.002, 0.004
    # geometric: log s = (0.002 + 0.004)/2 = 0.003; product: log s = 0.006
    old = torch.zeros(1, 3)
    logp = torch.tensor([[0.002, 0.004, 5.0]])
    mask = torch.tensor([[1, 1, 0]])
    geo = importance_ratios(logp, old, mask, "turn", turn_ratio="geometric")
    prod = importance_ratios(logp, old, mask, "turn", turn_ratio="product")
    torch.testing.assert_close(geo, torch.tensor([math.exp(0.003)] * 2))
    torch.testing.assert_close(prod, torch.tensor([math.exp(0.006)] * 2))


# ------------------------------------------------------------------------------------------
# The diagnostics agree with an independent computation, and the gradient is finite
# ------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    level=st.sampled_from(["token", "sequence", "turn"]),
    agg=st.sampled_from(AGGREGATIONS),
    turn_ratio=st.sampled_from(["geometric", "product"]),
    scale=st.sampled_from([1e-3, 1e-2, 0.3, 8.0]),
    ids=st.booleans(),
    per_token=st.booleans(),
    kl=st.booleans(),
    aepo=st.booleans(),
)
def test_diagnostics_match_the_clip_shares_computed_apart(
    seed, level, agg, turn_ratio, scale, ids, per_token, kl, aepo
):
    """Random batches, every option: scales from inside the clip window to past the log-ratio
    clamp (8 per token, summed by the product ratio), turn ids that jump back, per-token
    advantages, the KL penalty and AEPO's two options. The clip shares at this level and at the
    token and turn levels are the ones ``analysis.policy_change.clip_fraction_by_level``
    computes on its own; the loss and its gradient are finite."""
    logp, old, adv, mask = random_batch(seed, b=5, t=24, scale=scale)
    g = torch.Generator().manual_seed(seed + 1)
    mask[seed % 5] = 0  # a row without model tokens
    kw = dict(level=level, agg=agg, turn_ratio=turn_ratio, eps_low=0.003, eps_high=0.004)
    if ids:
        kw["turn_ids"] = torch.randint(0, 4, logp.shape, generator=g)
    if per_token:
        adv = torch.randn(logp.shape, generator=g)
    if kl:
        kw.update(ref_logp=old + 0.1 * torch.randn(logp.shape, generator=g), beta=0.1)
    if aepo:
        kw.update(
            entropy_balanced_clip=True,
            entropy_aware_adv=0.2,
            token_entropy=torch.rand(logp.shape, generator=g),
        )
    loss, grad, m = _grad(lambda x: loss_and_stats(x, old, adv, mask, **kw), logp)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    if not aepo:
        frac = clip_fraction_by_level(
            logp, old, adv, mask, kw.get("turn_ids"), eps_low=0.003, eps_high=0.004
        )
        if turn_ratio == "geometric":
            assert frac[level] == pytest.approx(m["clip_frac"])
            assert frac["turn"] == pytest.approx(m["clip_frac_turn"])
        assert frac["token"] == pytest.approx(m["clip_frac_token"])
        assert m["clip_frac"] == pytest.approx(m["clip_frac_low"] + m["clip_frac_high"])


# ------------------------------------------------------------------------------------------
# Hand cases: aggregation, clipping, KL
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", LOSSES)
@pytest.mark.parametrize(
    "agg, expected",
    [
        # ratio 1, per-token loss -A; row 0: A=1 on 2 tokens, row 1: A=2 on 4 tokens
        ("token-mean", (-1 * 2 - 2 * 4) / 6),  # -10/6
        ("seq-mean-token-mean", (-1 - 2) / 2),  # -1.5
    ],
)
def test_aggregations_by_hand(agg, expected, form):
    old = torch.zeros(2, 4)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    for level in ("token", "sequence", "turn"):
        loss, _ = LOSSES[form](
            old.clone(), old, torch.tensor([1.0, 2.0]), mask, level=level, agg=agg
        )
        assert loss.item() == pytest.approx(expected)


@pytest.mark.parametrize("form", LOSSES)
def test_seq_mean_skips_rows_without_model_tokens(form):
    old = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    loss, _ = LOSSES[form](old.clone(), old, torch.tensor([1.0, 5.0]), mask, level="token")
    assert loss.item() == pytest.approx(-1.0)


def test_clip_fractions_by_hand():
    # token level, eps 0.003/0.004, bounds [0.997, 1.004]
    # row 0 (A=+1): log-ratios 0, 0.01, -0.01, 0.001 -> only r=1.01 binds (high)
    #   (r=0.99 with A>0: max(-0.99, -0.997) = -0.99 is the unclipped branch: not binding)
    # row 1 (A=-1): -0.01, 0.01, 0, 0 -> only r=0.99 binds (low)
    old = torch.zeros(2, 4)
    logp = torch.tensor([[0.0, 0.01, -0.01, 0.001], [-0.01, 0.01, 0.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    _, m = loss_and_stats(logp, old, adv, torch.ones(2, 4), level="token")
    assert m["clip_frac_high"] == pytest.approx(1 / 8)
    assert m["clip_frac_low"] == pytest.approx(1 / 8)
    assert m["clip_frac"] == pytest.approx(2 / 8)
    assert clip_fraction_by_level(logp, old, adv, torch.ones(2, 4))["token"] == pytest.approx(2 / 8)
    # approx_kl = mean(old - new) = -(0 + 0.01 - 0.01 + 0.001 - 0.01 + 0.01 + 0 + 0)/8
    assert m["approx_kl"] == pytest.approx(-0.001 / 8)


@pytest.mark.parametrize("form", LOSSES)
def test_k3_kl_penalty_by_hand(form):
    # ref - logp = 0.1 on both tokens: KL = e^0.1 - 0.1 - 1 = 0.0051709
    old = torch.zeros(1, 2)
    ref = torch.full((1, 2), 0.1)
    loss, m = LOSSES[form](
        old.clone(), old, torch.tensor([0.0]), torch.ones(1, 2), ref_logp=ref, beta=0.5
    )
    kl = math.exp(0.1) - 0.1 - 1
    assert m.get("ref_kl", kl) == pytest.approx(kl)
    assert loss.item() == pytest.approx(0.5 * kl)


@pytest.mark.parametrize("form", LOSSES)
def test_advantages_per_row_equal_broadcast_per_token(form):
    logp, old, adv, mask = random_batch(0)
    a, _ = LOSSES[form](logp, old, adv, mask)
    b, _ = LOSSES[form](logp, old, adv[:, None].expand_as(logp).clone(), mask)
    torch.testing.assert_close(a, b)


# ------------------------------------------------------------------------------------------
# Special cases between levels (docs/method.md §7)
# ------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(AGGREGATIONS), st.sampled_from(list(LOSSES)))
def test_every_token_its_own_turn_is_token_level(seed, agg, form):
    logp, old, adv, mask = random_batch(seed)
    own_turn = torch.arange(logp.shape[1]).expand_as(logp)
    kw = dict(agg=agg, eps_low=0.003, eps_high=0.004)
    loss = LOSSES[form]
    l_tok, g_tok, m_tok = _grad(lambda x: loss(x, old, adv, mask, level="token", **kw), logp)
    l_turn, g_turn, m_turn = _grad(
        lambda x: loss(x, old, adv, mask, level="turn", turn_ids=own_turn, **kw), logp
    )
    torch.testing.assert_close(l_turn, l_tok)
    torch.testing.assert_close(g_turn, g_tok)
    assert m_turn.get("clip_frac") == pytest.approx(m_tok.get("clip_frac"))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(list(LOSSES)))
def test_one_turn_per_row_is_sequence_level(seed, form):
    logp, old, adv, mask = random_batch(seed)
    one_turn = torch.zeros_like(mask)  # every model token of a row shares id 0
    loss = LOSSES[form]
    l_seq, g_seq, _ = _grad(lambda x: loss(x, old, adv, mask, level="sequence"), logp)
    l_turn, g_turn, _ = _grad(
        lambda x: loss(x, old, adv, mask, level="turn", turn_ids=one_turn), logp
    )
    torch.testing.assert_close(l_turn, l_seq)
    torch.testing.assert_close(g_turn, g_seq)


@pytest.mark.parametrize("form", LOSSES)
def test_contiguous_single_run_is_sequence_level_without_turn_ids(form):
    logp, old, adv, _ = random_batch(3)
    mask = torch.zeros_like(logp, dtype=torch.long)
    mask[:, 2:11] = 1  # one run per row
    a, _ = LOSSES[form](logp, old, adv, mask, level="turn")
    b, _ = LOSSES[form](logp, old, adv, mask, level="sequence")
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("form", LOSSES)
@pytest.mark.parametrize(
    "turn_ratio, s1, s2",
    [("geometric", math.exp(0.02), math.exp(-0.01)), ("product", math.exp(0.04), math.exp(-0.02))],
)
def test_stop_gradient_form_gradient_is_s_k_grad_logp(form, turn_ratio, s1, s2):
    # one row, two turns: tokens 0-1 (log-ratios 0.01, 0.03) and 3-4 (-0.02, 0.0)
    # geometric: s_1 = exp(0.02), s_2 = exp(-0.01); product: s_1 = exp(0.04), s_2 = exp(-0.02)
    # with wide clips and one row of 4 model tokens, loss = (1/4) sum_t -A s_k(t):
    # dL/dlogp_t = -A s_k(t) / 4 for model tokens, 0 for the observation token
    old = torch.zeros(1, 5)
    logp = torch.tensor([[0.01, 0.03, 0.7, -0.02, 0.0]])
    mask = torch.tensor([[1, 1, 0, 1, 1]])
    a = 1.5
    _, g, _ = _grad(
        lambda x: LOSSES[form](
            x,
            old,
            torch.tensor([a]),
            mask,
            level="turn",
            eps_low=0.5,
            eps_high=0.5,
            turn_ratio=turn_ratio,
        ),
        logp,
    )
    expected = torch.tensor([[-a * s1, -a * s1, 0.0, -a * s2, -a * s2]]) / 4
    torch.testing.assert_close(g, expected)


@pytest.mark.parametrize("form", LOSSES)
@pytest.mark.parametrize("level", ["token", "sequence", "turn"])
def test_masked_tokens_contribute_nothing(level, form):
    logp, old, adv, mask = random_batch(7)
    adv_tok = adv[:, None].expand_as(logp).clone()
    h, ref = torch.rand_like(logp), logp - 0.05
    kw = dict(level=level, ref_logp=ref, beta=0.1, token_entropy=h, entropy_aware_adv=0.2)
    loss_fn = LOSSES[form]
    loss, g, _ = _grad(lambda x: loss_fn(x, old, adv_tok, mask, **kw), logp)
    # garbage (inf, NaN, huge) on every masked position changes nothing
    off = ~mask.bool()
    logp2, old2, adv2, h2, ref2 = logp.clone(), old.clone(), adv_tok.clone(), h.clone(), ref.clone()
    logp2[off], old2[off], adv2[off], h2[off], ref2[off] = -math.inf, math.nan, 1e9, math.nan, 7.0
    kw2 = dict(kw, ref_logp=ref2, token_entropy=h2)
    loss2, g2, _ = _grad(lambda x: loss_fn(x, old2, adv2, mask, **kw2), logp2)
    torch.testing.assert_close(loss2, loss)
    torch.testing.assert_close(g2, g)
    assert torch.all(g2[off] == 0)


# ------------------------------------------------------------------------------------------
# AEPO options
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", LOSSES)
def test_entropy_balanced_clip_keeps_gradient_of_clipped_tokens(form):
    # A = 1, log-ratio 0.05 > log(1.004): standard clip -> zero gradient;
    # balanced: clipped value (1+eps_h) r/sg(r) -> gradient -(1 + eps_h) per token, / 2 tokens
    old = torch.zeros(1, 2)
    logp = torch.full((1, 2), 0.05)
    kw = dict(level="token", eps_high=0.004)
    loss = LOSSES[form]
    _, g_std, m = _grad(lambda x: loss(x, old, torch.tensor([1.0]), torch.ones(1, 2), **kw), logp)
    _, g_bal, m_bal = _grad(
        lambda x: loss(
            x, old, torch.tensor([1.0]), torch.ones(1, 2), entropy_balanced_clip=True, **kw
        ),
        logp,
    )
    assert torch.all(g_std == 0)
    torch.testing.assert_close(g_bal, torch.full((1, 2), -1.004 / 2))
    assert m.get("clip_frac", 1.0) == m_bal.get("clip_frac", 1.0) == 1.0


@pytest.mark.parametrize("form", LOSSES)
def test_entropy_aware_advantage_by_hand(form):
    # H = (1, 3): mean 2, unbiased std sqrt(2): z = (-0.7071, +0.7071); gamma 0.2
    # A' = 2 (1 -+ 0.141421) = (1.717157, 2.282843); ratio 1, mean over 2 tokens -> grad = -A'/2
    old = torch.zeros(1, 2)
    h = torch.tensor([[1.0, 3.0]])
    _, g, _ = _grad(
        lambda x: LOSSES[form](
            x,
            old,
            torch.tensor([2.0]),
            torch.ones(1, 2),
            level="token",
            eps_low=0.5,
            eps_high=0.5,
            token_entropy=h,
            entropy_aware_adv=0.2,
        ),
        old.clone(),
    )
    torch.testing.assert_close(g, torch.tensor([[-1.717157, -2.282843]]) / 2, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------
# Diagnostics
# ------------------------------------------------------------------------------------------
def test_turn_kl_entropy_and_turn_counts_by_hand():
    # row 0: turns with summed log-ratio 0.03 and 0.01 -> shares 0.75, 0.25
    #   softmax: p = sigmoid(0.5) = 0.622459, 0.377541
    #   H = 0.622459*0.474077 + 0.377541*0.974077 = 0.662848; / ln 2 = 0.956288
    # row 1: one turn -> 0;  mean over rows = 0.478144
    old = torch.zeros(2, 5)
    logp = torch.tensor([[0.01, 0.02, 0.0, 0.01, 0.0], [0.02, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0]])
    _, m = loss_and_stats(logp, old, torch.tensor([1.0, 1.0]), mask)
    assert m["turn_kl_entropy"] == pytest.approx(0.478144, abs=1e-6)
    assert m["single_turn_rows"] == 1
    assert m["mean_turns_per_row"] == pytest.approx(1.5)


def test_turn_kl_entropy_is_zero_when_nothing_changed():
    logp, old, adv, mask = random_batch(1)
    _, m = loss_and_stats(old.clone(), old, adv, mask)
    assert m["turn_kl_entropy"] == 0.0
    assert m["approx_kl"] == 0.0
    assert m["clip_frac"] == 0.0


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", LOSSES)
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(level="word"), "level must be"),
        (dict(agg="mean"), "agg must be"),
        (dict(agg="seq-mean-token-sum"), "agg must be"),
        (dict(turn_ratio="arith"), "turn_ratio"),
        (dict(beta=0.1), "needs ref_logp"),
        (dict(entropy_aware_adv=0.2), "needs token_entropy"),
    ],
)
def test_bad_options_raise(kwargs, match, form):
    logp, old, adv, mask = random_batch(0)
    with pytest.raises(ValueError, match=match):
        LOSSES[form](logp, old, adv, mask, **kwargs)


@pytest.mark.parametrize("form", LOSSES)
def test_bad_inputs_raise(form):
    logp, old, adv, mask = random_batch(0)
    with pytest.raises(ValueError, match="old_logp has shape"):
        LOSSES[form](logp, old[:, :3], adv, mask)
    with pytest.raises(ValueError, match="advantages must be"):
        LOSSES[form](logp, old, adv[:2], mask)
    with pytest.raises(ValueError, match="only 0 and 1"):
        LOSSES[form](logp, old, adv, mask * 2)


@pytest.mark.parametrize("form", LOSSES)
def test_a_non_finite_input_is_named_with_its_position(form):
    logp, old, adv, mask = random_batch(0)
    bad = logp.clone()
    r, c = (int(i) for i in torch.nonzero(mask)[0])
    bad[r, c] = math.nan
    with pytest.raises(ValueError, match=rf"logp\[{r}, {c}\] is not finite"):
        LOSSES[form](bad, old, adv, mask)
    off = logp.clone()
    off[mask == 0] = -math.inf  # padding and observations are never read
    LOSSES[form](off, old, adv, mask)
    bad_adv = adv.clone()
    bad_adv[r] = math.inf
    with pytest.raises(ValueError, match=rf"advantages\[{r}\] is not finite"):
        LOSSES[form](logp, old, bad_adv, mask)


# ------------------------------------------------------------------------------------------
# Simulated policy change (notebook 03)
# ------------------------------------------------------------------------------------------
def test_simulated_change_shifts_whole_turns_and_leaves_masked_tokens():
    mask = torch.tensor([[1, 1, 0, 1, 1, 1, 0]])
    old = -torch.arange(7.0)[None]
    new = simulate_policy_change(
        old,
        mask,
        turn_drift_std=0.1,
        token_noise_std=0.0,
        generator=torch.Generator().manual_seed(0),
    )
    d = new - old
    assert d[0, 2] == 0 and d[0, 6] == 0
    torch.testing.assert_close(d[0, 1], d[0, 0])
    torch.testing.assert_close(d[0, 3:6], d[0, 3].expand(3))
    assert abs(float(d[0, 0] - d[0, 3])) > 1e-6
    # the drift of turn k is the generator's k-th draw (times σ_turn), in order of first token
    drift = torch.randn(2, generator=torch.Generator().manual_seed(0)) * 0.1
    torch.testing.assert_close(d[0, [0, 3]], drift)


def test_turn_level_clips_fewer_tokens_under_token_noise():
    # per-token noise averages out inside a turn's geometric mean, so turn ratios stay
    # inside [1 - 3e-3, 1 + 4e-3] far more often than token ratios do
    g = torch.Generator().manual_seed(0)
    b, t = 32, 240
    mask = torch.zeros(b, t, dtype=torch.long)
    for k in range(4):  # four turns of 40 tokens, 20 observation tokens between them
        mask[:, k * 60 : k * 60 + 40] = 1
    old = -torch.rand(b, t, generator=g)
    new = simulate_policy_change(old, mask, turn_drift_std=5e-4, token_noise_std=1e-2, generator=g)
    adv = torch.randn(b, generator=g)
    frac = clip_fraction_by_level(new, old, adv, mask)
    assert frac["turn"] < 0.5 * frac["token"]
    assert frac["sequence"] <= frac["turn"] + 0.05


# ------------------------------------------------------------------------------------------
# verl's low-var-KL clamp; the vectorised loss against a per-row loop
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", LOSSES)
def test_k3_kl_is_clamped_per_token_at_10_as_verl(form):
    # token 0: ref - logp = 5 -> e^5 - 5 - 1 = 142.41 -> clamped to 10 (no gradient);
    # token 1: ref - logp = 0.1 -> 0.0051709 (unclamped, gradient 1 - e^0.1 per unit beta)
    logp = torch.zeros(1, 2)
    ref = torch.tensor([[5.0, 0.1]])
    loss, g, m = _grad(
        lambda x: LOSSES[form](
            x,
            x.detach(),
            torch.tensor([0.0]),
            torch.ones(1, 2),
            ref_logp=ref,
            beta=1.0,
            agg="token-mean",
        ),
        logp,
    )
    small = math.exp(0.1) - 0.1 - 1
    assert m.get("ref_kl", (10.0 + small) / 2) == pytest.approx((10.0 + small) / 2)
    assert loss.item() == pytest.approx((10.0 + small) / 2)
    torch.testing.assert_close(g, torch.tensor([[0.0, (1 - math.exp(0.1)) / 2]]))


def _authors_loop():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_losses.py"
    spec = importlib.util.spec_from_file_location("bench_losses", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.authors_turn_loss


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_turn_loss_equals_a_per_row_loop(seed):
    """The benchmark's per-row, per-turn loop (authors' organisation) and ``policy_loss`` with
    ``loss_diagnostics`` agree on loss, gradient and diagnostics (float64: to 1e-12)."""
    logp, old, adv, mask = random_batch(seed, b=6, t=40, scale=0.01)
    mask[seed % 6] = 0  # a row without model tokens
    authors = _authors_loop()
    loss_a, grad_a, m_a = _grad(lambda x: authors(x, old, adv, mask), logp)
    loss_b, grad_b, m_b = _grad(lambda x: loss_and_stats(x, old, adv, mask, level="turn"), logp)
    assert loss_a.item() == pytest.approx(loss_b.item(), abs=1e-12)
    torch.testing.assert_close(grad_a, grad_b, atol=1e-12, rtol=0)
    for key in m_a:
        assert m_a[key] == pytest.approx(m_b[key], abs=1e-12), key


def test_turn_ids_out_of_order_give_the_same_loss():
    """Turn ids are labels: renaming them (ids that jump back) changes nothing."""
    logp, old, adv, mask = random_batch(3, b=2, t=12)
    mask = torch.ones_like(mask)
    ordered = torch.tensor([[0] * 4 + [1] * 4 + [2] * 4, [0] * 6 + [1] * 6])
    shuffled = torch.tensor([[5] * 4 + [1] * 4 + [3] * 4, [9] * 6 + [2] * 6])
    a, ma = loss_and_stats(logp, old, adv, mask, turn_ids=ordered)
    b, mb = loss_and_stats(logp, old, adv, mask, turn_ids=shuffled)
    assert a.item() == pytest.approx(b.item(), abs=1e-12)
    assert ma == pytest.approx(mb)
    batch = LossBatch(logp, old, adv, mask, turn_ids=shuffled)
    assert policy_loss(batch).item() == pytest.approx(a.item())


@pytest.mark.parametrize("level", ["token", "turn"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_half_precision_log_probs_run_in_float32_and_return_their_dtype(level, beta):
    """A bf16 policy without autocast (DeepSpeed's bf16) gives bf16 log-probs beside float32
    old ones: the loss runs in float32 (as it does on the same values given in float32) and
    returns the gradient in bf16."""
    logp, old, adv, mask = random_batch(5, b=4, t=20)
    half = logp.to(torch.bfloat16)
    old, adv = old.float(), adv.float()
    kw = dict(
        level=level, eps_low=0.003, eps_high=0.004, beta=beta, ref_logp=old + 0.05 if beta else None
    )
    x = half.clone().requires_grad_(True)
    loss, _ = loss_and_stats(x, old, adv, mask, **kw)
    (grad,) = torch.autograd.grad(loss, x)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    loss_r, grad_r, _ = _grad(lambda y: loss_and_stats(y, old, adv, mask, **kw), half.float())
    torch.testing.assert_close(loss.detach(), loss_r.float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, grad_r.to(torch.bfloat16), rtol=1e-2, atol=1e-4)
