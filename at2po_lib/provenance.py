"""Provenance: every number in a table or figure traces back to a profile, a seed and a git
revision. ``run_metadata`` is written beside each result (``*.meta.json``)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .paths import repo_root

_PACKAGES = ("torch", "transformers", "trl", "peft", "faiss-cpu", "bm25s", "numpy", "vllm")


def git_revision() -> str:
    """Current commit (with ``-dirty`` when the tree has uncommitted changes), or ``unknown``."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True, text=True,
            check=True, timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_root(),
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def run_metadata(profile: str, seed: int | None = None, config: Any = None, **extra: Any) -> dict:
    """Everything needed to trace a result: profile, seed, git revision, config, versions."""
    if is_dataclass(config):
        config = asdict(config)
    return {
        "profile": profile,
        "seed": seed,
        "git_revision": git_revision(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "config": config,
        **extra,
    }


def write_meta(result_path: str | Path, meta: dict) -> Path:
    """Write ``<result>.meta.json`` beside a result file and return its path."""
    result_path = Path(result_path)
    meta_path = result_path.with_name(result_path.name + ".meta.json")
    meta_path.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return meta_path
