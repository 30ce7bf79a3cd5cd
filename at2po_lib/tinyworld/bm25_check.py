"""Can a plain retriever find TinyWorld's supporting passages? (a sanity check, not a result)

``bm25_recall`` indexes the corpus with ``bm25s`` (the project's BM25 library) and measures,
per dataset, recall@k of

- ``question``: the question itself as the query, for the first hop's supporting passage
  (single-hop questions name their entity in full, so this should be high: ≥ 0.9 is the aim);
- ``hop_query``: every ``metadata.hop_queries[i]`` for ``supporting_ids[i]`` (what a scripted
  demonstration searches for).

The project's retrievers (``at2po_lib.retrieval``) are what the agent uses; this check depends
on nothing but the files, so the generator can be tuned without building an index.
"""

from __future__ import annotations

import pandas as pd

from .build import WorldFiles, read_corpus, read_rows
from ..config.choices import DATASETS

# Imported inside the functions that use them: bm25s; bm25s only for this check.


def bm25_recall(files: WorldFiles, k: int = 3, split: str = "test"):
    """DataFrame with columns ``dataset, group, questions, question_recall, hop_query_recall``."""
    import bm25s

    corpus = read_corpus(files)
    ids = list(corpus)
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize([corpus[i] for i in ids], show_progress=False), show_progress=False
    )

    def top_k(queries: list[str]) -> list[set[str]]:
        hits, _ = retriever.retrieve(
            bm25s.tokenize(queries, show_progress=False), k=k, show_progress=False
        )
        return [{ids[j] for j in row} for row in hits]

    records = []
    for name, group in DATASETS.items():
        if not files.dataset(name, split).is_file():
            continue
        rows = read_rows(files, name, split)
        first = top_k([r["question"] for r in rows])
        hops = [
            (q, s)
            for r in rows
            for q, s in zip(r["metadata"]["hop_queries"], r["metadata"]["supporting_ids"])
        ]
        found = top_k([q for q, _ in hops])
        records.append(
            {
                "dataset": name,
                "group": group,
                "questions": len(rows),
                "question_recall": sum(
                    r["metadata"]["supporting_ids"][0] in t for r, t in zip(rows, first)
                )
                / len(rows),
                "hop_query_recall": sum(s in t for (_, s), t in zip(hops, found)) / len(hops),
            }
        )
    return pd.DataFrame.from_records(records).round(3)
