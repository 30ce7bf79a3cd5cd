"""What a command resolves before any work: every dataset it will read, every logger it starts.

The range table (:mod:`at2po_lib.config.checks`) checks each value's form when a profile
loads: a TinyWorld name must be one of TinyWorld's datasets, a ``report_to`` name one of
transformers' loggers. What depends on this machine is resolved here, when a command that needs it starts:

- every FlashRAG dataset of ``train.train_datasets`` (its ``train`` split), ``eval.datasets``,
  ``eval.sampled_datasets`` and ``train.val_datasets`` (their evaluation split): its file under
  ``data.local_dir``, or in the hub's cache (downloaded now when the hub can be reached);
- every ``train.report_to`` logger: its package is installed.

A miss is a :class:`ProfileError` naming the key and the name, one line on the command line,
before any model loads. Unchecked, ``--set eval.datasets=[nonexistent_ds]`` would train to the
end and fail at the final evaluation (a traceback), and ``--resume`` after the typo was fixed
would refuse the checkpoint as another configuration: the training would be lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..config.checks import logger_problems
from .qa_data import DataError, HubUnreachableError, evaluation_split, flashrag_path
from ..util.errors import ProfileError

if TYPE_CHECKING:  # pragma: no cover
    from ..config.profile import ProfileConfig

TINYWORLD_PREFIX = "tiny_"
"""TinyWorld's datasets are generated with the profile's world (their names are checked by the
range table), never downloaded."""


def dataset_problems(
    cfg: "ProfileConfig", key: str, names: Iterable[str], split: str | None = None
) -> list[str]:
    """``key: name: why`` for each FlashRAG dataset of ``names`` whose ``split`` (default: its
    evaluation split) cannot be found."""
    found = []
    for name in names:
        if name.startswith(TINYWORLD_PREFIX):
            continue
        try:
            flashrag_path(name, split or evaluation_split(name), local_dir=cfg.data.local_dir)
        except (DataError, HubUnreachableError) as exc:
            found.append(f"{key}: {name}: {str(exc)[:300]}")
    return found


def check_datasets(
    cfg: "ProfileConfig", *, training: bool, evaluated: Sequence[str] | None = None
) -> None:
    """Resolve the datasets a run reads (module docstring): the training split when
    ``training``, the periodic validation's when it validates, the final evaluation's
    (``evaluated``, default ``eval.datasets``) and the sampled metric's when there is one."""
    final = not training or cfg.train.final_eval
    found = []
    if training:
        found += dataset_problems(cfg, "train.train_datasets", cfg.train.train_datasets, "train")
        if cfg.train.eval_every > 0:
            key = "train.val_datasets" if cfg.train.val_datasets else "eval.datasets"
            found += dataset_problems(cfg, key, cfg.train.val_datasets or cfg.eval.datasets)
    if final:
        found += dataset_problems(
            cfg,
            "eval.datasets" if evaluated is None else "--datasets",
            cfg.eval.datasets if evaluated is None else evaluated,
        )
        found += dataset_problems(cfg, "eval.sampled_datasets", cfg.eval.sampled_datasets)
    if found:
        raise ProfileError(f"profile {cfg.name}: " + "; ".join(dict.fromkeys(found)))


def check_run_inputs(cfg: "ProfileConfig", *, trains: bool) -> None:
    """Before a run: its datasets, and for a run that trains its loggers."""
    problems = logger_problems(list(cfg.train.report_to)) if trains else []
    if problems:
        raise ProfileError(f"profile {cfg.name}: " + "; ".join(problems))
    check_datasets(cfg, training=trains)
