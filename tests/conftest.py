"""Shared test setup: never touch the HF hub, and keep test artefacts out of the checkout."""

from __future__ import annotations

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture()
def isolated_outputs(tmp_path, monkeypatch) -> Path:
    """Send artefacts, results and figures of a test to a temporary folder."""
    monkeypatch.setenv("AT2PO_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("AT2PO_FIGURES", str(tmp_path / "figures"))
    return tmp_path


# A 20-passage wiki-18 corpus and its dense index (the offline MiniLM encoder, 32 tokens), shared
# by the index tests of every module that asks (tests read it or copy it, never change it): built
# once per session, not once per module (each build loads the encoder and embeds the corpus).
WIKI18_SAMPLE = FIXTURES / "wiki18_sample.jsonl"


@pytest.fixture(scope="session")
def corpus20(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "wiki20.jsonl"
    path.write_text("".join(WIKI18_SAMPLE.read_text().splitlines(keepends=True)[:20]))
    return path


@pytest.fixture(scope="session")
def dense_dir(tmp_path_factory, corpus20) -> Path:
    from at2po_lib.retrieval.dense import build_dense_index
    from at2po_lib.retrieval.encoders import EncoderSpec

    folder = tmp_path_factory.mktemp("dense") / "index"
    build_dense_index(corpus20, folder, EncoderSpec(max_length=32), shard_size=10, progress=False)
    return folder


@pytest.fixture(scope="module")
def smoke_toy(tmp_path_factory):
    """A smoke TinyWorld, its BM25 retriever, a trained tokenizer and a tag-biased random tiny
    Qwen3 (``ToySetup``), built once per module in its own artifacts folder, one torch thread."""
    import torch

    from at2po_lib.rollout.stand_ins import ToySetup

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AT2PO_ARTIFACTS", str(tmp_path_factory.mktemp("artifacts")))
        torch.set_num_threads(1)  # a tiny model on shared cores: one thread is fastest
        yield ToySetup("smoke", seed=0)
