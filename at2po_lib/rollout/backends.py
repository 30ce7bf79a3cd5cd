r"""Turn generators: given contexts (token ids), sample one *turn* each, batched.

A turn runs until a stop token (``</search>``, EOS, ...; the template's stops), a stop string found in
the decoded tail of the turn (for tokenizers where a tag spans several tokens), or the turn's
token budget. The agent loop (:mod:`.agent`) never sees text it did not get as ids: a backend
returns the sampled ids, their log-probabilities at the sampling temperature
(``log_softmax(logits / T)``, see :mod:`.sampling`; the trainer must use the same ``T``),
the exact per-token entropy and AEPO's top-k entropy.

Backends
--------
- :class:`HFBackend` (CPU or GPU): a hand-written sampling loop over
  ``model(input_ids, attention_mask, position_ids, cache=...)``. All requests of a call run
  as one batch (rows padded on the left; idle rows are masked and, once most rows are done,
  dropped). Every finished turn leaves a compacted :class:`~.kvcache.KVPrefix`; a request that
  carries one (the same chain's next turn, or a *branch* re-sampling a turn from its
  ancestor's context) only runs its new tokens through the model. ``keep_cache=False`` turns
  that off (each turn re-reads its whole context), which is what the benchmark compares.
  :attr:`HFBackend.stats` counts prefill (context) and decode tokens. With
  ``rollout.decode_grouping = round`` (a GPU's default, :mod:`.decoding`) the agent opens one
  :class:`~.session.RoundSession` per expansion round instead (:meth:`HFBackend.open_session`):
  every turn of the round in one decode call.
- :class:`~.vllm_backend.VLLMBackend`: the same interface on vLLM (paper scale).

A decode step reads back from the device once (the rows still going, or the step's values in a
round session): stop strings are matched on the device (:mod:`.stops`, tables built once per
tokenizer), and the copy-out of the caches uses lengths the host already knows. Generation runs
in ``rollout.decode_dtype`` (:mod:`.decoding`: bf16 weights and KV on a GPU, the weights' own
dtype on a CPU).

On CPU the loop swaps the model's attention for :func:`grouped_attention` (plain batched
matmuls, no key/value head repetition), which is several times faster than PyTorch's CPU
flash kernel for one-token queries; on GPU it uses ``sdpa``. Both get the same additive mask,
so outputs agree to float precision (tested against a full recompute).

Near the floor (``benchmarks/bench_rollout_floor.py`` prints each rollout against
the FLOPs of its real tokens, :mod:`.flops`). Three backend options, all on by default, all
off giving the path before it:

- ``lean``: a Qwen3 runs through :mod:`.lean` (its own operators without the ``transformers``
  module machinery: a tiny decode step's Python overhead), bit-identical;
- ``packed_prefill``: a context asked several times (the sampled metric's k copies of a
  question) is prefilled once, its prefix shared; on a CPU the prefill of
  :meth:`HFBackend.prefill`, of a turn call's pending tokens (observations, fresh contexts) and
  of a round session's joins runs in length-sorted chunks (:mod:`.packing`) instead of one batch
  padded to the longest row (a GPU keeps the padded batch: :attr:`HFBackend.chunk_prefill`);
- ``fused_prefill``: with ``lean``, prefill queries go through PyTorch's fused attention
  (:func:`fused_prefill_attention`), decode steps keep :func:`grouped_attention`.

None of them changes which random number goes to which row and token: rows keep their order
in every decode batch, only the prefill is regrouped. Chunks and the fused kernel round the
last bits otherwise (log-probabilities within ~1e-5); greedy and seeded sampled rollouts are
tested token for token against the old path (``tests/rollout/test_rollout_packing.py``).
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from .decoding import decode_capture, decode_dtype, decode_grouping
from .flops import causal_pairs
from .kvcache import BatchCache, KVPrefix, RowCache
from .lean import LeanForward, lean_forward_for
from .packing import plan_chunks, unique_rows
from .sampling import SamplingSpec, sample_step
from .session import RoundSession
from .stops import StopMatcher
from .turns import (
    BackendStats,
    TurnBackend,
    TurnRequest,
    TurnResult,
    eos_token_ids,
    split_stop_sequences,
)
from .vllm_backend import VLLMBackend

GROUPED_ATTENTION = "at2po_grouped"


# ------------------------------------------------------------------------------- attention


def grouped_attention(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """softmax(q k^T * scaling + mask) v with grouped-query heads, without repeating k/v.

    query (B, H, q, d), key/value (B, H_kv, K, d), mask (B, 1, q, K) additive;
    returns (B, q, H, d) like ``transformers``' eager attention. Query head h reads key/value
    head h // (H / H_kv), as ``repeat_kv`` does.
    """
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    grouped_q = query.reshape(batch, kv_heads, groups * q_len, dim)
    scores = torch.matmul(grouped_q, key.transpose(2, 3)) * scaling  # (B, H_kv, G*q, K)
    if attention_mask is not None:
        scores = scores.view(batch, kv_heads, groups, q_len, -1) + attention_mask[:, :, None]
        scores = scores.view(batch, kv_heads, groups * q_len, -1)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, value)  # (B, H_kv, G*q, d)
    return out.view(batch, heads, q_len, dim).transpose(1, 2).contiguous(), None


def fused_prefill_attention(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """:func:`grouped_attention` for one-token queries (decode steps), PyTorch's fused
    ``scaled_dot_product_attention`` (grouped-query heads, the same additive mask) for longer
    ones (prefill). Why: on a CPU the fused kernel never materialises the (B, H, q, K) scores
    and reads the strided cache views in place; a tiny-profile prefill chunk of 16 rows x 110
    new tokens after 300 cached ones took 8-10 ms a layer instead of 19-25 ms. The sums run in
    another order, so outputs agree to fp32 rounding (~5e-7 on the attention output), not bit for
    bit; the tests check that greedy and seeded sampled rollouts keep every token."""
    if query.shape[2] == 1:
        return grouped_attention(module, query, key, value, attention_mask, scaling)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def _register_grouped_attention() -> None:
    AttentionInterface.register(GROUPED_ATTENTION, grouped_attention)


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run with ``count`` intra-op CPU threads (None/0: unchanged), restoring afterwards.

    Why: a tiny model's matmuls are far too small to split; with 2 threads on a busy 2-core
    machine every op waits for the other core (measured here: 3 ms instead of 0.03 ms for a
    64x32 linear), so rollouts of the toy policy run fastest on one thread.
    """
    if not count:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextlib.contextmanager
def eval_mode(model) -> Iterator[None]:
    """Sample with dropout off even when the trainer left the model in train mode."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def attention_implementation(model, name: str) -> Iterator[None]:
    """Run ``model`` with another registered attention function, restoring it afterwards."""
    config = model.config
    old = config._attn_implementation
    if name == old:
        yield
        return
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = old


@contextlib.contextmanager
def decode_weights(model, dtype: torch.dtype) -> Iterator[None]:
    """Run ``model`` with its floating-point parameters in ``dtype`` for the duration: each
    parameter's data is replaced by a copy in ``dtype`` and restored afterwards (the originals,
    fp32 master weights, are never rounded). Tied parameters are one parameter: one copy.
    Nothing changes when the parameters are in ``dtype`` already."""
    params = [p for p in model.parameters() if p.is_floating_point() and p.dtype != dtype]
    saved = [p.data for p in params]
    try:
        for p in params:
            p.data = p.data.to(dtype)
        yield
    finally:
        for p, data in zip(params, saved):
            p.data = data


def weights_dtype(model) -> torch.dtype:
    """The dtype of the model's first parameter (the embedding: what it was loaded in)."""
    return next(model.parameters()).dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------------------- HF backend


@dataclass
class _TurnLog:
    """Per-step records of one batched turn, indexed by original row (B0)."""

    tokens: list[torch.Tensor] = field(default_factory=list)
    logps: list[torch.Tensor] = field(default_factory=list)
    entropies: list[torch.Tensor] = field(default_factory=list)
    topk: list[torch.Tensor] = field(default_factory=list)


class HFBackend:
    """Batched turn sampling with a Hugging Face causal LM and reusable KV prefixes."""

    records_topk = True  # AEPO's top-k entropy: one ``topk`` a step on the device

    def __init__(
        self,
        model,
        tokenizer,
        sampling: SamplingSpec,
        stop_sequences: Sequence[str],
        seed: int = 0,
        keep_cache: bool = True,
        max_batch_size: int = 512,
        attention: str = "auto",
        compact_below: float = 0.5,
        num_threads: int | None = None,
        dtype: str = "auto",
        grouping: str = "auto",
        capture: str = "auto",
        lean: bool = True,
        packed_prefill: bool = True,
        fused_prefill: bool = True,
    ) -> None:
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.num_threads = num_threads
        self.packed_prefill = packed_prefill
        """Prefill each distinct context once and, on a CPU, in length-sorted chunks
        (:mod:`.packing`); False: one padded batch per ``max_batch_size`` rows in request order
        (the earlier way)."""
        self.keeps_cache = keep_cache
        self.max_batch_size = max_batch_size
        self.compact_below = compact_below
        self.device = next(model.parameters()).device
        self.chunk_prefill = packed_prefill and self.device.type == "cpu"
        """Prefill rows in length-sorted chunks: on a CPU only, where :mod:`.packing`'s cost
        model was measured; on a GPU a forward's fixed cost (a kernel launch per operator) is
        far larger and padded rows run in parallel, so the padded batch stays."""
        on_gpu = self.device.type == "cuda"
        self.dtype = getattr(
            torch,
            decode_dtype(
                dtype,
                dtype_name(weights_dtype(model)),
                self.device.type,
                bf16_supported=torch.cuda.is_bf16_supported() if on_gpu else True,
            ),
        )
        """What generation runs in: the weights (a copy when it is not theirs), the KV cache."""
        self.grouping = decode_grouping(grouping, self.device.type) if keep_cache else "turn"
        """``turn`` or ``round`` (:mod:`.decoding`); a round session keeps caches by nature."""
        self.capture = decode_capture(capture, self.device.type)
        """A round session's decode step runs captured (:mod:`.capture`)."""
        text_cfg = (
            model.config.get_text_config()
            if hasattr(model.config, "get_text_config")
            else model.config
        )
        self.num_layers = text_cfg.num_hidden_layers
        self.num_kv_heads = (
            getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads
        )
        self.head_dim = (
            getattr(text_cfg, "head_dim", None)
            or text_cfg.hidden_size // text_cfg.num_attention_heads
        )
        stop_ids, self.stop_strings = split_stop_sequences(tokenizer, stop_sequences)
        stop_ids |= eos_token_ids(model, tokenizer)
        self.stop_ids = torch.tensor(sorted(stop_ids), dtype=torch.long, device=self.device)
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stop_ids)
        )
        self.matcher = (
            StopMatcher.build(tokenizer, self.stop_strings, self._vocab_size(), self.device)
            if self.stop_strings
            else None
        )
        if attention == "auto":
            attention = GROUPED_ATTENTION if self.device.type == "cpu" else "sdpa"
        if attention == GROUPED_ATTENTION:
            _register_grouped_attention()
        self.attention = attention
        self.lean: LeanForward | None = (
            lean_forward_for(model, fused_prefill_attention if fused_prefill else grouped_attention)
            if lean and attention == GROUPED_ATTENTION
            else None
        )
        """The model's operators without its module machinery (:mod:`.lean`), where the model
        is one it replicates; None calls the model. With ``fused_prefill`` its prefill forwards
        use :func:`fused_prefill_attention` (fp32 rounding), else it is bit-identical."""
        # transformers renamed ``past_key_values`` to ``cache`` (5.x); accept either.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
        params = inspect.signature(base.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.stats = BackendStats()

    def _vocab_size(self) -> int:
        """Rows of the output layer (a model may pad its vocabulary past the tokenizer's)."""
        head = (
            self.model.get_output_embeddings()
            if hasattr(self.model, "get_output_embeddings")
            else None
        )
        return head.weight.shape[0] if head is not None else len(self.tokenizer)

    @contextlib.contextmanager
    def _decoding(self) -> Iterator[None]:
        """The settings every decode call runs under: the attention function, the CPU
        threads, eval mode, and the weights in :attr:`dtype`."""
        with (
            attention_implementation(self.model, self.attention),
            torch_threads(self.num_threads),
            eval_mode(self.model),
            decode_weights(self.model, self.dtype),
        ):
            yield

    # -- public API ---------------------------------------------------------------------------

    @torch.inference_mode()
    def generate_turns(self, requests: Sequence[TurnRequest]) -> list[TurnResult]:
        results: list[TurnResult] = []
        with self._decoding():
            for start in range(0, len(requests), self.max_batch_size):
                results.extend(self._generate_batch(requests[start : start + self.max_batch_size]))
        self.stats.turns += len(requests)
        return results

    @contextlib.contextmanager
    def open_session(
        self, requests: Sequence[TurnRequest], capacity: int
    ) -> Iterator[RoundSession]:
        """A :class:`~.session.RoundSession` over ``requests`` (one row each; ``capacity``:
        columns a row may fill), decoding under :meth:`_decoding` until the block ends."""
        with torch.inference_mode(), self._decoding():
            yield RoundSession(self, requests, capacity)

    @torch.inference_mode()
    def prefill(self, contexts: Sequence[list[int]]) -> list[KVPrefix | None]:
        """Caches of ``context[:-1]`` for each context (shared by all chains of a prompt). With
        :attr:`packed_prefill` a context that occurs several times (the sampled metric's k
        copies of a question) is run once and its copies share one prefix (a prefix is read,
        never written: every decode call copies it into its own buffer)."""
        if not self.keeps_cache:
            return [None] * len(contexts)
        if self.packed_prefill:
            firsts, owner = unique_rows(contexts)
        else:
            firsts, owner = list(range(len(contexts))), list(range(len(contexts)))
        heads = [list(contexts[i][:-1]) for i in firsts]
        with self._decoding():
            prefixes, _ = self._prefill_chunks(
                [None] * len(heads), heads, [0] * len(heads), self._chunks(heads, [0] * len(heads))
            )
        return [prefixes[o] for o in owner]

    # -- internals ----------------------------------------------------------------------------

    def _chunks(self, pending: list[list[int]], cached: list[int]) -> list[list[int]]:
        """Rows of each prefill forward: length-sorted chunks (:mod:`.packing`) with
        :attr:`chunk_prefill`, else consecutive runs of ``max_batch_size`` rows."""
        if self.chunk_prefill:
            return plan_chunks([len(p) for p in pending], cached, self.max_batch_size)
        size = self.max_batch_size
        return [list(range(s, min(s + size, len(pending)))) for s in range(0, len(pending), size)]

    def _prefill_chunks(
        self,
        prefixes: Sequence[KVPrefix | None],
        pending: list[list[int]],
        cached: list[int],
        chunks: list[list[int]],
    ) -> tuple[list[KVPrefix], torch.Tensor]:
        """Run each row's ``pending`` tokens after its prefix, one forward per chunk of rows;
        returns every row's prefix extended by its pending tokens and the last logits (B, V)."""
        extended: list[KVPrefix | None] = [None] * len(pending)
        logits: torch.Tensor | None = None
        for rows in chunks:
            cache = BatchCache(
                [prefixes[r] for r in rows],
                self.num_layers,
                self.num_kv_heads,
                self.head_dim,
                max(max(len(pending[r]) for r in rows), 1),
                self.dtype,
                self.device,
            )
            part = self._forward_pending(
                cache, [pending[r] for r in rows], [cached[r] for r in rows]
            )
            if logits is None:
                logits = part.new_empty((len(pending), part.shape[-1]))
            logits[torch.tensor(rows, device=part.device)] = part
            counts = [cached[r] + len(pending[r]) for r in rows]
            for row, prefix in zip(rows, cache.extract(counts=counts, release=True)):
                extended[row] = prefix
        return extended, logits

    def _forward_pending(
        self, cache: BatchCache, pending: list[list[int]], start_positions: list[int]
    ) -> torch.Tensor:
        """Run each row's pending tokens (left-padded to one width); returns last logits (B, V)."""
        width = max(max(map(len, pending)), 1)
        batch = len(pending)
        ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((batch, width), dtype=torch.bool)
        positions = torch.zeros((batch, width), dtype=torch.long)
        for row, (tokens, first) in enumerate(zip(pending, start_positions)):
            n = len(tokens)
            if n:
                ids[row, width - n :] = torch.tensor(tokens, dtype=torch.long)
                valid[row, width - n :] = True
                positions[row, width - n :] = torch.arange(first, first + n)
        ids, valid, positions = (
            ids.to(self.device),
            valid.to(self.device),
            positions.to(self.device),
        )
        logits = self._forward(cache, ids, valid, positions)
        self.stats.prefill_tokens += sum(map(len, pending))
        self.stats.attention_pairs += sum(
            causal_pairs(first, len(tokens)) for tokens, first in zip(pending, start_positions)
        )
        return logits

    def _forward(
        self, cache: BatchCache, ids: torch.Tensor, valid: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        bias = cache.attention_bias(valid, self.dtype)
        logits = self._last_logits(ids, bias, positions, cache.cache)
        cache.advance(ids.shape[1])
        self.stats.forward_calls += 1
        return logits

    def _last_logits(
        self, ids: torch.Tensor, bias: torch.Tensor, positions: torch.Tensor, cache
    ) -> torch.Tensor:
        """The model on ``ids`` at ``positions`` with the additive mask ``bias``, writing into
        ``cache``; the last position's logits (B, V): the lean forward where there is one."""
        if self.lean is not None:
            return self.lean(ids, bias, positions, cache)
        out = self.model(
            input_ids=ids,
            attention_mask=bias,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        )
        return out.logits[:, -1]

    def forward_rows(
        self,
        cache: RowCache,
        rows: torch.Tensor | None,
        ids: torch.Tensor,
        columns: torch.Tensor,
        width: int,
    ) -> torch.Tensor:
        """One forward of a round session: ``rows`` (None: all) feed ``ids`` (b, q) written at
        ``columns`` (b, q; = positions) over the first ``width`` columns; returns the last
        query's logits (b, V)."""
        bias = cache.plan(rows, columns, width, self.dtype)
        return self._last_logits(ids, bias, columns, cache.cache)

    def usable_prefix(self, request: TurnRequest) -> KVPrefix | None:
        if not self.keeps_cache or request.prefix is None:
            return None
        # At least one context token must be fed to get the next-token logits.
        limit = len(request.context) - 1
        prefix = request.prefix
        return prefix if prefix.length <= limit else prefix.truncate(limit)

    def _generate_batch(self, requests: Sequence[TurnRequest]) -> list[TurnResult]:
        if not requests:
            return []
        for i, r in enumerate(requests):
            if not r.context:
                raise ValueError(f"turn request {i} has an empty context")
            if r.max_new_tokens < 1:
                raise ValueError(f"turn request {i} has max_new_tokens={r.max_new_tokens} < 1")
        prefixes = [self.usable_prefix(r) for r in requests]
        cached = [0 if p is None else p.length for p in prefixes]
        pending = [r.context[c:] for r, c in zip(requests, cached)]
        budget = torch.tensor([r.max_new_tokens for r in requests], device=self.device)
        max_new = max(r.max_new_tokens for r in requests)
        cache, logits = self._start_batch(prefixes, pending, cached, max_new)

        batch0 = len(requests)
        rows = torch.arange(batch0, device=self.device)  # batch row -> request index
        owners = list(range(batch0))  # the same on the host
        # Valid cache columns of each request: its prefix and pending tokens, then one per
        # token fed (the last sampled token of a turn never is).
        filled = [c + len(p) for c, p in zip(cached, pending)]
        next_pos = torch.tensor([len(r.context) for r in requests], device=self.device)
        generated = torch.zeros(batch0, dtype=torch.long, device=self.device)
        stopped = torch.zeros(batch0, dtype=torch.bool, device=self.device)
        active = torch.ones(batch0, dtype=torch.bool, device=self.device)  # per batch row
        states = self.matcher.initial(batch0) if self.matcher is not None else None
        log = _TurnLog()
        out_prefix: list[KVPrefix | None] = [None] * batch0
        for _ in range(max_new):
            step = sample_step(logits, self.sampling, self.generator)
            self._record(log, rows, active, step, batch0)
            generated[rows] += active.long()
            hit_stop = torch.isin(step.token_ids, self.stop_ids)
            if states is not None:
                states, hit_string = self.matcher.advance(states, step.token_ids)
                hit_stop |= hit_string
            stopped[rows] |= active & hit_stop
            active = active & ~hit_stop & (generated[rows] < budget[rows])
            going = active.tolist()  # the step's one device-to-host sync
            live = sum(going)
            if not live:
                break
            if self.keeps_cache and _share(live, len(going)) < self.compact_below:
                # active rows first, then the finished ones, each in row order (a stable sort)
                order = torch.sort((~active).to(torch.int8), stable=True).indices
                keep, done = order[:live], order[live:]
                finished = [owners[i] for i, g in enumerate(going) if not g]
                for owner, prefix in zip(
                    finished, cache.extract(done, [filled[o] for o in finished])
                ):
                    out_prefix[owner] = prefix
                cache.select_rows(keep)
                rows, active = rows[keep], active[keep]
                step.token_ids = step.token_ids[keep]
                states = states[:, keep] if states is not None else None
                owners = [owners[i] for i, g in enumerate(going) if g]
                going = [True] * live
            ids = torch.where(active, step.token_ids, self.pad_id)[:, None]
            positions = next_pos[rows][:, None]
            next_pos[rows] += active.long()
            logits = self._forward(cache, ids, active[:, None], positions)
            for owner, g in zip(owners, going):
                self.stats.attention_pairs += (filled[owner] + 1) * g
                filled[owner] += g
            self.stats.decode_tokens += live
        if self.keeps_cache:
            final = cache.extract(counts=[filled[o] for o in owners], release=True)
            for owner, prefix in zip(owners, final):
                out_prefix[owner] = prefix
        n_gen = generated.tolist()
        self.stats.generated_tokens += sum(n_gen)
        return self._assemble(log, n_gen, stopped.tolist(), out_prefix)

    def _start_batch(
        self,
        prefixes: list[KVPrefix | None],
        pending: list[list[int]],
        cached: list[int],
        max_new: int,
    ) -> tuple[BatchCache, torch.Tensor]:
        """The decode cache of a turn call with every row's pending tokens run, and their last
        logits. Rows that pad badly against each other run in chunks, each in a cache of its
        own whose columns are then copied into the decode cache; one chunk runs in the decode
        cache itself."""
        chunks = self._chunks(pending, cached)
        shape = (self.num_layers, self.num_kv_heads, self.head_dim)
        if len(chunks) == 1:
            cache = BatchCache(
                prefixes, *shape, max(map(len, pending)) + max_new, self.dtype, self.device
            )
            return cache, self._forward_pending(cache, pending, cached)
        lengths = [c + len(p) for c, p in zip(cached, pending)]
        cache = BatchCache.reserved(lengths, *shape, max_new, self.dtype, self.device)
        logits: torch.Tensor | None = None
        for rows in chunks:
            part_cache = BatchCache(
                [prefixes[r] for r in rows],
                *shape,
                max(len(pending[r]) for r in rows),
                self.dtype,
                self.device,
            )
            part = self._forward_pending(
                part_cache, [pending[r] for r in rows], [cached[r] for r in rows]
            )
            if logits is None:
                logits = part.new_empty((len(pending), part.shape[-1]))
            logits[torch.tensor(rows, device=part.device)] = part
            cache.copy_rows_from(
                rows, part_cache, [cached[r] for r in rows], [len(pending[r]) for r in rows]
            )
        return cache, logits

    def _record(
        self, log: _TurnLog, rows: torch.Tensor, active: torch.Tensor, step, batch0: int
    ) -> None:
        def full(values: torch.Tensor, fill: float) -> torch.Tensor:
            out = torch.full((batch0,), fill, dtype=values.dtype, device=values.device)
            out[rows] = torch.where(active, values, torch.full_like(values, fill))
            return out

        log.tokens.append(full(step.token_ids, -1))
        log.logps.append(full(step.logp, 0.0))
        log.entropies.append(full(step.entropy, 0.0))
        log.topk.append(full(step.topk_entropy, 0.0))

    def _assemble(
        self, log: _TurnLog, n_gen: list[int], stopped: list[bool], prefixes: list[KVPrefix | None]
    ) -> list[TurnResult]:
        def table(values: list[torch.Tensor]) -> list[list]:
            return torch.stack(values, dim=1).tolist()  # (B0, steps)

        tokens, logps = table(log.tokens), table(log.logps)
        entropies, topk = table(log.entropies), table(log.topk)
        return [
            TurnResult(
                token_ids=tokens[b][:n],
                logps=logps[b][:n],
                entropies=entropies[b][:n],
                topk_entropies=topk[b][:n],
                stopped=stopped[b],
                prefix=prefixes[b],
            )
            for b, n in enumerate(n_gen)
        ]


def _share(part: int, whole: int) -> float:
    """``part / whole`` as the float32 mean of a bool tensor gives it (what the compaction rule
    compared at first: the same rows are dropped at the same steps)."""
    return float(np.float32(part) / np.float32(whole))


def make_backend(
    model,
    tokenizer,
    rollout_cfg,
    stop_sequences: Sequence[str],
    seed: int = 0,
    greedy: bool = False,
    keep_cache: bool = True,
    topk_logprobs: bool | None = None,
    **kwargs,
) -> TurnBackend:
    """The backend named by ``rollout_cfg.backend`` (``hf`` or ``vllm``). For ``vllm``,
    ``model`` (or ``llm=``) is a ready engine: a backend never starts one, and it asks the
    engine for top-k log-probs only when ``topk_logprobs`` says so (None: for
    ``rollout_cfg.expansion = aepo``, the one method that reads them); the HF backend records
    them whatever it is told (they cost it one ``topk`` a step on the device)."""
    spec = SamplingSpec(
        temperature=0.0 if greedy else rollout_cfg.temperature,
        top_p=1.0 if greedy else rollout_cfg.top_p,
    )
    if rollout_cfg.backend == "hf":
        kwargs.setdefault("keep_cache", rollout_cfg.keep_cache and keep_cache)
        kwargs.setdefault("max_batch_size", rollout_cfg.max_batch_rows)
        kwargs.setdefault("num_threads", rollout_cfg.num_threads or None)
        kwargs.setdefault("dtype", rollout_cfg.decode_dtype)
        kwargs.setdefault("grouping", rollout_cfg.decode_grouping)
        kwargs.setdefault("capture", rollout_cfg.decode_capture)
        return HFBackend(model, tokenizer, spec, stop_sequences, seed=seed, **kwargs)
    if rollout_cfg.backend == "vllm":
        # ``model`` is the engine itself (evaluation) unless it comes as ``llm`` (the trainer)
        engine = kwargs.pop("llm", None) or model
        if topk_logprobs is None:
            topk_logprobs = rollout_cfg.expansion == "aepo"
        kwargs.setdefault("grouping", rollout_cfg.decode_grouping)
        return VLLMBackend(
            engine,
            tokenizer,
            spec,
            stop_sequences,
            seed=seed,
            topk_logprobs=topk_logprobs,
            **kwargs,
        )
    raise ValueError(f"rollout.backend={rollout_cfg.backend!r}; expected 'hf' or 'vllm'")
