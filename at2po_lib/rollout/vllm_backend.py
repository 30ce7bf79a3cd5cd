r"""The turn backend on vLLM (paper scale): same interface as :class:`~.backends.HFBackend`.

Written against vLLM's current offline API (``vllm.LLM.generate`` with ``TokensPrompt``
inputs and per-request ``SamplingParams``); vLLM is imported only when this backend is built
(it is not a dependency of the toy profiles).

How it maps onto the rollout's needs:

- **Token ids in, token ids out.** Each request is a ``TokensPrompt(prompt_token_ids=context)``;
  the turn is ``CompletionOutput.token_ids``. Nothing is re-tokenised.
- **Stops.** Tags that are single tokens go to ``stop_token_ids``; the others (``</search>``
  is several tokens in Qwen's tokenizer) to ``stop`` with ``include_stop_str_in_output=True``,
  so the turn's ids end with the tokens that spell the tag. EOS ends a turn as usual.
- **Shared prefixes.** The engine is created with ``enable_prefix_caching=True``: a branch
  re-sampling a turn from its ancestor's context finds that context's KV blocks in vLLM's
  cache, which plays the role of the HF backend's :class:`~.kvcache.KVPrefix`.
- **Log-probabilities.** The engine runs with ``logprobs_mode="processed_logprobs"`` (as TRL
  does), so the recorded log-prob of each sampled token is taken after the temperature, i.e.
  ``log_softmax(logits / T)`` as the trainer recomputes it. With ``top_p < 1`` vLLM's
  processed values are renormalised over the nucleus (the HF backend records untruncated
  values); the paper samples with ``top_p = 1``, where both agree.
- **Sampling seed.** Every request gets its own ``SamplingParams.seed``, a pure function of
  the backend's ``seed`` (the trainer passes its rollout seed, itself a function of ``--seed``,
  the rollout step, the dynamic-sampling round and the process: ``AT2POTrainer.rollout_seed``),
  the number of ``generate_turns`` calls made so far and the request's position
  (:func:`request_seeds`). Runs with different ``--seed`` therefore sample different streams, a
  rerun repeats its stream, and a resumed run samples step N exactly as the uninterrupted run did
  (the backend is made afresh for every rollout step). Identical contexts in one call (the M
  chains of a root) get different seeds, so they are not copies of one another. Exact repeats
  also need vLLM's batch-invariant kernels: the seed fixes the random draws, not the
  floating-point order of a differently batched forward pass.
- **Entropies.** vLLM returns the top-``k`` log-probs only (``k = topk_entropy_k``, 10 as in
  the AEPO code), so the exact per-token entropy is not available (NaN; use
  ``rollout.entropy_estimate = "sampled_nll"``, the authors' estimate) and AEPO's top-k
  entropy is computed from those values, as the AEPO code does.

    backend = VLLMBackend("Qwen/Qwen3-4B", tokenizer, SamplingSpec(1.0), turn_stops("atpo"),
                          gpu_memory_utilization=0.6, max_model_len=8192)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .turns import BackendStats, TurnRequest, TurnResult, eos_token_ids, split_stop_sequences
from .kvcache import KVPrefix
from .sampling import SamplingSpec


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # ImportError, or a broken CUDA install raising at import
        return False
    return True


def topk_entropy(logprobs: dict[int, Any], k: int) -> float:
    """-sum p log p over the ``k`` best-ranked entries of one step's vLLM log-prob dict (the
    dict may also hold the sampled token when it ranked below ``k``)."""
    values = sorted((lp.logprob for lp in logprobs.values()), reverse=True)[:k]
    return -sum(math.exp(v) * v for v in values if math.isfinite(v))


def request_seeds(seed: int, call: int, count: int) -> list[int]:
    """Per-request sampling seeds of one ``generate_turns`` call: ``count`` 31-bit integers from
    ``numpy.random.SeedSequence([seed, call])`` (distinct with overwhelming probability;
    deterministic in ``(seed, call)``)."""
    if count <= 0:
        return []
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(call)]).generate_state(count)
    return [int(x) & 0x7FFFFFFF for x in state]


class VLLMBackend:
    """Batched turns with ``vllm.LLM``; see the module docstring."""

    keeps_cache = False  # vLLM's prefix cache does the reuse inside the engine

    def __init__(self, model, tokenizer, sampling: SamplingSpec, stop_sequences: Sequence[str],
                 seed: int = 0, llm: Any = None, **engine_kwargs: Any) -> None:
        from vllm import LLM

        self.tokenizer, self.sampling, self.seed = tokenizer, sampling, seed
        if llm is None:
            name = model if isinstance(model, str) else getattr(model, "name_or_path", None)
            if not name:
                raise ValueError("VLLMBackend needs a model name/path (or a ready vllm.LLM as llm=)")
            engine_kwargs.setdefault("enable_prefix_caching", True)
            engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")
            engine_kwargs.setdefault("seed", seed)
            llm = LLM(model=str(name), **engine_kwargs)
        self.llm = llm
        stop_ids, self.stop_strings = split_stop_sequences(tokenizer, stop_sequences)
        if not isinstance(model, str) and model is not None:
            stop_ids |= eos_token_ids(model, tokenizer)
        elif tokenizer.eos_token_id is not None:
            stop_ids.add(tokenizer.eos_token_id)
        self.stop_ids = sorted(stop_ids)
        self.stats = BackendStats()
        self.calls = 0
        """``generate_turns`` calls so far (the second input of :func:`request_seeds`)."""

    def prefill(self, contexts: Sequence[list[int]]) -> list[KVPrefix | None]:
        return [None] * len(contexts)  # the engine's prefix cache shares prompts by itself

    def sampling_params(self, max_tokens: int, seed: int | None = None):
        from vllm import SamplingParams

        return SamplingParams(
            n=1,
            seed=seed,
            temperature=self.sampling.temperature,  # 0 = greedy in vLLM too
            top_p=self.sampling.top_p,
            top_k=-1,  # no top-k truncation (-1 is accepted by old and current vLLM)
            max_tokens=max_tokens,
            stop=list(self.stop_strings) or None,
            stop_token_ids=list(self.stop_ids),
            include_stop_str_in_output=True,
            logprobs=self.sampling.topk_entropy_k,
            skip_special_tokens=False,
        )

    def generate_turns(self, requests: Sequence[TurnRequest]) -> list[TurnResult]:
        from vllm.inputs import TokensPrompt

        if not requests:
            return []
        prompts = [TokensPrompt(prompt_token_ids=list(r.context)) for r in requests]
        seeds = request_seeds(self.seed, self.calls, len(requests))
        self.calls += 1
        params = [self.sampling_params(r.max_new_tokens, s) for r, s in zip(requests, seeds)]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        results = [self._result(out.outputs[0]) for out in outputs]
        self.stats.turns += len(requests)
        self.stats.generated_tokens += sum(len(r.token_ids) for r in results)
        self.stats.prefill_tokens += sum(len(r.context) for r in requests)  # upper bound: cache hits not seen
        return results

    def _result(self, completion) -> TurnResult:
        token_ids = list(completion.token_ids)
        steps = completion.logprobs or [{} for _ in token_ids]
        logps = [float(step[tok].logprob) if tok in step else float("nan")
                 for tok, step in zip(token_ids, steps)]
        k = self.sampling.topk_entropy_k
        return TurnResult(
            token_ids=token_ids, logps=logps, entropies=[float("nan")] * len(token_ids),
            topk_entropies=[topk_entropy(step, k) for step in steps],
            stopped=completion.finish_reason == "stop", prefix=None,
        )

