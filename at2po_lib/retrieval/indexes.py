"""Profiles → indexes → retrievers (the ``at2po index`` command is :mod:`at2po_lib.cli.index`).

- :func:`profile_corpus_path`: ``retrieval.corpus`` (relative paths are under the repository
  root) or the profile's TinyWorld corpus ``artifacts/<profile>/world/corpus.jsonl``, generated
  on demand by :func:`at2po_lib.tinyworld.build.ensure_world`.
- :func:`index_dirs`: ``retrieval.index_dir`` or ``artifacts/<profile>/index``, with ``dense/``
  and ``bm25/`` inside (with ``retrieval.prebuilt``, a folder that itself holds a faiss file,
  such as a downloaded ``e5_Flat.index``, is used as the dense index directly).
- :func:`ensure_index`: build what is missing or stale (an index whose recorded corpus checksum,
  encoder or index type no longer matches the profile, or whose ``meta.json`` is missing or
  unreadable, is rebuilt, in a staging folder swapped in when complete). A prebuilt index is
  an explicit choice (``retrieval.prebuilt``, ``at2po index --prebuilt``), never a fallback: it
  is checked (passage count against the corpus, encoder dimension) and never rebuilt.
- :func:`build_retriever`: the retriever a profile asks for: :class:`HTTPRetriever` when
  ``retrieval.url`` is set, else in-process dense or BM25.

Command line (:mod:`at2po_lib.cli.index`)::

    at2po index --profile tiny --method both            # the profile's indexes
    at2po index --corpus wiki-18.jsonl --out index/e5 --encoder intfloat/e5-base-v2 \\
        --query-prefix "query: " --passage-prefix "passage: " --fp16 --index-type Flat
    at2po index --corpus wiki-18.jsonl --out index/bm25 --bm25
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..util.locks import folder_lock
from ..util.paths import artifacts_dir, repo_root
from ..util.staging import recover
from .base import IndexMismatchError, RetrievalError, Retriever
from .bm25 import BM25Retriever, build_bm25_index
from .client import HTTPRetriever
from .corpus import Corpus
from .dense import DenseRetriever, build_dense_index, faiss_header, find_faiss_file
from .encoders import EncoderSpec
from .ownership import is_complete_build

if TYPE_CHECKING:  # pragma: no cover
    from ..config.profile import ProfileConfig

METHODS = ("dense", "bm25")


def _resolve(path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else repo_root() / p


def profile_corpus_path(cfg: "ProfileConfig") -> Path:
    """The corpus a profile retrieves from (TinyWorld's is generated if missing)."""
    if cfg.retrieval.corpus:
        path = _resolve(cfg.retrieval.corpus)
        if not path.is_file():
            raise RetrievalError(
                f"profile {cfg.name!r}: retrieval.corpus {path} does not exist. For wiki-18: "
                "download PeterJinGo/wiki-18-corpus (wiki-18.jsonl.gz) and gzip -d it there."
            )
        return path
    path = artifacts_dir(cfg.name) / "world" / "corpus.jsonl"
    if not path.is_file():
        # inner: the world builder pulls pandas, which the GPU retrieval server's own
        # environment (requirements-retriever-gpu.txt) does not hold
        from ..tinyworld.build import ensure_world

        ensure_world(cfg)
        if not path.is_file():
            raise RetrievalError(f"ensure_world({cfg.name!r}) did not write {path}")
    return path


def _holds_faiss_file(folder: Path) -> bool:
    return (folder / "index.faiss").is_file() or any(folder.glob("*.index"))


def index_dirs(cfg: "ProfileConfig") -> dict[str, Path]:
    """``{"dense": folder, "bm25": folder}`` for a profile (nothing is created)."""
    if cfg.retrieval.index_dir:
        base = _resolve(cfg.retrieval.index_dir)
    else:
        base = artifacts_dir(cfg.name) / "index"
    dense = base if cfg.retrieval.prebuilt and _holds_faiss_file(base) else base / "dense"
    return {"dense": dense, "bm25": base / "bm25"}


def _is_current(method: str, folder: Path, cfg: "ProfileConfig", corpus_path: Path) -> bool:
    """A finished index matching the profile (no or unreadable ``meta.json``: not finished)."""
    recover(folder, is_complete_build)  # finish an interrupted swap
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return False
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    if meta.get("kind") != method:
        return False
    if meta.get("corpus_checksum") != Corpus(corpus_path, cache_dir=folder).checksum():
        return False
    if method == "dense":
        spec = EncoderSpec.from_config(cfg.retrieval).to_dict()
        return meta.get("encoder") == spec and meta.get("index_type") == cfg.retrieval.index_type
    return True


def _check_prebuilt(folder: Path, cfg: "ProfileConfig", corpus_path: Path) -> None:
    """``retrieval.prebuilt``: the folder must hold a faiss file that fits the corpus. Checked
    from counts alone: the file's header (type, dimension, vectors; a Flat file's
    exact size) against the corpus's cached passage count; the index itself is read once, by
    the retriever that serves it (which checks the encoder's dimension)."""
    if not _holds_faiss_file(folder):
        raise RetrievalError(
            f"retrieval.prebuilt is set but {folder} holds no index.faiss or *.index "
            "file; download the index there, or unset retrieval.prebuilt to build one"
        )
    path = find_faiss_file(folder)
    header = faiss_header(path)
    corpus = Corpus(corpus_path, cache_dir=folder)
    try:
        passages = len(corpus)
    finally:
        corpus.close()
    if header.ntotal != passages:
        raise IndexMismatchError(
            f"{path}: index has {header.ntotal} vectors, corpus {corpus_path} "
            f"has {passages} passages"
        )


def ensure_index(
    cfg: "ProfileConfig",
    methods: Iterable[str] | None = None,
    *,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Path]:
    """Build the profile's index(es) unless an up-to-date one exists; returns their folders.

    ``methods`` defaults to ``(retrieval.method,)``; pass ``("dense", "bm25")`` for both.
    """
    methods = tuple(methods) if methods is not None else (cfg.retrieval.method,)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown retrieval method(s) {unknown}; use {METHODS}")
    folders = index_dirs(cfg)
    corpus_path = profile_corpus_path(cfg)
    rcfg = cfg.retrieval
    for method in methods:
        folder = folders[method]
        if method == "dense" and rcfg.prebuilt:
            _check_prebuilt(folder, cfg, corpus_path)
            continue
        if not force and _is_current(method, folder, cfg, corpus_path):
            continue
        with _build_lock(folder):
            # Another process (a parallel training run) may have built it while we waited.
            if not force and _is_current(method, folder, cfg, corpus_path):
                continue
            if method == "dense":
                build_dense_index(
                    corpus_path,
                    folder,
                    EncoderSpec.from_config(rcfg),
                    index_type=rcfg.index_type,
                    shard_size=rcfg.shard_size,
                    batch_size=rcfg.batch_size,
                    device=rcfg.device,
                    fp16=rcfg.fp16,
                    force=force,
                    progress=progress,
                )
            else:
                build_bm25_index(corpus_path, folder, progress=progress)
    return {m: folders[m] for m in methods}


def _build_lock(folder: Path):
    """The index folder's exclusive lock (:mod:`at2po_lib.util.locks`) while it is built; a second
    build of the same profile waits for the first (a note names its PID) and then finds the
    index current instead of racing it."""
    return folder_lock(folder, "index build", wait=True)


def build_retriever(
    cfg: "ProfileConfig",
    *,
    method: str | None = None,
    build: bool = True,
    use_gpu: bool | str = "auto",
) -> Retriever:
    """The retriever ``cfg`` asks for: HTTP when ``retrieval.url`` is set, else in-process
    (``method`` overrides ``retrieval.method``), building the index first when ``build``.
    ``use_gpu``: where a dense index is searched (``auto``: the GPUs when its shards fit)."""
    retriever = _build_retriever(cfg, method, build, use_gpu)
    # The agent's observations hold the profile's top-k, as the demonstrations do.
    retriever.default_topk = cfg.retrieval.topk
    return retriever


def _build_retriever(
    cfg: "ProfileConfig", method: str | None, build: bool, use_gpu: bool | str
) -> Retriever:
    rcfg = cfg.retrieval
    if rcfg.url:
        return HTTPRetriever(rcfg.url, timeout=rcfg.timeout_s, retries=rcfg.retries)
    method = method or rcfg.method
    folders = ensure_index(cfg, (method,)) if build else index_dirs(cfg)
    corpus_path = profile_corpus_path(cfg)
    if method == "dense":
        return DenseRetriever(
            folders["dense"],
            corpus_path,
            EncoderSpec.from_config(rcfg),
            batch_size=rcfg.batch_size,
            device=rcfg.device,
            fp16=rcfg.fp16,
            prebuilt=rcfg.prebuilt,
            use_gpu=use_gpu,
        )
    if method == "bm25":
        return BM25Retriever(folders["bm25"], corpus_path)
    raise ValueError(f"retrieval.method must be one of {METHODS}, got {method!r}")
