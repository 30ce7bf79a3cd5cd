r"""The toy Table 1: every method of the paper's Table 1 trained on one profile, several seeds.

    at2po table1 --profile tiny --seeds 0,1,2
    at2po table1 --profile tiny --seeds 0 --methods react,grpo,at2po
    at2po table1 --profile tiny --seeds 0,1,2 --set train.max_steps=96
    at2po report --profile tiny --seeds 0,1,2      # only collect the finished runs' table

Each (method, seed) is one :func:`at2po_lib.trainer.run.train` call (a finished run with the
same configuration is reused). ``react`` is the warm-start policy evaluated as is; greedy
evaluation is deterministic, so it runs for the first seed only. The table is tidy, one row per
(method, seed, dataset) — the seven datasets plus the sample-weighted ``multihop avg`` /
``singlehop avg`` rows of :func:`at2po_lib.evaluation.summarise` — with the run's wall time
(training + evaluation, seconds), and is written to ``results/<profile>/table1_<profile>.csv``
with a ``.meta.json`` beside it (config, versions, git revision, hardware). The command lines
are :mod:`at2po_lib.cli.table1` and :mod:`at2po_lib.cli.report`.
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

from ..config import load_profile
from . import records
from .methods import TABLE1_METHODS, get_method

TABLE_COLUMNS = ["profile", "method", "seed", "dataset", "group", "n", "em", "f1",
                 "mean_turns", "mean_tool_calls", "wall_time", "git_revision"]


def table1_methods(profile: str) -> list[str]:
    """Table 1's methods (Tree-GRPO included; the paper reports it for Qwen2.5-7B only)."""
    return list(TABLE1_METHODS)


def run_table1(profile: str, methods: Sequence[str] | None = None,
               seeds: Sequence[int] = (0,), force: bool = False,
               overrides: dict | None = None):
    """Train (or reuse) every (method, seed) and return the tidy table (not written).
    ``overrides``: profile overrides (nested dict) for every run, e.g. a longer training."""
    from .run import train

    methods = list(methods or table1_methods(profile))
    for method in methods:
        get_method(method)  # fail on a typo before hours of training
    for seed in seeds:
        for method in methods:
            if not get_method(method).trains and seed != seeds[0]:
                continue
            result = train(profile, method, seed, force=force, profile_overrides=overrides)
            print(f"[table1] {method} seed {seed}: {result.status} in {result.wall_time:.0f} s "
                  f"({result.run.root})", flush=True)
    return collect_table1(profile, methods, seeds)


def collect_table1(profile: str, methods: Sequence[str], seeds: Sequence[int]):
    """Tidy rows of the finished runs' ``final_eval.csv`` with their wall times."""
    import pandas as pd

    frames = []
    for method in methods:
        for seed in seeds:
            run = records.run_dir(profile, method, seed)
            if not (run.final_eval.is_file() and run.done.is_file()):
                continue
            frame = pd.read_csv(run.final_eval)
            frame["method"], frame["seed"] = method, seed
            frame["wall_time"] = json.loads(run.done.read_text()).get("wall_time")
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    table = pd.concat(frames, ignore_index=True)
    return table[[c for c in TABLE_COLUMNS if c in table.columns]]


def write_table1(table, profile: str, seeds: Sequence[int], overrides: dict | None = None):
    """``results/<profile>/table1_<profile>.csv`` + meta (the resolved config, overrides in)."""
    from ..evaluation import write_eval
    from ..paths import results_dir
    from ..provenance import hardware

    path = results_dir(profile) / f"table1_{profile}.csv"
    cfg = load_profile(profile, overrides)
    return write_eval(table, path, profile, None, cfg, seeds=list(seeds), hardware=hardware(),
                      command=" ".join(sys.argv))
