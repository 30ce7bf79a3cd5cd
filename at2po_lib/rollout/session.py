r"""One decode call for a whole expansion round (``rollout.decode_grouping = round``).

Rows are chains. Each step samples every row (``sample_step``); a row in a turn records its
token; a row whose turn ends (a stop token or string, or the call's budget) is handed back to
the agent, which either *resumes* it with its next context (the observation and the turn after
it join the running batch) or *closes* it (its cache becomes the chain's
:class:`~.kvcache.KVPrefix`, for the branches of later rounds). So every node of the round
(all prompts, all chains, all turns) is generated in one call, and a row does not wait for the
slowest row of its turn depth (``turn`` grouping: :meth:`.backends.HFBackend.generate_turns`).

Per step (B rows, the session's :class:`~.kvcache.RowCache`):

1. rows resumed since the last step run their new tokens through the model, those rows only
   (one forward of width max n_r; with the backend's ``chunk_prefill``, a CPU's default, one
   per length-sorted chunk of them, :mod:`.packing`), and their next-token logits replace
   theirs;
2. every row samples; on the device ``ended = active & (stop | generated >= budget)``;
3. one device-to-host copy (the step's only sync) brings the tokens, log-probs, entropies and
   which rows ended;
4. the rows still in a turn feed their token (one forward of width 1 for all B rows; idle rows
   write a masked column), launched before the agent handles the ended rows, so the device
   computes while the host searches.

Rows that have closed stay in the buffer, masked, until fewer than ``compact_below`` of the
rows are open; then the buffers keep the open rows only.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch

from .capture import StaticStep, captured_step
from .flops import causal_pairs
from .kvcache import KVPrefix, RowCache
from .packing import plan_chunks
from .sampling import SamplingSpec, sample_step
from .stops import StopMatcher
from .turns import BackendStats, TurnRequest, TurnResult

GROWTH = 1.25
"""A buffer that must take more columns grows to at least this many times its capacity."""


@dataclass
class _Turn:
    """What one row sampled in its current turn (host lists)."""

    tokens: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    topk: list[float] = field(default_factory=list)


class SessionBackend(Protocol):
    """What a session needs from its backend (:class:`~.backends.HFBackend`)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    pad_id: int
    stop_ids: torch.Tensor
    matcher: StopMatcher | None
    sampling: SamplingSpec
    generator: torch.Generator
    compact_below: float
    capture: bool
    chunk_prefill: bool
    stats: BackendStats

    def usable_prefix(self, request: TurnRequest) -> KVPrefix | None: ...

    def forward_rows(
        self,
        cache: RowCache,
        rows: torch.Tensor | None,
        ids: torch.Tensor,
        columns: torch.Tensor,
        width: int,
    ) -> torch.Tensor: ...


def to_device(values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device`` without waiting for the device's queue (pinned memory and an
    asynchronous copy on CUDA; a plain tensor on the CPU)."""
    if device.type != "cuda":
        return values
    return values.pin_memory().to(device, non_blocking=True)


class RoundSession:
    """Rows that go on from turn to turn inside one decode call (module docstring).

    ``requests``: each row's first context, turn budget and KV prefix; ``capacity``: columns
    a row may fill (its prompt plus its response budget; more are allocated when needed).
    Row ids are the requests' indices and stay valid while rows are dropped.
    """

    def __init__(
        self, backend: SessionBackend, requests: Sequence[TurnRequest], capacity: int
    ) -> None:
        self.backend = b = backend
        batch = len(requests)
        if not batch:
            raise ValueError("a decode session needs at least one request")
        prefixes = [b.usable_prefix(r) for r in requests]
        self.cache = RowCache(
            b.num_layers,
            b.num_kv_heads,
            b.head_dim,
            batch,
            max(capacity, max(len(r.context) for r in requests) + 1),
            b.dtype,
            b.device,
        )
        for row, prefix in enumerate(prefixes):
            self.cache.load(row, prefix)
        self.row_of = list(range(batch))
        """Batch position -> row id."""
        self.in_turn = [False] * batch
        self.closed = [False] * batch
        self.turns = [_Turn() for _ in range(batch)]
        self.lengths_t = torch.tensor(self.cache.lengths, dtype=torch.long, device=b.device)
        self.active = torch.zeros(batch, dtype=torch.bool, device=b.device)
        self.generated = torch.zeros(batch, dtype=torch.long, device=b.device)
        self.budget = torch.zeros(batch, dtype=torch.long, device=b.device)
        self.states = b.matcher.initial(batch) if b.matcher is not None else None
        self.logits: torch.Tensor | None = None
        self._step_fn: StaticStep | None = None
        self._step_version = -1
        self._joins: dict[int, tuple[list[int], int]] = {}
        self._waiting: set[int] = set()
        for row, request in enumerate(requests):
            self._queue(row, request.context, request.max_new_tokens)

    # -- the agent's side -----------------------------------------------------------------------

    def resume(self, row: int, context: list[int], max_new_tokens: int) -> None:
        """Row ``row`` goes on with ``context`` (its cached tokens plus what follows them)."""
        if row not in self._waiting:
            raise ValueError(f"row {row} is not waiting for its next turn")
        self._queue(self.row_of.index(row), context, max_new_tokens)
        self._waiting.discard(row)

    def close(self, row: int) -> KVPrefix:
        """Row ``row`` is done; returns its cache (context + turn, the last token excepted)."""
        if row not in self._waiting:
            raise ValueError(f"row {row} is not waiting for its next turn")
        self._waiting.discard(row)
        position = self.row_of.index(row)
        self.closed[position] = True
        return self.cache.extract_row(position)

    def next_turns(self) -> list[tuple[int, TurnResult]]:
        """Decode until at least one row's turn ends; returns ``(row id, result)`` of every row
        whose turn ended at that step (``result.prefix`` is None: the cache stays here until
        :meth:`close`). Empty when every row is closed."""
        if self._waiting:
            raise RuntimeError(f"rows {sorted(self._waiting)} were neither resumed nor closed")
        while True:
            if self._joins:
                self._join()
            self._compact()
            if not any(self.in_turn):
                self.cache.release()
                return []
            ended = self._step()
            if ended:
                return ended

    # -- internals ------------------------------------------------------------------------------

    def _queue(self, position: int, context: list[int], max_new_tokens: int) -> None:
        cached = self.cache.lengths[position]
        if max_new_tokens < 1:
            raise ValueError(f"row {self.row_of[position]}: max_new_tokens={max_new_tokens} < 1")
        if len(context) <= cached:
            raise ValueError(
                f"row {self.row_of[position]}: a context of {len(context)} tokens "
                f"does not go past its {cached} cached ones"
            )
        self._joins[position] = (list(context[cached:]), max_new_tokens)

    def _join(self) -> None:
        """Run the queued rows' new tokens (step 1 of the module docstring): in length-sorted
        chunks (:mod:`.packing`) when the backend chunks its prefill, else in one forward."""
        positions = sorted(self._joins)
        pending = [self._joins[p][0] for p in positions]
        budgets = [self._joins[p][1] for p in positions]
        self._joins = {}
        if self.backend.chunk_prefill:
            lengths = [self.cache.lengths[p] for p in positions]
            chunks = plan_chunks([len(t) for t in pending], lengths, len(positions))
        else:
            chunks = [list(range(len(positions)))]
        for chunk in chunks:
            self._join_rows(
                [positions[i] for i in chunk],
                [pending[i] for i in chunk],
                [budgets[i] for i in chunk],
            )

    def _join_rows(
        self, positions: list[int], pending: list[list[int]], budgets: list[int]
    ) -> None:
        """One forward of the rows at ``positions`` (sorted) feeding their ``pending`` tokens."""
        b, cache = self.backend, self.cache
        q = max(map(len, pending))
        width = max(cache.lengths[p] for p in positions) + q
        if width > cache.capacity:
            cache.grow(max(width, int(cache.capacity * GROWTH)))
        ids = torch.full((len(positions), q), b.pad_id, dtype=torch.long)
        for i, tokens in enumerate(pending):
            ids[i, q - len(tokens) :] = torch.tensor(tokens, dtype=torch.long)
        counts = torch.tensor([len(t) for t in pending])
        columns = RowCache.write_columns(
            torch.tensor([cache.lengths[p] for p in positions]), counts, q
        )
        # one host-to-device copy for everything the join needs
        packed = to_device(
            torch.cat(
                [
                    ids.flatten(),
                    columns.flatten(),
                    torch.tensor(positions),
                    torch.tensor(budgets),
                    counts,
                ]
            ),
            b.device,
        )
        n = len(positions)
        ids, columns = packed[: n * q].view(n, q), packed[n * q : 2 * n * q].view(n, q)
        rows, budget, counts = packed[2 * n * q :].view(3, n)
        logits = b.forward_rows(
            cache, None if len(positions) == len(self.row_of) else rows, ids, columns, width
        )
        b.stats.forward_calls += 1
        if self.logits is None and len(positions) == len(self.row_of):
            self.logits = logits
        else:
            if self.logits is None:  # the first join, in chunks: every row is in one of them
                self.logits = logits.new_empty((len(self.row_of), logits.shape[-1]))
            self.logits.index_copy_(0, rows, logits.to(self.logits.dtype))
        self.active[rows] = True
        self.generated[rows] = 0
        self.budget[rows] = budget
        self.lengths_t[rows] += counts
        if self.states is not None:
            self.states[:, rows] = 0
        for p, tokens in zip(positions, pending):
            b.stats.attention_pairs += causal_pairs(cache.lengths[p], len(tokens))
            cache.lengths[p] += len(tokens)
            self.in_turn[p] = True
            self.turns[p] = _Turn()
        b.stats.prefill_tokens += sum(map(len, pending))

    def _compact(self) -> None:
        """Drop closed rows once fewer than ``compact_below`` of the rows are open."""
        open_ = [p for p, closed in enumerate(self.closed) if not closed]
        if (
            not open_
            or len(open_) == len(self.closed)
            or len(open_) / len(self.closed) >= self.backend.compact_below
        ):
            return
        keep = to_device(torch.tensor(open_, dtype=torch.long), self.backend.device)
        self.cache.select_rows(keep, open_)
        self.lengths_t = self.lengths_t[keep]
        self.active, self.generated, self.budget = (
            self.active[keep],
            self.generated[keep],
            self.budget[keep],
        )
        self.logits = self.logits[keep]
        if self.states is not None:
            self.states = self.states[:, keep]
        for name in ("row_of", "in_turn", "closed", "turns"):
            values = getattr(self, name)
            setattr(self, name, [values[p] for p in open_])

    def _step(self) -> list[tuple[int, TurnResult]]:
        """Steps 2-4 of the module docstring; returns the rows whose turn ended."""
        b = self.backend
        step = sample_step(self.logits, b.sampling, b.generator)
        tokens, active = step.token_ids, self.active
        self.generated += active.long()
        hit = torch.isin(tokens, b.stop_ids)
        if self.states is not None:
            self.states, hit_string = b.matcher.advance(self.states, tokens)
            hit = hit | hit_string
        stopped = active & hit
        ended = active & (hit | (self.generated >= self.budget))
        self.active = active & ~ended
        packed = torch.stack(
            [
                tokens.double(),
                step.logp.double(),
                step.entropy.double(),
                step.topk_entropy.double(),
                ended.double(),
                stopped.double(),
            ]
        )
        rows = packed.tolist()  # the step's one device-to-host sync
        going = self._record(rows)
        if going:
            self._feed(tokens, going)
        ended_rows = []
        for p, flag in enumerate(rows[4]):
            if flag and self.in_turn[p]:
                self.in_turn[p] = False
                turn = self.turns[p]
                ended_rows.append(
                    (
                        self.row_of[p],
                        TurnResult(
                            token_ids=turn.tokens,
                            logps=turn.logps,
                            entropies=turn.entropies,
                            topk_entropies=turn.topk,
                            stopped=bool(rows[5][p]),
                        ),
                    )
                )
                self._waiting.add(self.row_of[p])
        b.stats.generated_tokens += sum(len(t.token_ids) for _, t in ended_rows)
        b.stats.turns += len(ended_rows)
        return ended_rows

    def _record(self, rows: list[list[float]]) -> list[int]:
        """Append the step's values to each row in a turn; returns the positions that go on."""
        going = []
        for p, in_turn in enumerate(self.in_turn):
            if not in_turn:
                continue
            turn = self.turns[p]
            turn.tokens.append(int(rows[0][p]))
            turn.logps.append(rows[1][p])
            turn.entropies.append(rows[2][p])
            turn.topk.append(rows[3][p])
            if not rows[4][p]:
                going.append(p)
        return going

    def _feed(self, tokens: torch.Tensor, going: list[int]) -> None:
        """Step 4: the rows in ``going`` feed their token (a width-1 forward over all rows;
        the others write a masked column)."""
        b, cache = self.backend, self.cache
        width = max(cache.lengths) + 1
        if width > cache.capacity:
            cache.grow(max(width, int(cache.capacity * GROWTH)))
        ids = torch.where(self.active, tokens, b.pad_id)[:, None]
        if b.capture:
            try:
                self.logits = self._captured()(ids, self.lengths_t[:, None])
            except RuntimeError as exc:  # an operator that cannot be recorded: decode eagerly
                warnings.warn(
                    f"the decode step could not be captured ({str(exc)[:200]}); "
                    "this backend decodes eagerly from here on",
                    RuntimeWarning,
                )
                b.capture = False
        if not b.capture:
            self.logits = b.forward_rows(cache, None, ids, self.lengths_t[:, None], width)
        b.stats.forward_calls += 1
        self.lengths_t += self.active.long()
        for p in going:
            cache.lengths[p] += 1
            b.stats.attention_pairs += cache.lengths[p]
        b.stats.decode_tokens += len(going)

    def _captured(self) -> StaticStep:
        """The decode step over the cache's full width with static inputs (:mod:`.capture`),
        recorded again whenever the buffers were reallocated."""
        cache = self.cache
        if self._step_fn is None or self._step_version != cache.version:
            b = self.backend

            def step(ids: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
                return b.forward_rows(cache, None, ids, columns, cache.capacity)

            self._step_fn = captured_step(step, len(self.row_of), b.device)
            self._step_version = cache.version
        return self._step_fn
