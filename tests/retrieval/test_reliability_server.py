"""The retrieval server under hostile but fair use, for real on 127.0.0.1 (issue 13): a bad
request fails alone, limits hold for chunked bodies, a full queue answers 503, abandoned and
timed-out work is dropped, an API key guards non-loopback binding, and a bounded load test."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from at2po_lib.retrieval.base import InvalidQueryError, Retriever
from at2po_lib.retrieval.batcher import MicroBatcher, QueueFullError
from at2po_lib.retrieval.bm25 import BM25Retriever, build_bm25_index
from at2po_lib.retrieval.client import HTTPRetriever, RetrievalServerError
from at2po_lib.cli.serve_retriever import main
from at2po_lib.retrieval.server import ServerLimits, start_server, start_server_process

FIXTURE = Path(__file__).parent.parent / "fixtures" / "wiki18_sample.jsonl"
GOOD = [
    "evan morris",
    "pentagon attack",
    "genentech",
    "football club",
    "river valley",
    "civil war",
    "music album",
    "film director",
]


@pytest.fixture(scope="module")
def bm25_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bm25")
    build_bm25_index(FIXTURE, folder, progress=False)
    return folder


@pytest.fixture(scope="module")
def bm25(bm25_dir) -> BM25Retriever:
    return BM25Retriever(bm25_dir, FIXTURE)


class GatedRetriever(Retriever):
    """A real retriever behind a gate: a search holding the query ``"slow"`` waits until the
    test opens the gate; every query searched is recorded; ``"boom"`` makes the search fail."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.searched: list[str] = []
        self.calls = 0

    def search(self, queries, topk=3):
        self.calls += 1
        self.searched += list(queries)
        if "slow" in queries:
            assert self.gate.wait(30), "the test never opened the gate"
        if "boom" in queries:
            raise RuntimeError("this query breaks the backend")
        return self.inner.search(queries, topk)

    def describe(self):
        return self.inner.describe()


def _post_concurrently(
    url: str, bodies: list[bytes], headers: dict | None = None
) -> list[httpx.Response]:
    barrier = threading.Barrier(len(bodies))

    def post(body: bytes) -> httpx.Response:
        with httpx.Client(timeout=30) as http:
            barrier.wait()
            return http.post(
                url, content=body, headers={"content-type": "application/json", **(headers or {})}
            )

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def _health(handle) -> dict:
    return httpx.get(handle.url + "/health").json()


def _wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


# -- one bad request fails alone ---------------------------------------------------------------


def test_a_lone_surrogate_fails_alone_and_the_eight_requests_batched_with_it_succeed(bm25):
    gated = GatedRetriever(bm25)
    # A wide batching window: the nine requests arrive within it and would share one search.
    with start_server(gated, max_wait_ms=400) as handle:
        bodies = [
            json.dumps({"queries": [q], "topk": 2, "return_scores": True}).encode() for q in GOOD
        ]
        bodies.append(b'{"queries": ["\\ud800"], "topk": 2}')  # valid JSON, not valid text
        responses = _post_concurrently(handle.retrieve_url, bodies)
    poisoned = responses[-1]
    assert (
        poisoned.status_code == 422
        and "queries[0] is not valid Unicode text" in poisoned.json()["error"]
    )
    assert [r.status_code for r in responses[:-1]] == [200] * 8
    assert [r.json()["result"][0] for r in responses[:-1]] == bm25.search(GOOD, 2)
    assert all("\ud800" not in q for q in gated.searched)  # refused before it reached a batch


def test_a_query_that_breaks_the_backend_inside_a_batch_fails_alone(bm25):
    gated = GatedRetriever(bm25)
    with start_server(gated, max_wait_ms=400) as handle:
        bodies = [
            json.dumps({"queries": [q], "topk": 2, "return_scores": True}).encode() for q in GOOD
        ]
        bodies.append(json.dumps({"queries": ["boom"]}).encode())
        responses = _post_concurrently(handle.retrieve_url, bodies)
        searches = handle.app.state.batcher.batches
    assert (
        responses[-1].status_code == 500 and "breaks the backend" in responses[-1].json()["error"]
    )
    assert [r.status_code for r in responses[:-1]] == [200] * 8
    assert [r.json()["result"][0] for r in responses[:-1]] == bm25.search(GOOD, 2)
    assert searches < 9 + 1  # the good ones were still served in batches


def test_the_client_refuses_a_surrogate_query_with_a_retrieval_error(bm25):
    with start_server(bm25) as handle:
        client = HTTPRetriever(handle.url, retries=0)
        with pytest.raises(InvalidQueryError, match=r"queries\[1\] is not valid Unicode"):
            client.search(["fine", "bad \ud800 query"])
        assert client.search(["naïve café — ünïcode"], 1)  # non-ASCII text travels (escaped JSON)


def test_repeated_http_500s_are_reported_as_server_errors_not_as_no_server(bm25):
    with start_server(GatedRetriever(bm25)) as handle:
        client = HTTPRetriever(handle.url, retries=2, backoff=0.01)
        with pytest.raises(RetrievalServerError) as caught:
            client.search(["boom"])
    message = str(caught.value)
    assert "answered with errors to all 3 attempts (HTTP 500 ×3)" in message
    assert handle.retrieve_url in message and "breaks the backend" in message
    assert "no retrieval server answered" not in message


# -- limits --------------------------------------------------------------------------------


def test_too_many_characters_in_one_request_is_a_413(bm25):
    limits = ServerLimits(max_request_chars=10_000)
    with start_server(bm25, limits=limits) as handle:
        response = httpx.post(handle.retrieve_url, json={"queries": ["x" * 1000] * 11})
        assert response.status_code == 413 and "11000 characters" in response.json()["error"]
        assert (
            httpx.post(handle.retrieve_url, json={"queries": ["x" * 1000] * 10}).status_code == 200
        )


def test_a_chunked_body_beyond_the_limit_is_refused_while_it_arrives(bm25):
    """No Content-Length: the server counts bytes as chunks arrive and stops reading."""
    limit, total = 64 << 10, 40 << 20
    with start_server(bm25, limits=ServerLimits(max_body_bytes=limit)) as handle:
        host, port = handle.url.removeprefix("http://").split(":")
        chunk = b"x" * (64 << 10)
        sent, answer = 0, b""
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            head = b'{"queries": ["'
            sock.sendall(
                b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(head), head)
            )
            try:
                while sent < total:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server closed the connection: it stopped reading
            try:
                while True:
                    data = sock.recv(65536)
                    if not data:
                        break
                    answer += data
            except (ConnectionResetError, socket.timeout):
                pass
        # Either the 413 arrived, or the connection was cut long before the 40 MB were sent.
        assert answer.startswith(b"HTTP/1.1 413") or sent < total // 4, (sent, answer[:200])
        if answer:
            assert b"exceeds 65536 bytes" in answer
        assert httpx.post(handle.retrieve_url, json={"queries": ["evan"]}).status_code == 200


def test_a_full_queue_answers_503_with_retry_after(bm25):
    gated = GatedRetriever(bm25)
    limits = ServerLimits(max_queries=4, max_queued_queries=4)
    with start_server(gated, limits=limits, max_wait_ms=0) as handle, ThreadPoolExecutor(2) as pool:
        try:
            blocker = pool.submit(
                httpx.post, handle.retrieve_url, json={"queries": ["slow"]}, timeout=30
            )
            _wait_until(lambda: "slow" in gated.searched)  # the worker is busy
            queued = pool.submit(
                httpx.post, handle.retrieve_url, json={"queries": GOOD[:4]}, timeout=30
            )
            _wait_until(lambda: _health(handle)["queued_queries"] == 4)
            full = httpx.post(handle.retrieve_url, json={"queries": ["one more"]})
            assert full.status_code == 503 and "queue holds 4 queries" in full.json()["error"]
            assert int(full.headers["retry-after"]) >= 1
        finally:
            gated.gate.set()
        assert blocker.result().status_code == 200 and queued.result().status_code == 200
        assert _health(handle)["rejected_queue_full"] == 1


def test_work_of_a_client_that_disconnects_is_dropped(bm25):
    gated = GatedRetriever(bm25)
    abandoned = [f"abandoned query {i}" for i in range(50)]
    with start_server(gated, max_wait_ms=0) as handle, ThreadPoolExecutor(1) as pool:
        try:
            blocker = pool.submit(
                httpx.post, handle.retrieve_url, json={"queries": ["slow"]}, timeout=30
            )
            _wait_until(lambda: "slow" in gated.searched)
            with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
                httpx.post(handle.retrieve_url, json={"queries": abandoned}, timeout=0.5)
            _wait_until(lambda: _health(handle)["abandoned"] == 1)
            assert _health(handle)["queued_queries"] == 0
        finally:
            gated.gate.set()
        assert blocker.result().status_code == 200
        assert httpx.post(handle.retrieve_url, json={"queries": ["evan"]}).status_code == 200
    assert not set(abandoned) & set(gated.searched)  # never searched


def test_a_request_past_its_time_out_gets_504_and_its_work_is_dropped(bm25):
    gated = GatedRetriever(bm25)
    with (
        start_server(gated, limits=ServerLimits(request_timeout_s=0.5), max_wait_ms=0) as handle,
        ThreadPoolExecutor(1) as pool,
    ):
        try:
            blocker = pool.submit(
                httpx.post, handle.retrieve_url, json={"queries": ["slow"]}, timeout=30
            )
            _wait_until(lambda: "slow" in gated.searched)
            late = httpx.post(handle.retrieve_url, json={"queries": ["waits too long"]}, timeout=30)
            assert late.status_code == 504 and "not answered within 0.5 s" in late.json()["error"]
        finally:
            gated.gate.set()
        assert blocker.result().status_code == 504  # it was stuck past the limit too
        assert httpx.post(handle.retrieve_url, json={"queries": ["evan"]}).status_code == 200
    assert "waits too long" not in gated.searched


# -- the batcher's fairness (real asyncio, a recording search) -------------------------------


def test_a_big_request_is_cut_so_a_small_one_waits_at_most_one_batch():
    calls: list[list[str]] = []

    def search(queries: list[str], topk: int) -> list:
        calls.append(list(queries))
        return [[{"document": {"id": q, "contents": q}, "score": float(topk)}] for q in queries]

    async def scenario() -> tuple[list, list]:
        batcher = MicroBatcher(
            search, ThreadPoolExecutor(1), max_wait_s=0.01, max_batch_queries=100
        )
        batcher.start()
        big = asyncio.ensure_future(batcher.submit([f"big {i}" for i in range(1000)], 1))
        await asyncio.sleep(0)  # the big request is queued first
        small = asyncio.ensure_future(batcher.submit(["small"], 1))
        results = await asyncio.gather(big, small)
        await batcher.stop()
        return results

    big_hits, small_hits = asyncio.run(scenario())
    assert [h[0]["document"]["id"] for h in big_hits] == [f"big {i}" for i in range(1000)]
    assert small_hits == [[{"document": {"id": "small", "contents": "small"}, "score": 1.0}]]
    first_with_small = next(i for i, call in enumerate(calls) if "small" in call)
    assert first_with_small <= 1 and all(len(call) <= 100 for call in calls)


def test_the_queue_bound_counts_queries_and_refuses_at_once():
    async def scenario() -> None:
        gate = threading.Event()

        def search(queries, topk):
            gate.wait(10)
            return [[] for _ in queries]

        batcher = MicroBatcher(search, ThreadPoolExecutor(1), max_wait_s=0, max_queued_queries=10)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(["a"], 1))  # taken by the worker at once
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(batcher.submit(["q"] * 10, 1))  # fills the queue
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFullError) as caught:
            await batcher.submit(["x"], 1)
        assert caught.value.retry_after_s >= 1
        second.cancel()  # abandoned: its queries leave the queue
        await asyncio.sleep(0)
        assert batcher.queued_queries() == 0
        gate.set()
        assert await first == [[]]
        await batcher.stop()

    asyncio.run(scenario())


# -- API key and binding -------------------------------------------------------------------


def test_binding_beyond_loopback_needs_an_api_key(bm25, bm25_dir, monkeypatch):
    monkeypatch.delenv("AT2PO_RETRIEVER_API_KEY", raising=False)
    with pytest.raises(ValueError, match="not a loopback address.*requires an API key"):
        start_server(bm25, host="0.0.0.0")

    with pytest.raises(SystemExit, match="requires an API key"):
        main(["--index", str(bm25_dir), "--bm25", "--corpus", str(FIXTURE), "--host", "0.0.0.0"])


def test_an_api_key_is_checked_on_every_request(bm25):
    with start_server(bm25, api_key="s3cret") as handle:
        assert httpx.post(handle.retrieve_url, json={"queries": ["evan"]}).status_code == 401
        wrong = httpx.post(
            handle.retrieve_url, json={"queries": ["evan"]}, headers={"X-API-Key": "nope"}
        )
        assert wrong.status_code == 401 and "X-API-Key" in wrong.json()["error"]
        good = httpx.post(
            handle.retrieve_url, json={"queries": ["evan"]}, headers={"X-API-Key": "s3cret"}
        )
        assert good.status_code == 200
        assert HTTPRetriever(handle.url, api_key="s3cret").search(["evan"], 1) == bm25.search(
            ["evan"], 1
        )
        with pytest.raises(RetrievalServerError, match="HTTP 401"):
            HTTPRetriever(handle.url, api_key="").search(["evan"], 1)


def test_the_command_line_server_says_it_requires_the_key(bm25_dir, bm25):
    env = {"AT2PO_RETRIEVER_API_KEY": "from-env"}
    with start_server_process(
        ["--index", str(bm25_dir), "--bm25", "--corpus", str(FIXTURE)], env=env
    ) as handle:
        assert httpx.post(handle.retrieve_url, json={"queries": ["evan"]}).status_code == 401
        assert HTTPRetriever(handle.url, api_key="from-env").search(["evan"], 2) == bm25.search(
            ["evan"], 2
        )
    assert (
        "API key required: clients send it in the X-API-Key header" in handle.log_path.read_text()
    )


# -- bounded load test -----------------------------------------------------------------------


def test_load_sixteen_clients_for_a_few_seconds_without_errors(bm25):
    """16 client threads send 1-query requests for 2 s over loopback; every answer must be a
    200 equal to the in-process result. Prints the latency percentiles (pytest -s shows them)."""
    queries = [
        f"{word} history"
        for word in ("evan", "airlines", "genentech", "football", "river", "war", "music", "film")
    ]
    expected = dict(zip(queries, bm25.search(queries, 3)))
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    with start_server(bm25) as handle:
        stop_at = time.monotonic() + 2.0

        def client(n: int) -> None:
            # Each client sends for 2 s and at least once (on a loaded machine a thread may
            # start late), so all 16 are measured; a hard cap keeps the test bounded.
            with httpx.Client(timeout=30) as http:
                i = n
                hard_stop = stop_at + 60.0
                while (time.monotonic() < stop_at or i == n) and time.monotonic() < hard_stop:
                    query = queries[i % len(queries)]
                    started = time.perf_counter()
                    response = http.post(
                        handle.retrieve_url,
                        json={"queries": [query], "topk": 3, "return_scores": True},
                    )
                    elapsed = time.perf_counter() - started
                    with lock:
                        if (
                            response.status_code != 200
                            or response.json()["result"][0] != expected[query]
                        ):
                            errors.append(f"{response.status_code}: {response.text[:100]}")
                        latencies.append(elapsed)
                    i += 1

        threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        health = _health(handle)
    assert errors == [] and len(latencies) >= 16
    cuts = statistics.quantiles(latencies, n=100)
    print(
        f"\nload: 16 clients, {len(latencies)} requests in 2 s, 0 errors; latency p50 "
        f"{cuts[49] * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms; "
        f"{health['queries_searched'] / health['search_calls']:.1f} queries per search call"
    )
