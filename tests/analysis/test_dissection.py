"""The dissection read from the runs' records (issue #35 item 4): credit spread, its fitted
rule, the clip levels, and the CLI over a run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from at2po_lib.analysis.dissection import (
    clip_levels,
    credit_from_runs,
    credit_spread,
    fit_spread_rule,
    paper_scale_weight_gap,
)
from at2po_lib.method.tree import TreeArrays
from at2po_lib.record.tree_files import save_trees

RUN = Path(__file__).resolve().parents[2] / "results" / "runs" / "tiny" / "at2po" / "seed0"


def two_sibling_tree(gap: float) -> TreeArrays:
    """root -> 1, 2 (entropies 0 and gap), both leaves."""
    h = np.array([0.0, 0.0, gap])
    return TreeArrays(
        parent=np.array([-1, 0, 0]),
        entropy=h,
        leaf_reward=np.array([np.nan, 1.0, 0.0]),
        node_arrays={"entropy_nll": h, "entropy_exact": h / 10},
    )


def test_credit_spread_and_rule_by_hand():
    sets = credit_spread([two_sibling_tree(0.2)])
    nll = sets[sets["estimate"] == "nll"].iloc[0]
    # two siblings: |w - 1/2| = |sigmoid(0.2) - 1/2| for both
    assert nll["dev"] == pytest.approx(1 / (1 + np.exp(-0.2)) - 0.5)
    assert (nll["range"], nll["n"]) == (pytest.approx(0.2), 2)
    # for two siblings dev = tanh(range / 2) / 2 ~ range / 4 = (1/2) * range / n: c -> 1/2
    fit = fit_spread_rule(
        credit_spread([two_sibling_tree(g) for g in (0.01, 0.02, 0.03)]), draws=100
    ).set_index("estimate")
    assert fit.loc["nll", "c"] == pytest.approx(0.5, abs=1e-3)
    assert fit.loc["exact", "trees"] == 3 and fit.loc["exact", "sibling_sets"] == 3
    assert fit.loc["nll", "c_lo"] <= fit.loc["nll", "c"] <= fit.loc["nll", "c_hi"]


def test_paper_scale_estimate_is_its_formula():
    got = paper_scale_weight_gap(token_spread=0.3, tokens=300, decision_gap=3.0, siblings=2)
    assert got["range"] == pytest.approx(0.3 / np.sqrt(300) + 0.01)
    assert got["weight_gap"] == pytest.approx(0.5 * got["range"] / 2)


def test_runs_read_back(tmp_path):
    run = tmp_path / "at2po" / "seed3"
    (run / "trees").mkdir(parents=True)
    save_trees([two_sibling_tree(0.4)], run / "trees" / "step0001.npz")
    save_trees([two_sibling_tree(0.1)], run / "trees" / "step0096.npz")
    rows = [
        {
            "step": s,
            "clip_ratio/token_level": t,
            "clip_ratio/turn_level": u,
            "clip_ratio/region_mean": u,
        }
        for s, t, u in ((1, 0.1, 0.3), (2, 0.2, 0.5))
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    sets, fits = credit_from_runs([run])
    assert set(sets["stage"]) == {"first", "last"}
    first = sets[(sets["stage"] == "first") & (sets["estimate"] == "nll")].iloc[0]
    assert first["range"] == pytest.approx(0.4)
    assert set(fits["method"]) == {"at2po"}  # one fit per method and stage
    clips = clip_levels([run]).iloc[0]
    assert (clips["token_level"], clips["turn_level"]) == (pytest.approx(0.15), pytest.approx(0.4))
    assert np.isnan(clips["turn_level_at_reference"]) and np.isnan(clips["epsilon"])
    # a run that logged both levels at 0.2 too, at its own range 3e-3 / 4e-3 (config.yaml)
    (run / "config.yaml").write_text(
        "settings:\n  trainer:\n    epsilon: 0.003\n    epsilon_high: 0.004\n"
    )
    both = [
        {**r, "clip_ratio/token_level_eps0.2": 0.01, "clip_ratio/turn_level_eps0.2": t}
        for r, t in zip(rows, (0.02, 0.04))
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in both))
    clips = clip_levels([run]).iloc[0]
    assert (clips["epsilon"], clips["epsilon_high"]) == (0.003, 0.004)
    assert (clips["token_level_at_reference"], clips["turn_level_at_reference"]) == (
        pytest.approx(0.01),
        pytest.approx(0.03),
    )
    # a run trained at 0.2 reads its own levels there
    grpo = tmp_path / "grpo_tree_budget" / "seed0"
    grpo.mkdir(parents=True)
    (grpo / "config.yaml").write_text(
        "settings:\n  trainer:\n    epsilon: 0.2\n    epsilon_high: 0.2\n"
    )
    (grpo / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    at_02 = clip_levels([grpo]).iloc[0]
    assert at_02["turn_level_at_reference"] == pytest.approx(0.4)
    # a run without the both-level records is left out, not read as zeros
    old = tmp_path / "grpo" / "seed0"
    old.mkdir(parents=True)
    (old / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.1}) + "\n")
    assert len(clip_levels([run, old])) == 1


@pytest.mark.slow  # fits a committed run's trees: ~7 s of CPU
@pytest.mark.skipif(not (RUN / "trees").is_dir(), reason="no committed AT2PO run with trees")
def test_dissect_runs_cli_on_a_committed_run(tmp_path, monkeypatch):
    from at2po_lib.cli import main

    copy = tmp_path / "runs" / "tiny" / "at2po" / "seed0"
    shutil.copytree(RUN, copy)
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    assert main(["dissect", "runs", "--profile", "tiny", "--methods", "at2po"]) == 0
    fits = pd.read_csv(tmp_path / "tiny" / "dissection" / "credit_spread.csv")
    assert set(fits["estimate"]) == {"nll", "exact"} and set(fits["stage"]) == {"first", "last"}
    assert set(fits["method"]) == {"at2po"}
    assert ((fits["c"] > 0.2) & (fits["c"] <= 0.5 + 1e-9)).all()
    assert (tmp_path / "tiny" / "dissection" / "clip_levels.csv.meta.json").is_file()
