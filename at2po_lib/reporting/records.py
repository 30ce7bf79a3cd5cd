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

What they read is validated (:class:`RecordError` names the file and, for a bad row, its line):
a run counts only with a readable ``DONE.json`` (a JSON object); ``outcomes.csv`` and
``final_eval.csv`` need their columns, at least one row, EM/F1 in [0, 1] and non-negative
counts; ``metrics.jsonl`` rows must be objects with an integer ``step``. A run left out (not
finished, or finished without the file a table needs) is never dropped silently: a note on
stderr lists the runs the result rests on and those left out, with why.
"""

from __future__ import annotations

import json
import math
import re
import sys
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


class RecordError(ValueError):
    """A run record that cannot be trusted; the message names the file (and line)."""


def _done_problem(path: Path) -> str | None:
    """Why ``DONE.json`` does not mark a finished run (None when it does)."""
    done = path / "DONE.json"
    if not done.is_file():
        return "no DONE.json (unfinished)"
    try:
        record = json.loads(done.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "DONE.json is not valid JSON"
    return None if isinstance(record, dict) else "DONE.json is not a JSON object"


def _status(path: Path) -> str | None:
    """``DONE.json``'s status (``trained``, ``evaluated``, ...) of a finished run."""
    return json.loads((path / "DONE.json").read_text(encoding="utf-8")).get("status")


class _Coverage:
    """Which runs a result rests on and which were left out (reported once, on stderr)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.used: list[str] = []
        self.left_out: list[str] = []

    def report(self) -> None:
        if not self.left_out:
            return
        seeds: dict[str, list[str]] = {}
        for run in self.used:
            method, seed = run.rsplit("/seed", 1)
            seeds.setdefault(method, []).append(seed)
        used = "; ".join(f"{m} seeds {','.join(s)}" for m, s in seeds.items()) or "none"
        print(f"{self.what}: rests on {len(self.used)} run(s) ({used}); left out "
              f"{len(self.left_out)}: {'; '.join(self.left_out)}", file=sys.stderr)


def _runs(profile: str, methods: Iterable[str] | None, seeds: Iterable[int] | None,
          coverage: _Coverage | None = None):
    """(method, seed, path) of every finished run; the others go to ``coverage.left_out``."""
    runs = discover_runs(profile, list(methods) if methods is not None else None)
    if seeds is not None:
        runs = runs[runs["seed"].isin(list(seeds))]
    if methods is not None:  # keep the caller's method order
        order = {m: i for i, m in enumerate(methods)}
        runs = runs.sort_values(["method", "seed"], key=lambda c: c.map(order) if c.name == "method"
                                else c, ignore_index=True)
    for row in runs.itertuples():
        problem = _done_problem(Path(row.path))
        if problem is not None:
            if coverage is not None:
                coverage.left_out.append(f"{row.method}/seed{row.seed} ({problem})")
            continue
        yield row.method, row.seed, Path(row.path)


def _read_csv(path: Path, **options) -> pd.DataFrame:
    """A CSV record; unreadable bytes, a torn quote or no header are errors naming it."""
    import pandas as pd

    try:
        path.read_bytes().decode("utf-8")
        return pd.read_csv(path, **options)
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not UTF-8 text (byte {exc.start}): a damaged record") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise RecordError(f"{path}: not a readable CSV record ({str(exc)[:200]})") from None


def _check_columns(frame: pd.DataFrame, path: Path, rules: dict[str, tuple[float, float]],
                   *, integer: Sequence[str] = (), optional: Sequence[str] = ()) -> None:
    """Every column of ``rules`` present (unless ``optional``), numeric and within its
    [low, high] (NaN allowed only in ``optional`` columns); at least one row. Errors name the
    file and the first bad line (the header is line 1)."""
    import pandas as pd

    missing = [c for c in rules if c not in frame.columns and c not in optional]
    if missing:
        raise RecordError(f"{path}: missing column(s) {', '.join(missing)}")
    if frame.empty:
        raise RecordError(f"{path}: a header and no rows (a damaged record)")
    for column, (low, high) in rules.items():
        if column not in frame.columns:
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        blank = values.isna() & (column not in optional or ~frame[column].isna())
        bad = blank | (values < low) | (values > high)
        if column in integer:
            bad |= values.notna() & (values != values.round())
        if bad.any():
            index = int(bad.to_numpy().nonzero()[0][0])
            shown = str(frame[column].iloc[index])[:40]
            raise RecordError(f"{path}, line {index + 2}: {column}={shown} is not a number"
                              f" in [{low:g}, {high:g}]"
                              f"{' (an integer)' if column in integer else ''}")


_OUTCOME_RULES = {"em": (0.0, 1.0), "f1": (0.0, 1.0), "turns": (0.0, math.inf),
                  "searches": (0.0, math.inf), "sampled_em": (0.0, 1.0)}
_FINAL_RULES = {"em": (0.0, 1.0), "f1": (0.0, 1.0), "n": (1.0, math.inf),
                "mean_turns": (0.0, math.inf), "mean_tool_calls": (0.0, math.inf),
                "sampled_em": (0.0, 1.0)}


def _check_metric_rows(rows: list, path: Path) -> list[dict]:
    for i, row in enumerate(rows):
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise RecordError(f"{path}, row {i + 1}: expected an object with an integer "
                              f"'step' >= 0, got {str(row)[:80]}")
    return rows


def load_training_records(profile: str, methods: Sequence[str] | None = None,
                          seeds: Sequence[int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(metrics, evals)`` of the runs that exist (missing runs are skipped)."""
    import pandas as pd

    from ..trainer.run_folder import read_jsonl, read_metrics

    metrics, evals = [], []
    coverage = _Coverage(f"training records of {profile}")
    for method, seed, path in _runs(profile, methods, seeds, coverage):
        tag = {"profile": profile, "method": method, "seed": seed}
        try:
            rows = _check_metric_rows(read_jsonl(path / "metrics.jsonl"), path / "metrics.jsonl")
            metrics += [{**tag, **row} for row in read_metrics(path / "metrics.jsonl")]
            evals += [{**tag, **row} for row in
                      _check_metric_rows(read_jsonl(path / "eval.jsonl"), path / "eval.jsonl")]
        except (UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"{path}: {exc}") from None
        if not rows and _status(path) != "evaluated":  # an evaluated-only run trains nothing
            coverage.left_out.append(f"{method}/seed{seed} (metrics.jsonl missing or empty)")
        else:
            coverage.used.append(f"{method}/seed{seed}")
    coverage.report()
    return pd.DataFrame.from_records(metrics), pd.DataFrame.from_records(evals)


def load_final_evals(profile: str, methods: Sequence[str] | None = None,
                     seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """Concatenated ``final_eval.csv`` of every finished run (with ``method`` and ``seed``)."""
    import pandas as pd

    frames = []
    coverage = _Coverage(f"final evaluations of {profile}")
    for method, seed, path in _runs(profile, methods, seeds, coverage):
        file = path / "final_eval.csv"
        if not file.is_file():
            coverage.left_out.append(f"{method}/seed{seed} (no final_eval.csv)")
            continue
        frame = _read_csv(file)
        _check_columns(frame, file, _FINAL_RULES, integer=("n",),
                       optional=("f1", "sampled_em", "mean_turns", "mean_tool_calls", "n"))
        frame["method"], frame["seed"] = method, seed
        frames.append(frame)
        coverage.used.append(f"{method}/seed{seed}")
    coverage.report()
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def read_outcomes(path: str | Path) -> pd.DataFrame:
    """One ``outcomes.csv``, with the column names :mod:`at2po_lib.stats` expects
    (``question_id``, ``turns``, ``searches``); ids are read as strings."""
    from ..evaluation import read_outcomes as read_outcome_file

    path = Path(path)
    _read_csv(path, nrows=1)  # bytes and header readable, else an error naming the file
    try:
        frame = read_outcome_file(path).rename(columns=_OUTCOME_RENAMES)
    except RecordError:
        raise
    except ValueError as exc:  # a missing column (named by read_outcomes) or a torn row
        raise RecordError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
    _check_columns(frame, path, _OUTCOME_RULES, integer=("turns", "searches"),
                   optional=("sampled_em",))
    return frame


def load_outcomes(profile: str, methods: Sequence[str] | None = None,
                  seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """Per-question outcomes of every run that has them: method, seed, dataset, group,
    question_id, prediction, em, f1, turns, searches, finish_reason (as recorded)."""
    import pandas as pd

    frames = []
    coverage = _Coverage(f"outcomes of {profile}")
    for method, seed, path in _runs(profile, methods, seeds, coverage):
        if not (path / OUTCOMES_FILE).is_file():
            coverage.left_out.append(f"{method}/seed{seed} (no {OUTCOMES_FILE})")
            continue
        frame = read_outcomes(path / OUTCOMES_FILE)
        frame.insert(0, "seed", seed)
        frame.insert(0, "method", method)
        frames.append(frame)
        coverage.used.append(f"{method}/seed{seed}")
    coverage.report()
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["method", "seed", "dataset", "question_id", "em"])
