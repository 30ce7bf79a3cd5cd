"""Retrieval for the search agent (docs/method.md §2): corpus access, dense (faiss) and BM25 indexes,
a Search-R1-compatible HTTP server and its client, all behind one interface::

    from at2po_lib.config.profile import load_profile
    from at2po_lib.retrieval.indexes import build_retriever

    retriever = build_retriever(load_profile("tiny"))     # builds the index if missing
    retriever.search(["who founded acme?"], topk=3)
    # [[{"document": {"id": "12", "contents": "\\"Acme\\"\\n..."}, "score": 7.1}, ...]]

Modules: :mod:`.corpus` (JSONL/.gz streaming, offsets, checksum), :mod:`.encoders`
(HF encoders, pooling, prefixes), :mod:`.shards` (resumable embedding), :mod:`.dense` (faiss),
:mod:`.bm25` (bm25s), :mod:`.ownership` (what a build may replace), :mod:`.indexes` (profiles
→ indexes → retrievers, ``at2po index``),
:mod:`.batcher` + :mod:`.server` (``at2po serve-retriever``), :mod:`.client`,
:mod:`.recall` (recall@k).

Each name is imported from the module that defines it; ``import at2po_lib.retrieval`` loads
neither torch nor faiss.
"""
