"""Dense retrieval with faiss: build an index over a corpus, load it, search it (docs/method.md §2).

Index types (inner product over L2-normalised vectors = cosine similarity):

- ``Flat``: ``IndexFlatIP``, exact search; the paper's index (wiki-18 with e5-base-v2:
  21,015,324 × 768 × 4 bytes ≈ 64.6 GB).
- ``HNSW`` (= ``HNSW64``; ``HNSW<M>`` picks another M): ``IndexHNSWFlat`` with the
  inner-product metric, approximate and much faster on CPU; Search-R1 publishes one for wiki-18.
  Searched with ``efSearch = max(hnsw_ef_search, k)`` (faiss's default of 16 loses recall).

Building streams the corpus in shards (:mod:`.shards`, resumable), then adds the shards to the
index one at a time, so memory holds the index plus one shard. Embedding uses the GPU through
torch whenever one is visible.

Loading reads the faiss file once, memory-mapped (``IO_FLAG_MMAP_IFC``: the flat
codes of Flat and HNSW indexes stay in the page cache, shared by every process serving the same
file, instead of a private 64.6 GB copy); checks that need only the counts read the file's
header (:func:`faiss_header`) and the corpus's cached line count. GPU: when faiss-gpu is
installed and GPUs are visible, a ``Flat`` index is sharded over all of them in float16
(``index_cpu_to_all_gpus`` with ``shard=True``: Search-R1's setting) *if the shards fit*: each
GPU's free memory must hold its shard plus faiss's scratch space (:func:`place_flat_index`).
When they do not (wiki-18 is 32.3 GB in fp16: Search-R1's issue 54 is this copy running out of
memory on one 80 GB card), the index stays on the CPU and a warning says so, with the sizes.
HNSW has no faiss GPU version and stays on CPU.

Building happens in a staging folder beside ``index_dir`` (``.<name>.staging``, where the
resumable embedding shards live too) and the finished index is swapped in atomically
(:mod:`at2po_lib.util.staging`): a failed or killed rebuild never leaves a folder that loads.

A folder holding only a prebuilt faiss file (Search-R1's ``e5_Flat.index``, no ``meta.json``)
loads only when asked for explicitly (``prebuilt=True``, ``--prebuilt``, ``retrieval.prebuilt``):
the encoder then comes from the caller and only the passage count can be checked. A faiss file
without ``meta.json`` is otherwise an unfinished build and refused.
"""

from __future__ import annotations

import os
import shutil
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..util.staging import recover, staging_path, swap_in
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
from .encoders import DenseEncoder, EncoderSpec
from .metadata import check_corpus, check_encoder, file_sizes, read_metadata, write_metadata
from .ownership import (
    MANIFEST,
    check_index_destination,
    confirm_destination,
    is_complete_build,
    write_manifest,
)
from .shards import ShardReport, embed_corpus_to_shards, iter_shards

# Imported inside the functions that use them: faiss; a BM25-only user never loads faiss
# (tests/retrieval/test_retrieval_build.py).

INDEX_FILE = "index.faiss"
DEFAULT_HNSW_M = 64


def parse_index_type(index_type: str) -> tuple[str, int | None]:
    """``Flat`` → ``("Flat", None)``; ``HNSW`` → ``("HNSW", 64)``; ``HNSW32`` → ``("HNSW", 32)``."""
    if index_type == "Flat":
        return "Flat", None
    if index_type.startswith("HNSW"):
        digits = index_type[4:]
        if digits == "" or (digits.isdigit() and int(digits) > 1):
            return "HNSW", int(digits) if digits else DEFAULT_HNSW_M
    raise ValueError(f"unknown index_type {index_type!r}; use 'Flat', 'HNSW' or 'HNSW<M>'")


def new_faiss_index(index_type: str, dim: int) -> Any:
    import faiss

    kind, m = parse_index_type(index_type)
    if kind == "Flat":
        return faiss.IndexFlatIP(dim)
    return faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)


def gpus_available() -> int:
    """GPUs faiss can use (0 with faiss-cpu)."""
    import faiss

    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def to_gpus(index: Any, gpus: int = -1) -> Any:
    """Shard a Flat index over ``gpus`` GPUs (-1: all visible), float16 storage (Search-R1's
    server setting)."""
    import faiss

    options = faiss.GpuMultipleClonerOptions()
    options.shard = True
    options.useFloat16 = True
    return faiss.index_cpu_to_all_gpus(index, co=options, ngpu=gpus)


FAISS_GPU_SCRATCH_BYTES = 1.5 * 2**30
"""Scratch memory faiss's ``StandardGpuResources`` takes on each GPU (its default temporary
memory for cards of 8 GiB and more), besides the index itself."""


def gpu_free_bytes() -> list[float]:
    """Free memory of each visible GPU (``torch.cuda.mem_get_info``), in bytes."""
    import torch  # heavy: only when a GPU placement is decided (BM25 servers never import it)

    return [float(torch.cuda.mem_get_info(i)[0]) for i in range(torch.cuda.device_count())]


@dataclass(frozen=True)
class Placement:
    """Where a loaded Flat index is searched: ``gpus`` > 0 shards it over that many GPUs."""

    gpus: int
    message: str


def place_flat_index(ntotal: int, dim: int, free_bytes: Sequence[float]) -> Placement:
    """Shard over every GPU when each holds its shard, ``ntotal·dim·2 / G`` bytes in fp16, plus
    :data:`FAISS_GPU_SCRATCH_BYTES` within its free memory; else the CPU, with a message that
    gives the sizes and what would lift it. ``free_bytes``: free memory per GPU."""
    gib = 2**30
    gpus = len(free_bytes)
    if gpus == 0:
        return Placement(0, "faiss: no GPU visible; searching the index on the CPU")
    shard = ntotal * dim * 2.0 / gpus
    short = [i for i, free in enumerate(free_bytes) if shard + FAISS_GPU_SCRATCH_BYTES > free]
    if not short:
        return Placement(
            gpus,
            f"faiss: {ntotal:,} vectors sharded over {gpus} GPU(s) in fp16, "
            f"{shard / gib:.1f} GiB each",
        )
    worst = min(free_bytes[i] for i in short)
    return Placement(
        0,
        (
            f"faiss: the Flat index ({ntotal:,} x {dim}) needs {shard / gib:.1f} GiB in fp16 on each "
            f"of {gpus} GPU(s) plus {FAISS_GPU_SCRATCH_BYTES / gib:.1f} GiB of scratch, but GPU "
            f"{short[0]} has {worst / gib:.1f} GiB free; searching it on the CPU instead (exact, "
            "slower: `at2po plan` gives the query rate). More GPUs, free memory, an HNSW index or "
            "a retrieval server on another machine lift this."
        ),
    )


@dataclass
class DenseBuildReport:
    index_dir: Path
    meta: dict[str, Any]
    shards: ShardReport


def build_dense_index(
    corpus_path: str | Path,
    index_dir: str | Path,
    spec: EncoderSpec = EncoderSpec(),
    *,
    index_type: str = "Flat",
    shard_size: int = 100_000,
    batch_size: int = 64,
    device: str | None = None,
    fp16: bool = False,
    embeddings_dir: str | Path | None = None,
    keep_embeddings: bool = False,
    force: bool = False,
    on_shard_done: Callable[[int], None] | None = None,
    progress: bool = True,
) -> DenseBuildReport:
    """Embed ``corpus_path`` with ``spec`` and write ``index.faiss`` + ``meta.json`` to ``index_dir``.

    Resumable: finished embedding shards in ``embeddings_dir`` (default ``index_dir/embeddings``)
    are reused. They are deleted after a successful build unless ``keep_embeddings``.
    """
    parse_index_type(index_type)
    index_dir = Path(index_dir)
    # before any work: the swap replaces the whole folder, so it must hold only our files
    destination = check_index_destination(index_dir, corpus_path)
    recover(index_dir, is_complete_build)
    work = staging_path(index_dir)  # built here, swapped in when complete
    work.mkdir(parents=True, exist_ok=True)
    # from a build killed at its end
    for stale in (work / "meta.json", work / INDEX_FILE, work / MANIFEST):
        stale.unlink(missing_ok=True)
    corpus = Corpus(corpus_path, cache_dir=work)
    if len(corpus) == 0:
        raise RetrievalError(f"{corpus.path}: corpus is empty")
    encoder = DenseEncoder(spec, batch_size=batch_size, device=device, fp16=fp16)
    shard_dir = Path(embeddings_dir) if embeddings_dir is not None else work / "embeddings"
    report = embed_corpus_to_shards(
        corpus,
        encoder,
        shard_dir,
        shard_size,
        force=force,
        on_shard_done=on_shard_done,
        progress=progress,
    )
    index = new_faiss_index(index_type, report.dim)
    for shard in tqdm(
        iter_shards(shard_dir, report.n_shards),
        total=report.n_shards,
        desc=f"faiss {index_type}",
        disable=not progress,
    ):
        index.add(np.ascontiguousarray(shard, dtype=np.float32))
    if index.ntotal != len(corpus):
        raise RetrievalError(
            f"{index_dir}: index holds {index.ntotal} vectors, corpus has {len(corpus)}"
        )
    _write_faiss(index, work / INDEX_FILE)
    if not keep_embeddings:
        shutil.rmtree(shard_dir, ignore_errors=True)
    write_metadata(
        work,
        {  # last: the identity checked on every load
            "kind": "dense",
            "encoder": spec.to_dict(),
            "dim": report.dim,
            "index_type": index_type,
            "passages": len(corpus),
            "corpus_checksum": corpus.checksum(),
            "corpus_path": str(corpus.path),
            "shard_size": shard_size,
            "files": file_sizes(work, [INDEX_FILE]),
        },
    )
    corpus.close()
    write_manifest(work)
    confirm_destination(destination)  # nothing added to the old folder during the build
    swap_in(work, index_dir)
    if embeddings_dir is None:
        report.shard_dir = index_dir / "embeddings"
    return DenseBuildReport(index_dir, read_metadata(index_dir, "dense"), report)


def _write_faiss(index: Any, path: Path) -> None:
    import faiss

    tmp = path.with_name(path.name + ".tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, path)


FAISS_HEADER = struct.Struct("<4siq")
"""A faiss file starts with its type's four-character code, then ``d`` (int32) and
``ntotal`` (int64): faiss's ``write_index_header``."""
FLAT_FOURCCS = {b"IxFI": 1, b"IxF2": 1}
"""IndexFlatIP / IndexFlatL2: header (37 bytes: the three fields above, two int64 placeholders,
``is_trained``, ``metric_type``), then the codes as a vector (an int64 size, ``ntotal·d·4``
bytes)."""


@dataclass(frozen=True)
class FaissHeader:
    kind: str
    dim: int
    ntotal: int


def faiss_header(path: Path) -> FaissHeader:
    """Type, dimension and vector count of a faiss file, from its first 16 bytes (no index is
    read). A Flat file whose size is not ``45 + ntotal·d·4`` bytes is truncated or padded."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            head = f.read(FAISS_HEADER.size)
    except OSError as exc:
        raise RetrievalError(f"{path}: cannot read the faiss file ({exc.strerror})") from None
    if len(head) < FAISS_HEADER.size:
        raise RetrievalError(f"{path}: not a faiss index ({len(head)} bytes)")
    fourcc, dim, ntotal = FAISS_HEADER.unpack(head)
    if not fourcc.isalnum() or dim <= 0 or ntotal < 0:
        raise RetrievalError(f"{path}: not a faiss index (header {head[:16]!r})")
    if fourcc in FLAT_FOURCCS:
        expected = 37 + 8 + ntotal * dim * 4
        size = path.stat().st_size
        if size != expected:
            raise RetrievalError(
                f"{path}: a Flat index of {ntotal:,} x {dim} is {expected:,} "
                f"bytes, the file {size:,} (truncated or corrupt?)"
            )
    return FaissHeader(fourcc.decode("ascii"), dim, ntotal)


def read_faiss(path: Path, mmap: bool = True) -> Any:
    """The one read of a faiss file: memory-mapped where faiss allows (``IO_FLAG_MMAP_IFC``,
    read-only: flat codes, as in Flat and HNSW indexes), else read into memory."""
    import faiss

    flags = 0
    if mmap and hasattr(faiss, "IO_FLAG_MMAP_IFC"):
        flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY
    return faiss.read_index(str(path), flags)


def _read_faiss(path: Path) -> Any:
    """:func:`read_faiss` with an error that names the file (faiss's own does not help)."""
    try:
        return read_faiss(path)
    except (RuntimeError, MemoryError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RetrievalError(
            f"{path}: not a readable faiss index (truncated or corrupt?): {first[:200]}"
        ) from None


def find_faiss_file(index_dir: Path) -> Path:
    """``index.faiss``, or the single ``*.index`` file of a prebuilt folder."""
    if index_dir.is_file():
        return index_dir
    if (index_dir / INDEX_FILE).is_file():
        return index_dir / INDEX_FILE
    candidates = sorted(index_dir.glob("*.index"))
    if len(candidates) == 1:
        return candidates[0]
    found = ", ".join(p.name for p in candidates) or "none"
    raise RetrievalError(
        f"{index_dir}: no {INDEX_FILE} and not exactly one *.index file (found: {found})"
    )


BLAS_THRESHOLD = 16
"""Batches of at least this many queries go through faiss's BLAS path (see DenseIndex)."""


class DenseIndex:
    """A loaded faiss index and its metadata; ``search`` takes vectors, returns rows.

    Exact (Flat) search of a batch of queries: faiss 1.15 only uses its BLAS matrix-product path
    from 128,000 queries up (``faiss.cvar.distance_compute_blas_threshold``); below that it scans
    the whole index once per query. ``search`` lowers the threshold to ``blas_threshold`` for the
    duration of the call (faiss's global setting is restored), because a batched server sends
    tens to hundreds of queries at once. Measured on 2 CPU cores, one thread, 50,000 × 384
    vectors: 64 queries took 926 ms by scans and 235 ms through BLAS; 256 queries 3.8 s and 0.7 s.
    """

    def __init__(
        self,
        index: Any,
        meta: dict[str, Any],
        source: Path,
        blas_threshold: int | None = BLAS_THRESHOLD,
    ) -> None:
        self.index = index
        self.meta = meta
        self.source = source
        self.blas_threshold = blas_threshold
        self.placement = "cpu"
        """Where the index is searched (``cpu``, or the message of :func:`place_flat_index`)."""

    @classmethod
    def load(
        cls,
        index_dir: str | Path,
        *,
        use_gpu: bool | str = "auto",
        hnsw_ef_search: int = 128,
        fallback_spec: EncoderSpec | None = None,
        prebuilt: bool = False,
        gpu_budget: Callable[[], Sequence[float]] | None = None,
    ) -> "DenseIndex":
        """Load and check an index folder (``meta.json`` + faiss file), reading the file once.

        ``prebuilt=True`` accepts a faiss file without ``meta.json`` (a downloaded index);
        ``fallback_spec`` then names its encoder. Any file that is missing, truncated or
        unreadable raises :class:`RetrievalError` naming it. ``gpu_budget()``: bytes each GPU
        may give the index (default: its free memory, :func:`gpu_free_bytes`); a Flat index
        whose shards do not fit stays on the CPU (:func:`place_flat_index`, a warning).
        """
        index_dir = Path(index_dir)
        path = find_faiss_file(index_dir)
        folder = path.parent
        if (folder / "meta.json").is_file():
            meta = read_metadata(folder, "dense")  # also checks the recorded file sizes
            index = _read_faiss(path)
        elif not prebuilt:
            raise RetrievalError(
                f"{path}: faiss file without meta.json, so nothing says which corpus and encoder "
                "it belongs to (an unfinished build, or a downloaded index). Rebuild it "
                "(`at2po index`), or use a downloaded index as it is with prebuilt=True "
                "(--prebuilt, retrieval.prebuilt) and its encoder."
            )
        else:  # a prebuilt index (e.g. Search-R1's e5_Flat.index): the caller vouches for it
            if fallback_spec is None:
                raise RetrievalError(
                    f"{path}: prebuilt index without meta.json; say which encoder made it"
                )
            index = _read_faiss(path)
            meta = {
                "kind": "dense",
                "encoder": fallback_spec.to_dict(),
                "dim": index.d,
                "index_type": "HNSW" if "HNSW" in type(index).__name__ else "Flat",
                "passages": index.ntotal,
                "corpus_checksum": None,
                "prebuilt": True,
            }
        if index.ntotal != meta["passages"] or index.d != meta["dim"]:
            raise IndexMismatchError(
                f"{path}: faiss file ({index.ntotal}×{index.d}) disagrees with meta.json"
            )
        if hasattr(index, "hnsw"):
            index.hnsw.efSearch = max(index.hnsw.efSearch, hnsw_ef_search)
        want_gpu = gpus_available() > 0 if use_gpu == "auto" else bool(use_gpu)
        placement = "cpu"
        if want_gpu:
            if gpus_available() == 0:
                raise RetrievalError("use_gpu=True but faiss sees no GPU (is faiss-gpu installed?)")
            if meta["index_type"] == "Flat":
                free = list((gpu_budget or gpu_free_bytes)())[: gpus_available()]
                where = place_flat_index(index.ntotal, index.d, free)
                if where.gpus:
                    index = to_gpus(index, where.gpus)
                else:
                    warnings.warn(where.message, RuntimeWarning, stacklevel=2)
                placement = where.message
            else:
                warnings.warn("faiss has no GPU HNSW; searching on CPU", stacklevel=2)
        loaded = cls(index, meta, path)
        loaded.placement = placement
        return loaded

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``vectors`` (n, dim) float32 → ``scores`` (n, k) float32, ``rows`` (n, k) int64."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.index.d:
            raise ValueError(
                f"query vectors must have shape (n, {self.index.d}), got {vectors.shape}"
            )
        k = min(k, self.ntotal)
        if hasattr(self.index, "hnsw"):
            self.index.hnsw.efSearch = max(self.index.hnsw.efSearch, k)
            return self.index.search(vectors, k)
        if self.blas_threshold is None:
            return self.index.search(vectors, k)
        import faiss

        previous = faiss.cvar.distance_compute_blas_threshold
        faiss.cvar.distance_compute_blas_threshold = self.blas_threshold
        try:
            return self.index.search(vectors, k)
        finally:
            faiss.cvar.distance_compute_blas_threshold = previous


class DenseRetriever(Retriever):
    """Encode queries, search faiss, look passages up in the corpus.

    ``spec=None`` queries with the encoder recorded in the index; a given ``spec`` must match it
    (:class:`IndexMismatchError` otherwise). ``corpus_path=None`` uses the recorded corpus path.
    """

    def __init__(
        self,
        index_dir: str | Path,
        corpus_path: str | Path | None = None,
        spec: EncoderSpec | None = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
        fp16: bool = False,
        use_gpu: bool | str = "auto",
        hnsw_ef_search: int = 128,
        prebuilt: bool = False,
        gpu_budget: Callable[[], Sequence[float]] | None = None,
    ) -> None:
        self.index = DenseIndex.load(
            index_dir,
            use_gpu=use_gpu,
            hnsw_ef_search=hnsw_ef_search,
            fallback_spec=spec,
            prebuilt=prebuilt,
            gpu_budget=gpu_budget,
        )
        meta = self.index.meta
        corpus_path = corpus_path or meta.get("corpus_path")
        if corpus_path is None:
            raise RetrievalError(f"{index_dir}: prebuilt index: pass the corpus path")
        self.corpus = Corpus(corpus_path, cache_dir=self.index.source.parent)
        if meta.get("corpus_checksum") is not None:
            check_corpus(meta, self.corpus, index_dir)
        elif len(self.corpus) != self.index.ntotal:
            raise IndexMismatchError(
                f"{index_dir}: index has {self.index.ntotal} vectors, corpus {self.corpus.path} has "
                f"{len(self.corpus)} passages"
            )
        if spec is None:
            spec = EncoderSpec(**meta["encoder"])
        else:
            check_encoder(meta, spec, index_dir)
        self.encoder = DenseEncoder(spec, batch_size=batch_size, device=device, fp16=fp16)
        if self.encoder.dim != self.index.index.d:
            raise IndexMismatchError(
                f"{index_dir}: encoder {spec.name!r} makes {self.encoder.dim}-dim vectors, index holds {self.index.index.d}"
            )

    def search(self, queries: Sequence[str], topk: int = DEFAULT_TOPK) -> list[list[Hit]]:
        queries = check_search_args(queries, topk)
        if not queries:
            return []
        scores, rows = self.index.search(self.encoder.encode_queries(queries), topk)
        return hits_from_rows(self.corpus, rows, scores)

    def describe(self) -> dict[str, Any]:
        meta = self.index.meta
        return {
            "method": "dense",
            "passages": self.index.ntotal,
            "index_type": meta["index_type"],
            "encoder": self.encoder.spec.name,
            "dim": meta["dim"],
            "device": self.encoder.device,
            "corpus": str(self.corpus.path),
            "index_placement": self.index.placement,
        }

    def close(self) -> None:
        self.corpus.close()
