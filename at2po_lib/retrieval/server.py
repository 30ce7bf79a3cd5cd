"""The retrieval server: Search-R1's ``/retrieve`` contract (docs/method.md §2) over any retriever.

``POST /retrieve`` with ``{"queries": [str, ...], "topk": int | null, "return_scores": bool}``:

- ``return_scores: true`` → ``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}``
- ``return_scores: false`` (the default, as in Search-R1) → ``{"result": [[document, ...], ...]}``
  (Search-R1's own server crashes on this path; here it works.)
- ``topk: null`` or missing → the server's default (3).

``GET /health`` → ``{"status": "ok", "passages", "index_type", "encoder", "method", "batching",
"search_calls", "queries_searched", "search_seconds", ...}`` (the counters show how well
requests are being batched: ``queries_searched / search_calls``).

Each request is validated on its own before it can join a batch, and gets a 4xx with a message
while the server keeps serving: a body that is not JSON or has wrong types/missing ``queries``
(422), an empty query list, ``topk`` outside ``[1, min(max_topk, passages)]``, a query longer
than ``max_query_chars`` or one that is not valid Unicode text such as a lone surrogate (422),
too many queries, too many characters in all, or too large a body, chunked bodies counted as
they arrive (413). Beyond the request limits (:class:`ServerLimits`): a full queue answers 503
with ``Retry-After``; a request not answered within ``request_timeout_s`` gets 504; the work of
a client that disconnects (or times out) is dropped from the queue. Concurrent requests are
micro-batched fairly (:mod:`.batcher`: a big request is cut so it cannot stall small ones, and a
batch whose search fails is retried request by request, so one bad request fails alone);
``--no-batching`` answers each request with its own search call (the benchmark's baseline).
All searches run in one worker thread, so the encoder and index are never used concurrently.

Binding to an address other than loopback requires an API key (``$AT2PO_RETRIEVER_API_KEY`` or
``--api-key-file``); ``/retrieve`` then answers 401 unless the ``X-API-Key`` header carries it,
and the server says so when it starts. :class:`~.client.HTTPRetriever` sends the same variable.

Command line (:mod:`at2po_lib.cli.serve_retriever`; binds 127.0.0.1 unless ``--host`` says
otherwise)::

    at2po serve-retriever --profile tiny --port 8000
    at2po serve-retriever --corpus wiki-18.jsonl --index data/e5_Flat_index \\
        --encoder intfloat/e5-base-v2 --query-prefix "query: " --passage-prefix "passage: " --fp16
    at2po serve-retriever --corpus corpus.jsonl --index index/bm25 --bm25

For notebooks and tests, :func:`start_server` (a thread in this process) and
:func:`start_server_process` (a subprocess) return a handle with ``.url`` and ``.stop()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.requests import ClientDisconnect

from .base import DEFAULT_TOPK, InvalidQueryError, Retriever, check_query_text
from .batcher import MicroBatcher, QueueFullError

# Imported inside the functions that use them: h11, uvicorn, httpx; the HTTP server's
# stack loads only when it serves.


class RetrieveRequest(BaseModel):
    """The body Search-R1's client posts; strict types, so ``"3"`` is not a ``topk``."""

    model_config = ConfigDict(extra="ignore")
    queries: list[StrictStr]
    topk: StrictInt | None = None
    return_scores: StrictBool = False


@dataclass
class ServerLimits:
    """Request limits; anything beyond them is answered 4xx/503/504 instead of being served.

    The cost of a request grows with its queries and their length (the encoder truncates each
    query to its ``max_length`` tokens, but tokenising still reads every character), so both are
    capped per request, and ``max_request_chars`` caps their product.
    """

    max_queries: int = 4096
    """Queries in one request (413 beyond)."""
    max_topk: int = 100
    max_query_chars: int = 4096
    """Characters in one query (422 beyond)."""
    max_request_chars: int = 1 << 20
    """Characters of all queries of one request together (413 beyond)."""
    max_body_bytes: int = 8 << 20
    """Request body, counted as it arrives, chunked bodies included (413 beyond)."""
    max_queued_queries: int = 16_384
    """Queries waiting for a search, all clients together (503 with ``Retry-After`` beyond)."""
    request_timeout_s: float = 60.0
    """A request not answered within this time gets 504 and its remaining queries are dropped."""
    header_timeout_s: float = 10.0
    """A connection must deliver a request's complete headers within this time of opening (or
    of its previous answer), else it is closed: slow-header clients ("slowloris") cannot hold
    connections open forever."""
    body_timeout_s: float = 30.0
    """The whole body must arrive within this time of the headers (408 and close beyond)."""
    max_connections: int = 256
    """Open connections at most, all clients together. A connection beyond it first makes room
    by closing the connection that has waited longest on its client (no request in progress,
    or a request whose headers or body are still arriving; by the time of its last byte); only
    when every connection is being answered is the new one closed, before anything is read. The
    server never runs out of file descriptors, and sockets held open without a request, or
    bodies dribbled a byte at a time, cannot lock good clients out."""
    max_connections_per_client: int = 64
    """Open connections from one address at most; beyond, that address's connection that has
    waited longest on its client is closed, or the new one when all of them are being answered.
    Trainers all reach the server from 127.0.0.1, so this cap is shared by every client of an
    address: shedding what waits on its sender, not what waits on the server, keeps slow
    senders from taking it over."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"ServerLimits.{name} must be positive, got {value}")
        if self.max_queued_queries < self.max_queries:
            raise ValueError(
                "ServerLimits.max_queued_queries must be >= max_queries "
                f"({self.max_queued_queries} < {self.max_queries})"
            )


API_KEY_HEADER = "X-API-Key"
API_KEY_ENV = "AT2PO_RETRIEVER_API_KEY"
"""Environment variable holding the API key (server: required off loopback; client: sent)."""


def is_loopback(host: str) -> bool:
    """``127.0.0.1``, ``::1``, ``localhost``: only this machine can connect."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_binding(host: str, api_key: str | None) -> None:
    """Refuse to serve beyond this machine without an API key."""
    if not is_loopback(host) and not api_key:
        raise ValueError(
            f"binding the retrieval server to {host!r} (not a loopback address) requires an API "
            f"key: set {API_KEY_ENV} (or --api-key-file); clients send it in the {API_KEY_HEADER} "
            "header (HTTPRetriever reads the same variable)"
        )


class _BodyTooLarge(Exception):
    pass


async def _read_body(request: Any, limit: int) -> bytes:
    """The request body, refusing it as soon as more than ``limit`` bytes have arrived
    (a declared Content-Length is checked before reading; chunked bodies are counted)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and len(declared) < 20 and int(declared) > limit:
        raise _BodyTooLarge(f"request body of {declared} bytes exceeds {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _BodyTooLarge(
                f"request body exceeds {limit} bytes (refused after {len(body)} bytes had arrived)"
            )
    return bytes(body)


def _public(info: dict[str, Any]) -> dict[str, Any]:
    """What ``/health`` may show anyone: no file-system paths (the corpus's, an encoder's
    folder), only the last component of an absolute path."""
    return {
        k: (Path(v).name if isinstance(v, str) and os.path.isabs(v) else v)
        for k, v in info.items()
        if k != "corpus"
    }


def _idle(protocol: Any) -> bool:
    """A connection with no request in progress (between requests, or none sent yet)."""
    import h11

    return (
        protocol.conn.their_state is h11.IDLE
        and not getattr(protocol, "_shed", False)
        and (protocol.cycle is None or protocol.cycle.response_complete)
        and not protocol.transport.is_closing()
    )


def _receiving_body(protocol: Any) -> bool:
    """A request whose headers are in and whose body is still arriving: it waits on its
    client (one whose body is complete is being answered, and is never shed)."""
    import h11

    return (
        protocol.conn.their_state is h11.SEND_BODY
        and not getattr(protocol, "_shed", False)
        and not protocol.transport.is_closing()
    )


def _shed_one(protocols: list[Any]) -> bool:
    """Close the one of ``protocols`` that has waited longest on its client (idle, headers or
    body still arriving; by the time of its last byte); False when every one is being
    answered. Not idle connections first: 64 senders dribbling a body byte every 2 s counted as
    busy and held every slot of their address, and a new connection is idle until its headers
    arrive, so slow senders reconnecting in a burst would shed good clients in that instant."""
    candidates = [p for p in protocols if _idle(p) or _receiving_body(p)]
    if not candidates:
        return False
    victim = min(candidates, key=lambda p: p._last_active)
    victim._shed = True
    victim._cancel_header_timer()
    victim.transport.close()
    return True


def guarded_protocol(limits: ServerLimits) -> type:
    """uvicorn's h11 protocol with the connection limits of ``limits``: caps on open connections,
    total and per client address, enforced when a connection opens (before anything is read) by
    shedding the connection that has waited longest on its client (idle, headers or body still
    arriving), and a time-out for complete request headers
    (uvicorn has none: a client sending one header byte a second kept its connection, and 250 of
    them made every good request time out; 300 sockets merely held open used to fill every
    slot)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _header_timer: Any = None
        _last_active: float = 0.0
        _peer: str = ""
        _shed: bool = False

        def connection_made(self, transport: Any) -> None:  # noqa: D401 - asyncio protocol
            super().connection_made(transport)
            self._last_active = self.loop.time()
            self._peer = str((transport.get_extra_info("peername") or ("?",))[0])
            if not self._make_room():
                self._shed = True
                transport.close()  # every other connection is busy: they keep working
                return
            self._arm_header_timer()

        def _make_room(self) -> bool:
            open_ = [
                c for c in self.connections if c is not self and not getattr(c, "_shed", False)
            ]
            mine = [c for c in open_ if getattr(c, "_peer", None) == self._peer]
            if len(mine) >= limits.max_connections_per_client and not _shed_one(mine):
                return False
            open_ = [c for c in open_ if not c._shed]
            return len(open_) < limits.max_connections or _shed_one(open_)

        def _arm_header_timer(self) -> None:
            self._cancel_header_timer()
            self._header_timer = self.loop.call_later(
                limits.header_timeout_s, self._header_time_out
            )

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_time_out(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()  # headers incomplete (or none) after the time-out

        def data_received(self, data: bytes) -> None:
            self._last_active = self.loop.time()
            super().data_received(data)

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:  # a request's headers are complete
                self._cancel_header_timer()

        def on_response_complete(self) -> None:
            self._last_active = self.loop.time()
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_header_timer()  # the next request's headers are timed again

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            super().connection_lost(exc)

    return GuardedH11Protocol


def uvicorn_options(limits: ServerLimits | None) -> dict[str, Any]:
    """uvicorn settings that enforce the connection limits (both ways of serving use them)."""
    return {"http": guarded_protocol(limits or ServerLimits()), "timeout_keep_alive": 5}


async def _wait_for_disconnect(receive: Any) -> None:
    """Returns when the client closes the connection (call after the body was read)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return
        await asyncio.sleep(0.01)  # a stray empty body message: do not spin


def create_app(
    retriever: Retriever,
    *,
    default_topk: int = DEFAULT_TOPK,
    batching: bool = True,
    max_wait_ms: float = 3.0,
    max_batch_queries: int = 256,
    limits: ServerLimits | None = None,
    api_key: str | None = None,
    warmup: bool = True,
) -> Any:
    """A FastAPI app serving ``retriever``; start it with uvicorn.

    ``api_key``: when set, ``/retrieve`` answers 401 unless the request carries it in the
    ``X-API-Key`` header (or ``Authorization: Bearer <key>``). ``warmup`` runs one search now,
    so lazy model loading happens before ``/health`` answers rather than inside the first
    client's request time-out.
    """
    limits = limits or ServerLimits()
    if warmup:
        retriever.search(["warm-up"], 1)
    info = retriever.describe()
    passages = int(info.get("passages") or 0) or None
    topk_cap = min(limits.max_topk, passages) if passages else limits.max_topk
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retrieval")
    stats = {
        "search_calls": 0,
        "queries_searched": 0,
        "search_seconds": 0.0,
        "rejected_queue_full": 0,
        "timed_out": 0,
        "abandoned": 0,
        "unauthorized": 0,
    }
    batcher = MicroBatcher(
        _counted_search(retriever, stats),
        executor,
        max_wait_s=max_wait_ms / 1000,
        max_batch_queries=max_batch_queries,
        max_queued_queries=limits.max_queued_queries,
        batching=batching,
    )
    lifespan = _lifespan(batcher, executor)

    # With a key, nothing but /retrieve and a bare /health answers without it: the interactive
    # docs and the schema are off (they describe the server to anyone who can connect).
    docs = {} if not api_key else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="AT2PO retrieval server (Search-R1 contract)", lifespan=lifespan, **docs)
    app.state.batcher = batcher
    app.state.stats = stats

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        if not _authorised(request, api_key):  # alive, and nothing else, without the key
            return {"status": "ok", "api_key_required": True}
        return {
            "status": "ok",
            **_public(info),
            "batching": batching,
            "default_topk": default_topk,
            "limits": asdict(limits),
            "api_key_required": bool(api_key),
            "queued_queries": batcher.queued_queries(),
            **stats,
        }

    @app.post("/retrieve")
    async def retrieve(request: Request) -> JSONResponse:
        if not _authorised(request, api_key):
            stats["unauthorized"] += 1
            return _error(401, f"missing or wrong API key (send it in the {API_KEY_HEADER} header)")
        body = await _limited_body(request, limits, stats)
        if isinstance(body, JSONResponse):
            return body
        parsed = _parse_request(body, limits, default_topk, topk_cap)
        if isinstance(parsed, JSONResponse):
            return parsed
        topk = parsed.topk if parsed.topk is not None else default_topk
        hits = await _answer(request, batcher, stats, limits, parsed.queries, topk)
        if isinstance(hits, JSONResponse):
            return hits
        if parsed.return_scores:
            return JSONResponse({"result": hits})
        return JSONResponse(
            {"result": [[hit["document"] for hit in query_hits] for query_hits in hits]}
        )

    return app


def _counted_search(
    retriever: Retriever, stats: dict[str, Any]
) -> Callable[[list[str], int], list]:
    """The one place the index is searched (in the worker thread); counts for /health."""

    def search(queries: list[str], topk: int) -> list:
        start = time.perf_counter()
        hits = retriever.search(queries, topk)
        stats["search_calls"] += 1
        stats["queries_searched"] += len(queries)
        stats["search_seconds"] += time.perf_counter() - start
        return hits

    return search


def _lifespan(batcher: MicroBatcher, executor: ThreadPoolExecutor) -> Callable[[FastAPI], Any]:
    """The app's lifespan: the batcher runs while the app serves; the worker thread ends after."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202 - FastAPI's protocol
        batcher.start()
        yield
        await batcher.stop()
        executor.shutdown(wait=False, cancel_futures=True)

    return lifespan


async def _limited_body(
    request: Request, limits: ServerLimits, stats: dict[str, Any]
) -> bytes | JSONResponse:
    """The request's body within the size and time limits, or the error to answer with."""
    try:
        return await asyncio.wait_for(
            _read_body(request, limits.max_body_bytes), limits.body_timeout_s
        )
    except _BodyTooLarge as exc:  # stop reading: close the connection after answering
        return _error(413, str(exc), {"Connection": "close"})
    except asyncio.TimeoutError:
        return _error(
            408,
            f"request body not received within {limits.body_timeout_s:g} s",
            {"Connection": "close"},
        )
    except ClientDisconnect:  # the client went away mid-upload: nobody to answer
        stats["abandoned"] += 1
        return _error(499, "client disconnected")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _authorised(request: Request, api_key: str | None) -> bool:
    """No key set, or the request carries it (``X-API-Key`` or ``Authorization: Bearer``);
    compared in constant time."""
    if not api_key:
        return True
    given = request.headers.get(API_KEY_HEADER, "")
    bearer = request.headers.get("authorization", "")
    if not given and bearer.lower().startswith("bearer "):
        given = bearer[7:].strip()
    return hmac.compare_digest(given.encode(), api_key.encode())


def _validation_message(exc: ValidationError) -> str:
    def where(e: dict) -> str:
        return ".".join(str(p) for p in e.get("loc", ())) or "body"

    return "invalid request: " + "; ".join(f"{where(e)}: {e.get('msg')}" for e in exc.errors())


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once: ``{"topk": 1, "topk": 50}`` is refused
    (json's default keeps the last silently; another reader may keep the first)."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"key {key[:40]!r} given twice")
        obj[key] = value
    return obj


def _parse_request(
    body: bytes, limits: ServerLimits, default_topk: int, topk_cap: int
) -> RetrieveRequest | JSONResponse:
    """Validate one request on its own, before it can join a batch: JSON, schema, then each
    limit (a 413 or 422 naming it)."""
    try:
        obj = json.loads(body, object_pairs_hook=_unique_keys)
    except RecursionError:  # nesting deeper than the interpreter's recursion limit
        return _error(422, "invalid request: body is nested too deeply")
    except (ValueError, UnicodeDecodeError) as exc:  # bad JSON, an integer > 4,300 digits
        return _error(422, f"invalid request: body is not valid JSON ({str(exc)[:200]})")
    try:
        req = RetrieveRequest.model_validate(obj)
    except ValidationError as exc:
        return _error(422, _validation_message(exc))
    queries = req.queries
    topk = req.topk if req.topk is not None else default_topk
    if not queries:
        return _error(422, "queries must be a non-empty list of strings")
    if len(queries) > limits.max_queries:
        return _error(
            413, f"{len(queries)} queries in one request; the limit is {limits.max_queries}"
        )
    if not 1 <= topk <= topk_cap:
        return _error(422, f"topk must be between 1 and {topk_cap}, got {topk}")
    too_long = [i for i, q in enumerate(queries) if len(q) > limits.max_query_chars]
    if too_long:
        return _error(
            422, f"queries[{too_long[0]}] is longer than {limits.max_query_chars} characters"
        )
    total = sum(len(q) for q in queries)
    if total > limits.max_request_chars:
        return _error(
            413,
            f"the queries hold {total} characters together; the limit per "
            f"request is {limits.max_request_chars}",
        )
    try:
        for i, query in enumerate(queries):
            check_query_text(query, i)
    except InvalidQueryError as exc:
        return _error(422, str(exc))
    return req


async def _answer(
    request: Request,
    batcher: MicroBatcher,
    stats: dict[str, Any],
    limits: ServerLimits,
    queries: list[str],
    topk: int,
) -> list | JSONResponse:
    """Queue the search; give up on a time-out or when the client disconnects."""
    work = asyncio.ensure_future(batcher.submit(queries, topk))
    gone = asyncio.ensure_future(_wait_for_disconnect(request.receive))
    try:
        done, _ = await asyncio.wait(
            {work, gone}, timeout=limits.request_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        gone.cancel()
    if work in done:
        try:
            return work.result()
        except QueueFullError as exc:
            stats["rejected_queue_full"] += 1
            return _error(503, str(exc), {"Retry-After": str(exc.retry_after_s)})
        except Exception as exc:  # the server stays up; the client sees why
            return _error(500, f"retrieval failed: {type(exc).__name__}: {exc}")
    work.cancel()  # drops this request's queries that were not searched yet
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await work
    if gone in done:
        stats["abandoned"] += 1
        return _error(499, "client disconnected")  # nobody reads it
    stats["timed_out"] += 1
    return _error(
        504,
        f"request not answered within {limits.request_timeout_s:g} s "
        f"({len(queries)} queries); send fewer queries per request",
    )


# -- running it ------------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_health(url: str, timeout: float, alive: Any = None) -> dict[str, Any]:
    """Poll ``{url}/health`` until it answers 200; ``alive()`` returning False aborts early."""
    import httpx

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError(f"retrieval server for {url} exited during start-up{last}")
        try:
            response = httpx.get(url + "/health", timeout=2.0)
            if response.status_code == 200:
                return response.json()
            last = f" (last answer: HTTP {response.status_code})"
        except httpx.TransportError as exc:
            last = f" (last error: {type(exc).__name__})"
        time.sleep(0.1)
    raise TimeoutError(f"retrieval server at {url} not healthy after {timeout:.0f} s{last}")


class ServerHandle:
    """A running server: ``url`` (``http://host:port``), ``retrieve_url``, ``stop()``."""

    def __init__(self, url: str, stop: Any, log_path: Path | None = None, app: Any = None) -> None:
        self.url = url
        self.retrieve_url = url + "/retrieve"
        self.log_path = log_path
        self.app = app
        """The FastAPI app when served from this process (``app.state.batcher.batches``)."""
        self._stop = stop

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ServerHandle({self.url!r})"


def start_server(
    retriever: Retriever,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout: float = 30.0,
    **app_kwargs: Any,
) -> ServerHandle:
    """Serve ``retriever`` from a background thread of this process (port 0: a free port).

    A non-loopback ``host`` needs ``api_key=...`` (see :func:`check_binding`)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    try:
        check_binding(host, app_kwargs.get("api_key"))
        app = create_app(retriever, **app_kwargs)
    except Exception:
        sock.close()
        raise
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, **uvicorn_options(app_kwargs.get("limits"))
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"retrieval-server-{port}"
    )
    thread.start()
    url = f"http://{host}:{port}"

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    try:
        wait_for_health(url, startup_timeout, alive=thread.is_alive)
    except Exception:
        stop()
        raise
    return ServerHandle(url, stop, app=app)


def start_server_process(
    server_args: list[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout: float = 300.0,
    env: dict[str, str] | None = None,
) -> ServerHandle:
    """Run ``at2po serve-retriever <server_args>`` in a subprocess; its log goes to a temp file."""
    port = port or free_port(host)
    log = Path(tempfile.mkstemp(prefix="retrieval-server-", suffix=".log")[1])
    cmd = [
        sys.executable,
        "-m",
        "at2po_lib.cli",
        "serve-retriever",
        *server_args,
        "--host",
        host,
        "--port",
        str(port),
    ]
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            cmd, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    url = f"http://{host}:{port}"

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    try:
        wait_for_health(url, startup_timeout, alive=lambda: proc.poll() is None)
    except Exception as exc:
        stop()
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{exc}\n--- server log ({log}) ---\n{tail}") from None
    return ServerHandle(url, stop, log)
