r"""Run directories, per-step records and resumable checkpoints.

Every training run owns one folder (small files kept by git, checkpoints ignored)::

    results/runs/<profile>/<method>/seed<S>/
        config.yaml        the effective settings (profile, preset, --set applied) and their sources
        meta.json          provenance: git revision, versions, hardware (run_metadata)
        metrics.jsonl      one row per rollout step: every metric TRL and AT2POTrainer log, under
                           the names they log it (``reward``, ``entropy``,
                           ``clip_ratio/region_mean``, ``rollout/turns_mean``, ...), plus
                           ``step``, ``global_step`` and ``wall_time`` (TRL's
                           ``completions/clipped_ratio`` counts completions without EOS and
                           reads 1.0 for the agent, which stops at a stop string;
                           ``rollout/answered`` is the share of leaves that answered)
        eval.jsonl         one row per (validation step, dataset): greedy EM
        final_eval.csv     greedy EM of the final policy on the test sets (Table 1's cells)
        outcomes.csv       one row per test question: prediction, EM, F1, turns, searches,
                           finish reason, sampled EM (every CI rests on these)
        DONE.json          written last: the run finished (config hash, wall time, summary)
        trees/             the rollout trees of the first and last rollout step
                           (``step<S>.npz``: every node's entropy summaries and decision label)
        checkpoints/       TRL checkpoints (git-ignored); a COMPLETE marker inside each one
                           that finished writing
        tensorboard/       TRL's ``report_to`` logs (git-ignored)

Atomicity: TRL writes ``checkpoint-N/`` file by file, so a run killed mid-save leaves a partial
folder. The COMPLETE marker is written (by write-to-temp + rename) only after the save returned;
resuming considers only marked checkpoints and deletes the others. Records are appended one
JSON line at a time and flushed; on resume, rows beyond the checkpoint's step are dropped
(:func:`truncate_jsonl`), so a killed-and-resumed run ends with exactly the rows of an
uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..config.profile import load_profile
from ..util.errors import ProfileError
from ..util.paths import results_dir
from ..util.storage import atomic_write, reported_writes

COMPLETE_MARKER = "COMPLETE"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True)
class RunDir:
    """Paths of one run (profile, method, seed)."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def meta(self) -> Path:
        return self.root / "meta.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def eval(self) -> Path:
        return self.root / "eval.jsonl"

    @property
    def final_eval(self) -> Path:
        return self.root / "final_eval.csv"

    @property
    def outcomes(self) -> Path:
        """Per-question outcomes of the final evaluation (:func:`at2po_lib.record.outcomes.write_outcomes`)."""
        return self.root / "outcomes.csv"

    @property
    def done(self) -> Path:
        return self.root / "DONE.json"

    @property
    def trees(self) -> Path:
        """Rollout trees of chosen steps (:class:`at2po_lib.trainer.callbacks.TreeRecord`)."""
        return self.root / "trees"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    def files(self) -> dict[str, Path]:
        """What lives where (notebook 04 prints this)."""
        return {
            name: getattr(self, name)
            for name in (
                "config",
                "meta",
                "metrics",
                "eval",
                "final_eval",
                "outcomes",
                "done",
                "trees",
                "checkpoints",
                "tensorboard",
            )
        }


def run_dir(profile: str, method: str, seed: int) -> RunDir:
    """``results/runs/<profile>/<method>/seed<S>/`` (created); ``profile`` is
    :func:`run_profile_key` for a training run."""
    return RunDir(results_dir("runs", profile, method, f"seed{seed}"))


def run_profile_key(profile_cfg: Any) -> str:
    """The profile part of a run folder: the profile's name, or ``<name>@<datasets>`` when the
    run trains on other datasets than the profile file declares (``--set
    train.train_datasets=[nq]`` on a HotpotQA profile), so that a single-hop and a multi-hop
    run never share a folder. A profile given as a YAML path outside configs/ keys by its name."""
    name, trained = profile_cfg.name, list(profile_cfg.train.train_datasets)
    try:
        declared = list(load_profile(name).train.train_datasets)
    except ProfileError:
        return name
    return name if trained == declared else f"{name}@{'+'.join(trained)}"


# ------------------------------------------------------------------------- resolved config
PROVENANCE_KEYS = ("sources",)
"""Keys of a run's record that say where its settings came from, not what they are: left out of
its hash (the same settings reached by ``--set`` or by a profile file are the same run)."""


def config_hash(resolved: dict[str, Any]) -> str:
    """Stable hash of a resolved configuration (keys sorted, JSON), less its provenance
    (:data:`PROVENANCE_KEYS`)."""
    kept = {k: v for k, v in resolved.items() if k not in PROVENANCE_KEYS}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_config(run: RunDir, resolved: dict[str, Any]) -> None:
    atomic_write(run.config, yaml.safe_dump(_plain(resolved), sort_keys=False))


def _plain(value: Any) -> Any:
    """YAML-safe copy: tuples to lists, unknown objects to strings, NaN kept as .nan."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def is_finished(run: RunDir, resolved_hash: str | None = None) -> bool:
    """Did this run finish (and, if a hash is given, with the same resolved config)?"""
    if not run.done.is_file():
        return False
    if resolved_hash is None:
        return True
    try:
        return json.loads(run.done.read_text()).get("config_hash") == resolved_hash
    except json.JSONDecodeError:
        return False


def mark_finished(run: RunDir, resolved_hash: str, **summary: Any) -> None:
    atomic_write(
        run.done,
        json.dumps({"config_hash": resolved_hash, **summary}, indent=2, default=str) + "\n",
    )


def clear_run(run: RunDir) -> None:
    """Remove the records and checkpoints of a run (a fresh start, ``force``)."""
    for path in (run.metrics, run.eval, run.final_eval, run.done, run.meta, run.config):
        path.unlink(missing_ok=True)
    for folder in (run.checkpoints, run.tensorboard, run.trees):
        shutil.rmtree(folder, ignore_errors=True)


# -------------------------------------------------------------------------------- JSONL
def _json_safe(value: Any) -> Any:
    """NaN/inf become None (JSON has no NaN); tensors/numpy scalars become floats."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append one row and flush it to disk (a crash loses at most the row being written)."""
    line = json.dumps({k: _json_safe(v) for k, v in row.items()}, default=str)
    with reported_writes(path), path.open("a") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: Path, torn_ok: bool = True) -> list[dict[str, Any]]:
    """Rows of a JSONL file ([] if absent); a torn last line (a crash mid-write) is skipped,
    any other bad line is an error naming the file and line. ``torn_ok=False`` (the records
    of a finished run, which no writer is appending to) refuses a torn last line as well."""
    return [row for _, row in read_jsonl_lines(path, torn_ok)]


def read_jsonl_lines(path: Path, torn_ok: bool = True) -> list[tuple[int, Any]]:
    """:func:`read_jsonl` with each row's line number (1-based; blank lines are skipped, so a
    row's index is not its line)."""
    if not path.is_file():
        return []
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}): a damaged record") from None
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append((i + 1, json.loads(line)))
        except (ValueError, RecursionError) as exc:  # bad JSON, too deep, too long a number
            if i == len(lines) - 1 and torn_ok:
                break
            torn = " (a torn last line: the record ends mid-write)" if i == len(lines) - 1 else ""
            raise ValueError(
                f"{path}, line {i + 1}: not valid JSON{torn} ({str(exc)[:200]})"
            ) from None
    return rows


def truncate_jsonl(path: Path, max_step: int, key: str = "step") -> int:
    """Keep only rows with ``row[key] <= max_step`` (atomic rewrite); returns rows kept."""
    rows = [r for r in read_jsonl(path) if r.get(key, -1) <= max_step]
    atomic_write(path, "".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


# -------------------------------------------------------------------------- checkpoints
def checkpoint_step(path: Path) -> int | None:
    match = _CHECKPOINT.match(path.name)
    return int(match.group(1)) if match else None


def mark_checkpoint_complete(checkpoint: Path, **info: Any) -> None:
    """Write the COMPLETE marker into a checkpoint that finished saving."""
    atomic_write(checkpoint / COMPLETE_MARKER, json.dumps(info, default=str) + "\n")


def complete_checkpoints(folder: Path) -> list[Path]:
    """Checkpoints with the COMPLETE marker, oldest first."""
    if not folder.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in folder.iterdir() if p.is_dir()]
    marked = [(s, p) for s, p in found if s is not None and (p / COMPLETE_MARKER).is_file()]
    return [p for _, p in sorted(marked)]


def latest_complete_checkpoint(folder: Path) -> Path | None:
    found = complete_checkpoints(folder)
    return found[-1] if found else None


def remove_incomplete_checkpoints(folder: Path) -> list[Path]:
    """Delete checkpoint folders without the marker (a save cut short); returns them."""
    if not folder.is_dir():
        return []
    removed = []
    for path in folder.iterdir():
        if (
            path.is_dir()
            and checkpoint_step(path) is not None
            and not (path / COMPLETE_MARKER).is_file()
        ):
            shutil.rmtree(path)
            removed.append(path)
    return removed
