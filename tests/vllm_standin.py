"""A stand-in ``vllm`` package for CPU tests (vLLM needs a GPU and is not installed here).

:func:`install` puts it into ``sys.modules`` through pytest's ``monkeypatch`` (so it is gone
after the test). ``vllm.LLM(model=...)`` records which model every engine was built from and
with which arguments (:data:`ENGINES`), then really loads that checkpoint with transformers and
answers ``generate`` with the project's Hugging Face backend: greedy requests give exactly the
tokens the HF backend gives for the same weights, so a test can tell *which* weights an
evaluation used, not only how many engines it started. Per-request ``SamplingParams`` (stops,
seeds, temperature, max tokens) are honoured as the backend reads them.

The colocated engine's sleep mode (``sleep``/``wake_up``) is recorded in ``events``, and an
engine asleep, or whose weights a level-2 sleep discarded, refuses to generate (vLLM would run
without a KV cache, or on freed weights). :class:`EchoLLM` is an engine without a model, for
tests of the calls themselves.
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass, field
from typing import Any

ENGINES: list["LLM"] = []
"""Every engine built since :func:`install`, in order."""


@dataclass
class SamplingParams:
    n: int = 1
    seed: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    stop: list[str] | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    logprobs: int | None = None
    skip_special_tokens: bool = True


def TokensPrompt(prompt_token_ids: list[int]) -> dict[str, list[int]]:  # noqa: N802 - vLLM's name
    return {"prompt_token_ids": list(prompt_token_ids)}


@dataclass
class _Logprob:
    logprob: float


@dataclass
class _Completion:
    token_ids: list[int]
    logprobs: list[dict[int, _Logprob]]
    finish_reason: str


@dataclass
class _RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[_Completion]


class _Engine:
    """What every stand-in engine records: construction, calls, sleep mode."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model_path = str(model)
        self.kwargs = kwargs
        self.generate_calls = 0
        self.prompts_seen = 0
        self.inputs: list[list[tuple[list[int], int | None]]] = []
        """Per ``generate`` call: (prompt ids, request seed) of every request, in order."""
        self.events: list[str] = []
        self.asleep = False
        self.weights_loaded = True
        ENGINES.append(self)

    def sleep(self, level: int = 1) -> None:
        self.events.append(f"sleep({level})")
        self.asleep = True
        if level == 2:  # level 2 discards the weights: they must be loaded again
            self.weights_loaded = False

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.events.append(f"wake_up({','.join(tags or [])})")
        if tags is None or "kv_cache" in tags:
            self.asleep = False

    def load_weights(self) -> None:
        """What TRL's ``sync_weights`` does to the engine (``model.load_weights``)."""
        self.events.append("load_weights")
        self.weights_loaded = True

    def reset_prefix_cache(self) -> None:
        self.events.append("reset_prefix_cache")

    def generate(self, prompts, sampling_params, use_tqdm: bool = True) -> list[_RequestOutput]:
        if self.asleep or not self.weights_loaded:
            raise RuntimeError(
                "stand-in vLLM: generate() while the engine sleeps "
                f"(KV cache asleep: {self.asleep}, weights loaded: "
                f"{self.weights_loaded})"
            )
        params = (
            sampling_params
            if isinstance(sampling_params, list)
            else [sampling_params] * len(prompts)
        )
        self.generate_calls += 1
        self.prompts_seen += len(prompts)
        self.inputs.append(
            [(list(p["prompt_token_ids"]), sp.seed) for p, sp in zip(prompts, params)]
        )
        return [self._one(p["prompt_token_ids"], sp) for p, sp in zip(prompts, params)]


class EchoLLM(_Engine):
    """No model: the completion of a prompt is its last id + 1, + 2, ... (``max_tokens`` of
    them), so a caller can check that it got the answers to its own prompts."""

    def _one(self, context: list[int], sp: SamplingParams) -> _RequestOutput:
        tokens = [int(context[-1]) + i for i in range(1, sp.max_tokens + 1)]
        return _RequestOutput(
            list(context), [_Completion(tokens, [{t: _Logprob(-0.5)} for t in tokens], "length")]
        )


class LLM(_Engine):
    """Records its construction; generates with the HF backend on the loaded checkpoint."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        from at2po_lib.policy.model import load_policy

        super().__init__(model, **kwargs)
        self.policy, self.tokenizer = load_policy(self.model_path)

    def _one(self, context: list[int], sp: SamplingParams) -> _RequestOutput:
        from at2po_lib.rollout.backends import HFBackend
        from at2po_lib.rollout.sampling import SamplingSpec
        from at2po_lib.rollout.turns import TurnRequest

        backend = HFBackend(
            self.policy,
            self.tokenizer,
            SamplingSpec(temperature=sp.temperature, top_p=sp.top_p),
            tuple(sp.stop or ()),
            seed=sp.seed or 0,
            keep_cache=False,
        )
        backend.stop_ids = _as_tensor(sorted(set(sp.stop_token_ids)), backend.stop_ids)
        turn = backend.generate_turns([TurnRequest(list(context), sp.max_tokens)])[0]
        logprobs = [
            {tok: _Logprob(lp if math.isfinite(lp) else 0.0)}
            for tok, lp in zip(turn.token_ids, turn.logps)
        ]
        return _RequestOutput(
            list(context),
            [_Completion(list(turn.token_ids), logprobs, "stop" if turn.stopped else "length")],
        )


def _as_tensor(values: list[int], like):
    import torch

    return torch.tensor(values, dtype=like.dtype, device=like.device)


def install(monkeypatch) -> types.ModuleType:
    """Make ``import vllm`` (and ``vllm.inputs``) return the stand-in for this test."""
    ENGINES.clear()
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = TokensPrompt
    module.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    return module
