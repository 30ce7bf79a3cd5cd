r"""Trainer callbacks that write a run's records (``run_folder.RunDir``) and show its progress.

All act on the main process only and hook TRL/transformers' callback events, so the training
loop stays TRL's:

- :class:`MetricsRecorder` (``on_log``): one ``metrics.jsonl`` row per rollout step with the
  metrics TRL and :class:`AT2POTrainer` log, under their logged names (TRL logs every
  ``logging_steps`` optimizer steps, which the run sets to the updates of one rollout step).
- :class:`GreedyValidation` (``on_train_begin`` / ``on_step_end``): greedy EM per dataset on the
  validation questions every ``eval_every`` rollout steps (and at step 0 with
  ``train.val_before_train``) → ``eval.jsonl``.
- :class:`CheckpointMarker` (``on_save``): the COMPLETE marker once TRL's save returned.
- :class:`TreeRecord` (``on_step_end``): the rollout trees of the first and the last rollout
  step → ``trees/step<S>.npz``, every node with its entropy summaries and decision label
  (:func:`at2po_lib.rollout.export.tree_arrays`), so analyses can read trained trees.
- :class:`StepProgress`: a progress bar over rollout steps with reward, entropy and time left;
  in a notebook also a live plot of reward and validation EM.
- :class:`TrainingProgress`: the same for a plain (SFT) trainer: one bar and a live loss plot,
  instead of transformers' printed ``{'loss': ...}`` dicts.

A *rollout step* (``step`` in every record) is ``global_step // updates_per_step``: one batch of
rollouts, the paper's unit ("240 training steps").
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm
from transformers import TrainerCallback

from ..record.tree_files import save_trees
from ..record import run_folder

# Imported inside the functions that use them: IPython; a notebook-only package, there only inside
# Jupyter.
# Imported inside the functions that use them: matplotlib; the trainer loads matplotlib only for a
# live plot in a notebook.

RECORD_FIELDS = ("step", "global_step", "wall_time")
"""What :class:`MetricsRecorder` adds to the logged metrics of a rollout step."""

WALL_TIME_KEYS = ("rollout/seconds", "step_time", "wall_time", "eval_time")
"""Record fields that measure time (excluded when comparing two runs' records)."""


def rollout_step(global_step: int, updates_per_step: int) -> int:
    return global_step // max(updates_per_step, 1)


class MetricsRecorder(TrainerCallback):
    """Append one row per logged rollout step to ``metrics.jsonl``.

    The row holds every metric of the log under the name TRL or :class:`AT2POTrainer` logged
    it (``clip_ratio/region_mean``, ``rollout/turns_mean``, ``completions/mean_length``...),
    so a record, TensorBoard and TRL's documentation all use one vocabulary; the recorder
    only adds :data:`RECORD_FIELDS`.
    """

    def __init__(self, path: Path, updates_per_step: int, start_time: float | None = None):
        self.path = path
        self.updates_per_step = updates_per_step
        self.start_time = start_time if start_time is not None else time.time()
        self.last: dict[str, Any] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "reward" not in logs:
            return  # evaluation logs and the final train summary carry no rollout metrics
        row: dict[str, Any] = {
            "step": rollout_step(state.global_step, self.updates_per_step),
            "global_step": state.global_step,
        }
        row.update(
            (key, value)
            for key, value in logs.items()
            if value is not None and key not in RECORD_FIELDS
        )
        row["wall_time"] = time.time() - self.start_time
        run_folder.append_jsonl(self.path, row)
        self.last = row


class GreedyValidation(TrainerCallback):
    """Greedy validation EM per dataset every ``every`` rollout steps, at the last step, and at
    step 0 when ``before_train`` (the authors' scripts set ``val_before_train=False``).

    ``evaluate() -> pandas.DataFrame`` (per-dataset rows with ``dataset``, ``group``, ``n``,
    ``em``, ``f1``, ``mean_turns``) is supplied by the run (``run.Validator``: it takes the
    trainer's current policy and shards questions over processes), so this callback knows
    nothing about models, retrievers or datasets. It runs on every process (generation may
    need collective weight gathering); the main process writes the rows.
    """

    def __init__(
        self,
        path: Path,
        evaluate: Callable[[], Any],
        every: int,
        updates_per_step: int,
        before_train: bool = False,
    ):
        self.path = path
        self.before_train = before_train
        self.evaluate = evaluate
        self.every = every
        self.updates_per_step = updates_per_step
        self.last: dict[str, float] = {}
        self.history: list[tuple[int, float]] = []  # (step, mean EM over datasets)

    def _run(self, step: int, state) -> None:
        start = time.perf_counter()
        frame = self.evaluate()
        seconds = time.perf_counter() - start
        if not state.is_world_process_zero:
            return
        for rec in frame.to_dict("records"):
            row = {
                "step": step,
                "dataset": rec["dataset"],
                "group": rec.get("group"),
                "n": rec.get("n"),
                "em": rec.get("em"),
                "f1": rec.get("f1"),
                "mean_turns": rec.get("mean_turns"),
                "mean_tool_calls": rec.get("mean_tool_calls"),
                "eval_time": seconds,
            }
            run_folder.append_jsonl(self.path, row)
            self.last[str(rec["dataset"])] = float(rec.get("em"))
        if self.last:
            self.history.append((step, sum(self.last.values()) / len(self.last)))

    def on_train_begin(self, args, state, control, **kwargs):
        if self.before_train and self.every > 0 and state.global_step == 0:
            self._run(0, state)

    def on_step_end(self, args, state, control, **kwargs):
        if self.every <= 0 or state.global_step % self.updates_per_step:
            return
        step = rollout_step(state.global_step, self.updates_per_step)
        if step % self.every == 0 or state.global_step >= state.max_steps:
            self._run(step, state)


class TreeRecord(TrainerCallback):
    """Save the trees of the rollout steps in ``steps`` (default: the first and the last) to
    ``<folder>/step<S:04d>.npz`` (:func:`at2po_lib.record.tree_files.save_trees`; one file per
    process, ``.rank<R>`` added under several). Output only: nothing the run computes reads it,
    so the run's configuration and results do not depend on it."""

    def __init__(self, trainer, folder: Path, steps: Sequence[int]):
        self.trainer, self.folder, self.steps = trainer, Path(folder), set(steps)

    def on_step_end(self, args, state, control, **kwargs):
        updates = self.trainer.updates_per_step
        batch = self.trainer.last_rollout
        step = rollout_step(state.global_step, updates)
        if state.global_step % updates or step not in self.steps or batch is None:
            return
        acc = self.trainer.accelerator
        rank = f".rank{acc.process_index}" if acc.num_processes > 1 else ""
        self.folder.mkdir(parents=True, exist_ok=True)
        save_trees(
            batch.trees,
            self.folder / f"step{step:04d}{rank}.npz",
            meta={
                "step": step,
                "global_step": state.global_step,
                "rank": acc.process_index,
                "world_size": acc.num_processes,
            },
        )


class CheckpointMarker(TrainerCallback):
    """Mark ``checkpoint-N`` complete once TRL's save has returned (see ``records``)."""

    def __init__(self, checkpoints: Path, updates_per_step: int):
        self.checkpoints = checkpoints
        self.updates_per_step = updates_per_step

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = self.checkpoints / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            run_folder.mark_checkpoint_complete(
                folder,
                global_step=state.global_step,
                step=rollout_step(state.global_step, self.updates_per_step),
            )


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, or papermill executing a notebook)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class LivePlot:
    """A small figure that redraws in place in a notebook: one output, updated as training goes.

    ``panels`` name the y axes; :meth:`update` takes ``{panel: {series: (steps, values)}}``.
    The figure is rendered to PNG and shown through an IPython display handle, so it never
    touches pyplot's current figure and appears once, not once per update. Redraws are at
    most every ``every_s`` seconds (rendering costs ~0.1 s) unless forced.
    """

    def __init__(self, panels: Sequence[str], title: str = "", every_s: float = 5.0):
        self.panels = list(panels)
        self.title = title
        self.every_s = every_s
        self.handle = None
        self.last_draw = 0.0

    def update(
        self,
        data: dict[str, dict[str, tuple[Sequence[float], Sequence[float]]]],
        force: bool = False,
    ) -> None:
        now = time.perf_counter()
        if not force and now - self.last_draw < self.every_s:
            return
        if not any(xs for series in data.values() for xs, _ in series.values()):
            return  # nothing to draw yet
        from IPython.display import Image, display

        image = Image(data=self._render(data), format="png")
        if self.handle is None:
            self.handle = display(image, display_id=True)
        else:
            self.handle.update(image)
        self.last_draw = now

    def _render(self, data) -> bytes:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(4.0 * len(self.panels), 2.6), layout="constrained")
        axes = fig.subplots(1, len(self.panels), squeeze=False)[0]
        for ax, panel in zip(axes, self.panels):
            for name, (xs, ys) in data.get(panel, {}).items():
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=name)
            ax.set_xlabel("step")
            ax.set_ylabel(panel)
            if len(data.get(panel, {})) > 1:
                ax.legend(fontsize="small")
        if self.title:
            fig.suptitle(self.title, fontsize="medium")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=90)
        return buffer.getvalue()


class _BarWithLivePlot(TrainerCallback):
    """A tqdm bar on the main process and, in a notebook, a :class:`LivePlot`; subclasses say
    what the bar counts (:meth:`_bar_position`) and what the plot shows (:meth:`_plot_data`)."""

    def __init__(self, description: str, panels: Sequence[str], plot: bool | None):
        self.description = description
        self.plot = (
            LivePlot(panels, description) if (in_notebook() if plot is None else plot) else None
        )
        self.bar = None

    def _bar_position(self, state) -> tuple[int, int]:
        """``(total, done)`` when training begins."""
        raise NotImplementedError

    def _plot_data(self) -> dict[str, dict[str, tuple[Sequence[float], Sequence[float]]]]:
        raise NotImplementedError

    def _draw(self, force: bool = False) -> None:
        if self.plot is not None:
            self.plot.update(self._plot_data(), force=force)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            total, done = self._bar_position(state)
            self.bar = tqdm(total=total, desc=self.description, unit="step", initial=done)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self._draw(force=True)
            self.bar.close()
            self.bar = None


class StepProgress(_BarWithLivePlot):
    """A tqdm bar over rollout steps: reward, entropy, latest validation EM, time left; in a
    notebook also a live plot of the mean reward and the validation EM per step."""

    def __init__(
        self,
        total_steps: int,
        updates_per_step: int,
        description: str = "",
        validation: GreedyValidation | None = None,
        plot: bool | None = None,
    ):
        # without validation (a short live run) the second panel is the policy entropy: an
        # empty validation panel would only say nothing was measured
        second = "validation EM" if validation is not None else "policy entropy"
        super().__init__(description, ["reward", second], plot)
        self.total = total_steps
        self.updates_per_step = updates_per_step
        self.validation = validation
        self.rewards: tuple[list[int], list[float]] = ([], [])
        self.entropies: tuple[list[int], list[float]] = ([], [])

    def _bar_position(self, state) -> tuple[int, int]:
        return self.total, rollout_step(state.global_step, self.updates_per_step)

    def _plot_data(self):
        if self.validation is None:
            return {
                "reward": {"sampled leaves": self.rewards},
                "policy entropy": {"policy tokens": self.entropies},
            }
        history = self.validation.history
        return {
            "reward": {"sampled leaves": self.rewards},
            "validation EM": {"greedy": ([s for s, _ in history], [em for _, em in history])},
        }

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs or "reward" not in logs:
            return
        step = rollout_step(state.global_step, self.updates_per_step)
        self.bar.update(max(step - self.bar.n, 0))
        self.rewards[0].append(step)
        self.rewards[1].append(float(logs["reward"]))
        if "entropy" in logs:
            self.entropies[0].append(step)
            self.entropies[1].append(float(logs["entropy"]))
        postfix = {"reward": f"{logs['reward']:.3f}"}
        if logs.get("entropy") is not None:
            postfix["entropy"] = f"{logs['entropy']:.3f}"
        if self.validation is not None and self.validation.history:
            postfix["val_em"] = f"{self.validation.history[-1][1]:.3f}"
        self.bar.set_postfix(postfix, refresh=False)
        self._draw()


class TrainingProgress(_BarWithLivePlot):
    """One tqdm bar over optimizer steps with the latest loss, and in a notebook a live plot
    of the training loss (plus any points ``extra_points()`` returns, e.g. validation EM of
    saved checkpoints: ``{"validation EM": [(step, em), ...]}``, drawn in a second panel).

    Replaces transformers' ``PrinterCallback``, which prints every log dict (a ~50 KB wall of
    ``{'loss': ...}`` lines for the tiny warm start); the records stay in
    ``trainer.state.log_history``.
    """

    def __init__(
        self,
        description: str = "training",
        extra_points: Callable[[], dict[str, list[tuple[int, float]]]] | None = None,
        plot: bool | None = None,
    ):
        super().__init__(
            description, ["loss"] + (["validation"] if extra_points is not None else []), plot
        )
        self.extra_points = extra_points
        self.losses: tuple[list[int], list[float]] = ([], [])

    def _bar_position(self, state) -> tuple[int, int]:
        return state.max_steps, state.global_step

    def _plot_data(self):
        data = {"loss": {"train": self.losses}}
        if self.extra_points is not None:
            data["validation"] = {
                name: ([s for s, _ in pts], [v for _, v in pts])
                for name, pts in self.extra_points().items()
            }
        return data

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(max(state.global_step - self.bar.n, 0))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs or "loss" not in logs:
            return
        self.losses[0].append(state.global_step)
        self.losses[1].append(float(logs["loss"]))
        self.bar.set_postfix({"loss": f"{logs['loss']:.3f}"}, refresh=False)
        self._draw()
