r"""The turn backend on vLLM (paper scale): same interface as :class:`~.backends.HFBackend`.

Written against vLLM's current offline API (``vllm.LLM.generate`` with ``TokensPrompt``
inputs and per-request ``SamplingParams``, and the step-level ``LLM.llm_engine`` under it);
vLLM is imported only when this backend is built (it is not a dependency of the toy profiles).

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
- **Batching.** Every chain of an expansion round goes into one continuous queue on the engine
  (:mod:`.vllm_queue`, ``rollout.decode_grouping`` ``auto``/``round``): a row whose turn ends
  gets its observation and its next turn joins the running batch while the other rows go on,
  so no row waits for the slowest turn of its depth. ``turn`` (and a tensor-parallel group,
  whose ranks must submit identical requests, and AEPO, which branches between turn depths)
  makes one ``generate`` call per turn depth instead (:meth:`VLLMBackend.generate_turns`).
- **Sampling seed.** vLLM 0.31 has no seed per call (``LLM(seed=...)`` seeds the engine once;
  an unseeded request draws at the batch position it lands in), so every *sampled* request
  carries its own ``SamplingParams.seed``, a pure function of the backend's ``seed`` (the
  trainer passes its rollout seed, itself a function of ``--seed``, the rollout step, the
  dynamic-sampling round and the process: ``AT2POTrainer.rollout_seed``) and of the request's
  place: its queue, row and turn (:func:`~.vllm_queue.turn_seed`), or with ``turn`` grouping the
  number of ``generate_turns`` calls made so far and its position (:func:`request_seeds`). Runs
  with different ``--seed`` therefore sample different streams, a rerun repeats its stream,
  and a resumed run samples step N exactly as the uninterrupted run did (the backend is made
  afresh for every rollout step). Identical contexts (the M chains of a root) get different
  seeds, so they are not copies of one another. Greedy requests carry no seed: vLLM draws
  nothing for them, and a seeded request costs vLLM's sampler a per-row step in Python.
  Exact repeats also need vLLM's batch-invariant kernels: the seed fixes the random draws,
  not the floating-point order of a differently batched forward pass.
- **Entropies.** vLLM returns the top-``k`` log-probs only, so the exact per-token entropy is
  not available (NaN; use ``rollout.entropy_estimate = "sampled_nll"``, the authors' estimate).
  Only AEPO reads the top-``k`` entropy (:func:`~.aepo.aepo_turn_entropy`), so only an AEPO
  rollout (``topk_logprobs=True``; ``make_backend`` sets it for ``rollout.expansion = aepo``)
  asks for ``k = topk_entropy_k`` log-probs a token (10, as the AEPO code) and computes it from
  them as the AEPO code does; the other methods ask for the sampled token's log-prob only and
  record NaN top-``k`` entropies (vLLM then builds one log-prob entry a token, not eleven).

- **One engine per policy, never one per call.** The backend never starts an engine: it is
  handed one, either the trainer's colocated engine (TRL's, whose weights it syncs from the
  policy being trained) or the one :func:`build_engine` starts once from the checkpoint being
  evaluated, with the profile's share of the GPU (``train.vllm_gpu_memory_utilization``). A
  backend is a cheap view of that engine (its sampling settings and seeds), so evaluation makes
  one per batch without a second engine start; a model object (whose ``name_or_path`` may still
  be the hub name of the untrained weights) is refused.

- **The colocated engine, driven as TRL drives it.** The trainer does not call the engine TRL
  built directly: :func:`colocated_engine` wraps TRL's ``VLLMGeneration`` with what its own
  ``generate`` does around ``llm.generate``, over a whole rollout instead of one
  call, because the agent generates turn by turn. *Sleep mode*
  (``vllm_enable_sleep_mode``): weights re-pushed from the training model if they were
  discarded (TRL's ``sync_weights``), the KV cache woken before the first turn, the engine
  put back to sleep (level 2) after the last. *Tensor parallelism*
  (``vllm_tensor_parallel_size > 1``): the ranks of one TP group run one engine together and
  must submit identical requests, so every call gathers the group's requests
  (``all_gather_object`` over TRL's ``tp_group``), generates all of them and keeps this rank's
  share; a rank whose rollout ends first keeps joining its group's calls (with no requests of
  its own) until every rank of the group has finished, so no rank waits on a collective the
  others never enter.

    engine = build_engine("results/runs/.../checkpoints/checkpoint-240", profile_cfg)
    backend = VLLMBackend(engine, tokenizer, SamplingSpec(1.0), turn_stops("atpo"))
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ..policy.tokenizer import load_tokenizer
from ..util.staging import staging_path, swap_in
from .kvcache import KVPrefix
from .sampling import SamplingSpec
from ..config.choices import DECODE_GROUPINGS
from .vllm_cpu import install_shims as install_vllm_shims
from .turns import BackendStats, TurnRequest, TurnResult, eos_token_ids, split_stop_sequences
from .vllm_queue import QueueSession, step_engine, turn_seed

# Imported inside the functions that use them: peft; peft only for a LoRA checkpoint.
# Imported inside the functions that use them: vllm; vLLM is optional, installed only in the GPU
# environment.


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # ImportError, or a broken CUDA install raising at import
        return False
    return True


def is_engine(obj: Any) -> bool:
    """A vLLM engine (or a wrapper with its ``generate``), not a torch module, a name or None."""
    return (
        obj is not None
        and not isinstance(obj, (str, torch.nn.Module))
        and callable(getattr(obj, "generate", None))
    )


def engine_max_model_len(profile_cfg) -> int:
    """The context an engine must hold: ``rollout.max_prompt_tokens + max_response_tokens`` (as
    the trainer sets ``vllm_max_model_length``)."""
    rollout = profile_cfg.rollout
    return rollout.max_prompt_tokens + rollout.max_response_tokens


def build_engine(model_path: str | Path, profile_cfg, seed: int = 0, **engine_kwargs: Any):
    """The one engine that evaluates ``model_path`` (a checkpoint folder, a LoRA checkpoint
    merged first by :func:`engine_weights`, or the hub name when the hub weights are the policy
    being evaluated, as for the ReAct row): started once,
    with the profile's GPU share (``train.vllm_gpu_memory_utilization``: what the colocated
    engine takes during training), dtype (``policy.dtype``) and context length, prefix caching on and log-probs after
    the temperature (as TRL's engine). ``engine_kwargs`` override these.

    The EOS ids of the checkpoint's ``generation_config.json`` (Qwen3 has two) are kept on the
    engine as ``at2po_eos_ids`` for the backends that sample from it."""
    from vllm import LLM  # heavy, GPU-only: imported when an engine is started

    install_vllm_shims()  # vLLM's CPU build only
    model_path = engine_weights(model_path)
    kwargs = {
        "gpu_memory_utilization": profile_cfg.train.vllm_gpu_memory_utilization,
        # the profile's dtype, not vLLM's "auto" (which runs a float32 checkpoint in bf16)
        "dtype": profile_cfg.policy.dtype,
        "max_model_len": engine_max_model_len(profile_cfg),
        "enable_prefix_caching": True,
        "logprobs_mode": "processed_logprobs",
        "seed": seed,
        **engine_kwargs,
    }
    engine = LLM(model=str(model_path), **kwargs)
    engine.at2po_eos_ids = checkpoint_eos_ids(model_path)
    return engine


MERGED_FOLDER = "merged"
"""Where :func:`engine_weights` writes a LoRA checkpoint's merged model (inside it)."""


def engine_weights(model_path: str | Path) -> str | Path:
    """What vLLM loads for ``model_path``: the folder itself, or for a LoRA checkpoint (peft's
    ``adapter_config.json``, no ``config.json``: what a LoRA run saves) the base with the
    adapters merged in, written once to ``<checkpoint>/merged`` (vLLM loads whole models)."""
    folder = Path(str(model_path)).expanduser()
    if not (folder / "adapter_config.json").is_file() or (folder / "config.json").is_file():
        return model_path
    merged = folder / MERGED_FOLDER
    if (merged / "config.json").is_file():
        return merged
    from peft import AutoPeftModelForCausalLM

    model = AutoPeftModelForCausalLM.from_pretrained(str(folder)).merge_and_unload()
    work = staging_path(merged)
    model.save_pretrained(work)
    load_tokenizer(folder).save_pretrained(work)
    swap_in(work, merged)  # a killed merge leaves no folder that looks finished
    return merged


def checkpoint_eos_ids(model_path: str | Path) -> set[int]:
    """``eos_token_id`` of a checkpoint folder's ``generation_config.json`` (empty when there
    is none, e.g. a hub name: the tokenizer's EOS then stops turns)."""
    path = Path(str(model_path)).expanduser() / "generation_config.json"
    if not path.is_file():
        return set()
    try:
        value = json.loads(path.read_text()).get("eos_token_id")
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if value is None:
        return set()
    return {int(value)} if isinstance(value, int) else {int(v) for v in value}


AllGather = Callable[[Any], list[Any]]
"""``all_gather(obj) -> [obj of rank 0, obj of rank 1, ...]`` over one tensor-parallel group."""


def tp_all_gather(generation: Any) -> AllGather:
    """``torch.distributed.all_gather_object`` over TRL's TP group (``generation.tp_group``)."""
    size = generation.tensor_parallel_size

    def gather(obj: Any) -> list[Any]:
        out: list[Any] = [None] * size
        torch.distributed.all_gather_object(out, obj, group=generation.tp_group)
        return out

    return gather


class ColocatedEngine:
    """TRL's colocated engine (``VLLMGeneration.llm``) with ``VLLMGeneration.generate``'s TP
    gathering, for per-request ``SamplingParams``; see the module docstring. Made by
    :func:`colocated_engine`, which also handles sleep mode around it.

    ``all_gather``/``group_rank``: this rank's TP group (TRL's ``tp_group`` by default)."""

    def __init__(
        self, generation: Any, all_gather: AllGather | None = None, group_rank: int | None = None
    ) -> None:
        self.generation = generation
        self.llm = generation.llm
        self.tp_size = int(getattr(generation, "tensor_parallel_size", 1) or 1)
        self.at2po_eos_ids = set(getattr(self.llm, "at2po_eos_ids", ()))
        if self.tp_size > 1:
            self.all_gather = all_gather or tp_all_gather(generation)
            self.group_rank = (
                group_rank
                if group_rank is not None
                else torch.distributed.get_rank(group=generation.tp_group)
            )
        self.generate_calls = 0
        """``llm.generate`` calls (with TP: one per turn depth, plus the drain's)."""

    @property
    def step_engine(self) -> Any | None:
        """vLLM's step-level engine for the rollout's queue (:mod:`.vllm_queue`) with one rank
        per engine; None with TP, whose ranks submit identical requests only through
        :meth:`generate` (a queue would gather the group's requests at every engine step)."""
        return step_engine(self.llm) if self.tp_size == 1 else None

    def generate(
        self, prompts: Sequence[Any], sampling_params: Any = None, use_tqdm: bool = False
    ) -> list[Any]:
        """``llm.generate`` on this rank's prompts; with TP, on the whole group's prompts (one
        list of ``SamplingParams`` per prompt, or one for all), returning this rank's share.
        Never called with no prompts: a rank without requests joins through :meth:`drain`."""
        prompts = list(prompts)
        if not prompts:
            return []
        params = (
            list(sampling_params)
            if isinstance(sampling_params, (list, tuple))
            else [sampling_params] * len(prompts)
        )
        if self.tp_size == 1:
            return self._generate(prompts, params)
        parts = self.all_gather((prompts, params))
        outputs = self._generate(
            [p for part in parts for p in part[0]], [sp for part in parts for sp in part[1]]
        )
        start = sum(len(part[0]) for part in parts[: self.group_rank])
        return outputs[start : start + len(prompts)]

    def drain(self) -> None:
        """TP: take part in the group's calls until every rank has finished its rollout (a
        round in which no rank brings requests)."""
        if self.tp_size == 1:
            return
        while True:
            parts = self.all_gather(([], []))
            prompts = [p for part in parts for p in part[0]]
            if not prompts:
                return
            self._generate(prompts, [sp for part in parts for sp in part[1]])

    def _generate(self, prompts: list[Any], params: list[Any]) -> list[Any]:
        self.generate_calls += 1
        return self.llm.generate(prompts, sampling_params=params, use_tqdm=False)


@contextlib.contextmanager
def colocated_engine(
    generation: Any, all_gather: AllGather | None = None, group_rank: int | None = None
) -> Iterator[ColocatedEngine]:
    """The colocated engine, awake, for one rollout (or one evaluation): what TRL's
    ``VLLMGeneration.generate`` does around its single call, around all of the agent's turns.

    Sleep mode: weights discarded by an earlier sleep (level 2) are pushed again from the
    training model (``generation.sync_weights()``: TRL's own re-push, since vLLM's reload would
    read the initial checkpoint), the KV cache is woken, and on exit the engine sleeps again
    (level 2) and TRL's flag says so, so its next sync knows. TP: on exit the rank drains its
    group (:meth:`ColocatedEngine.drain`); after an error it does not (the run is failing)."""
    sleep_mode = bool(getattr(generation, "enable_sleep_mode", False))
    if sleep_mode:
        if getattr(generation, "_llm_weights_sleeping", False):
            generation.sync_weights()  # wakes the weights and loads the policy's into them
        generation.llm.wake_up(tags=["kv_cache"])
    engine = ColocatedEngine(generation, all_gather, group_rank)
    failed = False
    try:
        yield engine
    except BaseException:
        failed = True
        raise
    finally:
        if not failed:
            engine.drain()
        if sleep_mode:
            generation.llm.sleep(level=2)
            generation._llm_weights_sleeping = True  # TRL's flag: re-push before the next use


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


def queue_grouping(choice: str, can_queue: bool) -> str:
    """``round`` (one queue per expansion round) or ``turn`` (one ``generate`` call per turn
    depth) for ``rollout.decode_grouping = choice``; ``auto`` queues where the engine can."""
    if choice not in DECODE_GROUPINGS:
        raise ValueError(
            f"rollout.decode_grouping={choice!r}; expected one of {', '.join(DECODE_GROUPINGS)}"
        )
    if choice == "round" and not can_queue:
        raise ValueError(
            "rollout.decode_grouping='round' queues turns on vLLM's step-level engine "
            "(LLM.llm_engine), which this engine does not offer (a tensor-parallel group "
            "submits through generate): use 'auto' or 'turn'"
        )
    if choice == "auto":
        return "round" if can_queue else "turn"
    return choice


class VLLMBackend:
    """Batched turns with a ready vLLM engine (``vllm.LLM`` or anything with its ``generate``);
    see the module docstring.

    ``topk_logprobs``: ask for the top-``k`` log-probs AEPO's entropy needs (else the sampled
    token's only; :attr:`records_topk`). ``grouping``: ``rollout.decode_grouping``."""

    keeps_cache = False  # vLLM's prefix cache does the reuse inside the engine
    max_batch_size = None  # the engine's scheduler bounds the running rows (max_num_seqs)

    def __init__(
        self,
        llm: Any,
        tokenizer,
        sampling: SamplingSpec,
        stop_sequences: Sequence[str],
        seed: int = 0,
        topk_logprobs: bool = False,
        grouping: str = "auto",
    ) -> None:
        if not is_engine(llm):
            raise TypeError(
                f"VLLMBackend needs a vLLM engine, got {type(llm).__name__}: pass the trainer's "
                "colocated engine (AT2POTrainer.policy_for_generation) or "
                "build_engine(checkpoint, profile) once; a model object would make vLLM load "
                "its name_or_path (the hub weights, not the ones being evaluated)"
            )
        self.tokenizer, self.sampling, self.seed = tokenizer, sampling, seed
        self.llm = llm
        self.records_topk = topk_logprobs
        self.queue = step_engine(llm)
        self.grouping = queue_grouping(grouping, self.queue is not None)
        stop_ids, self.stop_strings = split_stop_sequences(tokenizer, stop_sequences)
        stop_ids |= eos_token_ids(None, tokenizer) | set(getattr(llm, "at2po_eos_ids", ()))
        self.stop_ids = sorted(stop_ids)
        self.stats = BackendStats()
        self.calls = 0
        """``generate_turns`` calls so far (the second input of :func:`request_seeds`)."""
        self.sessions = 0
        """Queues opened so far (the second input of :func:`~.vllm_queue.turn_seed`)."""

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
            # 0: the sampled token's log-prob only (vLLM always adds the sampled token)
            logprobs=self.sampling.topk_entropy_k if self.records_topk else 0,
            skip_special_tokens=False,
        )

    def request_seed(self, session: int, row: int, turn: int) -> int | None:
        """The seed of ``row``'s ``turn``-th turn in queue ``session``; None when greedy."""
        return None if self.sampling.greedy else turn_seed(self.seed, session, row, turn)

    @contextlib.contextmanager
    def open_session(
        self, requests: Sequence[TurnRequest], capacity: int = 0
    ) -> Iterator[QueueSession]:
        """One queue on the engine for ``requests`` (:class:`~.vllm_queue.QueueSession`);
        ``capacity`` is the HF session's and unused here. Requests still running when the block
        ends (an error) are aborted."""
        session = QueueSession(self.queue, self, requests)
        try:
            yield session
        finally:
            session.abort()

    def generate_turns(self, requests: Sequence[TurnRequest]) -> list[TurnResult]:
        """One ``generate`` call for ``requests`` (one turn each)."""
        from vllm.inputs import TokensPrompt

        if not requests:
            return []
        prompts = [TokensPrompt(prompt_token_ids=list(r.context)) for r in requests]
        count = len(requests)
        seeds = (
            [None] * count if self.sampling.greedy else request_seeds(self.seed, self.calls, count)
        )
        self.calls += 1
        params = [self.sampling_params(r.max_new_tokens, s) for r, s in zip(requests, seeds)]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        results = [self.result(out.outputs[0]) for out in outputs]
        self.stats.turns += len(requests)
        self.stats.generated_tokens += sum(len(r.token_ids) for r in results)
        self.stats.prefill_tokens += sum(
            len(r.context) for r in requests
        )  # upper bound: cache hits not seen
        return results

    def result(self, completion) -> TurnResult:
        """One finished request's ``CompletionOutput`` as a turn."""
        token_ids = list(completion.token_ids)
        steps = completion.logprobs or [{} for _ in token_ids]
        logps = [
            float(step[tok].logprob) if tok in step else float("nan")
            for tok, step in zip(token_ids, steps)
        ]
        k = self.sampling.topk_entropy_k
        topk = (
            [topk_entropy(step, k) for step in steps]
            if self.records_topk
            else [float("nan")] * len(token_ids)
        )
        return TurnResult(
            token_ids=token_ids,
            logps=logps,
            entropies=[float("nan")] * len(token_ids),
            topk_entropies=topk,
            stopped=completion.finish_reason == "stop",
            prefix=None,
        )
