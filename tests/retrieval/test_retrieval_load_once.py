"""Issue #36, part 4: the retriever reads its faiss file once (memory-mapped; the prebuilt check
reads counts only), and a Flat index goes to the GPUs only when its shards fit their free
memory, else it is searched on the CPU with a warning that gives the sizes. faiss-cpu runs here:
the GPU side is simulated (a device count, a memory budget, a cloner that records its call)."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import faiss
import numpy as np
import pytest

from at2po_lib.config.profile import load_profile
from at2po_lib.retrieval import dense
from at2po_lib.retrieval.base import IndexMismatchError, RetrievalError
from at2po_lib.retrieval.dense import (
    FAISS_GPU_SCRATCH_BYTES,
    DenseIndex,
    faiss_header,
    place_flat_index,
)
from at2po_lib.retrieval.indexes import build_retriever, ensure_index

GIB = 2**30
WIKI18 = 21_015_324


# corpus20 and dense_dir (the 20-passage corpus and its dense index): tests/conftest.py


@pytest.fixture()
def counting_reader(monkeypatch):
    """``faiss.read_index`` that counts its calls and records their flags."""
    calls: list[int] = []
    real = faiss.read_index

    def read_index(path, flags=0):
        calls.append(flags)
        return real(path, flags)

    monkeypatch.setattr(faiss, "read_index", read_index)
    return calls


def _downloaded(dense_dir: Path, tmp_path: Path) -> Path:
    """A folder holding only the index's faiss file, as Search-R1's download does."""
    download = tmp_path / "download"
    download.mkdir()
    shutil.copy(dense_dir / "index.faiss", download / "e5_Flat.index")
    return download


def _prebuilt_profile(corpus: Path, folder: Path):
    return load_profile(
        "smoke",
        {
            "retrieval": {
                "method": "dense",
                "corpus": str(corpus),
                "index_dir": str(folder),
                "prebuilt": True,
                "max_length": 32,
                "topk": 3,
            }
        },
    )


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_a_prebuilt_index_is_read_once_memory_mapped(
    dense_dir, corpus20, tmp_path, counting_reader, isolated_outputs
):
    download = _downloaded(dense_dir, tmp_path)
    cfg = _prebuilt_profile(corpus20, download)
    ensure_index(cfg, ("dense",), progress=False)  # `at2po index --prebuilt`: counts only
    assert counting_reader == []
    retriever = build_retriever(cfg, use_gpu=False)
    assert len(counting_reader) == 1  # one read, by the retriever that serves it
    assert counting_reader[0] & faiss.IO_FLAG_MMAP_IFC
    hits = retriever.search(["Who wrote the book?"], topk=3)
    assert len(hits[0]) == 3 and retriever.describe()["passages"] == 20


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_the_prebuilt_check_compares_counts_from_the_header(
    dense_dir, corpus20, tmp_path, counting_reader, isolated_outputs
):
    download = _downloaded(dense_dir, tmp_path)
    short = tmp_path / "short.jsonl"
    short.write_text("".join(corpus20.read_text().splitlines(keepends=True)[:12]))
    with pytest.raises(IndexMismatchError, match="20 vectors.*12 passages"):
        ensure_index(_prebuilt_profile(short, download), ("dense",), progress=False)
    data = (download / "e5_Flat.index").read_bytes()
    (download / "e5_Flat.index").write_bytes(data[:-100])
    with pytest.raises(RetrievalError, match="e5_Flat.index: a Flat index of 20 x 384 is"):
        ensure_index(_prebuilt_profile(corpus20, download), ("dense",), progress=False)
    assert counting_reader == []


def test_faiss_header_by_hand(tmp_path):
    x = np.random.default_rng(0).random((30, 8), dtype=np.float32)
    flat, hnsw = faiss.IndexFlatIP(8), faiss.IndexHNSWFlat(8, 4, faiss.METRIC_INNER_PRODUCT)
    for index, name in ((flat, "flat.index"), (hnsw, "hnsw.index")):
        index.add(x)
        faiss.write_index(index, str(tmp_path / name))
    assert faiss_header(tmp_path / "flat.index") == dense.FaissHeader("IxFI", 8, 30)
    assert (tmp_path / "flat.index").stat().st_size == 45 + 30 * 8 * 4
    assert faiss_header(tmp_path / "hnsw.index") == dense.FaissHeader("IHNf", 8, 30)
    (tmp_path / "junk.index").write_bytes(b"\x00\x01" * 4)
    with pytest.raises(RetrievalError, match="junk.index: not a faiss index"):
        faiss_header(tmp_path / "junk.index")
    (tmp_path / "bad.index").write_bytes(struct.pack("<4siq", b"IxFI", -3, 5) + b"\0" * 40)
    with pytest.raises(RetrievalError, match="bad.index: not a faiss index"):
        faiss_header(tmp_path / "bad.index")


# ---------------------------------------------------------------- GPU placement
def test_placement_by_hand():
    # wiki-18 x 768 in fp16 = 32,279,537,664 B = 30.06 GiB; + 1.5 GiB scratch
    need = WIKI18 * 768 * 2
    assert need == 32_279_537_664
    assert place_flat_index(WIKI18, 768, [78 * GIB]).gpus == 1  # an 80 GB card, idle
    one = place_flat_index(WIKI18, 768, [24 * GIB])  # a 24 GB card
    assert one.gpus == 0 and "needs 30.1 GiB in fp16 on each of 1 GPU(s)" in one.message
    assert "GPU 0 has 24.0 GiB free; searching it on the CPU" in one.message
    eight = place_flat_index(WIKI18, 768, [40 * GIB] * 8)  # 3.76 GiB shards
    assert eight.gpus == 8 and "3.8 GiB each" in eight.message
    busy = place_flat_index(WIKI18, 768, [40 * GIB] * 7 + [need / 8 + FAISS_GPU_SCRATCH_BYTES - 1])
    assert busy.gpus == 0 and "GPU 7 has" in busy.message
    assert place_flat_index(WIKI18, 768, []).gpus == 0


@pytest.fixture()
def one_simulated_gpu(monkeypatch):
    """faiss sees one GPU; cloning to it records the call and keeps the CPU index."""
    clones: list[int] = []

    def to_gpus(index, gpus=-1):
        clones.append(gpus)
        return index

    monkeypatch.setattr(dense, "gpus_available", lambda: 1)
    monkeypatch.setattr(dense, "to_gpus", to_gpus)
    return clones


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_one_gpu_too_small_for_the_index_falls_back_to_the_cpu(dense_dir, one_simulated_gpu):
    size = 20 * 384 * 2  # the index's fp16 bytes
    with pytest.warns(RuntimeWarning, match="GPU 0 has .* free; searching it on the CPU"):
        small = DenseIndex.load(
            dense_dir, use_gpu=True, gpu_budget=lambda: [size + FAISS_GPU_SCRATCH_BYTES - 1]
        )
    assert one_simulated_gpu == [] and "on the CPU" in small.placement
    scores, rows = small.search(np.ones((1, 384), dtype=np.float32), 2)
    assert rows.shape == (1, 2)
    roomy = DenseIndex.load(
        dense_dir, use_gpu=True, gpu_budget=lambda: [size + FAISS_GPU_SCRATCH_BYTES]
    )
    assert one_simulated_gpu == [1] and "sharded over 1 GPU(s)" in roomy.placement
