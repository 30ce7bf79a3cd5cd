"""Micro-batching of concurrent search requests (asyncio).

A search agent's rollout workers each send small requests (often one query). Encoding one
query costs nearly as much as encoding sixteen (the model call dominates; on 2 CPU cores
MiniLM takes ~0.1 s for 1 query and ~0.09 s for 16), and one faiss call over a matrix of queries
beats many single-row calls. So the server queues requests, and a single background task takes
everything that arrived within ``max_wait_s`` of the first (at most ``max_batch_queries``
queries, never splitting a request), runs **one** search over the concatenated queries in a
worker thread, and hands each request its slice. Requests that arrive while a batch is being
computed simply form the next batch, so under load batches grow by themselves.

Requests asking for different ``topk`` are searched in one call per distinct ``topk`` (slicing a
larger top-k would change approximate HNSW results and break "same answer as in-process").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from .base import Hit

SearchFn = Callable[[list[str], int], list[list[Hit]]]


@dataclass
class _Request:
    queries: list[str]
    topk: int
    future: asyncio.Future = field(repr=False)


class MicroBatcher:
    """``await batcher.submit(queries, topk)`` → that request's hits; one search per batch."""

    def __init__(self, search: SearchFn, executor: Executor, *, max_wait_s: float = 0.003,
                 max_batch_queries: int = 256) -> None:
        if max_wait_s < 0 or max_batch_queries < 1:
            raise ValueError("max_wait_s must be >= 0 and max_batch_queries >= 1")
        self.search = search
        self.executor = executor
        self.max_wait_s = max_wait_s
        self.max_batch_queries = max_batch_queries
        self._pending: list[_Request] = []
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.batches = 0
        """Search calls made so far (a test reads it)."""

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

    async def submit(self, queries: list[str], topk: int) -> list[list[Hit]]:
        if self._wakeup is None:
            raise RuntimeError("MicroBatcher.start() was not called")
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(queries, topk, future))
        self._wakeup.set()
        return await future

    def _queued_queries(self) -> int:
        return sum(len(r.queries) for r in self._pending)

    def _take_batch(self) -> list[_Request]:
        batch, size = [], 0
        while self._pending:
            nxt = len(self._pending[0].queries)
            if batch and size + nxt > self.max_batch_queries:
                break
            batch.append(self._pending.pop(0))
            size += nxt
        return batch

    async def _loop(self) -> None:
        assert self._wakeup is not None
        while True:
            await self._wakeup.wait()
            if self.max_wait_s > 0 and self._queued_queries() < self.max_batch_queries:
                await asyncio.sleep(self.max_wait_s)  # let concurrent requests join
            batch = self._take_batch()
            if not self._pending:
                self._wakeup.clear()
            if batch:
                await self._execute(batch)

    async def _execute(self, batch: list[_Request]) -> None:
        loop = asyncio.get_running_loop()
        by_topk: dict[int, list[_Request]] = {}
        for request in batch:
            by_topk.setdefault(request.topk, []).append(request)
        for topk, requests in by_topk.items():
            flat = [q for r in requests for q in r.queries]
            try:
                hits = await loop.run_in_executor(self.executor, self.search, flat, topk)
                self.batches += 1
            except Exception as exc:  # every waiting request gets the error; the loop lives on
                for r in requests:
                    if not r.future.done():
                        r.future.set_exception(exc)
                continue
            start = 0
            for r in requests:
                if not r.future.done():  # the client may have gone away
                    r.future.set_result(hits[start : start + len(r.queries)])
                start += len(r.queries)
