"""The sha256 of a file, read in 1 MiB blocks (bounded memory for multi-GB weights and indexes).

Records that must prove which bytes they describe (a warm start's file list, an index build's
manifest, a study's cache key) all hash files the same way, here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK_BYTES = 1 << 20


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()
