"""The engines tier's guard (tests/test_engines_*.py): a module whose engine is missing skips,
saying how to run it, except inside ``./run_tests.sh --engines`` (``AT2PO_ENGINES=1``), where a
missing engine fails the tier instead of letting it pass on nothing. Also the tier's one check
of a synced colocated engine against the trained model (:func:`assert_synced`)."""

from __future__ import annotations

import os

import pytest


def require_engine(what: str, installed: bool) -> None:
    """Skip the calling test module (or fail the tier) when ``what`` is not ``installed``."""
    if installed:
        return
    if os.environ.get("AT2PO_ENGINES") == "1":
        raise RuntimeError(
            f"the engines tier runs without {what}: scripts/bootstrap_engines.sh did not install it"
        )
    pytest.skip(
        f"{what} is not installed: the engines tier runs with ./run_tests.sh --engines",
        allow_module_level=True,
    )


BF16_TIE_NATS = 0.1
"""Largest log-prob margin at which the colocated engine (vLLM's CPU kernels, bf16) and a bf16
copy of the trained model (``transformers``' kernels) may pick different greedy tokens: two
kernels that sum in another order round a bf16 logit differently by an ulp or a few (an ulp is
2^-7 to 2^-5 at logits of 2 to 8), so a near-tie can break either way. An engine that still
held the old weights parts from the model where the update moved the answer, by margins far
above this."""


def assert_synced(result: dict) -> None:
    """A colocated scenario's answers (tests/engines_entry.py): equal before training, the
    engine stale after the update (its answers as before while the model's changed), and after
    the sync the engine's answers those of the updated model, except where the model's own
    margin between the two tokens at their first difference is a bf16 near-tie
    (``after_gaps``, :data:`BF16_TIE_NATS`); the sync moved the engine's answers."""
    assert result["before"] == result["before_hf"]
    changed = [i for i, (a, b) in enumerate(zip(result["before_hf"], result["after_hf"])) if a != b]
    assert changed, "the update changed no greedy answer: raise the learning rate"
    assert result["stale"] == result["before"]
    assert result["after"] != result["stale"], "the sync left the engine's answers as they were"
    assert_engine_holds(result["after"], result["after_hf"], result["after_gaps"])


def assert_engine_holds(engine: list, model: list, gaps: list[float]) -> None:
    """The engine's greedy answers are the model's (a bf16 copy's) except where the model's
    own log-prob margin between the two tokens at their first difference (``gaps``, one per
    differing row) is a bf16 near-tie (:data:`BF16_TIE_NATS`)."""
    assert len(gaps) == sum(a != b for a, b in zip(engine, model))
    assert all(abs(gap) <= BF16_TIE_NATS for gap in gaps), gaps
