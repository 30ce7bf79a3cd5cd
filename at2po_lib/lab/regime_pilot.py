r"""Does RL learn on this profile, and are the turns where the outcome is decided? The gates of
a toy regime, measured from its runs (``at2po regime-pilot``).

A regime (world, demonstrations, warm start, RL settings) is worth a study only when:

1. **RL learns**: GRPO from the warm start gains on the multi-hop average (greedy EM, every
   test question), with a 95% interval over seeds × questions (:func:`at2po_lib.evaluation.stats.
   difference_ci`: paired over questions, the warm start evaluated once, GRPO's seeds
   resampled), and its training reward rises (first vs last ``window`` steps);
2. **groups carry signal**: the share of GRPO's prompt groups with zero reward variance
   (TRL's ``frac_reward_zero_std``) over the first ``window`` steps;
3. **the outcome is decided at the turns**: among the warm start's failed greedy test
   trajectories, the share that failed at a decision (stopped early, repeated a query,
   searched off the plan: :mod:`at2po_lib.analysis.decisions`) and the share that had the supporting answer in
   context; and, on the same training prompts and leaf budget, the share of re-sampled turns
   whose branch ends with another reward than the branch they were re-sampled from, for
   entropy-guided picks and for uniform picks (the authors' ``random_siblings``), with the
   median entropy of search turns.

Everything is read from the run folders ``at2po train --method react`` / ``--method grpo``
wrote (nothing is trained here) and from fresh rollouts of the warm start.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.decisions import (
    classify_all,
    decision_calibration,
    failure_split,
    flip_ratio_ci,
    resample_flips,
    search_turn_entropy,
)
from ..analysis.study_trees import grow_trees, policy_folder, study_rows
from ..config.profile import load_profile
from ..evaluation.greedy import greedy_answers
from ..policy.model import load_policy
from ..protocol.prompts import get_template
from ..retrieval.indexes import build_retriever
from ..evaluation.stats import difference_ci, mean_ci
from ..tinyworld.build import ensure_world, read_rows
from ..util.paths import recorded_path, results_dir
from ..util.provenance import run_metadata, write_meta
from ..util.writing import save_figure
from ..record.reading import load_outcomes, load_training_records

# Imported inside the functions that use them: matplotlib; the pilot selects the Agg backend before
# pyplot loads (it runs headless).

MULTI_HOP = ("tiny_hotpotqa", "tiny_2wiki", "tiny_musique", "tiny_bamboogle")
SINGLE_HOP = ("tiny_nq", "tiny_triviaqa", "tiny_popqa")


def em_gain(
    profile: str,
    seeds: Sequence[int],
    method: str = "grpo",
    baseline: str = "react",
    metric: str = "em",
) -> dict[str, Any]:
    """Multi-hop and single-hop gain of ``method`` over ``baseline`` with 95% intervals."""
    outcomes = load_outcomes(profile, [baseline, method])
    outcomes = outcomes[(outcomes["method"] == baseline) | outcomes["seed"].isin(list(seeds))]
    if metric not in outcomes.columns:
        raise ValueError(f"no {metric!r} column in the outcomes of {profile}/{method}")
    missing = sorted(set(seeds) - set(outcomes.loc[outcomes["method"] == method, "seed"]))
    if missing or not (outcomes["method"] == baseline).any():
        raise FileNotFoundError(
            f"{profile}: no outcomes for {baseline} or {method} seeds {missing} "
            f"(run `at2po train --profile {profile} --method ...` first)"
        )
    out: dict[str, Any] = {"metric": metric, "seeds": list(seeds)}
    for group, datasets in (("multihop", MULTI_HOP), ("singlehop", SINGLE_HOP)):
        sub = outcomes[outcomes["dataset"].isin(datasets)].dropna(subset=[metric])
        if sub.empty:
            continue
        diff = difference_ci(sub, method, baseline, metric=metric)
        out[group] = {
            "gain": diff.as_dict(),
            baseline: mean_ci(sub, baseline, metric=metric).as_dict(),
            method: mean_ci(sub, method, metric=metric).as_dict(),
        }
    return out


def signal_and_reward(
    profile: str, seeds: Sequence[int], method: str = "grpo", window: int = 10
) -> dict[str, Any]:
    """Zero-variance share over the first ``window`` steps; reward over the first and last
    ``window`` steps (per seed and pooled)."""
    metrics, _ = load_training_records(profile, [method], list(seeds))
    if metrics.empty or "frac_reward_zero_std" not in metrics.columns:
        raise FileNotFoundError(
            f"{profile}/{method}: no metrics.jsonl with frac_reward_zero_std "
            f"for seeds {list(seeds)}"
        )
    reward_key = "reward" if "reward" in metrics.columns else "rewards/leaf_reward/mean"
    per_seed = {}
    for seed, m in metrics.groupby("seed"):
        m = m.sort_values("step")
        first, last = m.head(window), m.tail(window)
        per_seed[int(seed)] = {
            "steps": int(m["step"].max()),
            "zero_std_first": float(first["frac_reward_zero_std"].mean()),
            "reward_first": float(first[reward_key].mean()),
            "reward_last": float(last[reward_key].mean()),
        }
    pooled = {
        k: float(np.mean([v[k] for v in per_seed.values()]))
        for k in ("zero_std_first", "reward_first", "reward_last")
    }
    return {"window": window, "per_seed": per_seed, **pooled}


def reward_curves(profile: str, seeds: Sequence[int], method: str = "grpo"):
    """(step, seed, reward) rows of the training reward, for the pilot's figure."""
    metrics, _ = load_training_records(profile, [method], list(seeds))
    reward_key = "reward" if "reward" in metrics.columns else "rewards/leaf_reward/mean"
    return metrics[["seed", "step", reward_key]].rename(columns={reward_key: "reward"})


def warmstart_failures(
    cfg, policy: Path, datasets: Sequence[str] = MULTI_HOP, split: str = "test"
) -> dict[str, Any]:
    """Greedy trajectories of the warm start on every ``split`` question of ``datasets``,
    classified (:func:`.decisions.failure_split`)."""
    files = ensure_world(cfg)
    retriever = build_retriever(cfg, build=False)
    model, tokenizer = load_policy(policy, cfg.policy.dtype)
    frames = []
    for name in datasets:
        rows = read_rows(files, name, split)
        trajectories = greedy_answers(
            model,
            tokenizer,
            get_template(cfg.policy.template),
            retriever,
            rows,
            cfg.rollout,
            cfg.eval.batch_size,
        )
        frames.append(classify_all(rows, trajectories, name))
    frame = pd.concat(frames, ignore_index=True)
    return {
        "split": failure_split(frame),
        "per_dataset": {name: failure_split(part) for name, part in frame.groupby("dataset")},
    }


def expansion_flips(
    cfg,
    policy: Path,
    rows: Sequence[dict],
    seed: int,
    expansions: Sequence[str] = ("entropy", "random_siblings", "entropy_max"),
) -> dict[str, Any]:
    """Flip shares of re-sampled turns per expansion, on the same prompts and leaf budget.
    ``entropy_max`` is the entropy-guided expansion with ``rollout.turn_entropy = "max"``
    (docs/method.md §11); each ``*_over_random`` ratio carries a 95% interval paired over
    prompts (``*_over_random_ci``)."""
    out = {}
    for expansion in expansions:
        run_cfg, grown = cfg, expansion
        if expansion == "entropy_max":
            run_cfg = replace(cfg, rollout=replace(cfg.rollout, turn_entropy="max"))
            grown = "entropy"
        trees = grow_trees(run_cfg, rows, grown, seed, policy, log=False)
        out[expansion] = {
            **resample_flips(trees),
            "search_turn_entropy": search_turn_entropy(trees),
        }
    base = out.get("random_siblings", {}).get("flip_share")
    for name in ("entropy", "entropy_max"):
        if name in out and base:
            out[f"{name}_over_random"] = out[name]["flip_share"] / base
            out[f"{name}_over_random_ci"] = flip_ratio_ci(
                out[name]["per_prompt"], out["random_siblings"]["per_prompt"]
            )
    return out


def run_regime_pilot(
    profile: str,
    seeds: Sequence[int],
    num_prompts: int = 200,
    seed: int = 0,
    policy: str | None = None,
    overrides: dict | None = None,
    out_dir: str | Path | None = None,
    command: str = "",
) -> dict[str, Any]:
    """Measure the three gates and write ``<out_dir>/regime.json`` (default
    ``results/<profile>/pilot/``) and ``reward_curve.png``, each with its ``.meta.json``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = load_profile(profile, overrides or None)
    folder = policy_folder(cfg.name, policy)
    out = Path(out_dir) if out_dir else results_dir(cfg.name) / "pilot"
    out.mkdir(parents=True, exist_ok=True)
    rows = study_rows(cfg.name, list(cfg.train.train_datasets), num_prompts, seed)
    result = {
        "profile": cfg.name,
        "seeds": list(seeds),
        "policy": recorded_path(folder),
        "gate1_em_gain": em_gain(cfg.name, seeds),
        "gate1_sampled_gain": em_gain(cfg.name, seeds, metric="sampled_em"),
        "gate2_signal": signal_and_reward(cfg.name, seeds),
        "gate3_failures": warmstart_failures(cfg, folder),
        "gate3_decision_calibration": decision_calibration(cfg, folder).to_dict(orient="records"),
        "gate3_flips": {
            "prompts": num_prompts,
            "seed": seed,
            **expansion_flips(cfg, folder, rows, seed),
        },
    }
    meta = run_metadata(
        cfg.name,
        seed,
        config=None,
        command=command,
        policy=recorded_path(folder),
        writer="at2po_lib.lab.regime_pilot:run_regime_pilot",
    )
    path = out / "regime.json"
    path.write_text(json.dumps(result, indent=1, default=float) + "\n")
    write_meta(path, meta)
    curves = reward_curves(cfg.name, seeds)
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for s, part in curves.groupby("seed"):
        part = part.sort_values("step")
        ax.plot(part["step"], part["reward"].rolling(5, min_periods=1).mean(), label=f"seed {s}")
    ax.set_xlabel("training step")
    ax.set_ylabel("mean leaf reward (5-step mean)")
    ax.set_title(f"GRPO's training reward rises ({cfg.name}, toy scale)")
    ax.legend()
    figure = save_figure(fig, out / "reward_curve.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    write_meta(figure, meta)
    result["paths"] = [str(path), str(figure)]
    return result
