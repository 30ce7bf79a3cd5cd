"""A short live training run for notebook 04: a few steps a student can watch.

:func:`live_run` trains one method for ``steps`` steps from the profile's warm start into a
scratch results folder (``results/executed/<profile>/live/``, git-ignored), so it never touches
the recorded runs under ``results/runs/`` that the rest of the notebook shows, and is never
reused: a live run is for watching. No validation, no final evaluation, no checkpoints.
The trainer's progress bar and live plot show it step by step; :class:`StepRecorder` keeps
the logged steps for the notebook's summary.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd
from transformers import TrainerCallback

from ..config.profile import load_profile
from ..study.run import train
from ..warmstart.sft import ensure_warmstart
from ..util.paths import results_dir, results_moved_to

LIVE_METRICS = ("reward", "entropy")


def _callback_base() -> type:
    return TrainerCallback


class StepRecorder(_callback_base()):
    """A ``TrainerCallback`` keeping every logged rollout step's :data:`LIVE_METRICS`
    (``rows``); the trainer's own progress bar and live plot (``StepProgress``: reward and, with
    no validation, policy entropy) draw them as they come."""

    def __init__(self, metrics: tuple[str, ...] = LIVE_METRICS):
        self.metrics, self.rows = metrics, []

    def on_log(
        self,
        args: Any,
        state: Any,
        control: Any,
        logs: Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs and "reward" in logs:
            self.rows.append({"step": len(self.rows) + 1, **{m: logs.get(m) for m in self.metrics}})


def live_run(
    profile: str, method: str, steps: int, seed: int = 0, overrides: Mapping[str, Any] | None = None
) -> tuple[Any, "Any"]:
    """Train ``method`` for ``steps`` steps (module docstring); returns the
    :class:`~at2po_lib.study.run.TrainResult` and a DataFrame of the logged steps."""
    merged = {k: dict(v) for k, v in (overrides or {}).items()}
    policy = ensure_warmstart(load_profile(profile, merged or None))  # before the scratch folder
    merged.setdefault("train", {}).update(
        {"max_steps": int(steps), "eval_every": 0, "final_eval": False, "save_every": 0}
    )
    merged.setdefault("policy", {}).update({"model": str(policy)})
    scratch = results_dir("executed", profile, "live")
    curves = StepRecorder()
    with results_moved_to(scratch):
        result = train(
            profile, method, seed, force=True, profile_overrides=merged, callbacks=[curves]
        )
    return result, pd.DataFrame(curves.rows)
