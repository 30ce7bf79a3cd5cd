"""Retrieval for the search agent (docs/method.md §2): corpus access, dense (faiss) and BM25 indexes,
a Search-R1-compatible HTTP server and its client, all behind one interface::

    from at2po_lib.config import load_profile
    from at2po_lib.retrieval import build_retriever

    retriever = build_retriever(load_profile("tiny"))     # builds the index if missing
    retriever.search(["who founded acme?"], topk=3)
    # [[{"document": {"id": "12", "contents": "\\"Acme\\"\\n..."}, "score": 7.1}, ...]]

Modules: :mod:`.corpus` (JSONL/.gz streaming, offsets, checksum), :mod:`.encoders`
(HF encoders, pooling, prefixes), :mod:`.shards` (resumable embedding), :mod:`.dense` (faiss),
:mod:`.bm25` (bm25s), :mod:`.build` (profiles → indexes → retrievers, ``at2po index``),
:mod:`.batcher` + :mod:`.server` (``at2po serve-retriever``), :mod:`.client`,
:mod:`.evaluate` (recall@k).

Names are imported lazily so ``import at2po_lib.retrieval`` loads neither torch nor faiss.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Retriever": ".base", "RetrievalError": ".base", "IndexMismatchError": ".base",
    "DEFAULT_TOPK": ".base",
    "Corpus": ".corpus", "CorpusError": ".corpus", "split_contents": ".corpus",
    "EncoderSpec": ".encoders", "DenseEncoder": ".encoders", "PAPER_E5": ".encoders",
    "OFFLINE_MINILM": ".encoders",
    "build_dense_index": ".dense", "DenseRetriever": ".dense", "DenseIndex": ".dense",
    "build_bm25_index": ".bm25", "BM25Retriever": ".bm25",
    "build_retriever": ".build", "ensure_index": ".build", "index_dirs": ".build",
    "profile_corpus_path": ".build",
    "HTTPRetriever": ".client",
    "start_server": ".server", "start_server_process": ".server", "create_app": ".server",
    "recall_at_k": ".evaluate", "recall_table": ".evaluate", "retrieved_ids": ".evaluate",
    "recall_for_datasets": ".evaluate", "example_hits": ".evaluate", "first_hop_ids": ".evaluate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'at2po_lib.retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
