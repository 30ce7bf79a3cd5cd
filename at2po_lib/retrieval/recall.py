r"""Retrieval quality: recall@k of the supporting passages.

For question :math:`q` with supporting passage ids :math:`S_q` (non-empty) and ranked retrieved
ids :math:`R_q`:

.. math::

    \mathrm{recall@}k = \frac{1}{|Q|} \sum_{q \in Q} \frac{|R_q[:k] \cap S_q|}{|S_q|}

With one supporting passage per question (single-hop, or the first hop of a multi-hop
question) this is the share of questions whose passage is in the top k.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import pandas as pd

from .base import Retriever
from .corpus import split_contents


def recall_at_k(
    retrieved: Sequence[Sequence[str]],
    relevant: Sequence[Collection[str]],
    ks: Iterable[int],
) -> dict[int, float]:
    """``retrieved[i]``: ranked ids for question i; ``relevant[i]``: its supporting ids.

    Returns ``{k: recall@k}``. Duplicate retrieved ids count once.
    """
    if len(retrieved) != len(relevant):
        raise ValueError(f"{len(retrieved)} retrieved lists but {len(relevant)} relevant sets")
    if not retrieved:
        raise ValueError("recall_at_k needs at least one question")
    ks = sorted(set(ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    for i, ids in enumerate(relevant):
        if not ids:
            raise ValueError(f"question {i} has no relevant ids")
    totals = dict.fromkeys(ks, 0.0)
    for ranked, gold in zip(retrieved, relevant):
        gold = set(gold)
        for k in ks:
            totals[k] += len(set(ranked[:k]) & gold) / len(gold)
    return {k: totals[k] / len(retrieved) for k in ks}


def retrieved_ids(
    retriever: Retriever, queries: Sequence[str], k: int, batch_size: int = 256
) -> list[list[str]]:
    """Ranked passage ids, top ``k``, for every query (searched in batches)."""
    out: list[list[str]] = []
    for start in range(0, len(queries), batch_size):
        hits = retriever.search(list(queries[start : start + batch_size]), topk=k)
        out.extend([h["document"]["id"] for h in query_hits] for query_hits in hits)
    return out


def recall_table(
    retrievers: dict[str, Retriever],
    queries: Sequence[str],
    relevant: Sequence[Collection[str]],
    ks: Sequence[int] = (1, 3, 5, 10),
) -> Any:
    """A tidy ``pandas.DataFrame`` with columns ``retriever, k, recall``."""
    rows = []
    for name, retriever in retrievers.items():
        ranked = retrieved_ids(retriever, queries, max(ks))
        for k, value in recall_at_k(ranked, relevant, ks).items():
            rows.append({"retriever": name, "k": k, "recall": value})
    return pd.DataFrame(rows)


def first_hop_ids(row: dict[str, Any]) -> list[str]:
    """The passage a question's first search should find: ``metadata.supporting_ids[0]``
    (for a single-hop question, its only supporting passage)."""
    try:
        supporting = row["metadata"]["supporting_ids"]
    except (KeyError, TypeError):
        raise ValueError(
            f"row {row.get('id')!r}: no metadata.supporting_ids (TinyWorld rows have them)"
        ) from None
    if not supporting:
        raise ValueError(f"row {row.get('id')!r}: metadata.supporting_ids is empty")
    return [str(supporting[0])]


def row_query(row: dict[str, Any], query: str) -> str:
    """``question`` (what the agent is asked) or ``hop_query`` (the ideal first search,
    ``metadata.hop_queries[0]``)."""
    if query == "question":
        return row["question"]
    if query == "hop_query":
        return row["metadata"]["hop_queries"][0]
    raise ValueError(f"query must be 'question' or 'hop_query', got {query!r}")


def recall_for_datasets(
    retrievers: dict[str, Retriever],
    rows_by_dataset: dict[str, Sequence[dict[str, Any]]],
    ks: Sequence[int] = (1, 3, 5, 10),
    queries: Sequence[str] = ("question",),
) -> Any:
    """Tidy ``DataFrame`` (``dataset, query, retriever, k, recall, questions``): recall@k of the
    first-hop supporting passage for every dataset, retriever and query kind."""
    frames = []
    for dataset, rows in rows_by_dataset.items():
        relevant = [first_hop_ids(r) for r in rows]
        for query in queries:
            texts = [row_query(r, query) for r in rows]
            table = recall_table(retrievers, texts, relevant, ks)
            frames.append(table.assign(dataset=dataset, query=query, questions=len(rows)))
    columns = ["dataset", "query", "retriever", "k", "recall", "questions"]
    return pd.concat(frames, ignore_index=True)[columns]


def example_hits(
    retrievers: dict[str, Retriever], rows: Sequence[dict[str, Any]], k: int = 3
) -> Any:
    """One line per (question, retriever, rank): title of the hit, score, and whether it is the
    first-hop supporting passage, for showing examples."""
    records = []
    for name, retriever in retrievers.items():
        hits = retriever.search([r["question"] for r in rows], topk=k)
        for row, query_hits in zip(rows, hits):
            gold = set(first_hop_ids(row))
            for rank, hit in enumerate(query_hits, start=1):
                records.append(
                    {
                        "question": row["question"],
                        "retriever": name,
                        "rank": rank,
                        "title": split_contents(hit["document"]["contents"])[0],
                        "score": round(hit["score"], 3),
                        "supporting": hit["document"]["id"] in gold,
                    }
                )
    return pd.DataFrame(records)
