"""The per-question outcome file of a final evaluation (``outcomes.csv`` in a run folder, or
``<name>_outcomes.csv`` beside ``at2po evaluate``'s table): one row per test question, written
and read back as written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

OUTCOME_COLUMNS = [
    "dataset",
    "group",
    "id",
    "prediction",
    "em",
    "f1",
    "num_turns",
    "num_tool_calls",
    "finish_reason",
    "sampled_em",
]
"""Columns of a per-question outcome file (``sampled_em`` only when it was measured)."""


def write_outcomes(details: pd.DataFrame, path: str | Path) -> Path:
    """Per-question outcomes (one row per test question: prediction, EM, F1, turns, searches,
    finish reason, sampled EM) as CSV: the unit every confidence interval rests on
    (:mod:`at2po_lib.evaluation.stats`). Question text and golden answers stay in the dataset files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = [c for c in OUTCOME_COLUMNS if c in details.columns]
    details[columns].to_csv(path, index=False, float_format="%.4f", lineterminator="\n")
    return path


def read_outcomes(path: str | Path) -> pd.DataFrame:
    """An outcome file back as written (ids and predictions as strings); a missing column is
    an error naming the file."""
    path = Path(path)
    frame = pd.read_csv(
        path,
        dtype={"id": str, "prediction": str, "finish_reason": str},
        keep_default_na=False,
        na_values={"sampled_em": [""]},
    )
    missing = [c for c in OUTCOME_COLUMNS[:-1] if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not an outcome file (missing columns {missing})")
    return frame
