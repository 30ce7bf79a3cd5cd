"""Compare the runs of two results folders file by file, timing and revision aside.

    python scripts/compare_runs.py RESULTS_A RESULTS_B
    python scripts/compare_runs.py RESULTS_A RESULTS_B --rtol 1e-4   # numbers within a tolerance

For every ``runs/<profile>/<method>/seed<S>/`` of RESULTS_A, the same folder of RESULTS_B must
hold the same ``metrics.jsonl`` and ``eval.jsonl`` rows (every key but the timing ones:
``wall_time``, ``step_time``, ``eval_time``, ``rollout/seconds`` and other ``*seconds*``/``*runtime*``/
``*per_second*`` keys), the same ``final_eval.csv`` and ``outcomes.csv`` (the ``git_revision``
column aside) and the same arrays in every ``trees/*.npz``. Prints one line per run and, last,
``ALL IDENTICAL`` (exit 0) or ``DIFFERENCES FOUND`` (exit 1) with the first differing keys.

``--rtol R`` (and ``--atol A``, default 0) compares numbers as equal when ``|x - y| <= A + R·|y|``
(strings, integers in ``trees/`` and row counts still exactly), for a change that keeps the
maths but sums in another order (fp32 rounding); then the last line is ``ALL WITHIN TOLERANCE``
with the largest relative difference found, when anything differed at all.

Used for issue #49's behaviour check: 2-step runs of the same method before and after a change,
each in its own scratch ``AT2PO_RESULTS`` (sharing one ``AT2PO_ARTIFACTS``), e.g.
``at2po train --profile tiny --method at2po_exact --seed 0 --set train.max_steps=2 --set
train.eval_every=0 --set eval.max_questions=10``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

TIMING = ("wall_time", "step_time", "eval_time", "seconds", "runtime", "per_second")
"""Substrings of the metric names that measure time (they differ from run to run)."""
PROVENANCE_COLUMNS = ("git_revision", "created")


TOLERANCE = {"rtol": 0.0, "atol": 0.0}
"""How far two numbers may differ and count as equal (``--rtol``/``--atol``; exact by default)."""
LARGEST = {"relative": 0.0}
"""The largest relative difference between numbers found equal within the tolerance."""


def _close(x, y) -> bool:
    """Equal, or two numbers within :data:`TOLERANCE` (recorded in :data:`LARGEST`)."""
    if x == y:
        return True
    numbers = (int, float)
    if isinstance(x, numbers) and isinstance(y, numbers) and not isinstance(x, bool):
        gap = abs(x - y)
        if gap <= TOLERANCE["atol"] + TOLERANCE["rtol"] * abs(y):
            LARGEST["relative"] = max(LARGEST["relative"], gap / max(abs(y), 1e-30))
            return True
    return False


def _rows_close(x: list[dict], y: list[dict]) -> bool:
    return len(x) == len(y) and all(
        set(r1) == set(r2) and all(_close(r1[k], r2[k]) for k in r1) for r1, r2 in zip(x, y)
    )


def _frames_close(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    if a.equals(b):
        return True
    if list(a.columns) != list(b.columns) or a.shape != b.shape:
        return False
    for column in a.columns:
        x, y = a[column], b[column]
        if x.dtype.kind == "f" and y.dtype.kind == "f":
            if not all(
                _close(float(u), float(v)) or (np.isnan(u) and np.isnan(v)) for u, v in zip(x, y)
            ):
                return False
        elif not x.equals(y):
            return False
    return True


def _arrays_close(x: np.ndarray, y: np.ndarray) -> bool:
    if x.shape != y.shape or x.dtype.kind != y.dtype.kind:
        return False
    if x.dtype.kind != "f":
        return bool(np.array_equal(x, y))
    return all(
        _close(float(u), float(v)) or (np.isnan(u) and np.isnan(v))
        for u, v in zip(x.ravel(), y.ravel())
    )


def _rows(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if not any(t in k for t in TIMING)} for row in rows]


def _frame(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    return frame.drop(columns=[c for c in frame.columns if c in PROVENANCE_COLUMNS])


def compare_run(a: Path, b: Path) -> tuple[list[str], list[str]]:
    """(summary parts, differences) of one run folder in both results folders."""
    parts, differences = [], []
    for name in ("metrics.jsonl", "eval.jsonl"):
        if not (a / name).is_file():
            continue
        x, y = _rows(a / name), _rows(b / name) if (b / name).is_file() else []
        keys = sorted(set().union(*x)) if x else []
        same = x == y or _rows_close(x, y)
        parts.append(f"{name} {_verdict(x == y, same)} ({len(x)} rows, {len(keys)} keys)")
        if not same:
            for i, (r1, r2) in enumerate(zip(x, y)):
                keys = sorted(k for k in set(r1) | set(r2) if not _close(r1.get(k), r2.get(k)))
                if keys:
                    differences.append(f"{name} row {i}: {keys[:8]}")
                    break
            if len(x) != len(y):
                differences.append(f"{name}: {len(x)} rows against {len(y)}")
    for name in ("final_eval.csv", "outcomes.csv"):
        if not (a / name).is_file():
            continue
        exact = (b / name).is_file() and _frame(a / name).equals(_frame(b / name))
        same = exact or ((b / name).is_file() and _frames_close(_frame(a / name), _frame(b / name)))
        parts.append(f"{name} {_verdict(exact, same)} ({len(_frame(a / name))} rows)")
        if not same:
            differences.append(name)
    trees = sorted((a / "trees").glob("*.npz"))
    differing = []
    for path in trees:
        other = b / "trees" / path.name
        if not other.is_file():
            differing.append(f"{path.name} (missing)")
            continue
        with np.load(path, allow_pickle=False) as x, np.load(other, allow_pickle=False) as y:
            keys = [
                k
                for k in sorted(set(x.files) | set(y.files))
                if k not in x.files
                or k not in y.files
                or not (
                    np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f")
                    or _arrays_close(x[k], y[k])
                )
            ]
        if keys:
            differing.append(f"{path.name} {keys[:8]}")
    if trees:
        parts.append(f"trees/ {len(trees)} npz {'identical' if not differing else 'DIFFERENT'}")
        differences += [f"trees/{d}" for d in differing]
    return parts, differences


def _verdict(exact: bool, close: bool) -> str:
    return "identical" if exact else "within tolerance" if close else "DIFFERENT"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    for name in ("rtol", "atol"):
        value = getattr(args, name)
        if not (0.0 <= value < 1.0):
            parser.error(f"--{name} {value}: expected a number in [0, 1)")
    TOLERANCE.update(rtol=args.rtol, atol=args.atol)
    LARGEST["relative"] = 0.0
    first, second = args.first, args.second
    runs = sorted(p.relative_to(first) for p in first.glob("runs/*/*/seed*") if p.is_dir())
    if not runs:
        print(f"no runs under {first}/runs/")
        return 2
    found = []
    for run in runs:
        parts, differences = compare_run(first / run, second / run)
        print(f"{run} | " + "; ".join(parts))
        found += [f"  {run}: {d}" for d in differences]
    if found:
        last = "DIFFERENCES FOUND"
    elif LARGEST["relative"] > 0:
        last = (
            f"ALL WITHIN TOLERANCE (rtol {args.rtol:g}, atol {args.atol:g}; largest relative "
            f"difference {LARGEST['relative']:.2e})"
        )
    else:
        last = "ALL IDENTICAL"
    print("\n".join(found + [last]))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
