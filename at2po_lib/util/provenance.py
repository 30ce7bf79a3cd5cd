"""Provenance: every number in a table or figure traces back to a profile, a seed, a git
revision, the function that wrote it and the command that ran it. ``run_metadata`` is written
beside each result (``*.meta.json``):

- ``writer``: the function that made the result, as ``module:qualname``
  (``at2po_lib.reporting.table1:table1``), given by the caller or else the function that called
  :func:`run_metadata` (helpers that only format or write are skipped, :data:`_HELPERS`);
- ``command``: how it was run: the ``at2po`` command line (:mod:`at2po_lib.cli` records it in
  ``AT2PO_COMMAND``, which notebooks run by ``at2po run-notebooks`` inherit), else this
  process's own command line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .paths import recorded_paths_in, repo_root
from .writing import all_or_none, write_if_changed

# Imported inside the functions that use them: torch; every command imports this module, and torch
# (~1 s) loads only when the hardware is recorded.

_PACKAGES = ("torch", "transformers", "trl", "peft", "faiss-cpu", "bm25s", "numpy", "vllm")


OUTPUT_PATHS = ("results", "figures", "README.md", "docs/toy_study.md")
"""What the stages write (records, tables, figures, the documents' generated blocks): edits
there do not change the code that produced a result, so they do not make a revision dirty."""


TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
"""How records write a time (``created``, a block's ``started`` and ``finished``)."""


STARTUP_HOOKS = ("sitecustomize", "usercustomize")
"""Modules Python's ``site`` runs at start-up from anywhere on the path, before any of the
project's code: one there can change what runs without changing a tracked file."""


def code_tree() -> Path:
    """The folder the imported ``at2po_lib`` comes from: the code that runs, which is not the
    working directory's checkout when an environment of another checkout is active."""
    return Path(__file__).resolve().parents[2]  # at2po_lib/util/provenance.py -> the tree


def startup_hooks() -> list[Path]:
    """The :data:`STARTUP_HOOKS` files found on ``sys.path`` (run at start-up)."""
    found = []
    for name in STARTUP_HOOKS:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            found.append(Path(spec.origin))
    return found


def git_revision() -> str:
    """The commit of the code that runs (:func:`code_tree`), with ``-dirty`` when tracked files
    other than :data:`OUTPUT_PATHS` have uncommitted changes (the code differs from the commit)
    or a start-up hook is on the path (:func:`startup_hooks`), or ``unknown``."""
    return revision_of(code_tree())


def revision_of(tree: Path) -> str:
    """:func:`git_revision` of the checkout ``tree``."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                *(f":(exclude){path}" for path in OUTPUT_PATHS),
            ],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("-dirty" if dirty or startup_hooks() else "")


def code_mismatch() -> str | None:
    """Why the code that runs is not the working tree's (:func:`repo_root`, where results are
    written), or None: one folder, or two checkouts at one clean commit. A result must name the
    code that made it, and a checkout's records must be made by that checkout's code."""
    here, code = repo_root().resolve(), code_tree()
    if here == code:
        return None
    ours, theirs = revision_of(here), revision_of(code)
    if ours == theirs and ours != "unknown" and not ours.endswith("-dirty"):
        return None
    return (
        f"the code that runs (at2po_lib from {code}, revision {theirs}) is not this checkout's "
        f"({here}, revision {ours}): activate this checkout's environment "
        "(source .venv/bin/activate) or run from the checkout whose code is imported"
    )


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def hardware() -> dict[str, Any]:
    """Where a result was computed: CPU count, torch threads, the GPU if any (``meta.json``
    of training runs and of the Table 1 study). Imports torch."""
    import torch

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    return info


_ARCHITECTURES = ("x86_64", "amd64", "aarch64", "arm64", "i686", "ppc64le", "s390x")


def machine_build(platform_name: str) -> str:
    """The machine build a ``platform`` record names: the local part of its kernel release
    (``Linux-6.18.44-fc-v669-x86_64-with-glibc2.36`` → ``fc-v669``), the build the
    reproduction records compare (``results/tiny/reproduction/``). Float kernels differ between
    builds, so one seed gives another run on another build. A release without a local part
    gives the whole release; a string of another form is returned as it is."""
    parts = platform_name.split("-")
    arch = next((i for i, part in enumerate(parts) if part in _ARCHITECTURES), None)
    if arch is None or arch < 2:
        return platform_name
    release = parts[1:arch]  # ['6.18.44', 'fc', 'v669']
    return "-".join(release[1:]) or release[0]


COMMAND_ENV = "AT2PO_COMMAND"
"""Environment variable holding the ``at2po`` command line that runs this process (set by
:func:`at2po_lib.cli.main`; inherited by the notebooks ``at2po run-notebooks`` executes)."""
_HELPERS = {
    ("at2po_lib.util.provenance", "run_metadata"),
    ("at2po_lib.reporting.output", "source_meta"),
    ("at2po_lib.evaluation.greedy", "write_eval"),
}
"""Functions that only collect or write a meta: the writer is whoever called them."""


def function_name(function: Any) -> str:
    """``module:qualname`` of a function (``at2po_lib.reporting.table1:table1``)."""
    return f"{function.__module__}:{function.__qualname__}"


def current_command() -> str:
    """The ``at2po`` command running this process, else the process's command line."""
    if os.environ.get(COMMAND_ENV):
        return os.environ[COMMAND_ENV]
    program = Path(sys.argv[0])
    name = f"python -m {program.parent.name}" if program.name == "__main__.py" else program.name
    return " ".join([name, shlex.join(sys.argv[1:])]).strip()


def calling_function() -> str:
    """``module:qualname`` of the first caller outside :data:`_HELPERS` (notebook cells are
    ``__main__:<module>``)."""
    frame = inspect.currentframe()
    while frame is not None:
        module = frame.f_globals.get("__name__", "?")
        if (module, frame.f_code.co_name) not in _HELPERS and module != __name__:
            return f"{module}:{frame.f_code.co_qualname}"
        frame = frame.f_back
    return "unknown"


def run_metadata(
    profile: str,
    seed: int | None = None,
    config: Any = None,
    *,
    writer: Any = None,
    command: str | None = None,
    **extra: Any,
) -> dict:
    """Everything needed to trace a result: profile, seed, git revision, the writing function
    and command (module docstring), config, versions. ``writer``: a function or its name."""
    if is_dataclass(config):
        config = asdict(config)
    if writer is None:
        writer = calling_function()
    return {
        "profile": profile,
        "seed": seed,
        "writer": writer if isinstance(writer, str) else function_name(writer),
        "command": recorded_paths_in(command or current_command()),
        "git_revision": git_revision(),
        "created": time.strftime(TIME_FORMAT),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "config": config,
        **extra,
    }


VOLATILE_META_KEYS = ("created", "git_revision", "platform", "command")
"""Meta fields that change on every run or machine without the result changing (the same result
comes from ``./run_all.sh``, ``at2po run-notebooks --only 05`` or ``at2po report``: a kept meta
names a command that produced exactly these bytes)."""


def meta_path_of(result_path: str | Path) -> Path:
    """``<result>.meta.json``: where :func:`write_meta` keeps a result's provenance."""
    result_path = Path(result_path)
    return result_path.with_name(result_path.name + ".meta.json")


def read_meta(result_path: str | Path) -> dict:
    """The provenance :func:`write_meta` wrote beside a result; {} when there is none. A meta
    file that is not a JSON object is an error naming it (a record must not lose its source
    silently)."""
    path = meta_path_of(result_path)
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not readable JSON ({err})") from err
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: holds {type(meta).__name__}, not an object")
    return meta


def write_meta(result_path: str | Path, meta: dict) -> Path:
    """Write ``<result>.meta.json`` beside a result file and return its path.

    The meta records the result's sha256. If the existing meta describes the same bytes and
    differs only in :data:`VOLATILE_META_KEYS`, it is kept as it is: re-running a deterministic
    stage on a clean checkout then leaves ``git status`` clean, and the kept meta still names a
    revision that produced exactly these bytes.
    """
    result_path = Path(result_path)
    meta_path = meta_path_of(result_path)
    if result_path.is_file():
        meta = {**meta, "result_sha256": hashlib.sha256(result_path.read_bytes()).hexdigest()}
    text = json.dumps(meta, indent=2, default=str) + "\n"
    if meta_path.is_file():
        try:
            old = json.loads(meta_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            old = None  # a broken meta file is replaced
        if isinstance(old, dict) and _stable_fields(old) == _stable_fields(json.loads(text)):
            return meta_path
    write_if_changed(meta_path, text)  # undone with the result inside writing.all_or_none
    return meta_path


def _stable_fields(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k not in VOLATILE_META_KEYS}


def write_csv_tables(folder: str | Path, frames: dict[str, Any], meta: dict) -> dict[str, Path]:
    """Each ``name -> DataFrame`` as ``folder/name`` (CSV, 4 decimals) with ``meta`` beside it
    (:func:`write_meta`), all or none (each file whole; a failure half-way puts back the ones
    already written); returns the paths by name."""
    paths = {}
    with all_or_none():
        for name, frame in frames.items():
            path = Path(folder) / name
            write_if_changed(path, frame.to_csv(index=False, float_format="%.4f"))
            write_meta(path, meta)
            paths[name] = path
    return paths
