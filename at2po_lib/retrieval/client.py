"""HTTP client for a retrieval server speaking Search-R1's ``/retrieve`` contract (docs/method.md §2).

Sends what Search-R1's rollout sends (``_batch_search`` in ``search_r1/llm_agent/generation.py``):
``POST {"queries": [...], "topk": k, "return_scores": true}`` and returns the ``"result"`` list,
so :meth:`HTTPRetriever.search` gives the same hits as the in-process retrievers.

Failures: connection errors, time-outs and 5xx answers are retried with exponential backoff
(``backoff · 2^attempt`` seconds, capped at 30 s), so a server restart inside the retry budget
goes unnoticed; a 4xx answer is the caller's mistake and raises at once with the server's
message; when no server answers, the error names the URL.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from .base import DEFAULT_TOPK, Hit, RetrievalError, Retriever, check_search_args

MAX_BACKOFF_S = 30.0


class RetrievalServerError(RetrievalError):
    """The server answered, but with an error (4xx/5xx) or a malformed body."""


def normalise_url(url: str) -> tuple[str, str]:
    """``http://h:p`` or ``http://h:p/retrieve`` → (base URL, ``/retrieve`` URL)."""
    url = url.rstrip("/")
    if url.endswith("/retrieve"):
        return url[: -len("/retrieve")], url
    return url, url + "/retrieve"


def _check_result(body: Any, n_queries: int, url: str) -> list[list[Hit]]:
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list) or len(result) != n_queries:
        raise RetrievalServerError(f"{url}: expected {{'result': [{n_queries} lists]}}, got {str(body)[:200]}")
    for hits in result:
        if not isinstance(hits, list) or any(not isinstance(h, dict) or "document" not in h for h in hits):
            raise RetrievalServerError(f"{url}: hits must be {{'document': ..., 'score': ...}}, got {str(hits)[:200]}")
    return result


class HTTPRetriever(Retriever):
    """A :class:`Retriever` backed by a running server.

    ``batch_size`` queries go in one request (Search-R1 sends a whole rollout batch at once);
    ``timeout`` is per request; ``retries`` extra attempts follow the first.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.5,
        batch_size: int = 512,
    ) -> None:
        import httpx

        if retries < 0 or backoff < 0 or batch_size < 1:
            raise ValueError("retries and backoff must be >= 0 and batch_size >= 1")
        self.base_url, self.url = normalise_url(url)
        self.retries = retries
        self.backoff = backoff
        self.batch_size = batch_size
        self._client = httpx.Client(timeout=timeout)

    def _post(self, payload: dict[str, Any]) -> Any:
        import httpx

        last_error: str = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.backoff * 2 ** (attempt - 1), MAX_BACKOFF_S))
            try:
                response = self._client.post(self.url, json=payload)
            except httpx.TransportError as exc:  # refused, reset, timed out: try again
                last_error = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500:
                last_error = f"HTTP {response.status_code}: {response.text[:300]}"
                continue
            if response.status_code >= 400:
                raise RetrievalServerError(f"{self.url} rejected the request (HTTP {response.status_code}): {response.text[:500]}")
            try:
                return response.json()
            except ValueError:
                raise RetrievalServerError(f"{self.url}: answer is not JSON: {response.text[:200]}") from None
        raise RetrievalError(
            f"no retrieval server answered at {self.url} after {self.retries + 1} attempts "
            f"(last error: {last_error}). Start one with `at2po serve-retriever` or unset retrieval.url."
        )

    def search(self, queries: Sequence[str], topk: int = DEFAULT_TOPK) -> list[list[Hit]]:
        queries = check_search_args(queries, topk)
        out: list[list[Hit]] = []
        for start in range(0, len(queries), self.batch_size):
            batch = queries[start : start + self.batch_size]
            body = self._post({"queries": batch, "topk": topk, "return_scores": True})
            out.extend(_check_result(body, len(batch), self.url))
        return out

    def health(self) -> dict[str, Any]:
        """``GET /health`` (one attempt; raises if the server is down)."""
        response = self._client.get(self.base_url + "/health")
        response.raise_for_status()
        return response.json()

    def describe(self) -> dict[str, Any]:
        try:
            return {"method": "http", "url": self.url, **self.health()}
        except Exception as exc:  # describe() must not fail just because the server is down
            return {"method": "http", "url": self.url, "error": str(exc)}

    def close(self) -> None:
        self._client.close()
