"""A stand-in ``vllm`` package for CPU tests (vLLM needs a GPU and is not installed here).

:func:`install` puts it into ``sys.modules`` through pytest's ``monkeypatch`` (so it is gone
after the test). ``vllm.LLM(model=...)`` records which model every engine was built from and
with which arguments (:data:`ENGINES`), then really loads that checkpoint with transformers and
answers ``generate`` with the project's Hugging Face backend: greedy requests give exactly the
tokens the HF backend gives for the same weights, so a test can tell *which* weights an
evaluation used, not only how many engines it started. Per-request ``SamplingParams`` (stops,
seeds, temperature, max tokens) are honoured as the backend reads them.

``llm_engine`` is vLLM's step-level engine as the rollout's queue drives it
(:class:`StepEngine`): a request's turn is computed when it is added and ends as many steps
later as it has tokens, so turns of different lengths end at different steps, as rows of a
continuously batched engine do.

The colocated engine's sleep mode (``sleep``/``wake_up``) is recorded in ``events``, and an
engine asleep, or whose weights a level-2 sleep discarded, refuses to generate (vLLM would run
without a KV cache, or on freed weights). :class:`EchoLLM` is an engine without a model, for
tests of the calls themselves.
"""

from __future__ import annotations

import enum
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
    output_kind: "RequestOutputKind | None" = None


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


def TokensPrompt(prompt_token_ids: list[int]) -> dict[str, list[int]]:  # noqa: N802 - vLLM's name
    return {"prompt_token_ids": list(prompt_token_ids)}


def tokens_input(prompt_token_ids: list[int]) -> dict:
    """vLLM's rendered token input (what ``LLM.generate`` hands ``add_request``)."""
    return {"type": "token", "prompt_token_ids": list(prompt_token_ids)}


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
    request_id: str = ""
    finished: bool = True


class StepEngine:
    """``LLM.llm_engine`` as the rollout's queue drives it: ``add_request``, ``step``,
    ``abort_request``. Records every request (``requests``: id, prompt ids, params, the engine
    clock at which it was added)."""

    def __init__(self, llm: "_Engine") -> None:
        self.llm = llm
        self.clock = 0
        self.running: dict[str, tuple[int, _RequestOutput]] = {}
        self.requests: list[tuple[str, list[int], SamplingParams, int]] = []
        self.aborted: list[str] = []
        self.ended: dict[str, int] = {}
        """Request id -> the step at which it ended."""

    def add_request(self, request_id: str, prompt: dict, params: SamplingParams) -> str:
        if request_id in self.running:
            raise ValueError(f"stand-in vLLM: request id {request_id!r} is running already")
        self.llm.check_awake()
        ids = list(prompt["prompt_token_ids"])
        output = self.llm._one(ids, params)
        output.request_id = request_id
        ends = self.clock + max(1, len(output.outputs[0].token_ids))
        self.running[request_id] = (ends, output)
        self.requests.append((request_id, ids, params, self.clock))
        self.llm.prompts_seen += 1
        return request_id

    def step(self) -> list[_RequestOutput]:
        self.clock += 1
        done = [rid for rid, (ends, _) in self.running.items() if ends <= self.clock]
        self.ended.update((rid, self.clock) for rid in done)
        return [self.running.pop(rid)[1] for rid in done]

    def abort_request(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.running.pop(rid, None)
            self.aborted.append(rid)


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
        self.llm_engine = StepEngine(self)
        ENGINES.append(self)

    def check_awake(self) -> None:
        """vLLM would run without a KV cache, or on freed weights: refuse."""
        if self.asleep or not self.weights_loaded:
            raise RuntimeError(
                "stand-in vLLM: generate() while the engine sleeps "
                f"(KV cache asleep: {self.asleep}, weights loaded: "
                f"{self.weights_loaded})"
            )

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
        self.check_awake()
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

    @classmethod
    def wrapping(cls, policy, tokenizer) -> "LLM":
        """An engine answering with ``policy`` as it is in memory (a model whose changes
        ``save_pretrained`` would not keep, such as a tag-biased LM head)."""
        engine = cls.__new__(cls)
        _Engine.__init__(engine, "in-memory")
        engine.policy, engine.tokenizer = policy, tokenizer
        return engine

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
    """Make ``import vllm`` (and ``vllm.inputs``, ``vllm.sampling_params``) return the stand-in
    for this test."""
    ENGINES.clear()
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt, inputs.tokens_input = TokensPrompt, tokens_input
    params = types.ModuleType("vllm.sampling_params")
    params.SamplingParams, params.RequestOutputKind = SamplingParams, RequestOutputKind
    module.inputs, module.sampling_params = inputs, params
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", params)
    return module
