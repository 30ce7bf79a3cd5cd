"""The turn-generator interface every backend implements: requests, results, counters.

Kept apart from the backends so that :mod:`.backends` (Hugging Face, imports torch) and
:mod:`.vllm_backend` both depend on it and not on each other; :func:`.backends.make_backend`
picks one of them by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from .kvcache import KVPrefix


@dataclass
class TurnRequest:
    """One context to continue by one turn."""

    context: list[int]
    """Prompt + completion so far (token ids)."""
    max_new_tokens: int
    prefix: KVPrefix | None = None
    """Cache of a prefix of ``context`` (any length); ignored when the backend keeps none."""


@dataclass
class TurnResult:
    """The sampled turn of one request (all lists have one entry per sampled token)."""

    token_ids: list[int]
    logps: list[float]
    entropies: list[float]
    """Exact entropy of the tempered distribution at each step (NaN if the backend lacks it)."""
    topk_entropies: list[float]
    stopped: bool
    """True when a stop token/string ended the turn; False when ``max_new_tokens`` did."""
    prefix: KVPrefix | None = None
    """Cache of ``context + token_ids[:-1]`` for the next turn or a later branch."""


@dataclass
class BackendStats:
    """Token counts since the backend was made (or :meth:`reset`)."""

    prefill_tokens: int = 0
    """Context tokens run through the model (prompts, observations, recomputed prefixes)."""
    decode_tokens: int = 0
    """Sampled tokens fed back one step at a time."""
    generated_tokens: int = 0
    forward_calls: int = 0
    turns: int = 0
    attention_pairs: int = 0
    """Causal query-key pairs of the tokens run (a token at position ``t`` reads ``t + 1``
    keys), padding excluded: the attention's share of the real tokens' FLOPs
    (:func:`~.flops.rollout_flops`; the HF backend counts them, on the host)."""

    def reset(self) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, 0)


class TurnBackend(Protocol):
    """What the agent loop needs from a generator."""

    stats: BackendStats
    keeps_cache: bool

    def generate_turns(self, requests: Sequence[TurnRequest]) -> list[TurnResult]: ...

    def prefill(self, contexts: Sequence[list[int]]) -> list[KVPrefix | None]: ...


def split_stop_sequences(tokenizer, stops: Sequence[str]) -> tuple[set[int], list[str]]:
    """Stop strings that are single tokens become stop ids; the rest stay strings."""
    ids, strings = set(), []
    for text in stops:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) == 1:
            ids.add(int(encoded[0]))
        else:
            strings.append(text)
    return ids, strings


def eos_token_ids(model, tokenizer) -> set[int]:
    """EOS ids from the tokenizer and the model's generation config (Qwen3 has two)."""
    ids: set[int] = set()
    for source in (
        tokenizer.eos_token_id,
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if source is None:
            continue
        ids.update([source] if isinstance(source, int) else list(source))
    return ids
