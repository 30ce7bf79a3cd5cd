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
