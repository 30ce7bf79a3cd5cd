"""Retrain two methods side by side with one knob changed: notebook 04's "try this".

:func:`retrain_side_by_side` trains each method (AT2PO and GRPO by default) from the profile's
warm start in its own process, one torch thread each (two processes fill two cores), with the
same seed and the same ``--set`` values, into a scratch results folder
(``results/executed/<profile>/try/``, git-ignored, never read by a table); the recorded runs
under ``results/runs/`` are untouched. A progress bar per method follows each run's
``metrics.jsonl``. The runs are whole runs (validation and the final evaluation included,
unless the overrides turn them off), so :func:`paired_difference` can compare them on the
same test questions.

:func:`paired_difference` is the mean per-question EM difference of two runs of one seed over
the questions both answered, with its Student-t interval over questions: it says how the two
policies differ on these questions, not how the methods differ (that needs seeds:
:func:`seed_differences` gives the committed seeds' own differences to read it beside).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats
from tqdm.auto import tqdm

from ..config.profile import load_profile
from ..util.paths import results_dir, results_moved_to
from ..warmstart.sft import ensure_warmstart
from ..reporting.curves import plot_training_curves, plot_validation_em
from ..record.reading import load_outcomes, load_training_records

POLL_SECONDS = 2.0
"""How often the progress bars read the runs' metrics."""


@dataclass
class SideBySide:
    """The scratch results folder of a side-by-side retraining and what each process did."""

    results: Path
    methods: tuple[str, ...]
    seed: int
    wall_seconds: float
    logs: dict[str, Path]


def _set_values(overrides: Mapping[str, Any]) -> list[str]:
    """``--set`` arguments of ``{"section.key": value}``."""
    out = []
    for key, value in overrides.items():
        if "." not in key:
            raise ValueError(
                f"try-this knob {key!r}: expected section.key, e.g. rollout.tree_alpha"
            )
        text = "[" + ",".join(map(str, value)) + "]" if isinstance(value, (list, tuple)) else value
        out += ["--set", f"{key}={text}"]
    return out


def _steps_done(results: Path, profile: str, method: str, seed: int) -> int:
    """Logged steps of a run being built (its staging folder) or finished."""
    base = results / "runs" / profile / method
    best = 0
    for path in list(base.glob(f".seed{seed}*/metrics.jsonl")) + [
        base / f"seed{seed}" / "metrics.jsonl"
    ]:
        if path.is_file():
            best = max(best, sum(1 for line in path.open() if line.strip()))
    return best


def retrain_side_by_side(
    profile: str,
    overrides: Mapping[str, Any] | None = None,
    methods: Sequence[str] = ("at2po", "grpo"),
    seed: int = 0,
    progress: bool = True,
) -> SideBySide:
    """Train ``methods`` at once, one process and one thread each (module docstring);
    ``overrides`` are ``{"section.key": value}`` profile values for both (the knob)."""
    set_args = _set_values(dict(overrides or {}))
    nested: dict[str, dict[str, Any]] = {}
    for key, value in (overrides or {}).items():
        section, name = key.split(".", 1)
        nested.setdefault(section, {})[name] = value
    cfg = load_profile(profile, nested or None)  # a bad knob fails here, before any process
    policy = ensure_warmstart(load_profile(profile))
    results = results_dir("executed", profile, "try")
    logs = {m: results / f"{m}.log" for m in methods}
    results.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "AT2PO_RESULTS": str(results),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
    }
    command = [sys.executable, "-m", "at2po_lib.cli", "train", "--profile", profile]
    common = set_args + [
        "--set",
        f"policy.model={policy}",
        "--set",
        "train.progress_bar=false",
        "--seed",
        str(seed),
        "--force",
    ]
    start = time.perf_counter()
    processes = {}
    for method in methods:
        with logs[method].open("w") as log:
            processes[method] = subprocess.Popen(
                command + ["--method", method] + common, env=env, stdout=log, stderr=log
            )
    bars = _progress_bars(methods, cfg.train.max_steps) if progress else {}
    try:
        while any(p.poll() is None for p in processes.values()):
            for method, bar in bars.items():
                bar.n = _steps_done(results, profile, method, seed)
                bar.refresh()
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        for p in processes.values():
            p.terminate()
        raise
    finally:
        for method, bar in bars.items():
            bar.n = _steps_done(results, profile, method, seed)
            bar.close()
    failed = [m for m, p in processes.items() if p.returncode != 0]
    if failed:
        tail = logs[failed[0]].read_text().strip().splitlines()[-1:] or ["(empty log)"]
        raise RuntimeError(
            f"retraining {', '.join(failed)} failed (log: {logs[failed[0]]}): {tail[0]}"
        )
    return SideBySide(results, tuple(methods), seed, time.perf_counter() - start, logs)


def _progress_bars(methods: Sequence[str], steps: int) -> dict[str, Any]:
    return {
        m: tqdm(total=steps, desc=f"{m} (seed, 1 core)", unit="step", position=i)
        for i, m in enumerate(methods)
    }


def paired_difference(
    outcomes: pd.DataFrame, method: str, baseline: str, group: str | None = "multihop"
) -> dict[str, float]:
    """Mean per-question EM difference ``method − baseline`` over the questions both runs
    answered (one seed each; ``group`` None: every question), with the 95% Student-t interval
    over questions, in EM points (x100)."""
    frame = outcomes if group is None else outcomes[outcomes["group"] == group]
    keys = ["dataset", "question_id"]
    a = frame[frame["method"] == method].set_index(keys)["em"]
    b = frame[frame["method"] == baseline].set_index(keys)["em"]
    both = a.index.intersection(b.index)
    if len(both) < 2:
        raise ValueError(
            f"{method} and {baseline} share {len(both)} evaluated questions: need 2 or more"
        )
    diff = 100.0 * (a.loc[both].to_numpy(float) - b.loc[both].to_numpy(float))
    mean, sem = float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(len(diff)))
    half = float(stats.t.ppf(0.975, len(diff) - 1) * sem)
    return {"diff": mean, "low": mean - half, "high": mean + half, "questions": len(diff)}


def seed_differences(
    outcomes: pd.DataFrame, method: str, baseline: str, group: str | None = "multihop"
) -> pd.Series:
    """Per seed that both methods recorded, the mean EM difference ``method − baseline`` in
    points (x100): how much one seed's comparison moves from seed to seed."""
    frame = outcomes if group is None else outcomes[outcomes["group"] == group]
    means = frame.groupby(["method", "seed"])["em"].mean().mul(100.0)
    if method not in means.index.get_level_values(
        0
    ) or baseline not in means.index.get_level_values(0):
        return pd.Series(dtype=float, name=f"{method} - {baseline}")
    shared = means[method].index.intersection(means[baseline].index)
    return (means[method].loc[shared] - means[baseline].loc[shared]).rename(
        f"{method} - {baseline}"
    )


def load_side_by_side(
    result: SideBySide, profile: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``(metrics, evals, outcomes)`` of a side-by-side retraining's runs (its scratch folder)."""
    with results_moved_to(result.results):
        metrics, evals = load_training_records(profile, list(result.methods), [result.seed])
        outcomes = load_outcomes(profile, list(result.methods), [result.seed])
    return metrics, evals, outcomes


def plot_side_by_side(
    metrics: pd.DataFrame,
    evals: pd.DataFrame,
    difference: Mapping[str, float],
    spread: pd.Series,
    dataset: str = "tiny_hotpotqa",
    label: str = "this pair",
):
    """Three panels: the two runs' mean leaf reward over steps, their greedy validation EM of
    ``dataset``, and their paired multi-hop EM difference (point and 95% interval over
    questions) beside each committed seed's difference (dots). Returns ``(fig, axes)``."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.3), gridspec_kw={"width_ratios": [3, 3, 2]})
    plot_training_curves(metrics, ["reward"], smooth=3, axes=[axes[0]])
    axes[0].set_title("mean leaf reward")
    if len(evals) and (evals["dataset"] == dataset).any():
        plot_validation_em(evals, dataset, ax=axes[1])
        axes[1].set_title(f"validation EM ({dataset})")
    else:
        axes[1].set_axis_off()
    ax = axes[2]
    jitter = np.linspace(-0.15, 0.15, len(spread)) if len(spread) else []
    ax.scatter(
        jitter, spread.to_numpy(), color="0.6", s=14, label=f"committed seeds ({len(spread)})"
    )
    ax.errorbar(
        [0.45],
        [difference["diff"]],
        yerr=[[difference["diff"] - difference["low"]], [difference["high"] - difference["diff"]]],
        fmt="D",
        color="C3",
        capsize=4,
        label=f"{label} (95% over {difference['questions']} questions)",
    )
    ax.axhline(0.0, color="0.3", linewidth=0.8)
    ax.set_xlim(-0.5, 0.9)
    ax.set_xticks([])
    ax.set_ylabel(f"{spread.name or 'difference'}, multi-hop EM points")
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.02))
    ax.set_title("paired difference")
    fig.tight_layout()
    return fig, axes
