r"""Read the run folders the trainer writes, as tidy frames.

A run folder (``results/runs/<profile>/<method>/seed<S>/``, see :mod:`at2po_lib.trainer.run_folder`)
holds ``metrics.jsonl`` (one row per rollout step), ``eval.jsonl`` (validation EM per step and
dataset), ``final_eval.csv`` (greedy EM per test set) and ``outcomes.csv`` (one row per test
question: prediction, EM, F1, turns, searches, finish reason). Paper-scale runs made on a GPU
write the same files under ``results/runs/paper-<backbone>/``, so every table and figure reads
them the same way.

- :func:`discover_runs`: which (method, seed) folders exist and which finished.
- :func:`load_training_records` → ``metrics`` (method, seed, step) and ``evals`` (method, seed,
  step, dataset).
- :func:`load_final_evals` → the final greedy EM of every run (one row per dataset).
- :func:`load_outcomes` → per-question outcomes, the unit every CI in the project rests on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from ..util.paths import results_dir

if TYPE_CHECKING:
    import pandas as pd

OUTCOMES_FILE = "outcomes.csv"
"""Per-question outcomes beside a run's ``final_eval.csv``."""

_SEED_DIR = re.compile(r"^seed(\d+)$")
_OUTCOME_RENAMES = {"id": "question_id", "num_turns": "turns", "num_tool_calls": "searches"}


def runs_root(profile: str) -> Path:
    """``results/runs/<profile>/`` (not created: looking must leave no empty folders)."""
    return results_dir() / "runs" / profile


def discover_runs(profile: str, methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run folder of ``profile``: method, seed, path, finished (``DONE.json``),
    has_outcomes. Sorted by method then seed."""
    import pandas as pd

    root = runs_root(profile)
    rows = []
    method_dirs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for method_dir in method_dirs:
        if methods is not None and method_dir.name not in methods:
            continue
        for seed_dir in sorted(method_dir.iterdir()):
            match = _SEED_DIR.match(seed_dir.name)
            if not match or not seed_dir.is_dir():
                continue
            rows.append({"method": method_dir.name, "seed": int(match.group(1)),
                         "path": seed_dir, "finished": (seed_dir / "DONE.json").is_file(),
                         "has_outcomes": (seed_dir / OUTCOMES_FILE).is_file()})
    frame = pd.DataFrame(rows, columns=["method", "seed", "path", "finished", "has_outcomes"])
    return frame.sort_values(["method", "seed"], ignore_index=True)


def _runs(profile: str, methods: Iterable[str] | None, seeds: Iterable[int] | None):
    runs = discover_runs(profile, list(methods) if methods is not None else None)
    if seeds is not None:
        runs = runs[runs["seed"].isin(list(seeds))]
    if methods is not None:  # keep the caller's method order
        order = {m: i for i, m in enumerate(methods)}
        runs = runs.sort_values(["method", "seed"], key=lambda c: c.map(order) if c.name == "method"
                                else c, ignore_index=True)
    for row in runs.itertuples():
        yield row.method, row.seed, Path(row.path)


def load_training_records(profile: str, methods: Sequence[str] | None = None,
                          seeds: Sequence[int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(metrics, evals)`` of the runs that exist (missing runs are skipped)."""
    import pandas as pd

    from ..trainer.run_folder import read_jsonl, read_metrics

    metrics, evals = [], []
    for method, seed, path in _runs(profile, methods, seeds):
        tag = {"profile": profile, "method": method, "seed": seed}
        metrics += [{**tag, **row} for row in read_metrics(path / "metrics.jsonl")]
        evals += [{**tag, **row} for row in read_jsonl(path / "eval.jsonl")]
    return pd.DataFrame.from_records(metrics), pd.DataFrame.from_records(evals)


def load_final_evals(profile: str, methods: Sequence[str] | None = None,
                     seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """Concatenated ``final_eval.csv`` of every finished run (with ``method`` and ``seed``)."""
    import pandas as pd

    frames = []
    for method, seed, path in _runs(profile, methods, seeds):
        if (path / "final_eval.csv").is_file():
            frame = pd.read_csv(path / "final_eval.csv")
            frame["method"], frame["seed"] = method, seed
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def read_outcomes(path: str | Path) -> pd.DataFrame:
    """One ``outcomes.csv``, with the column names :mod:`at2po_lib.stats` expects
    (``question_id``, ``turns``, ``searches``); ids are read as strings."""
    from ..evaluation import read_outcomes as read_outcome_file

    return read_outcome_file(path).rename(columns=_OUTCOME_RENAMES)


def load_outcomes(profile: str, methods: Sequence[str] | None = None,
                  seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """Per-question outcomes of every run that has them: method, seed, dataset, group,
    question_id, prediction, em, f1, turns, searches, finish_reason (as recorded)."""
    import pandas as pd

    frames = []
    for method, seed, path in _runs(profile, methods, seeds):
        if (path / OUTCOMES_FILE).is_file():
            frame = read_outcomes(path / OUTCOMES_FILE)
            frame.insert(0, "seed", seed)
            frame.insert(0, "method", method)
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["method", "seed", "dataset", "question_id", "em"])
