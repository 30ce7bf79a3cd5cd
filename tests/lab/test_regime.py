"""The regime gates (at2po_lib.lab.regime_pilot) on hand-made run folders: a gain with its
interval from per-question outcomes, the zero-variance share and the reward's rise from
metrics.jsonl."""

from __future__ import annotations

import json

import numpy as np
import pytest

from at2po_lib.lab.regime_pilot import MULTI_HOP, em_gain, signal_and_reward

HEADER = "dataset,group,id,prediction,em,f1,num_turns,num_tool_calls,finish_reason,sampled_em\n"


def _run(root, method, seed, em_by_question, metrics=()):
    folder = root / "runs" / "toy" / method / f"seed{seed}"
    folder.mkdir(parents=True)
    lines = [
        f"{ds},{'multihop' if ds in MULTI_HOP else 'singlehop'},{qid},x,{em:.4f},{em:.4f},2,1,answer,{em:.4f}\n"
        for (ds, qid), em in em_by_question.items()
    ]
    (folder / "outcomes.csv").write_text(HEADER + "".join(lines))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (folder / "eval.jsonl").write_text("")
    (folder / "DONE.json").write_text(
        json.dumps({"status": "trained", "config_hash": "x", "wall_time": 1.0})
    )


@pytest.fixture()
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    return tmp_path


def test_em_gain_is_the_paired_difference_with_an_interval(results):
    questions = [("tiny_hotpotqa", f"q{i}") for i in range(40)] + [
        ("tiny_nq", f"s{i}") for i in range(40)
    ]
    rng = np.random.default_rng(0)
    base = {q: float(rng.random() < 0.2) for q in questions}
    _run(results, "react", 0, base)
    for seed in (0, 1):  # GRPO answers 10 more multi-hop questions right, single-hop unchanged
        better = dict(base)
        for q in [q for q in questions if q[0] == "tiny_hotpotqa" and not base[q]][:10]:
            better[q] = 1.0
        _run(results, "grpo", seed, better)
    out = em_gain("toy", [0, 1])
    gain = out["multihop"]["gain"]
    assert gain["estimate"] == pytest.approx(10 / 40)
    assert gain["low"] > 0 and gain["high"] >= gain["estimate"] >= gain["low"]
    assert out["singlehop"]["gain"]["estimate"] == pytest.approx(0.0)
    with pytest.raises(FileNotFoundError, match="seeds \\[5\\]"):
        em_gain("toy", [0, 5])


def test_signal_and_reward_read_the_first_and_last_steps(results):
    metrics = [
        {"step": s, "reward": 0.1 * s, "frac_reward_zero_std": 1.0 if s <= 2 else 0.5}
        for s in range(1, 21)
    ]
    _run(results, "grpo", 0, {("tiny_hotpotqa", "q0"): 1.0}, metrics)
    out = signal_and_reward("toy", [0], window=4)
    assert out["zero_std_first"] == pytest.approx((1 + 1 + 0.5 + 0.5) / 4)
    assert out["reward_first"] == pytest.approx(0.25)
    assert out["reward_last"] == pytest.approx(0.1 * (17 + 18 + 19 + 20) / 4)
    with pytest.raises(FileNotFoundError, match="frac_reward_zero_std"):
        signal_and_reward("toy", [7])
