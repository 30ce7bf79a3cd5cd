r"""Stop strings as a token-level automaton, built once per tokenizer.

A stop string ``s`` of ``m`` characters that the tokenizer spells with several tokens
(``</search>`` in Qwen's vocabulary) ends a turn at the token that completes it. Per row the
rollout keeps the KMP state ``q`` (0 <= q < m): the length of the longest prefix of ``s`` that
is a suffix of the turn's text so far. A token whose text is ``t`` moves it to

.. math::

    \delta(q, t) = \begin{cases} m & s \text{ occurs in } s_{:q} \Vert t \\
                   \max\{k < m : s_{:k} \text{ is a suffix of } s_{:q} \Vert t\} & \text{else}
                   \end{cases}

and the turn stops when the state reaches ``m``. ``s`` never occurs inside ``s[:q]`` (q < m),
so a match always ends inside ``t``. The table ``delta`` (m x V, int64) is computed once per
tokenizer and stop string (:func:`stop_tables`, cached by the vocabulary's fingerprint) and
the rollout looks it up on the device: one gather a decode step, no decoding, no host sync.

Computing it: ``delta(0, t)`` for every token (a substring test and a few ``endswith``), then for
``q > 0`` only the tokens whose value can differ from ``delta(0, t)``: an alignment that starts
inside ``s[:q]`` at a border ``k`` of it (``s[:k]`` a suffix of ``s[:q]``) survives only when
``t`` continues ``s`` from ``k`` (``t`` starts with ``s[k]``), and an empty ``t`` keeps ``q``.

A token's text is its decode on its own (``tokenizer.decode([i])``, special tokens included,
as the turn's text is decoded). For byte-level BPE (Qwen) the turn's text is the concatenation
of those texts, except where a multi-byte character is split between tokens (each half decodes
to U+FFFD); a stop string of ASCII characters is found in the same places either way.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TEXTS: dict[str, list[str]] = {}
_TABLES: dict[tuple[str, str], np.ndarray] = {}
_PADDED: dict[tuple[str, tuple[str, ...], int], np.ndarray] = {}


def vocabulary_fingerprint(tokenizer) -> str:
    """SHA-1 of the tokenizer's definition (a fast tokenizer's serialised JSON: vocabulary,
    merges, added tokens, decoder; else its vocabulary, token -> id), memoised per tokenizer
    object: two tokenizers that decode alike share every cached table."""
    try:
        return _FINGERPRINTS[tokenizer]
    except (KeyError, TypeError):
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        text = backend.to_str()  # 0.2 s for Qwen's 151k tokens; the vocabulary dict takes longer
    else:
        text = repr((len(tokenizer), sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])))
    digest = hashlib.sha1(text.encode()).hexdigest()
    try:
        _FINGERPRINTS[tokenizer] = digest
    except TypeError:  # an object that takes no weak reference: recomputed next time
        pass
    return digest


def token_texts(tokenizer) -> list[str]:
    """``decode([i])`` for every id of the tokenizer, once per vocabulary (the costly part):
    by the fast tokenizer's own batch decode where there is one (3x ``batch_decode``, whose
    per-sequence Python calls take ~4 s for 151,936 ids on a busy 2-core machine), with the
    same clean-up ``decode`` applies."""
    key = vocabulary_fingerprint(tokenizer)
    if key not in _TEXTS:
        ids = [[i] for i in range(len(tokenizer))]
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            _TEXTS[key] = tokenizer.batch_decode(ids)
        else:
            texts = backend.decode_batch(ids, skip_special_tokens=False)
            if getattr(tokenizer, "clean_up_tokenization_spaces", False):
                texts = [tokenizer.clean_up_tokenization(t) for t in texts]
            _TEXTS[key] = texts
    return _TEXTS[key]


def state_after(stop: str, state: int, text: str) -> int:
    """``delta(state, text)`` of the module docstring, by its definition."""
    joined = stop[:state] + text
    if stop in joined:
        return len(stop)
    for k in range(min(len(stop) - 1, len(joined)), 0, -1):
        if joined.endswith(stop[:k]):
            return k
    return 0


def transition_table(texts: Sequence[str], stop: str) -> np.ndarray:
    """``delta`` for every state ``q < m`` and token: (m, V) int64 (module docstring)."""
    if not stop:
        raise ValueError("a stop string must not be empty")
    m = len(stop)
    ends = set(stop[:-1])  # the last characters of the proper prefixes s[:k], k = 1..m-1

    def from_start(text: str) -> int:
        if stop in text:
            return m
        return state_after(stop, 0, text) if text and text[-1] in ends else 0

    base = np.array([from_start(t) for t in texts], dtype=np.int64)
    table = np.tile(base, (m, 1))
    for q in range(1, m):
        borders = [k for k in range(1, q + 1) if stop[:q].endswith(stop[:k])]
        firsts = {stop[k] for k in borders}
        for i, text in enumerate(texts):
            if not text or text[0] in firsts:
                table[q, i] = state_after(stop, q, text)
    return table


def stop_tables(tokenizer, stops: Sequence[str]) -> list[np.ndarray]:
    """One :func:`transition_table` per stop string, cached per vocabulary and string."""
    key = vocabulary_fingerprint(tokenizer)
    out = []
    for stop in stops:
        if (key, stop) not in _TABLES:
            _TABLES[(key, stop)] = transition_table(token_texts(tokenizer), stop)
        out.append(_TABLES[(key, stop)])
    return out


@dataclass
class StopMatcher:
    """The stop strings' automata as one padded table (S, m_max + 1, V'), on the host and on
    the rollout's device.

    Row ``m`` of a string (and any row past it) sends every token back to state 0: a row that
    has just matched restarts (it stops anyway), and every state stays a valid index. Ids at or
    above the tokenizer's length (a model's padded vocabulary) have no text: they keep the
    state, as an empty string would.
    """

    strings: tuple[str, ...]
    host: np.ndarray
    """(S, m_max + 1, V') int64."""
    table: torch.Tensor
    """``host`` on the device."""
    lengths: torch.Tensor
    """(S,) int64: m of each string."""

    @classmethod
    def build(
        cls, tokenizer, stops: Sequence[str], vocab_size: int, device: torch.device | str = "cpu"
    ) -> StopMatcher:
        width = max(vocab_size, len(tokenizer))
        key = (vocabulary_fingerprint(tokenizer), tuple(stops), width)
        if key not in _PADDED:
            tables = stop_tables(tokenizer, stops)
            depth = max((t.shape[0] for t in tables), default=0) + 1
            host = np.zeros((len(tables), depth, width), dtype=np.int64)
            for s, t in enumerate(tables):
                m, known = t.shape
                host[s, :m, :known] = t
                host[s, :m, known:] = np.arange(m)[:, None]  # no text: the state stays
            _PADDED[key] = host
        host = _PADDED[key]
        return cls(
            tuple(stops),
            host,
            torch.from_numpy(host).to(device),
            torch.tensor([len(s) for s in stops], dtype=torch.long, device=device),
        )

    def initial(self, rows: int) -> torch.Tensor:
        """(S, rows) states at the start of a turn."""
        return torch.zeros(len(self.strings), rows, dtype=torch.long, device=self.table.device)

    def advance(
        self, states: torch.Tensor, token_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(new states (S, B), hit (B,) bool)`` after each row's token (B,)."""
        strings = torch.arange(len(self.strings), device=states.device)[:, None]
        new = self.table[strings, states, token_ids[None, :]]
        return new, (new == self.lengths[:, None]).any(dim=0)

    def completed_by_last(self, token_ids: Sequence[int]) -> str | None:
        """The stop string that the last of ``token_ids`` completes (the first one listed when
        several do), on the host; None when none does. Ids past the table have no text."""
        if not token_ids:
            return None
        width = self.host.shape[2]
        for s, stop in enumerate(self.strings):
            state = 0
            for token in token_ids:
                if token < width:
                    state = int(self.host[s, state, token])
            if state == len(stop):
                return stop
        return None
