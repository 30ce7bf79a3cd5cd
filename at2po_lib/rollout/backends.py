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
  :attr:`HFBackend.stats` counts prefill (context) and decode tokens.
- :class:`~.vllm_backend.VLLMBackend`: the same interface on vLLM (paper scale).

On CPU the loop swaps the model's attention for :func:`grouped_attention` (plain batched
matmuls, no key/value head repetition), which is several times faster than PyTorch's CPU
flash kernel for one-token queries; on GPU it uses ``sdpa``. Both get the same additive mask,
so outputs agree to float precision (tested against a full recompute).
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
from transformers import AttentionInterface

from .kvcache import BatchCache, KVPrefix
from .sampling import SamplingSpec, sample_step
from .turns import (BackendStats, TurnBackend, TurnRequest, TurnResult, eos_token_ids,
                    split_stop_sequences)
from .vllm_backend import VLLMBackend

GROUPED_ATTENTION = "at2po_grouped"


# ------------------------------------------------------------------------------- attention


def grouped_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                      **kwargs) -> tuple[torch.Tensor, None]:
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


# ------------------------------------------------------------------------------- stop rules


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

    def __init__(self, model, tokenizer, sampling: SamplingSpec, stop_sequences: Sequence[str],
                 seed: int = 0, keep_cache: bool = True, max_batch_size: int = 512,
                 attention: str = "auto", compact_below: float = 0.5,
                 num_threads: int | None = None) -> None:
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.num_threads = num_threads
        self.keeps_cache = keep_cache
        self.max_batch_size = max_batch_size
        self.compact_below = compact_below
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.num_layers = text_cfg.num_hidden_layers
        self.num_kv_heads = getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads
        self.head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads
        stop_ids, self.stop_strings = split_stop_sequences(tokenizer, stop_sequences)
        stop_ids |= eos_token_ids(model, tokenizer)
        self.stop_ids = torch.tensor(sorted(stop_ids), dtype=torch.long, device=self.device)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stop_ids)
        self._tail_tokens = max((len(tokenizer.encode(s, add_special_tokens=False))
                                 for s in self.stop_strings), default=0) + 2
        self._stop_char_tokens = self._tokens_with_stop_chars() if self.stop_strings else None
        if attention == "auto":
            attention = GROUPED_ATTENTION if self.device.type == "cpu" else "sdpa"
        if attention == GROUPED_ATTENTION:
            _register_grouped_attention()
        self.attention = attention
        # transformers renamed ``past_key_values`` to ``cache`` (5.x); accept either.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
        params = inspect.signature(base.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.stats = BackendStats()

    def _tokens_with_stop_chars(self) -> torch.Tensor:
        """(V,) bool: tokens whose text contains the last character of some stop string; only
        after such a token can a stop string have just been completed."""
        last_chars = {s[-1] for s in self.stop_strings}
        vocab = len(self.tokenizer)
        pieces = self.tokenizer.batch_decode([[i] for i in range(vocab)])
        flags = [any(c in piece for c in last_chars) for piece in pieces]
        size = max(vocab, self.model.get_output_embeddings().weight.shape[0])
        out = torch.zeros(size, dtype=torch.bool, device=self.device)
        out[: len(flags)] = torch.tensor(flags, dtype=torch.bool)
        return out

    # -- public API ---------------------------------------------------------------------------

    @torch.inference_mode()
    def generate_turns(self, requests: Sequence[TurnRequest]) -> list[TurnResult]:
        results: list[TurnResult] = []
        with attention_implementation(self.model, self.attention), \
                torch_threads(self.num_threads), eval_mode(self.model):
            for start in range(0, len(requests), self.max_batch_size):
                results.extend(self._generate_batch(requests[start:start + self.max_batch_size]))
        self.stats.turns += len(requests)
        return results

    @torch.inference_mode()
    def prefill(self, contexts: Sequence[list[int]]) -> list[KVPrefix | None]:
        """Caches of ``context[:-1]`` for each context (shared by all chains of a prompt)."""
        if not self.keeps_cache:
            return [None] * len(contexts)
        out: list[KVPrefix | None] = []
        with attention_implementation(self.model, self.attention), \
                torch_threads(self.num_threads), eval_mode(self.model):
            for start in range(0, len(contexts), self.max_batch_size):
                chunk = [list(c[:-1]) for c in contexts[start:start + self.max_batch_size]]
                cache = BatchCache([None] * len(chunk), self.num_layers, self.num_kv_heads,
                                   self.head_dim, max(max(map(len, chunk)), 1), self.dtype,
                                   self.device)
                self._forward_pending(cache, chunk, [0] * len(chunk))
                out.extend(cache.extract())
        return out

    # -- internals ----------------------------------------------------------------------------

    def _forward_pending(self, cache: BatchCache, pending: list[list[int]],
                         start_positions: list[int]) -> torch.Tensor:
        """Run each row's pending tokens (left-padded to one width); returns last logits (B, V)."""
        width = max(max(map(len, pending)), 1)
        batch = len(pending)
        ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((batch, width), dtype=torch.bool)
        positions = torch.zeros((batch, width), dtype=torch.long)
        for row, (tokens, first) in enumerate(zip(pending, start_positions)):
            n = len(tokens)
            if n:
                ids[row, width - n:] = torch.tensor(tokens, dtype=torch.long)
                valid[row, width - n:] = True
                positions[row, width - n:] = torch.arange(first, first + n)
        ids, valid, positions = ids.to(self.device), valid.to(self.device), positions.to(self.device)
        logits = self._forward(cache, ids, valid, positions)
        self.stats.prefill_tokens += sum(map(len, pending))
        return logits

    def _forward(self, cache: BatchCache, ids: torch.Tensor, valid: torch.Tensor,
                 positions: torch.Tensor) -> torch.Tensor:
        bias = cache.attention_bias(valid, self.dtype)
        out = self.model(input_ids=ids, attention_mask=bias, position_ids=positions,
                         use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache.cache})
        cache.advance(ids.shape[1])
        self.stats.forward_calls += 1
        return out.logits[:, -1]

    def _usable_prefix(self, request: TurnRequest) -> KVPrefix | None:
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
        prefixes = [self._usable_prefix(r) for r in requests]
        cached = [0 if p is None else p.length for p in prefixes]
        pending = [r.context[c:] for r, c in zip(requests, cached)]
        budget = torch.tensor([r.max_new_tokens for r in requests], device=self.device)
        max_new = int(budget.max())
        cache = BatchCache(prefixes, self.num_layers, self.num_kv_heads, self.head_dim,
                           max(map(len, pending)) + max_new, self.dtype, self.device)
        logits = self._forward_pending(cache, pending, cached)

        batch0 = len(requests)
        rows = torch.arange(batch0, device=self.device)  # batch row -> request index
        next_pos = torch.tensor([len(r.context) for r in requests], device=self.device)
        generated = torch.zeros(batch0, dtype=torch.long, device=self.device)
        stopped = torch.zeros(batch0, dtype=torch.bool, device=self.device)
        active = torch.ones(batch0, dtype=torch.bool, device=self.device)  # per batch row
        log = _TurnLog()
        tails: list[list[int]] = [[] for _ in range(batch0)]
        out_prefix: list[KVPrefix | None] = [None] * batch0
        for _ in range(max_new):
            step = sample_step(logits, self.sampling, self.generator)
            self._record(log, rows, active, step, batch0)
            generated[rows] += active.long()
            hit_stop = torch.isin(step.token_ids, self.stop_ids)
            if self.stop_strings:
                hit_stop |= self._string_stops(step.token_ids, rows, active, tails)
            stopped[rows] |= active & hit_stop
            active = active & ~hit_stop & (generated[rows] < budget[rows])
            if not bool(active.any()):
                break
            if self.keeps_cache and float(active.float().mean()) < self.compact_below:
                done_rows = torch.nonzero(~active).squeeze(1)
                for local, prefix in zip(done_rows.tolist(), cache.extract(done_rows)):
                    out_prefix[int(rows[local])] = prefix
                keep = torch.nonzero(active).squeeze(1)
                cache.select_rows(keep)
                rows, active = rows[keep], active[keep]
                step.token_ids = step.token_ids[keep]
            ids = torch.where(active, step.token_ids, self.pad_id)[:, None]
            positions = next_pos[rows][:, None]
            next_pos[rows] += active.long()
            logits = self._forward(cache, ids, active[:, None], positions)
            self.stats.decode_tokens += int(active.sum())
        if self.keeps_cache:
            for local, prefix in enumerate(cache.extract()):
                out_prefix[int(rows[local])] = prefix
        n_gen = generated.tolist()
        self.stats.generated_tokens += sum(n_gen)
        return self._assemble(log, n_gen, stopped.tolist(), out_prefix)

    def _record(self, log: _TurnLog, rows: torch.Tensor, active: torch.Tensor, step,
                batch0: int) -> None:
        def full(values: torch.Tensor, fill: float) -> torch.Tensor:
            out = torch.full((batch0,), fill, dtype=values.dtype, device=values.device)
            out[rows] = torch.where(active, values, torch.full_like(values, fill))
            return out

        log.tokens.append(full(step.token_ids, -1))
        log.logps.append(full(step.logp, 0.0))
        log.entropies.append(full(step.entropy, 0.0))
        log.topk.append(full(step.topk_entropy, 0.0))

    def _string_stops(self, token_ids: torch.Tensor, rows: torch.Tensor, active: torch.Tensor,
                      tails: list[list[int]]) -> torch.Tensor:
        """Stop strings that span several tokens: check the decoded tail of flagged rows."""
        hits = torch.zeros_like(active)
        flagged = active & self._stop_char_tokens[token_ids]
        tokens = token_ids.tolist()
        for local, (row, ok) in enumerate(zip(rows.tolist(), active.tolist())):
            if ok:
                tails[row] = (tails[row] + [tokens[local]])[-self._tail_tokens:]
        for local in torch.nonzero(flagged).squeeze(1).tolist():
            text = self.tokenizer.decode(tails[int(rows[local])])
            if any(s in text for s in self.stop_strings):
                hits[local] = True
        return hits

    def _assemble(self, log: _TurnLog, n_gen: list[int], stopped: list[bool],
                  prefixes: list[KVPrefix | None]) -> list[TurnResult]:
        def table(values: list[torch.Tensor]) -> list[list]:
            return torch.stack(values, dim=1).tolist()  # (B0, steps)

        tokens, logps = table(log.tokens), table(log.logps)
        entropies, topk = table(log.entropies), table(log.topk)
        return [
            TurnResult(token_ids=tokens[b][:n], logps=logps[b][:n], entropies=entropies[b][:n],
                       topk_entropies=topk[b][:n], stopped=stopped[b], prefix=prefixes[b])
            for b, n in enumerate(n_gen)
        ]


def make_backend(model, tokenizer, rollout_cfg, stop_sequences: Sequence[str], seed: int = 0,
                 greedy: bool = False, keep_cache: bool = True, **kwargs) -> TurnBackend:
    """The backend named by ``rollout_cfg.backend`` (``hf`` or ``vllm``). For ``vllm``,
    ``model`` (or ``llm=``) is a ready engine: a backend never starts one."""
    spec = SamplingSpec(temperature=0.0 if greedy else rollout_cfg.temperature,
                        top_p=1.0 if greedy else rollout_cfg.top_p)
    if rollout_cfg.backend == "hf":
        kwargs.setdefault("keep_cache", rollout_cfg.keep_cache and keep_cache)
        kwargs.setdefault("max_batch_size", rollout_cfg.max_batch_rows)
        kwargs.setdefault("num_threads", rollout_cfg.num_threads or None)
        return HFBackend(model, tokenizer, spec, stop_sequences, seed=seed, **kwargs)
    if rollout_cfg.backend == "vllm":
        # ``model`` is the engine itself (evaluation) unless it comes as ``llm`` (the trainer)
        engine = kwargs.pop("llm", None) or model
        return VLLMBackend(engine, tokenizer, spec, stop_sequences, seed=seed, **kwargs)
    raise ValueError(f"rollout.backend={rollout_cfg.backend!r}; expected 'hf' or 'vllm'")
