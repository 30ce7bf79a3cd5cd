"""Compare the runs of two results folders file by file, timing and revision aside.

    python scripts/compare_runs.py RESULTS_A RESULTS_B

For every ``runs/<profile>/<method>/seed<S>/`` of RESULTS_A, the same folder of RESULTS_B must
hold the same ``metrics.jsonl`` and ``eval.jsonl`` rows (every key but the timing ones:
``wall_time``, ``step_time``, ``eval_time``, ``rollout/seconds`` and other ``*seconds*``/``*runtime*``/
``*per_second*`` keys), the same ``final_eval.csv`` and ``outcomes.csv`` (the ``git_revision``
column aside) and the same arrays in every ``trees/*.npz``. Prints one line per run and, last,
``ALL IDENTICAL`` (exit 0) or ``DIFFERENCES FOUND`` (exit 1) with the first differing keys.

Used for issue #49's behaviour check: 2-step runs of the same method before and after a change,
each in its own scratch ``AT2PO_RESULTS`` (sharing one ``AT2PO_ARTIFACTS``), e.g.
``at2po train --profile tiny --method at2po_exact --seed 0 --set train.max_steps=2 --set
train.eval_every=0 --set eval.max_questions=10``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

TIMING = ("wall_time", "step_time", "eval_time", "seconds", "runtime", "per_second")
"""Substrings of the metric names that measure time (they differ from run to run)."""
PROVENANCE_COLUMNS = ("git_revision", "created")


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
        parts.append(
            f"{name} {'identical' if x == y else 'DIFFERENT'} ({len(x)} rows, {len(keys)} keys)"
        )
        if x != y:
            for i, (r1, r2) in enumerate(zip(x, y)):
                keys = sorted(k for k in set(r1) | set(r2) if r1.get(k) != r2.get(k))
                if keys:
                    differences.append(f"{name} row {i}: {keys[:8]}")
                    break
            if len(x) != len(y):
                differences.append(f"{name}: {len(x)} rows against {len(y)}")
    for name in ("final_eval.csv", "outcomes.csv"):
        if not (a / name).is_file():
            continue
        same = (b / name).is_file() and _frame(a / name).equals(_frame(b / name))
        parts.append(
            f"{name} {'identical' if same else 'DIFFERENT'} ({len(_frame(a / name))} rows)"
        )
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
                or not np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f")
            ]
        if keys:
            differing.append(f"{path.name} {keys[:8]}")
    if trees:
        parts.append(f"trees/ {len(trees)} npz {'identical' if not differing else 'DIFFERENT'}")
        differences += [f"trees/{d}" for d in differing]
    return parts, differences


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__)
        return 2
    first, second = (Path(p) for p in args)
    runs = sorted(p.relative_to(first) for p in first.glob("runs/*/*/seed*") if p.is_dir())
    if not runs:
        print(f"no runs under {first}/runs/")
        return 2
    found = []
    for run in runs:
        parts, differences = compare_run(first / run, second / run)
        print(f"{run} | " + "; ".join(parts))
        found += [f"  {run}: {d}" for d in differences]
    print("\n".join(found + ["DIFFERENCES FOUND" if found else "ALL IDENTICAL"]))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
