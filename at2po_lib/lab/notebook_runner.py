"""Run the numbered notebooks headless with papermill, in order, under one profile.

``at2po run-notebooks`` (:mod:`at2po_lib.cli.run_notebooks`; ``./run_all.sh`` calls it) runs
:func:`run_notebooks`. Each stage (notebook) is skipped when its executed copy is
up to date: the stamp beside it records a hash of the notebook, the resolved profile, the
library's sources and the stamps of all earlier stages, so a change anywhere upstream re-runs
everything downstream of it. ``--force`` re-runs regardless.

If a notebook fails, the run stops with exit status 1 and names the notebook and the failing
cell; the executed copy (with the traceback) is kept, and so is everything earlier stages made.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config.profile import load_profile
from ..util.paths import repo_root, results_dir

# Imported inside the functions that use them: nbformat, papermill, traitlets, jupyter_client; the
# notebook stack loads only when notebooks run.


KERNEL_NAME = "at2po"
"""The Jupyter kernel every notebook names: this environment, registered by scripts/bootstrap.sh."""


@dataclass
class StageResult:
    notebook: Path
    status: str  # "ran", "skipped" or "failed"
    seconds: float = 0.0
    message: str = ""


def list_notebooks(notebooks_dir: Path, only: list[str] | None = None) -> list[Path]:
    """Numbered notebooks (``NN_name.ipynb``) in order; ``only`` keeps the given prefixes."""
    found = sorted(p for p in notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if only is not None and not [o for o in only if o.strip()]:  # e.g. --only ",,,"
        raise ValueError(f"--only names no notebook (got {only!r}); give prefixes such as 00,01")
    if only:
        unknown = [o for o in only if not any(p.name.startswith(o) for p in found)]
        if unknown:
            names = ", ".join(p.name for p in found)
            raise ValueError(f"--only {','.join(unknown)}: no such notebook (have: {names})")
        found = [p for p in found if any(p.name.startswith(o) for o in only)]
    return found


def library_fingerprint(root: Path) -> str:
    """Hash of every library source file: a code change invalidates executed notebooks."""
    digest = hashlib.sha256()
    for path in sorted((root / "at2po_lib").rglob("*")):
        if path.suffix in {".py", ".yaml", ".json", ".jinja"} and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def stage_stamp(notebook: Path, profile_json: str, lib_hash: str, upstream: str) -> str:
    digest = hashlib.sha256()
    for part in (
        notebook.read_bytes(),
        profile_json.encode(),
        lib_hash.encode(),
        upstream.encode(),
    ):
        digest.update(part)
    return digest.hexdigest()


def _unreadable(notebook: Path) -> str | None:
    """Why ``notebook`` is not a readable notebook file (None when it is)."""
    import nbformat

    try:
        nbformat.validate(nbformat.read(notebook, as_version=4))
    except Exception as exc:  # nbformat raises JSON, validation and version errors
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"{type(exc).__name__}: {first[:200]}"
    return None


def _failure_message(exc: Exception, notebook: Path) -> str:
    """Name the failing cell by its index in the *original* notebook (papermill's index counts
    the injected-parameters cell too), plus its execution count."""
    cell = getattr(exc, "cell_index", None)
    source = getattr(exc, "source", None)
    if source is not None:
        import nbformat

        cells = nbformat.read(notebook, as_version=4).cells
        matches = [i for i, c in enumerate(cells) if c.source == source]
        if matches:
            cell = matches[0]
    exec_count = getattr(exc, "exec_count", None)
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    where = f"cell {cell}" if cell is not None else "an unknown cell"
    if exec_count is not None:
        where += f" (execution count {exec_count})"
    return f"{where}: {ename}: {evalue}"


def run_notebooks(
    profile: str,
    only: list[str] | None = None,
    force: bool = False,
    notebooks_dir: Path | None = None,
    out_dir: Path | None = None,
    kernel_name: str = KERNEL_NAME,
    retrain: bool = False,
    overrides: dict | None = None,
) -> list[StageResult]:
    """Execute the notebooks in order; stops at the first failure (its result is last).

    Every notebook gets the parameters ``profile``, ``overrides`` (nested profile values, what
    ``--set`` gives; part of the stage stamps) and ``retrain`` (re-run committed training runs
    and the warm start instead of reusing them; implies re-running every stage).

    Each stage's measured time goes to ``timings.json`` beside the executed copies (not in git;
    ``docs/timings.yaml`` holds the times the notebooks and docs/setup.md quote)."""
    import papermill

    check_kernel(kernel_name)

    root = repo_root()
    overrides = dict(overrides or {})
    # unknown profile or key: an error naming it, before any work
    cfg = load_profile(profile, overrides or None)
    profile_json = json.dumps({"config": cfg.to_dict(), "retrain": retrain}, sort_keys=True)
    force = force or retrain
    notebooks_dir = notebooks_dir or root / "notebooks"
    out_dir = out_dir or results_dir("executed", cfg.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    lib_hash = library_fingerprint(root)

    results: list[StageResult] = []
    upstream = ""
    for notebook in list_notebooks(notebooks_dir, only):
        output = out_dir / notebook.name
        stamp_path = out_dir / f"{notebook.stem}.stamp"
        stamp = stage_stamp(notebook, profile_json, lib_hash, upstream)
        upstream += stamp
        if (
            not force
            and output.exists()
            and stamp_path.exists()
            and stamp_path.read_text() == stamp
        ):
            print(f"[{cfg.name}] {notebook.name}: up to date, skipped", flush=True)
            results.append(StageResult(notebook, "skipped"))
            continue
        print(f"[{cfg.name}] {notebook.name}: running ...", flush=True)
        stamp_path.unlink(missing_ok=True)
        started, load = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load_average()
        start = time.perf_counter()
        try:
            with _local_kernel() as kernel_args:
                papermill.execute_notebook(
                    str(notebook),
                    str(output),
                    parameters=_declared(
                        notebook, {"profile": cfg.name, "overrides": overrides, "retrain": retrain}
                    ),
                    kernel_name=kernel_name,
                    cwd=str(root),
                    progress_bar=False,
                    **kernel_args,
                )
        except Exception as exc:  # papermill wraps cell errors; anything else is a failure too
            unreadable = _unreadable(notebook)
            message = (
                f"the notebook file cannot be read ({unreadable})"
                if unreadable
                else _failure_message(exc, notebook)
            )
            shown = notebook.relative_to(root) if notebook.is_relative_to(root) else notebook
            where = (
                f"  executed copy with the traceback: {output}"
                if output.exists() and not unreadable
                else f"  no executed copy was written; fix {notebook} (e.g. restore it with git)"
            )
            print(f"[{cfg.name}] FAILED {shown}: {message}\n{where}", file=sys.stderr, flush=True)
            results.append(StageResult(notebook, "failed", time.perf_counter() - start, message))
            return results
        seconds = time.perf_counter() - start
        stamp_path.write_text(stamp)
        print(f"[{cfg.name}] {notebook.name}: done in {seconds:.1f} s", flush=True)
        results.append(StageResult(notebook, "ran", seconds))
        record_timing(out_dir / "timings.json", notebook.stem, seconds, started, load)
    return results


@contextlib.contextmanager
def _local_kernel() -> Iterator[dict]:
    """papermill arguments that make the kernel talk over Unix sockets in a private temporary
    folder (POSIX): the kernel opens no TCP port (its channels, and through
    :mod:`at2po_lib.util.unix_kernel` ipykernel's pipe for forked subprocesses, are sockets in the
    folder), and ipykernel >= 7 has no unencrypted TCP traffic to warn about. nbclient still
    creates, owns and shuts down the kernel. Elsewhere: no arguments (papermill's default TCP
    kernel)."""
    if os.name != "posix":
        yield {}
        return
    from traitlets.config import Config

    with tempfile.TemporaryDirectory(prefix="at2po-kernel-") as folder:
        yield {
            "config": Config(
                {"KernelManager": {"transport": "ipc", "ip": os.path.join(folder, "kernel")}}
            ),
            # named, not imported: ipykernel loads IPython, which `at2po` itself never needs
            "kernel_manager_class": "at2po_lib.util.unix_kernel.UnixKernelManager",
        }


def _declared(notebook: Path, parameters: dict) -> dict:
    """The parameters a notebook's ``parameters`` cell declares (``profile`` always): a notebook
    that trains nothing has no ``retrain``, and papermill would warn about every extra one."""
    import papermill

    declared = set(papermill.inspect_notebook(str(notebook)))
    return {k: v for k, v in parameters.items() if k == "profile" or k in declared}


def check_kernel(kernel_name: str) -> None:
    """Fail early, naming the fix, when ``kernel_name`` is missing or runs another Python
    (papermill would run the notebooks in whatever environment that kernel points to)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    fix = (
        f"run scripts/bootstrap.sh, or `{sys.executable} -m ipykernel install --sys-prefix "
        f"--name {kernel_name}`"
    )
    try:
        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel:
        raise ValueError(f"no Jupyter kernel named {kernel_name!r}: {fix}") from None
    python = Path(spec.argv[0]) if spec.argv else None
    # Folders compared resolved: a venv reached through a symlink (~/venvs/at2po -> /data/...)
    # is the same environment. Not the interpreters themselves: every venv's python links to
    # the same base interpreter.
    if (
        kernel_name == KERNEL_NAME
        and python is not None
        and not _same_folder(python.parent, Path(sys.executable).parent)
    ):
        raise ValueError(
            f"the Jupyter kernel {kernel_name!r} runs {python}, not this environment's "
            f"{sys.executable}: {fix}"
        )


def _same_folder(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def record_timing(
    path: Path,
    stage: str,
    seconds: float,
    started: str | None = None,
    load_average: float | None = None,
) -> None:
    """Add one stage's measurement to ``timings.json``: ``{stage: {"seconds", "started",
    "load_average", "cpus"}}``, what ``python -m at2po_lib.util.timings --update PROFILE``
    copies into ``docs/timings.yaml``. ``load_average`` is the 1-minute load when the stage
    started: a wall time means little without the load it ran under."""
    timings = json.loads(path.read_text()) if path.is_file() else {}
    timings[stage] = {
        "seconds": round(seconds, 1),
        "started": started,
        "load_average": None if load_average is None else round(load_average, 2),
        "cpus": os.cpu_count(),
    }
    path.write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")


def load_average() -> float | None:
    """The 1-minute load average (None where the system has none, e.g. Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
