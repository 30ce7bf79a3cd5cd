"""Profiles → indexes → retrievers (``ensure_index``, ``build_retriever``, ``at2po index``) on the
smoke profile's TinyWorld, with artefacts in a temporary folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from at2po_lib.cli.index import main
from at2po_lib.config.profile import load_profile
from at2po_lib.retrieval.base import RetrievalError
from at2po_lib.retrieval.bm25 import BM25Retriever
from at2po_lib.retrieval.indexes import (
    build_retriever,
    ensure_index,
    index_dirs,
    profile_corpus_path,
)
from at2po_lib.retrieval.client import HTTPRetriever
from at2po_lib.retrieval.dense import DenseRetriever
from at2po_lib.retrieval.recall import recall_at_k, retrieved_ids

FIXTURE = Path(__file__).parent.parent / "fixtures" / "wiki18_sample.jsonl"


@pytest.fixture()
def smoke(isolated_outputs):
    return load_profile("smoke", {"retrieval": {"max_length": 96}})


@pytest.mark.slow  # builds indexes
def test_ensure_index_builds_once_and_rebuilds_when_the_profile_changes(smoke, isolated_outputs):
    folders = ensure_index(smoke, ("dense", "bm25"), progress=False)
    root = isolated_outputs / "artifacts" / "smoke" / "index"
    assert folders == {"dense": root / "dense", "bm25": root / "bm25"}
    assert (
        profile_corpus_path(smoke)
        == isolated_outputs / "artifacts" / "smoke" / "world" / "corpus.jsonl"
    )
    stamps = {m: (f / "meta.json").stat().st_mtime_ns for m, f in folders.items()}
    ensure_index(smoke, ("dense", "bm25"), progress=False)  # up to date: nothing rebuilt
    assert {m: (f / "meta.json").stat().st_mtime_ns for m, f in folders.items()} == stamps
    changed = load_profile("smoke", {"retrieval": {"max_length": 64}})
    ensure_index(changed, ("dense", "bm25"), progress=False)
    assert (folders["bm25"] / "meta.json").stat().st_mtime_ns == stamps["bm25"]
    assert json.loads((folders["dense"] / "meta.json").read_text())["encoder"]["max_length"] == 64


@pytest.mark.slow  # builds indexes
def test_build_retriever_follows_the_profile(smoke, isolated_outputs):
    from at2po_lib.tinyworld.build import ensure_world, read_rows

    retriever = build_retriever(smoke)  # smoke (from tiny) searches with BM25
    assert isinstance(retriever, BM25Retriever)
    rows = read_rows(ensure_world(smoke), "tiny_nq", "test")
    queries = [r["metadata"]["hop_queries"][0] for r in rows]
    relevant = [r["metadata"]["supporting_ids"][:1] for r in rows]
    # The hop query names the entity and the relation: BM25 must find most passages in its top 3.
    assert recall_at_k(retrieved_ids(retriever, queries, 3), relevant, [3])[3] >= 0.7
    dense = build_retriever(smoke, method="dense")
    assert (
        isinstance(dense, DenseRetriever)
        and dense.describe()["passages"] == retriever.describe()["passages"]
    )


def test_a_url_gives_the_http_client(isolated_outputs):
    cfg = load_profile("smoke", {"retrieval": {"url": "http://127.0.0.1:9/retrieve", "retries": 0}})
    retriever = build_retriever(cfg)
    assert isinstance(retriever, HTTPRetriever) and retriever.url == "http://127.0.0.1:9/retrieve"
    with pytest.raises(RetrievalError, match="127.0.0.1:9/retrieve"):
        retriever.search(["x"])


def test_missing_configured_corpus_explains_the_download(isolated_outputs):
    cfg = load_profile("smoke", {"retrieval": {"corpus": "data/no-such-wiki-18.jsonl"}})
    with pytest.raises(RetrievalError, match="PeterJinGo/wiki-18-corpus"):
        profile_corpus_path(cfg)


def test_a_folder_with_a_prebuilt_faiss_file_is_the_dense_index_only_when_asked(
    isolated_outputs, tmp_path
):
    (tmp_path / "e5_Flat.index").write_bytes(b"")
    cfg = load_profile("smoke", {"retrieval": {"index_dir": str(tmp_path), "prebuilt": True}})
    assert index_dirs(cfg) == {"dense": tmp_path, "bm25": tmp_path / "bm25"}
    implicit = load_profile("smoke", {"retrieval": {"index_dir": str(tmp_path)}})
    assert index_dirs(implicit)["dense"] == tmp_path / "dense"  # never a fallback


def test_command_line(isolated_outputs, tmp_path, capsys):
    assert main(["--profile", "smoke", "--method", "bm25"]) == 0
    assert "bm25:" in capsys.readouterr().out
    assert main(["--corpus", str(FIXTURE), "--out", str(tmp_path / "bm25"), "--bm25"]) == 0
    assert "bm25 index (1000 passages)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--corpus", str(FIXTURE)])  # no --out


def test_importing_the_package_loads_no_heavy_library():
    import subprocess
    import sys

    code = (
        "import sys, at2po_lib.retrieval.base as b, at2po_lib.retrieval.recall as r; "
        "import at2po_lib.retrieval.indexes; b.Retriever; r.recall_at_k; "
        "heavy = [m for m in ('torch', 'faiss', 'transformers', 'bm25s', 'fastapi') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
