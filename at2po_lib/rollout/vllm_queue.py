r"""One continuous queue on a vLLM engine for a whole expansion round (the vLLM side of
``rollout.decode_grouping = round``, :mod:`.session` being the Hugging Face side).

``LLM.generate`` returns when its slowest request ends, so one call per turn depth makes every
row of a depth wait for the longest turn of that depth, and the engine runs ever fewer rows
until the call returns. Here the agent drives vLLM's step-level engine (``LLM.llm_engine``:
``add_request``, ``step``, ``abort_request``) itself: every chain of the round is queued at
once; each ``step`` is one scheduler step of the engine (a forward pass over every running
request); a request whose turn ends is handed back to the agent, which either *resumes* its row
(the observation and the next turn are queued while the others keep running) or *closes* it.
So the engine's batch holds rows of every turn depth, and the round ends with its last turn,
not with the sum of each depth's slowest turn.

Sampling seeds. vLLM 0.31 has no seed per call: ``LLM(seed=...)`` seeds the engine once, and an
unseeded request draws from the engine's shared generator at the batch position it lands in,
which in a queue depends on when the others joined (in a standalone engine, whose core runs in
its own process, on timing). A resumed run (``--resume``) or a rerun must sample a step as the
uninterrupted run did, so a sampled request keeps a seed of its own: a pure function of the
backend's seed, the session's index among the backend's sessions, the row and the row's turn
(:func:`turn_seed`), whatever the order in which rows end. Greedy requests carry none (vLLM
makes no generator for them).

Order. Rows that end at the same engine step are handed back in row order. The trainer's
colocated engine (TRL's ``external_launcher``) runs vLLM's core in the training process, one
scheduler step per ``step`` call, so a rollout repeats; a standalone engine (evaluation's
:func:`~.vllm_backend.build_engine`) may let a resumed row join a step earlier or later, which
changes no seeded row's draws (evaluation grows one chain per tree).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from .turns import BackendStats, TurnRequest, TurnResult

# Imported inside the functions that use them: vllm; optional, installed only where it runs.

_QUEUE_NAMES = itertools.count()
"""Numbers the sessions of this process, so request ids never repeat on a shared engine."""

STEP_API = ("add_request", "step", "abort_request")
"""What the queue calls on vLLM's ``LLMEngine``."""


def step_engine(llm: Any) -> Any | None:
    """``llm``'s step-level engine (``llm.llm_engine`` with :data:`STEP_API`), or None when it
    has none or must not be driven step by step (a wrapper says so with ``step_engine``: a
    tensor-parallel group's ranks submit identical requests through ``generate``)."""
    if hasattr(llm, "step_engine"):
        return llm.step_engine
    engine = getattr(llm, "llm_engine", None)
    if engine is None or not all(callable(getattr(engine, name, None)) for name in STEP_API):
        return None
    return engine


def turn_seed(seed: int, session: int, row: int, turn: int) -> int:
    """The sampling seed of ``row``'s ``turn``-th turn in a backend's ``session``-th queue: a
    31-bit integer from ``numpy.random.SeedSequence([seed, session, row, turn])``."""
    mix = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(session), int(row), int(turn)])
    return int(mix.generate_state(1)[0]) & 0x7FFFFFFF


class QueueBackend(Protocol):
    """What a queue needs from its backend (:class:`~.vllm_backend.VLLMBackend`)."""

    stats: BackendStats
    sessions: int

    def sampling_params(self, max_tokens: int, seed: int | None = None) -> Any: ...

    def request_seed(self, session: int, row: int, turn: int) -> int | None: ...

    def result(self, completion: Any) -> TurnResult: ...


def prompt_maker() -> Callable[[list[int]], Any]:
    """Token ids -> the engine's input: vLLM's ``tokens_input`` (what ``LLM.generate`` hands
    ``add_request`` after rendering a ``TokensPrompt``), or the ``TokensPrompt`` itself where
    vLLM has no such helper."""
    try:
        from vllm.inputs import tokens_input
    except ImportError:
        from vllm.inputs import TokensPrompt

        return lambda ids: TokensPrompt(prompt_token_ids=ids)
    return tokens_input


class QueueSession:
    """Rows that go on from turn to turn on one engine queue (module docstring); the same
    interface as :class:`~.session.RoundSession`. Row ids are the requests' indices."""

    def __init__(self, engine: Any, backend: QueueBackend, requests: Sequence[TurnRequest]):
        from vllm.sampling_params import RequestOutputKind

        if not requests:
            raise ValueError("a queue session needs at least one request")
        self.engine, self.backend = engine, backend
        self.index = backend.sessions
        backend.sessions += 1
        self.name = f"at2po-q{next(_QUEUE_NAMES)}"
        self.final_only = RequestOutputKind.FINAL_ONLY  # one output per request, when it ends
        self.prompt = prompt_maker()
        self.turns = [0] * len(requests)
        self.pending: dict[str, int] = {}
        """Request id -> row, for every request the engine still runs."""
        self._waiting: set[int] = set()
        try:
            for row, request in enumerate(requests):
                self._submit(row, request.context, request.max_new_tokens)
        except BaseException:
            self.abort()  # a request refused half-way: the ones added before it must not run on
            raise

    # -- the agent's side -----------------------------------------------------------------------

    def resume(self, row: int, context: list[int], max_new_tokens: int) -> None:
        """Row ``row`` goes on with ``context`` (its next turn joins the running batch)."""
        self._take(row)
        self.turns[row] += 1
        self._submit(row, context, max_new_tokens)

    def close(self, row: int) -> None:
        """Row ``row`` is done (the engine's prefix cache keeps what a later branch reuses)."""
        self._take(row)

    def next_turns(self) -> list[tuple[int, TurnResult]]:
        """Step the engine until at least one row's turn ends; ``(row id, result)`` of every row
        that ended at that step, in row order. Empty when no row is running."""
        if self._waiting:
            raise RuntimeError(f"rows {sorted(self._waiting)} were neither resumed nor closed")
        while self.pending:
            ended = [out for out in self.engine.step() if out.finished]
            if ended:
                return self._hand_back(ended)
        return []

    def abort(self) -> None:
        """Drop every request still running (the rollout failed: the engine must not keep
        them)."""
        if self.pending:
            self.engine.abort_request(list(self.pending))
            self.pending.clear()

    # -- internals ------------------------------------------------------------------------------

    def _take(self, row: int) -> None:
        if row not in self._waiting:
            raise ValueError(f"row {row} is not waiting for its next turn")
        self._waiting.discard(row)

    def _submit(self, row: int, context: list[int], max_new_tokens: int) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"row {row}: max_new_tokens={max_new_tokens} < 1")
        seed = self.backend.request_seed(self.index, row, self.turns[row])
        params = self.backend.sampling_params(max_new_tokens, seed)
        params.output_kind = self.final_only
        request_id = f"{self.name}-{row}-{self.turns[row]}"
        self.engine.add_request(request_id, self.prompt(list(context)), params)
        self.pending[request_id] = row
        self.backend.stats.prefill_tokens += len(context)  # upper bound: cache hits not seen

    def _hand_back(self, outputs: list[Any]) -> list[tuple[int, TurnResult]]:
        # a row has one request at a time: rows are distinct keys
        rows = sorted(((self.pending.pop(out.request_id), out) for out in outputs), key=_row)
        results = [(row, self.backend.result(out.outputs[0])) for row, out in rows]
        self._waiting.update(row for row, _ in results)
        stats = self.backend.stats
        stats.turns += len(results)
        stats.generated_tokens += sum(len(r.token_ids) for _, r in results)
        return results


def _row(pair: tuple[int, Any]) -> int:
    return pair[0]
