"""The retriever interface shared by every backend (docs/method.md §2).

One call, one shape, whether the search runs in this process or behind HTTP::

    retriever.search(["who founded x?", "where is y?"], topk=3)
    -> [[{"document": {"id": "17", "contents": "\\"Title\\"\\ntext"}, "score": 0.83}, ...],  # query 1
        [...]]                                                                            # query 2

That is exactly one element of the server's ``"result"`` list (Search-R1's contract, reused by
Tree-GRPO and the AT2PO code), so an agent never knows which backend answered.

Implementations: :class:`~at2po_lib.retrieval.dense.DenseRetriever` (faiss),
:class:`~at2po_lib.retrieval.bm25.BM25Retriever` (bm25s) and
:class:`~at2po_lib.retrieval.client.HTTPRetriever` (a running server).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol, Sequence

if TYPE_CHECKING:  # pragma: no cover - typing only
    import numpy as np

Document = dict[str, str]
"""``{"id": str, "contents": str}``; ``contents`` is ``"\\"Title\\"\\ntext"`` in wiki-18."""
Hit = dict[str, Any]
"""``{"document": Document, "score": float}``."""

DEFAULT_TOPK = 3
"""Search-R1, Tree-GRPO and the AT2PO code all show the agent the top 3 passages."""


class RetrievalError(RuntimeError):
    """A retrieval backend could not answer (bad index, unreachable server, ...)."""


class IndexMismatchError(RetrievalError):
    """An index does not belong to the corpus or encoder it is used with."""


class InvalidQueryError(RetrievalError, ValueError):
    """A query that no backend can search (e.g. a lone surrogate, which is not encodable text)."""


def check_query_text(query: str, index: int) -> None:
    """A query must be encodable as UTF-8: a lone surrogate (``"\\ud800"``, which JSON can
    carry) breaks tokenizers and HTTP bodies alike, so it is refused here, naming the query."""
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidQueryError(
            f"queries[{index}] is not valid Unicode text ({exc.reason} at character {exc.start}: "
            f"{query[exc.start]!r})"
        ) from None


def check_search_args(queries: Sequence[str], topk: int) -> list[str]:
    """Validate the arguments of :meth:`Retriever.search`; returns ``queries`` as a list."""
    if isinstance(queries, str):
        raise TypeError("queries must be a list of strings, got a single string")
    queries = list(queries)
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise TypeError(f"queries[{i}] must be a string, got {type(query).__name__}")
        check_query_text(query, i)
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise ValueError(f"topk must be a positive integer, got {topk!r}")
    return queries


class Retriever(ABC):
    """Search a passage collection; ``search`` is the whole interface an agent needs."""

    default_topk: int = DEFAULT_TOPK
    """Passages per observation for an agent that does not say (``SearchEnv``): the profile's
    ``retrieval.topk``, which :func:`at2po_lib.retrieval.indexes.build_retriever` sets."""

    @abstractmethod
    def search(self, queries: Sequence[str], topk: int = DEFAULT_TOPK) -> list[list[Hit]]:
        """Top-``topk`` hits per query, best first (fewer if the collection is smaller)."""

    def describe(self) -> dict[str, Any]:
        """What ``GET /health`` reports: at least ``passages``, ``index_type``, ``encoder``."""
        return {"backend": type(self).__name__}

    def close(self) -> None:
        """Release files and models (optional)."""

    def __enter__(self) -> "Retriever":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PassageLookup(Protocol):
    """What :func:`hits_from_rows` needs of a corpus (:class:`~.corpus.Corpus` has it); a
    protocol, so this module need not import :mod:`.corpus`, which imports it."""

    def get(self, rows: Sequence[int]) -> list[Document]: ...


def hits_from_rows(
    corpus: PassageLookup, rows: "np.ndarray", scores: "np.ndarray"
) -> list[list[Hit]]:
    """Turn index results into hits: ``rows``/``scores`` have shape (n_queries, k).

    Negative rows (faiss's "no result", e.g. k > number of passages) are dropped. Each distinct
    row is read from the corpus once, however many queries retrieved it.
    """
    pairs = [
        [(int(r), float(s)) for r, s in zip(query_rows, query_scores) if r >= 0]
        for query_rows, query_scores in zip(rows.tolist(), scores.tolist())
    ]
    wanted = sorted({row for query_pairs in pairs for row, _ in query_pairs})
    documents = dict(zip(wanted, corpus.get(wanted)))
    # JSON has no NaN/inf; a non-finite score would break the HTTP contract.
    return [
        [
            {"document": dict(documents[row]), "score": score if math.isfinite(score) else 0.0}
            for row, score in query_pairs
        ]
        for query_pairs in pairs
    ]
