r"""Read the run folders the trainer writes, as tidy frames.

A run folder (``results/runs/<profile>/<method>/seed<S>/``, see :mod:`at2po_lib.record.run_folder`)
holds ``metrics.jsonl`` (one row per rollout step), ``eval.jsonl`` (validation EM per step and
dataset), ``final_eval.csv`` (greedy EM per test set) and ``outcomes.csv`` (one row per test
question: prediction, EM, F1, turns, searches, finish reason). Paper-scale runs made on a GPU
write the same files under ``results/runs/paper-<backbone>/``, so every table and figure reads
them the same way.

- :func:`discover_runs`: which (method, seed) folders exist and which finished: real folders
  named ``seed<N>`` only (a link, ``seed01`` or ``seed١`` is refused: each would count a run
  twice; ``seed1.bak`` is no run); :func:`finished_run_folders` for the other readers of runs
  (``at2po dissect runs``), checked as the report checks them.
- :func:`load_training_records` → ``metrics`` (method, seed, step) and ``evals`` (method, seed,
  step, dataset).
- :func:`load_final_evals` → the final greedy EM of every run (one row per dataset).
- :func:`load_outcomes` → per-question outcomes, the unit every CI in the project rests on.

What they read is validated (:class:`RecordError` names the file and, for a bad row, its line):
a run counts only with a readable ``DONE.json`` (a JSON object); ``outcomes.csv`` and
``final_eval.csv`` need their columns, at least one row, finite EM/F1 in [0, 1] (a question's
greedy EM 0 or 1) and non-negative counts, and each question (each dataset) once (a duplicated
(dataset, id) would count its EM twice in the seed's mean); ``metrics.jsonl`` and ``eval.jsonl``
rows must be objects with an integer ``step``, finite numbers (no ``NaN``/``Infinity``) and
each step (and dataset) once, and a finished run's files must parse to the last line (a torn
line there is damage, not a writer mid-append). A run left out (not finished, or finished without the file a table
needs) is never dropped silently: a note on stderr lists the runs the result rests on and those
left out, with why.

- :func:`check_seeds`: the seeds of a method are independent runs of one configuration (what
  every interval over seeds assumes): each records its own seed, one config hash in
  ``DONE.json``, ``config.yaml`` and ``meta.json`` that is the hash of its ``config.yaml``, and
  the same configuration less the seed, profile and git revision as its siblings; no two seeds
  hold the same outcomes or the same metrics (a copied folder). ``at2po report`` runs it before
  writing anything.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd
import yaml

from .identity import run_identity
from .outcomes import read_outcomes as read_outcome_file
from .run_folder import config_hash, read_jsonl, read_jsonl_lines
from ..util.errors import RecordError
from ..util.paths import results_dir

OUTCOMES_FILE = "outcomes.csv"
"""Per-question outcomes beside a run's ``final_eval.csv``."""

_SEED_DIR = re.compile(r"seed(0|[1-9][0-9]*)", re.ASCII)
"""A run folder's name: ``seed<N>``, N in ASCII digits without a leading zero."""
_SEED_LIKE = re.compile(r"seed\d+")
"""A name that reads as a seed number but is not a run folder's (``seed01``, ``seed١``)."""
_OUTCOME_RENAMES = {"id": "question_id", "num_turns": "turns", "num_tool_calls": "searches"}


def runs_root(profile: str) -> Path:
    """``results/runs/<profile>/`` (not created: looking must leave no empty folders)."""
    return results_dir() / "runs" / profile


def discover_runs(profile: str, methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run folder of ``profile``: method, seed, path, finished (``DONE.json``),
    has_outcomes. Sorted by method then seed."""
    root = runs_root(profile)
    rows = []
    method_dirs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for method_dir in method_dirs:
        if methods is not None and method_dir.name not in methods:
            continue
        for seed_dir in sorted(method_dir.iterdir()):
            match = _run_folder(seed_dir)
            if match is None:
                continue
            rows.append(
                {
                    "method": method_dir.name,
                    "seed": int(match.group(1)),
                    "path": seed_dir,
                    "finished": (seed_dir / "DONE.json").is_file(),
                    "has_outcomes": (seed_dir / OUTCOMES_FILE).is_file(),
                }
            )
    frame = pd.DataFrame(rows, columns=["method", "seed", "path", "finished", "has_outcomes"])
    return frame.sort_values(["method", "seed"], ignore_index=True)


def _run_folder(path: Path) -> re.Match | None:
    """The ``seed<N>`` match of a run folder; None for an entry that is no run (``seed1.bak``,
    a file). A link named ``seed<N>`` or a name that reads as a seed number without being
    ``seed<N>`` (``seed01``, ``seed١``) is a :class:`RecordError`: each would count a run a
    second time (a ``seed01`` copy would count as another seed 1)."""
    match = _SEED_DIR.fullmatch(path.name)
    if match and path.is_symlink():
        raise RecordError(
            f"{path}: a symbolic link (to {path.resolve()}); a run is a real folder "
            "and a link would count a run twice: remove the link"
        )
    if match is None and _SEED_LIKE.fullmatch(path.name):
        raise RecordError(
            f"{path}: reads as seed {int(path.name[4:])} but is not a run folder "
            f"name (seed<N>, ASCII digits, no leading zero): a copy that would count "
            "a seed twice? Move it out of the runs folder"
        )
    return match if match and path.is_dir() else None


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
        print(
            f"{self.what}: rests on {len(self.used)} run(s) ({used}); left out "
            f"{len(self.left_out)}: {'; '.join(self.left_out)}",
            file=sys.stderr,
        )


def _runs(
    profile: str,
    methods: Iterable[str] | None,
    seeds: Iterable[int] | None,
    coverage: _Coverage | None = None,
):
    """(method, seed, path) of every finished run; the others go to ``coverage.left_out``."""
    runs = discover_runs(profile, list(methods) if methods is not None else None)
    if seeds is not None:
        runs = runs[runs["seed"].isin(list(seeds))]
    if methods is not None:  # keep the caller's method order
        order = {m: i for i, m in enumerate(methods)}
        runs = runs.sort_values(
            ["method", "seed"],
            key=lambda c: c.map(order) if c.name == "method" else c,
            ignore_index=True,
        )
    for row in runs.itertuples():
        problem = _done_problem(Path(row.path))
        if problem is not None:
            if coverage is not None:
                coverage.left_out.append(f"{row.method}/seed{row.seed} ({problem})")
            continue
        yield row.method, row.seed, Path(row.path)


def finished_run_folders(profile: str, methods: Sequence[str]) -> list[Path]:
    """The folders of the finished runs of ``methods`` (in that order, each method's by folder
    name), after checking their records as ``at2po report`` does: metric rows
    (:func:`load_training_records`) and independent seeds (:func:`check_seeds`)."""
    load_training_records(profile, methods)
    check_seeds(profile, methods)
    found = {method: [] for method in methods}
    for method, _, path in _runs(profile, methods, None):
        found[method].append(path)
    return [path for method in methods for path in sorted(found[method], key=lambda p: p.name)]


def _read_csv(path: Path, **options) -> pd.DataFrame:
    """A CSV record; unreadable bytes, a torn quote or no header are errors naming it."""
    try:
        path.read_bytes().decode("utf-8")
        return pd.read_csv(path, **options)
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not UTF-8 text (byte {exc.start}): a damaged record") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise RecordError(f"{path}: not a readable CSV record ({str(exc)[:200]})") from None


def _check_columns(
    frame: pd.DataFrame,
    path: Path,
    rules: dict[str, tuple[float, float]],
    *,
    integer: Sequence[str] = (),
    optional: Sequence[str] = (),
    binary: Sequence[str] = (),
) -> None:
    """Every column of ``rules`` present (unless ``optional``), a finite number within its
    [low, high] (NaN allowed only in ``optional`` columns), 0 or 1 in a ``binary`` column; at
    least one row. Errors name the file and the first bad line (the header is line 1)."""
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
        bad = blank | (values < low) | (values > high) | values.isin([math.inf, -math.inf])
        if column in integer:
            bad |= values.notna() & (values != values.round())
        if column in binary:
            bad |= values.notna() & ~values.isin([0.0, 1.0])
        if bad.any():
            index = int(bad.to_numpy().nonzero()[0][0])
            shown = str(frame[column].iloc[index])[:40]
            kind = (
                "0 or 1 (a question is answered exactly or not)"
                if column in binary
                else f"a finite number in [{low:g}, {high:g}]"
                + (" (an integer)" if column in integer else "")
            )
            raise RecordError(f"{path}, line {index + 2}: {column}={shown} is not {kind}")


_OUTCOME_RULES = {
    "em": (0.0, 1.0),
    "f1": (0.0, 1.0),
    "turns": (0.0, math.inf),
    "searches": (0.0, math.inf),
    "sampled_em": (0.0, 1.0),
}
_FINAL_RULES = {
    "em": (0.0, 1.0),
    "f1": (0.0, 1.0),
    "n": (1.0, math.inf),
    "mean_turns": (0.0, math.inf),
    "mean_tool_calls": (0.0, math.inf),
    "sampled_em": (0.0, 1.0),
}


def _check_metric_rows(
    rows: list[tuple[int, Any]], path: Path, key: Sequence[str] = ("step",)
) -> list[dict]:
    """The rows of ``metrics.jsonl`` (one per ``step``) or ``eval.jsonl`` (one per ``step`` and
    ``dataset``), given with their line numbers: objects with an integer ``step`` >= 0, every
    number finite (JSON's ``NaN``/``Infinity`` parse, and would move every mean), each key
    once (a duplicated row would count its step twice). Errors name file and line."""
    first: dict[tuple, int] = {}
    for line, row in rows:
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise RecordError(
                f"{path}, line {line}: expected an object with an integer "
                f"'step' >= 0, got {str(row)[:80]}"
            )
        bad = next(
            (k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)), None
        )
        if bad is not None:
            raise RecordError(
                f"{path}, line {line}: {bad}={row[bad]} is not a finite number (a damaged record)"
            )
        ident = tuple(str(row.get(k)) for k in key)
        if ident in first:
            named = ", ".join(f"{k} {v}" for k, v in zip(key, ident))
            raise RecordError(
                f"{path}, line {line}: {named} again (first on line "
                f"{first[ident]}): a duplicated row; each counts once"
            )
        first[ident] = line
    return [row for _, row in rows]


def load_training_records(
    profile: str, methods: Sequence[str] | None = None, seeds: Sequence[int] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(metrics, evals)`` of the runs that exist (missing runs are skipped)."""
    metrics, evals = [], []
    coverage = _Coverage(f"training records of {profile}")
    for method, seed, path in _runs(profile, methods, seeds, coverage):
        tag = {"profile": profile, "method": method, "seed": seed}
        try:
            # a finished run's records are whole: a torn last line is refused, not dropped
            rows = _check_metric_rows(
                read_jsonl_lines(path / "metrics.jsonl", torn_ok=False), path / "metrics.jsonl"
            )
            metrics += [{**tag, **row} for row in rows]
            evals += [
                {**tag, **row}
                for row in _check_metric_rows(
                    read_jsonl_lines(path / "eval.jsonl", torn_ok=False),
                    path / "eval.jsonl",
                    key=("step", "dataset"),
                )
            ]
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


def load_final_evals(
    profile: str, methods: Sequence[str] | None = None, seeds: Sequence[int] | None = None
) -> pd.DataFrame:
    """Concatenated ``final_eval.csv`` of every finished run (with ``method`` and ``seed``)."""
    frames = []
    coverage = _Coverage(f"final evaluations of {profile}")
    for method, seed, path in _runs(profile, methods, seeds, coverage):
        file = path / "final_eval.csv"
        if not file.is_file():
            coverage.left_out.append(f"{method}/seed{seed} (no final_eval.csv)")
            continue
        frame = _read_csv(file)
        _check_columns(
            frame,
            file,
            _FINAL_RULES,
            integer=("n",),
            optional=("f1", "sampled_em", "mean_turns", "mean_tool_calls", "n"),
        )
        _check_unique(frame, file, ["dataset"], "dataset")
        frame["method"], frame["seed"] = method, seed
        frames.append(frame)
        coverage.used.append(f"{method}/seed{seed}")
    coverage.report()
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def read_outcomes(path: str | Path) -> pd.DataFrame:
    """One ``outcomes.csv``, with the column names :mod:`at2po_lib.evaluation.stats` expects
    (``question_id``, ``turns``, ``searches``); ids are read as strings."""
    path = Path(path)
    _read_csv(path, nrows=1)  # bytes and header readable, else an error naming the file
    try:
        frame = read_outcome_file(path).rename(columns=_OUTCOME_RENAMES)
    except RecordError:
        raise
    except ValueError as exc:  # a missing column (named by read_outcomes) or a torn row
        raise RecordError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
    _check_columns(
        frame,
        path,
        _OUTCOME_RULES,
        integer=("turns", "searches"),
        optional=("sampled_em",),
        binary=("em",),
    )
    _check_unique_questions(frame, path)
    return frame


def _check_unique_questions(frame: pd.DataFrame, path: Path) -> None:
    """Each (dataset, question id) once: a seed's EM is the mean over its questions, so a
    repeated row with another EM would move it. Ids repeat across datasets (``q0`` of HotpotQA
    and of NQ), not within one."""
    keys = [c for c in ("dataset", "question_id") if c in frame.columns]
    if "question_id" in keys:
        _check_unique(frame, path, keys, "question")


def _check_unique(frame: pd.DataFrame, path: Path, keys: list[str], what: str) -> None:
    """Each value of ``keys`` on one row, else an error naming both lines."""
    if not set(keys) <= set(frame.columns):
        return
    repeated = frame.duplicated(keys, keep="first")
    if not repeated.any():
        return
    index = int(repeated.to_numpy().nonzero()[0][0])
    row = frame.iloc[index]
    same = (frame[keys] == row[keys]).all(axis=1).to_numpy().nonzero()[0]
    name = "/".join(str(row[k]) for k in keys)
    raise RecordError(
        f"{path}, line {index + 2}: {what} {name} again (first on line "
        f"{int(same[0]) + 2}): a duplicated record; each {what} counts once"
    )


def load_outcomes(
    profile: str, methods: Sequence[str] | None = None, seeds: Sequence[int] | None = None
) -> pd.DataFrame:
    """Per-question outcomes of every run that has them: method, seed, dataset, group,
    question_id, prediction, em, f1, turns, searches, finish_reason (as recorded)."""
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
    return (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["method", "seed", "dataset", "question_id", "em"])
    )


# ------------------------------------------------------- the settings runs recorded
def recorded_rollout(profile: str, methods: Sequence[str]) -> dict[str, Any] | None:
    """The rollout settings the finished runs of ``methods`` recorded (their effective
    settings: :func:`at2po_lib.record.identity.run_identity`), the most common among them
    when they differ; None without a readable record."""
    found = []
    for _, _, path in _runs(profile, methods, None):
        config = _read_object(path / "config.yaml")
        if config is None:
            continue
        config.pop("config_hash", None)
        identity = run_identity(config)
        if identity is not None:
            found.append(identity["settings"]["rollout"])
    if not found:
        return None
    counts = Counter(_canonical(r) for r in found)
    top = max(counts.values())
    return next(r for r in found if counts[_canonical(r)] == top)


# ----------------------------------------------------------------- seeds of one method
_SEED_FIELDS = (("seed",), ("settings", "trainer", "seed"))
"""Where ``config.yaml`` records the run's seed: all that may differ
between two seeds of a method (the hash covers it, so each seed's hash differs; the rest of the
configuration may not)."""

_SHARED = {
    "config": "configuration less the seed (config.yaml)",
    "profile": "profile (meta.json)",
    "git_revision": "git revision (meta.json)",
}
"""What the seeds of one method must share, and where it is recorded."""


def check_seeds(profile: str, methods: Sequence[str] | None = None) -> None:
    """Refuse (:class:`RecordError` naming the file) the finished runs of ``profile`` whose
    seeds are not independent runs of one configuration: a record of another seed, method or
    profile than its folder; a config hash in ``DONE.json``, ``config.yaml`` or ``meta.json``
    that is not the hash of the ``config.yaml`` beside it; a configuration less the seed,
    profile or git revision that differs from the method's other seeds (the majority; a tie
    goes to the lowest seed); two seeds with the same outcomes or metrics (a copied folder).
    Runs recorded before these files existed (none of them) are compared on what they hold."""
    by_method: dict[str, list[tuple[int, Path]]] = {}
    for method, seed, path in _runs(profile, methods, None):
        by_method.setdefault(method, []).append((seed, path))
    for method, runs in by_method.items():
        shared = {seed: _run_provenance(profile, method, seed, path) for seed, path in runs}
        for key in _SHARED:
            _check_agreement(method, key, {seed: record[key] for seed, record in shared.items()})
        _check_not_copies(method, runs)
        _check_same_questions(method, runs)


def _check_same_questions(method: str, runs: list[tuple[int, Path]]) -> None:
    """Every seed of ``method`` answered the same questions (``outcomes.csv``): a seed with an
    extra, a missing or a renamed question id is named with the first such id (the comparison
    over seeds pairs questions; unchecked, it fails late, naming the good seeds and no file)."""
    sets = {}
    for seed, path in runs:
        if (path / OUTCOMES_FILE).is_file():
            frame = read_outcomes(path / OUTCOMES_FILE)
            sets[seed] = frozenset(
                zip(
                    frame.get("dataset", pd.Series([""] * len(frame))),
                    frame["question_id"].astype(str),
                )
            )
    if len(set(sets.values())) <= 1:
        return
    counts = Counter(sets.values())
    top = max(counts.values())
    majority = next(sets[s] for s in sorted(sets) if counts[sets[s]] == top)
    agree = [s for s in sorted(sets) if sets[s] == majority]
    for seed, path in runs:
        if seed not in sets or sets[seed] == majority:
            continue
        extra, missing = sorted(sets[seed] - majority), sorted(majority - sets[seed])
        what = (
            f"question {'/'.join(extra[0])} that seed{agree[0]} has not"
            if extra
            else f"no question {'/'.join(missing[0])}, which seed{agree[0]} answered"
        )
        raise RecordError(
            f"{path / OUTCOMES_FILE}: {what} ({len(extra)} extra, {len(missing)} "
            f"missing against {method}'s other seeds): the seeds of a method must "
            "answer the same test questions"
        )


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""``yaml.safe_load``'s loader in libyaml's C build where PyYAML has it: the same safe
constructors and resolvers, about ten times faster on the run configs a report reads (every
finished run's ``config.yaml``, some more than once)."""


def _read_object(path: Path) -> dict | None:
    """A JSON or YAML record that must hold an object (None when absent)."""
    if not path.is_file():
        return None
    try:
        text = path.read_bytes().decode("utf-8")
        record = json.loads(text) if path.suffix == ".json" else yaml.load(text, _SAFE_LOADER)
    except (UnicodeDecodeError, ValueError, RecursionError, yaml.YAMLError) as exc:
        raise RecordError(f"{path}: not a readable record ({str(exc)[:200]})") from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: expected an object, got {type(record).__name__}")
    return record


def _run_provenance(
    profile: str, method: str, seed: int, path: Path
) -> dict[str, tuple[Path, Any]]:
    """What a run records about itself, checked against its folder: each of :data:`_SHARED`
    as (file, value), value None when the file is absent."""
    done = _read_object(path / "DONE.json") or {}
    meta = _read_object(path / "meta.json")
    config = _read_object(path / "config.yaml")
    hashes = {"DONE.json": done.get("config_hash")}
    if meta is not None:
        hashes["meta.json"] = meta.get("config_hash")
        _check_field(path / "meta.json", "seed", meta.get("seed"), seed, f"seed{seed}")
        _check_field(
            path / "meta.json", "profile", meta.get("profile"), profile, f"results/runs/{profile}/"
        )
    less_seed = None
    if config is not None:
        recorded = config.pop("config_hash", None)
        computed = config_hash(config)
        if recorded != computed:
            raise RecordError(
                f"{path / 'config.yaml'}: config_hash {recorded} is not the hash "
                f"of the configuration the file holds ({computed}): edited after "
                "the run, or damaged"
            )
        for name, value in hashes.items():
            if value is not None and value != computed:
                raise RecordError(
                    f"{path / name}: config_hash {value} is not config.yaml's "
                    f"({computed}): these records come from different runs"
                )
        for keys in _SEED_FIELDS:
            holder = config
            for key in keys[:-1]:
                holder = holder.get(key) if isinstance(holder, dict) else None
            if isinstance(holder, dict) and keys[-1] in holder:
                _check_field(
                    path / "config.yaml", ".".join(keys), holder[keys[-1]], seed, f"seed{seed}"
                )
        _check_field(
            path / "config.yaml",
            "method",
            config.get("method"),
            path.parent.name,
            f"{method}/",
        )
        less_seed = _configuration_less_seed(config)
    return {
        "config": (path / "config.yaml", less_seed),
        "profile": (path / "meta.json", None if meta is None else meta.get("profile")),
        "git_revision": (path / "meta.json", None if meta is None else meta.get("git_revision")),
    }


def _configuration_less_seed(config: dict) -> Any:
    """What the seeds of one method must share: the run's effective settings
    (:func:`at2po_lib.record.identity.run_identity`; the record as written when it cannot be
    read as a current run), less the seed."""
    identity = run_identity(config)
    less_seed = json.loads(json.dumps(config if identity is None else identity, default=str))
    for keys in _SEED_FIELDS:
        holder = less_seed
        for key in keys[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            holder.pop(keys[-1], None)
    return less_seed


def _check_field(path: Path, key: str, value: Any, expected: Any, folder: str) -> None:
    """``value`` is ``expected``, else the record is another run's."""
    if value is not None and value != expected:
        raise RecordError(
            f"{path}: records {key} {value!r}, but it lies in {folder}: a copy of "
            "another run's records? Move it where it belongs or remove it"
        )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _check_agreement(method: str, key: str, values: dict[int, tuple[Path, Any]]) -> None:
    """Every seed's ``key`` equals the majority's (a tie goes to the lowest seed), else the
    first seed that differs is named with the first field that differs."""
    counts = Counter(_canonical(value) for _, value in values.values())
    if len(counts) <= 1:
        return
    top = max(counts.values())
    seeds = sorted(values)
    majority = next(
        _canonical(values[s][1]) for s in seeds if counts[_canonical(values[s][1])] == top
    )
    agree = [s for s in seeds if _canonical(values[s][1]) == majority]
    for seed in seeds:
        path, value = values[seed]
        if _canonical(value) == majority:
            continue
        theirs = values[agree[0]][1]
        where = ", ".join(f"seed{s}" for s in agree[:5]) + (" ..." if len(agree) > 5 else "")
        if value is None:
            what = f"absent, while {where} record their {_SHARED[key]}"
        elif theirs is None:
            what = f"present, while {where} have none"
        else:
            what = (
                f"{_SHARED[key]} differs from {method}'s other seeds ({where}): "
                f"{_first_difference(value, theirs, key)}"
            )
        raise RecordError(
            f"{path}: {what}. The seeds of a method must be one configuration at "
            "one revision (Table 1's intervals treat them as repeats); rerun this "
            "seed like the others or move it out of the runs folder"
        )


def _first_difference(ours: Any, theirs: Any, where: str) -> str:
    """``where.key: ours vs theirs`` at the first (sorted) key where two records differ."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted(set(ours) | set(theirs)):
            if _canonical(ours.get(key)) != _canonical(theirs.get(key)):
                return _first_difference(
                    ours.get(key), theirs.get(key), key if where == "config" else f"{where}.{key}"
                )
    return f"{where}: {str(ours)[:80]} here, {str(theirs)[:80]} there"


TIMING_METRICS = ("step_time", "wall_time", "rollout/seconds")
"""Metrics that measure the clock, not the training: two trainings of one seed differ there
only, so a copied run is compared without them (a nudged ``step_time`` is still a copy)."""


def run_fingerprints(path: Path) -> dict[str, str]:
    """sha256 of a run's outcomes (rows sorted by question, as read) and of its metrics rows
    less :data:`TIMING_METRICS`: two independent seeds share neither (sampling and updates
    differ from the first step)."""
    found = {}
    if (path / OUTCOMES_FILE).is_file():
        frame = read_outcomes(path / OUTCOMES_FILE)
        keys = [c for c in ("dataset", "question_id") if c in frame.columns]
        frame = frame.sort_values(keys, kind="stable", ignore_index=True) if keys else frame
        found[OUTCOMES_FILE] = frame.to_csv(index=False)
    rows = read_jsonl(path / "metrics.jsonl", torn_ok=False)
    if rows:  # an evaluated-only run has none to compare
        found["metrics.jsonl"] = _canonical(
            [{k: v for k, v in row.items() if k not in TIMING_METRICS} for row in rows]
        )
    return {name: hashlib.sha256(text.encode()).hexdigest() for name, text in found.items()}


def _check_not_copies(method: str, runs: list[tuple[int, Path]]) -> None:
    """No two seeds of ``method`` with the same outcomes or metrics."""
    seen: dict[tuple[str, str], tuple[int, Path]] = {}
    for seed, path in runs:
        for name, digest in run_fingerprints(path).items():
            first_seed, first = seen.setdefault((name, digest), (seed, path))
            if first_seed != seed:
                raise RecordError(
                    f"{path / name}: the same {name} as {method}/seed{first_seed} "
                    f"({first / name}): a copied run, which would count as a second "
                    "independent seed and narrow every interval; remove the copy"
                )
