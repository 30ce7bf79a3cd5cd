r"""Sparse retrieval: BM25 through ``bm25s`` (its own save/load), the same interface as dense.

Score of passage :math:`D` for query :math:`Q` (Lucene's variant, ``method="lucene"``):

.. math::

    \mathrm{BM25}(D, Q) = \sum_{t \in Q} \mathrm{idf}(t)\,
        \frac{f(t, D)\,(k_1 + 1)}{f(t, D) + k_1 (1 - b + b\,|D| / \mathrm{avgdl})},
    \qquad \mathrm{idf}(t) = \ln\Bigl(1 + \frac{N - n_t + 0.5}{n_t + 0.5}\Bigr)

Search-R1's BM25 option is a pyserini (Lucene) index with pyserini's defaults k1 = 0.9,
b = 0.4, which are the defaults here. Difference: pyserini also Porter-stems words; this
tokenizer lowercases, splits on ``\w\w+`` and drops English stop words, without stemming
(PyStemmer is not a dependency). Titles are indexed with the text (the whole ``contents``).

Building streams the corpus in chunks and keeps only token ids (about 4 bytes a token: roughly
8 GB for wiki-18's ~2 billion tokens, plus the sparse matrix), never the passage text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..util.staging import discard, recover, staging_path, swap_in
from .base import (
    DEFAULT_TOPK,
    Hit,
    IndexMismatchError,
    RetrievalError,
    Retriever,
    check_search_args,
    hits_from_rows,
)
from .corpus import Corpus
from .metadata import check_corpus, file_sizes, read_metadata, write_metadata
from .ownership import (
    check_index_destination,
    confirm_destination,
    is_complete_build,
    write_manifest,
)

# Imported inside the functions that use them: bm25s; retrieval.indexes imports this module, and
# bm25s loads only when a BM25 index is built or searched (tests/retrieval/test_retrieval_build.py).

STOPWORDS = "en"


@dataclass
class BM25BuildReport:
    index_dir: Path
    meta: dict[str, Any]


def _new_tokenizer() -> Any:
    from bm25s.tokenization import Tokenizer

    return Tokenizer(lower=True, stopwords=STOPWORDS, stemmer=None)


def build_bm25_index(
    corpus_path: str | Path,
    index_dir: str | Path,
    *,
    k1: float = 0.9,
    b: float = 0.4,
    method: str = "lucene",
    chunk_size: int = 100_000,
    progress: bool = True,
) -> BM25BuildReport:
    """Tokenise ``corpus_path`` chunk by chunk, build a bm25s index, save it with ``meta.json``."""
    import bm25s
    from bm25s.tokenization import Tokenized

    index_dir = Path(index_dir)
    # before any work: the swap replaces the whole folder, so it must hold only our files
    destination = check_index_destination(index_dir, corpus_path)
    recover(index_dir, is_complete_build)
    work = staging_path(index_dir)  # built here, swapped in when complete
    discard(work)  # tokenising is cheap: a killed build starts over
    work.mkdir(parents=True)
    corpus = Corpus(corpus_path, cache_dir=work)
    if len(corpus) == 0:
        raise RetrievalError(f"{corpus.path}: corpus is empty")
    tokenizer = _new_tokenizer()
    token_ids: list[list[int]] = []
    with tqdm(total=len(corpus), unit="passage", desc="bm25 tokenise", disable=not progress) as bar:
        for _, chunk in corpus.iter_chunks(chunk_size):
            token_ids.extend(
                tokenizer.tokenize(
                    [p["contents"] for p in chunk],
                    update_vocab=True,
                    return_as="ids",
                    show_progress=False,
                )
            )
            bar.update(len(chunk))
    model = bm25s.BM25(k1=k1, b=b, method=method)
    model.index(Tokenized(ids=token_ids, vocab=tokenizer.get_vocab_dict()), show_progress=progress)
    del token_ids
    model.save(str(work), show_progress=False)
    tokenizer.save_vocab(str(work))
    tokenizer.save_stopwords(str(work))
    index_files = sorted(
        p.name
        for p in work.iterdir()
        if p.is_file() and not p.name.startswith(("corpus_offsets", "meta.json"))
    )
    write_metadata(
        work,
        {  # last: the identity checked on every load
            "kind": "bm25",
            "index_type": "BM25",
            "encoder": f"bm25s ({method}, k1={k1}, b={b})",
            "k1": k1,
            "b": b,
            "method": method,
            "stopwords": STOPWORDS,
            "lower": True,
            "stemmer": None,
            "passages": len(corpus),
            "corpus_checksum": corpus.checksum(),
            "corpus_path": str(corpus.path),
            "files": file_sizes(work, index_files),
        },
    )
    corpus.close()
    write_manifest(work)
    confirm_destination(destination)  # nothing added to the old folder during the build
    swap_in(work, index_dir)
    return BM25BuildReport(index_dir, read_metadata(index_dir, "bm25"))


def top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best rows of one query's ``scores`` (n,), best first; equal scores in row order.

    Why not bm25s's own selection: it orders tied scores with numpy's ``argpartition`` and
    ``argsort``, whose SIMD kernels numpy picks per CPU (AVX2 vs AVX-512), so two machines
    returned different passages for the same query. Ties are common in a small corpus (211 of
    TinyWorld's 2,650 test queries tie within their top 3), and notebook 01's BM25 recall@1
    moved by up to 0.035 between machines. Here only the k-th largest *value* comes from a
    partition (a value does not depend on the kernel); the order is decided by (score, row).
    """
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=scores.dtype), np.zeros(0, dtype=np.int64)
    kth = np.partition(scores, n - k)[n - k]
    above = np.flatnonzero(scores > kth)
    tied = np.flatnonzero(scores == kth)[: k - len(above)]
    rows = np.concatenate([above, tied])
    rows = rows[np.lexsort((rows, -scores[rows]))]  # last key first: score descending, then row
    return scores[rows], rows.astype(np.int64)


class BM25Index:
    """A loaded bm25s model with its tokenizer; ``search`` takes strings, returns rows."""

    def __init__(self, index_dir: str | Path, *, mmap: bool = False) -> None:
        import bm25s

        self.index_dir = Path(index_dir)
        self.meta = read_metadata(self.index_dir, "bm25")  # also checks the recorded file sizes
        try:
            self.model = bm25s.BM25.load(str(self.index_dir), mmap=mmap, show_progress=False)
            self.tokenizer = _new_tokenizer()
            self.tokenizer.load_vocab(str(self.index_dir))
            self.tokenizer.load_stopwords(str(self.index_dir))
        except (OSError, ValueError, KeyError, EOFError) as exc:  # json/npy readers' errors
            where = getattr(exc, "filename", None) or self.index_dir
            raise RetrievalError(
                f"{where}: cannot read the BM25 index in {self.index_dir} "
                f"({type(exc).__name__}: {str(exc)[:200]}); rebuild it"
            ) from None
        docs = int(self.model.scores.get("num_docs", self.meta["passages"]))
        if docs != int(self.meta["passages"]):
            raise IndexMismatchError(
                f"{self.index_dir}: the BM25 model holds {docs} passages, "
                f"meta.json says {self.meta['passages']}; rebuild the index"
            )

    @property
    def ntotal(self) -> int:
        return int(self.meta["passages"])

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """``queries`` (n,) → ``scores`` (n, k) float32, ``rows`` (n, k) int64, best first.

        Words not in the corpus vocabulary are dropped; a query with no known word scores 0
        everywhere and returns the first k rows.
        """
        from bm25s.tokenization import Tokenized, convert_tokenized_to_string_list

        ids = self.tokenizer.tokenize(
            list(queries), update_vocab=False, return_as="ids", show_progress=False
        )
        words = convert_tokenized_to_string_list(
            Tokenized(ids=ids, vocab=self.tokenizer.get_vocab_dict())
        )
        k = min(k, self.ntotal)
        out_scores = np.zeros((len(words), k), dtype=np.float32)
        out_rows = np.zeros((len(words), k), dtype=np.int64)
        for i, query_words in enumerate(words):  # bm25s scores one query at a time too
            scores = (
                self.model.get_scores(query_words)
                if query_words
                else np.zeros(self.ntotal, dtype=np.float32)
            )
            out_scores[i], out_rows[i] = top_k_rows(np.asarray(scores, dtype=np.float32), k)
        return out_scores, out_rows


class BM25Retriever(Retriever):
    """BM25 search over a corpus; the corpus must be the one the index was built from."""

    def __init__(
        self, index_dir: str | Path, corpus_path: str | Path | None = None, *, mmap: bool = False
    ) -> None:
        self.index = BM25Index(index_dir, mmap=mmap)
        self.corpus = Corpus(corpus_path or self.index.meta["corpus_path"], cache_dir=index_dir)
        check_corpus(self.index.meta, self.corpus, index_dir)

    def search(self, queries: Sequence[str], topk: int = DEFAULT_TOPK) -> list[list[Hit]]:
        queries = check_search_args(queries, topk)
        if not queries:
            return []
        scores, rows = self.index.search(queries, topk)
        return hits_from_rows(self.corpus, rows, scores)

    def describe(self) -> dict[str, Any]:
        meta = self.index.meta
        return {
            "method": "bm25",
            "passages": self.index.ntotal,
            "index_type": "BM25",
            "encoder": meta["encoder"],
            "corpus": str(self.corpus.path),
        }

    def close(self) -> None:
        self.corpus.close()
