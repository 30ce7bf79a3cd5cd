r"""The toy study: the runs behind Tables 1–3, trained (or reused) for several seeds.

    at2po study --profile tiny --table 1 --seeds 0,1,2,3,4
    at2po study --profile tiny --table 1 --methods grpo,at2po --seeds 5,6,7,8,9
    at2po study --profile tiny --table 2 --seeds 0,1,2,3,4     # ablation steps 1-3 (+ at2po)
    at2po study --profile tiny --table 3 --seeds 0,1,2,3,4     # the credit grid
    at2po study --profile tiny --table 3 --seeds 0,1,2 \
        --methods 'credit_*_diff_global,credit_*_diff_localglobal'   # the code's other modes

Each (method, seed) is one :func:`at2po_lib.study.run.train` call: a finished run with the
same configuration is reused, an interrupted one resumes from its last complete checkpoint,
so a study can be stopped at any point and continued later (or split over machines by
``--methods``). ``react`` (the warm start evaluated as is; greedy decoding is deterministic)
runs for the first seed only. The tables and figures are then computed from the stored
records by :func:`at2po_lib.reporting.report.write_report` (``at2po report`` alone redoes
that part, in about a minute).

Which runs each table needs (docs/method.md §10):

- Table 1: ReAct, GRPO, DAPO, GSPO, Tree-GRPO, AEPO, AT2PO.
- Table 2: the three ablation steps; step 4 is AT2PO itself (Table 1's runs).
- Table 3: the credit grid, value modes × {node value, difference to the parent} by default
  (``--methods`` for the full 4 × 4 grid); its default cell (entropy_softmax, node_value) *is*
  AT2PO, so Table 1's runs serve there.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from typing import Any, Sequence

from ..config.profile import load_profile
from ..method.presets import METHODS, STUDY_TABLES, get_method
from ..util.paths import results_dir
from ..util.staging import staging_path
from ..record import run_folder
from ..record.identity import same_finished_run
from ..trainer.resolve import resolve_run
from .run import train


def study_methods(table: str, methods: Sequence[str] | None = None) -> list[str]:
    """The methods of ``table`` ('1', '2', '3'), or the given ones (each checked to exist).

    A given name may be a shell-style pattern over the presets, e.g. ``credit_*_diff_global``
    (every value mode with that advantage mode, in preset order); a pattern that matches
    nothing is an error, like an unknown name.
    """
    if table not in STUDY_TABLES:
        raise ValueError(f"unknown table {table!r}; known: {', '.join(STUDY_TABLES)}")
    chosen: list[str] = []
    for name in methods or STUDY_TABLES[table]:
        if any(ch in name for ch in "*?["):
            matches = fnmatch.filter(METHODS, name)
            if not matches:
                raise KeyError(
                    f"method pattern {name!r} matches no preset; "
                    "`at2po train --list-methods` lists all"
                )
            chosen += [m for m in matches if m not in chosen]
        elif name not in chosen:
            get_method(name)  # a typo fails before hours of training
            chosen.append(name)
    return chosen


def run_study(
    profile: str,
    table: str,
    seeds: Sequence[int],
    methods: Sequence[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> list[Any]:
    """Train or reuse every (method, seed) of ``table``, seed by seed (so the first seeds of
    every method finish first); returns the :class:`TrainResult` of each call."""
    chosen = study_methods(table, methods)
    results = []
    for seed in seeds:
        for method in chosen:
            if not get_method(method).trains and seed != seeds[0]:
                continue
            # resume: a run killed earlier (a machine that stopped, a kill) continues from its last complete
            # checkpoint instead of starting over; force starts every run afresh
            result = train(
                profile, method, seed, resume=not force, force=force, profile_overrides=overrides
            )
            print(
                f"[study] table {table}: {method} seed {seed}: {result.status} in "
                f"{result.wall_time:.0f} s ({result.run.root})",
                flush=True,
            )
            results.append(result)
    return results


@dataclass(frozen=True)
class PlannedRun:
    """What ``at2po study`` would do with one (method, seed)."""

    method: str
    seed: int
    state: str
    """``finished`` (reused), ``other config`` (finished with another configuration: kept
    unless ``--force``), ``resumes`` (an interrupted run with a complete checkpoint) or ``new``."""
    detail: str = ""


def study_plan(
    profile: str,
    table: str,
    seeds: Sequence[int],
    methods: Sequence[str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> list[PlannedRun]:
    """Each (method, seed) that :func:`run_study` would visit and its state, read from the run
    folders without training or writing anything: what is left of a study spread over
    several sittings or machines (``at2po study ... --plan``)."""
    cfg = load_profile(profile, overrides or None)
    chosen = study_methods(table, methods)
    runs_root = results_dir("runs") / run_folder.run_profile_key(cfg)
    plan = []
    for seed in seeds:
        for method in chosen:
            if not get_method(method).trains and seed != seeds[0]:
                continue
            run = run_folder.RunDir(runs_root / method / f"seed{seed}")
            spec = resolve_run(cfg, method, seed)
            digest, identity = run_folder.config_hash(spec.record()), spec.identity()
            checkpoint = run_folder.latest_complete_checkpoint(
                run_folder.RunDir(staging_path(run.root)).checkpoints
            )
            if same_finished_run(run, digest, identity):
                wall = json.loads(run.done.read_text()).get("wall_time")
                plan.append(
                    PlannedRun(method, seed, "finished", f"{wall / 60:.0f} min" if wall else "")
                )
            elif run_folder.is_finished(run):
                plan.append(PlannedRun(method, seed, "other config", "kept; --force retrains it"))
            elif checkpoint is not None:
                step = json.loads((checkpoint / run_folder.COMPLETE_MARKER).read_text())["step"]
                plan.append(PlannedRun(method, seed, "resumes", f"from step {step}"))
            else:
                plan.append(PlannedRun(method, seed, "new"))
    return plan
