"""The engines tier's guard (tests/test_engines_*.py): a module whose engine is missing skips,
saying how to run it, except inside ``./run_tests.sh --engines`` (``AT2PO_ENGINES=1``), where a
missing engine fails the tier instead of letting it pass on nothing."""

from __future__ import annotations

import os

import pytest


def require_engine(what: str, installed: bool) -> None:
    """Skip the calling test module (or fail the tier) when ``what`` is not ``installed``."""
    if installed:
        return
    if os.environ.get("AT2PO_ENGINES") == "1":
        raise RuntimeError(
            f"the engines tier runs without {what}: scripts/bootstrap_engines.sh did not install it"
        )
    pytest.skip(
        f"{what} is not installed: the engines tier runs with ./run_tests.sh --engines",
        allow_module_level=True,
    )
