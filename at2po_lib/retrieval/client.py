"""HTTP client for a retrieval server speaking Search-R1's ``/retrieve`` contract (docs/method.md §2).

Sends what Search-R1's rollout sends (``_batch_search`` in ``search_r1/llm_agent/generation.py``):
``POST {"queries": [...], "topk": k, "return_scores": true}`` and returns the ``"result"`` list,
so :meth:`HTTPRetriever.search` gives the same hits as the in-process retrievers.

Failures: connection errors, time-outs and 5xx answers are retried with exponential backoff
(``backoff · 2^attempt`` seconds, capped at 30 s; a 503's ``Retry-After`` is honoured), so a
server restart inside the retry budget goes unnoticed; a 4xx answer is the caller's mistake and
raises at once with the server's message. When the retries run out, the error names the URL and
says what happened: no server answered (connection errors), or the server answered with errors
(the HTTP statuses seen and the last message). A query that cannot be sent (a lone surrogate)
is refused before any request with :class:`~.base.InvalidQueryError` naming it.

The request body is JSON with non-ASCII characters escaped, so any valid text travels as ASCII.
``api_key`` (default ``$AT2PO_RETRIEVER_API_KEY``) is sent in the ``X-API-Key`` header, which a
server bound beyond loopback requires.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import Any, Sequence

from .base import DEFAULT_TOPK, Hit, RetrievalError, Retriever, check_search_args

# Imported inside the functions that use them: httpx; only an HTTP retriever needs the client
# library.

MAX_BACKOFF_S = 30.0
API_KEY_HEADER = "X-API-Key"
API_KEY_ENV = "AT2PO_RETRIEVER_API_KEY"


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
        raise RetrievalServerError(
            f"{url}: expected {{'result': [{n_queries} lists]}}, got {str(body)[:200]}"
        )
    for hits in result:
        if not isinstance(hits, list) or any(
            not isinstance(h, dict) or "document" not in h for h in hits
        ):
            raise RetrievalServerError(
                f"{url}: hits must be {{'document': ..., 'score': ...}}, got {str(hits)[:200]}"
            )
    return result


def _retry_after(response: Any) -> float:
    """Seconds a 503's ``Retry-After`` header asks for (0 when absent or not a number)."""
    value = response.headers.get("retry-after", "")
    try:
        return min(max(float(value), 0.0), MAX_BACKOFF_S)
    except ValueError:
        return 0.0


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
        api_key: str | None = None,
    ) -> None:
        import httpx

        if retries < 0 or backoff < 0 or batch_size < 1:
            raise ValueError("retries and backoff must be >= 0 and batch_size >= 1")
        self.base_url, self.url = normalise_url(url)
        self.retries = retries
        self.backoff = backoff
        self.batch_size = batch_size
        api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        headers = {"content-type": "application/json"}
        if api_key:
            headers[API_KEY_HEADER] = api_key
        self._client = httpx.Client(timeout=timeout, headers=headers)

    def _post(self, payload: dict[str, Any]) -> Any:
        import httpx

        body = json.dumps(payload).encode("ascii")  # ensure_ascii: any valid str is sendable
        transport_errors: list[str] = []
        server_errors: list[int] = []
        last_error = ""
        wait = 0.0
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(max(wait, min(self.backoff * 2 ** (attempt - 1), MAX_BACKOFF_S)))
            wait = 0.0
            try:
                response = self._client.post(self.url, content=body)
            except httpx.TransportError as exc:  # refused, reset, timed out: try again
                last_error = f"{type(exc).__name__}: {exc}"
                transport_errors.append(last_error)
                continue
            if response.status_code >= 500:
                last_error = f"HTTP {response.status_code}: {response.text[:300]}"
                server_errors.append(response.status_code)
                wait = _retry_after(response)
                continue
            if response.status_code >= 400:
                raise RetrievalServerError(
                    f"{self.url} rejected the request (HTTP {response.status_code}): {response.text[:500]}"
                )
            try:
                return response.json()
            except ValueError:
                raise RetrievalServerError(
                    f"{self.url}: answer is not JSON: {response.text[:200]}"
                ) from None
        attempts = self.retries + 1
        if server_errors:
            statuses = ", ".join(
                f"HTTP {code} ×{n}" for code, n in sorted(Counter(server_errors).items())
            )
            also = f" and {len(transport_errors)} connection error(s)" if transport_errors else ""
            raise RetrievalServerError(
                f"the retrieval server at {self.url} answered with errors to all {attempts} attempts "
                f"({statuses}{also}); last: {last_error}. See the server's log."
            )
        raise RetrievalError(
            f"no retrieval server answered at {self.url} after {attempts} attempts "
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
