"""The retrieval server and client, for real on 127.0.0.1: Search-R1's request shape, the
documented answers, 4xx for bad requests, batching, restarts, and HTTP = in-process."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest
import requests

from at2po_lib.retrieval.base import RetrievalError, Retriever
from at2po_lib.retrieval.bm25 import BM25Retriever, build_bm25_index
from at2po_lib.retrieval.client import HTTPRetriever, RetrievalServerError, normalise_url
from at2po_lib.retrieval.dense import DenseRetriever, build_dense_index
from at2po_lib.retrieval.encoders import EncoderSpec
from at2po_lib.retrieval.server import free_port, start_server, start_server_process

FIXTURE = Path(__file__).parent.parent / "fixtures" / "wiki18_sample.jsonl"
QUERIES = [
    "who was evan morris",
    "american airlines flight 77 pentagon",
    "genentech lobbyist",
    "football",
]


@pytest.fixture(scope="session")
def bm25_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bm25")
    build_bm25_index(FIXTURE, folder, progress=False)  # all 1,000 passages: tokenising is cheap
    return folder


@pytest.fixture(scope="session")
def bm25(bm25_dir) -> BM25Retriever:
    return BM25Retriever(bm25_dir, FIXTURE)


@pytest.fixture(scope="session")
def server(bm25):
    handle = start_server(bm25)
    yield handle
    handle.stop()


@pytest.fixture(scope="session")
def dense(tmp_path_factory) -> DenseRetriever:
    root = tmp_path_factory.mktemp("dense")
    corpus = root / "wiki60.jsonl"
    corpus.write_text("".join(FIXTURE.read_text().splitlines(keepends=True)[:60]))
    build_dense_index(corpus, root / "index", EncoderSpec(max_length=64), progress=False)
    return DenseRetriever(root / "index", corpus)


def searchr1_batch_search(url: str, queries: list[str], topk: int) -> dict:
    """What Search-R1's rollout does (``_batch_search``): requests.post with this exact JSON."""
    payload = {"queries": queries, "topk": topk, "return_scores": True}
    return requests.post(url, json=payload).json()


def searchr1_passages_to_string(result: list[dict]) -> str:
    """Search-R1's ``_passages2string``: reads doc_item["document"]["contents"]."""
    out = ""
    for idx, doc_item in enumerate(result):
        content = doc_item["document"]["contents"]
        title, text = content.split("\n")[0], "\n".join(content.split("\n")[1:])
        out += f"Doc {idx + 1}(Title: {title}) {text}\n"
    return out


def test_searchr1_client_request_gets_the_documented_shape(server, bm25):
    body = searchr1_batch_search(server.retrieve_url, QUERIES, 3)
    assert set(body) == {"result"} and len(body["result"]) == len(QUERIES)
    for hits in body["result"]:
        assert len(hits) == 3
        for hit in hits:
            assert set(hit) == {"document", "score"} and set(hit["document"]) == {"id", "contents"}
            assert isinstance(hit["score"], float)
    assert body["result"] == bm25.search(QUERIES, 3)
    rendered = searchr1_passages_to_string(body["result"][0])
    assert rendered.startswith('Doc 1(Title: "Evan Morris") Evan Morris')


def test_return_scores_false_gives_bare_documents(server, bm25):
    body = requests.post(
        server.retrieve_url, json={"queries": QUERIES[:2], "topk": 2, "return_scores": False}
    ).json()
    expected = [[hit["document"] for hit in hits] for hits in bm25.search(QUERIES[:2], 2)]
    assert body == {"result": expected}
    # Missing topk and return_scores: Search-R1's defaults (topk 3, return_scores false).
    default = requests.post(server.retrieve_url, json={"queries": QUERIES[:1]}).json()
    assert default == {"result": [[hit["document"] for hit in bm25.search(QUERIES[:1], 3)[0]]]}


def test_topk_null_uses_the_default_of_three(server):
    body = requests.post(
        server.retrieve_url, json={"queries": ["evan"], "topk": None, "return_scores": True}
    ).json()
    assert len(body["result"][0]) == 3


def test_health_reports_the_index(server):
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["passages"] == 1000
    assert (
        health["index_type"] == "BM25"
        and "bm25s" in health["encoder"]
        and health["batching"] is True
    )


BAD_REQUESTS = [
    (b"this is not json", 422, "not valid JSON"),
    (b'{"topk": 3}', 422, "queries: Field required"),
    (b'{"queries": []}', 422, "non-empty"),
    (b'{"queries": "a single string"}', 422, "valid list"),
    (b'{"queries": [1, 2]}', 422, "valid string"),
    (b'{"queries": ["a"], "topk": 0}', 422, "topk must be between 1 and 100"),
    (b'{"queries": ["a"], "topk": 101}', 422, "topk must be between 1 and 100"),
    (b'{"queries": ["a"], "topk": "3"}', 422, "topk: Input should be a valid integer"),
    (b'{"queries": ["a"], "return_scores": "yes"}', 422, "return_scores"),
    (json.dumps({"queries": ["x" * 5000]}).encode(), 422, "longer than 4096"),
    (json.dumps({"queries": ["q"] * 4097}).encode(), 413, "limit is 4096"),
    (b"[1, 2, 3]", 422, "body"),
]


@pytest.mark.parametrize(("body", "status", "message"), BAD_REQUESTS)
def test_bad_requests_get_a_4xx_and_the_server_keeps_serving(server, body, status, message):
    response = httpx.post(
        server.retrieve_url, content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == status
    assert message in response.json()["error"]
    assert httpx.get(server.url + "/health").status_code == 200
    assert len(searchr1_batch_search(server.retrieve_url, ["evan morris"], 1)["result"][0]) == 1


def test_oversized_body_is_refused_before_parsing(bm25):
    from at2po_lib.retrieval.server import ServerLimits

    with start_server(bm25, limits=ServerLimits(max_body_bytes=1000)) as handle:
        response = httpx.post(handle.retrieve_url, json={"queries": ["x" * 2000]})
        assert response.status_code == 413 and "exceeds 1000" in response.json()["error"]
        assert httpx.post(handle.retrieve_url, json={"queries": ["x"]}).status_code == 200


class FailingRetriever(Retriever):
    """A retriever whose backend breaks on one query (a real class, not a mock)."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner

    def search(self, queries, topk=3):
        if "boom" in queries:
            raise RuntimeError("index file vanished")
        return self.inner.search(queries, topk)

    def describe(self):
        return self.inner.describe()


@pytest.mark.parametrize("batching", [True, False])
def test_a_failing_search_is_a_500_with_the_reason_and_the_server_survives(bm25, batching):
    with start_server(FailingRetriever(bm25), batching=batching) as handle:
        response = httpx.post(handle.retrieve_url, json={"queries": ["boom"]})
        assert response.status_code == 500 and "index file vanished" in response.json()["error"]
        assert httpx.post(handle.retrieve_url, json={"queries": ["evan"]}).status_code == 200


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(bm25):
    queries = [
        f"{word} history"
        for word in (
            "evan",
            "airlines",
            "genentech",
            "football",
            "river",
            "war",
            "music",
            "film",
            "church",
            "school",
            "army",
            "island",
            "railway",
            "king",
            "city",
            "album",
        )
    ]
    expected = {q: bm25.search([q], 3)[0] for q in queries}
    answers: dict[str, list] = {}
    barrier = threading.Barrier(len(queries))
    # A generous batching window makes "fewer searches than requests" independent of machine load.
    with start_server(bm25, max_wait_ms=300) as handle:

        def client(query: str) -> None:
            with httpx.Client(timeout=60) as http:
                barrier.wait()
                answers[query] = http.post(
                    handle.retrieve_url, json={"queries": [query], "topk": 3, "return_scores": True}
                ).json()["result"][0]

        threads = [threading.Thread(target=client, args=(q,)) for q in queries]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        searches = handle.app.state.batcher.batches
    assert answers == expected
    assert 1 <= searches < len(queries)


def test_no_batching_and_mixed_topk_give_the_same_answers(bm25):
    with start_server(bm25, batching=False) as plain, start_server(bm25, max_wait_ms=50) as batched:
        for topk in (1, 3, 5):
            body = {"queries": QUERIES, "topk": topk, "return_scores": True}
            a = httpx.post(plain.retrieve_url, json=body).json()
            b = httpx.post(batched.retrieve_url, json=body).json()
            assert a == b == {"result": bm25.search(QUERIES, topk)}


@pytest.mark.slow  # builds a MiniLM index
def test_http_equals_in_process_for_dense(dense):
    queries = ["evan morris lobbyist", "pentagon attack rescue", ""]
    with start_server(dense) as handle:
        client = HTTPRetriever(handle.url)
        remote, local = client.search(queries, 4), dense.search(queries, 4)
    assert [[h["document"] for h in q] for q in remote] == [
        [h["document"] for h in q] for q in local
    ]
    for remote_hits, local_hits in zip(remote, local):
        assert [h["score"] for h in remote_hits] == pytest.approx(
            [h["score"] for h in local_hits], abs=1e-5
        )


def test_client_batches_long_query_lists(server, bm25):
    client = HTTPRetriever(server.retrieve_url, batch_size=3)
    queries = QUERIES * 2  # 8 queries → requests of 3, 3 and 2
    assert client.search(queries, 2) == bm25.search(queries, 2)
    assert client.search([], 2) == []


def test_client_survives_a_server_restart(bm25):
    port = free_port()
    first = start_server(bm25, port=port)
    client = HTTPRetriever(first.url, timeout=10, retries=8, backoff=0.2)
    before = client.search(["evan morris"], 3)
    first.stop()
    restarted: list = []
    timer = threading.Timer(1.0, lambda: restarted.append(start_server(bm25, port=port)))
    timer.start()
    try:
        started = time.monotonic()
        after = client.search(["evan morris"], 3)  # refused at first, retried until the restart
        assert after == before
        assert time.monotonic() - started >= 0.2  # it really had to wait for the new server
    finally:
        timer.join()
        for handle in restarted:
            handle.stop()


def test_client_names_the_url_when_no_server_answers():
    url = f"http://127.0.0.1:{free_port()}/retrieve"
    client = HTTPRetriever(url, timeout=2, retries=2, backoff=0.01)
    with pytest.raises(
        RetrievalError, match=f"no retrieval server answered at {url} after 3 attempts"
    ):
        client.search(["x"])


def test_client_does_not_retry_a_4xx(server):
    client = HTTPRetriever(server.url, retries=5, backoff=30)  # one retry would sleep 30 s
    started = time.monotonic()
    with pytest.raises(RetrievalServerError, match="HTTP 422.*topk must be between"):
        client.search(["x"], topk=500)
    assert time.monotonic() - started < 25


def test_normalise_url():
    assert normalise_url("http://h:1") == ("http://h:1", "http://h:1/retrieve")
    assert normalise_url("http://h:1/retrieve/") == ("http://h:1", "http://h:1/retrieve")


def test_server_runs_as_a_subprocess_from_the_command_line(bm25_dir, bm25):
    with start_server_process(
        ["--index", str(bm25_dir), "--bm25", "--corpus", str(FIXTURE)]
    ) as handle:
        assert handle.url.startswith("http://127.0.0.1:")
        body = searchr1_batch_search(handle.retrieve_url, QUERIES, 2)
        assert body["result"] == bm25.search(QUERIES, 2)
    with pytest.raises(httpx.TransportError):
        httpx.get(handle.url + "/health", timeout=2)
