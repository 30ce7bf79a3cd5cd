"""Micro-batching of concurrent search requests (asyncio), with a bounded, fair queue.

A search agent's rollout workers each send small requests (often one query). Encoding one
query costs nearly as much as encoding sixteen (the model call dominates; on 2 CPU cores
MiniLM takes ~0.1 s for 1 query and ~0.09 s for 16), and one faiss call over a matrix of queries
beats many single-row calls. So the server queues requests, and a single background task takes
what arrived within ``max_wait_s`` of the first (at most ``max_batch_queries`` queries), runs
**one** search over the concatenated queries in a worker thread, and hands each request its
slice. Requests that arrive while a batch is being computed form the next batch, so under load
batches grow by themselves.

Robustness (one client must not be able to poison or stall the others):

- **Fair slices.** A request larger than the room left in a batch is cut: the batch takes what
  fits and the rest of that request waits behind every request not yet started. So a
  4,000-query request delays a 1-query request by at most the batch being searched when it
  arrives, instead of by its whole search. Cutting changes
  no result: every backend scores each query on its own.
- **Bounded queue.** :meth:`MicroBatcher.submit` raises :class:`QueueFullError` when the queued
  queries would exceed ``max_queued_queries`` (the server answers 503 with ``Retry-After``).
- **Poisoned batches.** If a search over a whole batch raises, every request in it is searched
  again on its own, so only the request that causes the failure gets the error.
- **Abandoned work is dropped.** Cancelling the task that awaits :meth:`submit` (a client that
  disconnected, a per-request time-out) removes the request's unsearched queries from the queue.

Requests asking for different ``topk`` are searched in one call per distinct ``topk`` (slicing a
larger top-k would change approximate HNSW results and break "same answer as in-process").
With ``batching=False`` each search call serves exactly one whole request (the benchmark's
baseline), with the same queue bound and cancellation.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from .base import Hit

SearchFn = Callable[[list[str], int], list[list[Hit]]]


class QueueFullError(RuntimeError):
    """The queue holds too many queries; ``retry_after_s`` estimates when to try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(eq=False)
class _Request:
    queries: list[str]
    topk: int
    future: asyncio.Future = field(repr=False)
    taken: int = 0
    """Queries already handed to a search (a request is cut into slices, taken in order)."""
    hits: list[list[Hit]] = field(default_factory=list, repr=False)

    @property
    def remaining(self) -> int:
        return len(self.queries) - self.taken

    @property
    def abandoned(self) -> bool:
        return self.future.done()


@dataclass
class _Slice:
    request: _Request
    start: int
    stop: int

    @property
    def queries(self) -> list[str]:
        return self.request.queries[self.start : self.stop]


class MicroBatcher:
    """``await batcher.submit(queries, topk)`` → that request's hits; one search per batch."""

    def __init__(
        self,
        search: SearchFn,
        executor: Executor,
        *,
        max_wait_s: float = 0.003,
        max_batch_queries: int = 256,
        max_queued_queries: int = 16_384,
        batching: bool = True,
    ) -> None:
        if max_wait_s < 0 or max_batch_queries < 1 or max_queued_queries < 1:
            raise ValueError(
                "max_wait_s must be >= 0, max_batch_queries and max_queued_queries >= 1"
            )
        self.search = search
        self.executor = executor
        self.max_wait_s = max_wait_s if batching else 0.0
        self.max_batch_queries = max_batch_queries
        self.max_queued_queries = max_queued_queries
        self.batching = batching
        self._pending: deque[_Request] = deque()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.batches = 0
        """Search calls made so far (a test reads it)."""
        self.queries_per_second = 0.0
        """Throughput of the last search call (for the ``Retry-After`` estimate)."""

    def start(self) -> None:
        """Start the background task (call from inside the running event loop)."""
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for request in self._pending:
            if not request.future.done():
                request.future.set_exception(RuntimeError("server shutting down"))
        self._pending.clear()

    def queued_queries(self) -> int:
        """Queries waiting for a search (abandoned requests do not count)."""
        return sum(r.remaining for r in self._pending if not r.abandoned)

    async def submit(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """Queue one request and wait for its hits.

        Raises :class:`QueueFullError` at once when the queue is full; cancelling the awaiting
        task drops the request's queries that have not been searched yet.
        """
        if self._wakeup is None:
            raise RuntimeError("MicroBatcher.start() was not called")
        queued = self.queued_queries()
        if queued + len(queries) > self.max_queued_queries:
            wait = queued / self.queries_per_second if self.queries_per_second > 0 else 1.0
            raise QueueFullError(
                f"the server's queue holds {queued} queries (limit {self.max_queued_queries}); "
                "try again later",
                retry_after_s=max(1, min(60, round(wait + 0.5))),
            )
        request = _Request(queries, topk, asyncio.get_running_loop().create_future())
        self._pending.append(request)
        self._wakeup.set()
        try:
            return await request.future
        finally:
            if not request.future.done():  # cancelled by the caller: abandon the request
                request.future.cancel()
            if request in self._pending:
                self._pending.remove(request)

    def _take_batch(self) -> list[_Slice]:
        """The next batch: requests in queue order, a request that does not fit is cut and its
        rest re-queued at the back; abandoned requests are dropped."""
        batch: list[_Slice] = []
        room = self.max_batch_queries
        requeue: list[_Request] = []
        # Requests not yet started go first (stable: arrival order otherwise), so one that
        # arrived while a cut request's slice was searched does not wait for its next slice.
        self._pending = deque(sorted(self._pending, key=lambda r: r.taken > 0))
        while self._pending and room > 0:
            request = self._pending.popleft()
            if request.abandoned:
                continue
            if not self.batching:  # one whole request per search call
                return [_Slice(request, 0, len(request.queries))]
            take = min(request.remaining, room)
            batch.append(_Slice(request, request.taken, request.taken + take))
            request.taken += take
            room -= take
            if request.remaining:
                requeue.append(request)
        self._pending.extend(requeue)
        return batch

    async def _loop(self) -> None:
        assert self._wakeup is not None
        while True:
            await self._wakeup.wait()
            if self.max_wait_s > 0 and self.queued_queries() < self.max_batch_queries:
                await asyncio.sleep(self.max_wait_s)  # let concurrent requests join
            batch = self._take_batch()
            if not self._pending:
                self._wakeup.clear()
            if batch:
                await self._execute(batch)

    async def _run_search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        hits = await loop.run_in_executor(self.executor, self.search, queries, topk)
        self.batches += 1
        elapsed = loop.time() - started
        if elapsed > 0:
            self.queries_per_second = len(queries) / elapsed
        return hits

    async def _execute(self, batch: list[_Slice]) -> None:
        by_topk: dict[int, list[_Slice]] = {}
        for piece in batch:
            by_topk.setdefault(piece.request.topk, []).append(piece)
        for topk, pieces in by_topk.items():
            pieces = [p for p in pieces if not p.request.abandoned]
            if not pieces:
                continue
            try:
                hits = await self._run_search([q for p in pieces for q in p.queries], topk)
            except Exception as exc:
                if len(pieces) == 1:
                    self._fail(pieces[0], exc)
                    continue
                await self._search_one_by_one(pieces, topk)  # find the culprit, serve the rest
                continue
            start = 0
            for piece in pieces:
                size = piece.stop - piece.start
                self._deliver(piece, hits[start : start + size])
                start += size

    async def _search_one_by_one(self, pieces: list[_Slice], topk: int) -> None:
        for piece in pieces:
            if piece.request.abandoned:
                continue
            try:
                self._deliver(piece, await self._run_search(piece.queries, topk))
            except Exception as exc:
                self._fail(piece, exc)

    def _deliver(self, piece: _Slice, hits: list[list[Hit]]) -> None:
        request = piece.request
        if request.abandoned:  # the client went away while its slice was searched
            return
        request.hits.extend(hits)
        if len(request.hits) == len(request.queries):
            request.future.set_result(request.hits)

    def _fail(self, piece: _Slice, exc: Exception) -> None:
        request = piece.request
        if not request.abandoned:
            request.future.set_exception(exc)
        if request in self._pending:  # its other slices are not worth searching
            self._pending.remove(request)
