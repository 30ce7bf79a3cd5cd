"""The expansion oracle (issue #35 item 4): per-candidate flip probabilities from re-samples,
and the summaries that rank scores against them."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pandas as pd
import pytest
import torch

from at2po_lib.analysis.expansion_oracle import (SCORES, chunks_to_do, measure_chunk, oracle_summary,
                                                 per_prompt)
from at2po_lib.rollout.stand_ins import ScriptedBackend, ToySetup


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AT2PO_ARTIFACTS", str(tmp_path_factory.mktemp("artifacts")))
        torch.set_num_threads(1)
        yield ToySetup("smoke", seed=0)


def search_then_guess(gold: str, p_right: float):
    """First turn: a search (always the same); second: the right answer with p_right."""
    first_len: list[int] = []

    def script(context: list[int], rng: random.Random) -> str:
        first_len.append(first_len[0] if first_len else len(context))
        if len(context) == first_len[0]:
            return "<search> the capital </search>"
        answer = gold if rng.random() < p_right else "nobody"
        return f"<answer> {answer} </answer><|im_end|>"

    return script


@pytest.mark.slow
def test_flip_probability_of_a_scripted_policy_is_known(toy):
    # Re-sampling the search turn gives a new answer: right with p = 0.3. A candidate whose own
    # chain was right flips with 1 - p = 0.7, a wrong one with p = 0.3.
    row = dict(toy.rows[0], dataset="tiny_hotpotqa")
    gold = row["golden_answers"][0]
    cfg = dataclasses.replace(toy.cfg.rollout, max_response_tokens=600, max_tool_calls=3)
    backend = ScriptedBackend(toy.tokenizer, search_then_guess(gold, 0.3), seed=3)
    records = measure_chunk(None, toy.tokenizer, toy.template, toy.retriever, [row], cfg,
                            chains=4, resamples=300, seed=0, first_prompt=0, backend=backend)
    frame = pd.DataFrame(records)
    assert len(frame) == 4  # the four search turns; the answers are leaves
    assert (frame["decision"] != "root").all() and (frame["depth"] == 1).all()
    assert (frame["siblings_before"] == 3).all()  # four chains from the root
    assert np.allclose(frame["authors_score"], frame["entropy_nll"] - 0.05 * 3)
    assert np.allclose(frame["sibling_penalty"], -0.05 * 3)
    for _, c in frame.iterrows():
        rewards = json.loads(c["resample_rewards"])
        p_flip = np.mean([r != c["original_reward"] for r in rewards])
        expected = 0.7 if c["original_reward"] == 1.0 else 0.3
        assert abs(p_flip - expected) < 0.09  # 300 draws: sd 0.027


def hand_frame() -> pd.DataFrame:
    """One prompt, four candidates with p_flip 0, 0.5, 0.25, 1 from four re-samples."""
    resamples = [[0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]]
    frame = pd.DataFrame({"prompt": 0, "node": [1, 2, 3, 4], "original_reward": 0.0,
                          "resample_rewards": [json.dumps(r) for r in resamples]})
    for score in SCORES:
        frame[score] = [1.0, 2.0, 3.0, 4.0]
    frame["resamples"] = 4
    frame["flips"] = [sum(r) for r in resamples]
    frame["p_flip"] = frame["flips"] / 4
    return frame


def test_per_prompt_by_hand():
    got = per_prompt(hand_frame(), k=2).iloc[0]
    # ranks of p_flip (0, .5, .25, 1) are 1, 3, 2, 4: rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert got["spearman_entropy_exact"] == pytest.approx(0.8)
    assert got["uniform_expected"] == pytest.approx(2 * 0.4375)
    assert got["picked_entropy_exact"] == pytest.approx(1.0 + 0.25)  # nodes 4 and 3
    # the oracle ranks by the first half of the re-samples (0, .5, 0, 1) and is scored on the
    # second (0, .5, .5, 1): its picks are nodes 4 and 2
    assert got["picked_oracle"] == pytest.approx(1.0 + 0.5)
    assert got["uniform_expected_eval_half"] == pytest.approx(2 * 0.5)


def test_summary_ratios_and_intervals():
    frames = [hand_frame().assign(prompt=p) for p in range(5)]
    summary = oracle_summary(pd.concat(frames), k=2, draws=200).set_index("score")
    assert summary.loc["entropy_exact", "flips_vs_uniform"] == pytest.approx(1.25 / 0.875)
    assert summary.loc["oracle", "flips_vs_uniform"] == pytest.approx(1.5 / 1.0)
    assert summary.loc["entropy_exact", "spearman"] == pytest.approx(0.8)
    # identical prompts: the bootstrap interval is the point
    assert summary.loc["entropy_exact", "spearman_lo"] == pytest.approx(0.8)
    assert (summary["prompts"] == 5).all() and (summary["candidates"] == 20).all()


def test_committed_style_summaries_are_read_and_said(tmp_path):
    from at2po_lib.analysis.expansion_oracle import flip_ratio_sentence, read_summaries

    def summary(ratio, lo, hi, k, prompts):
        return pd.DataFrame({"score": ["entropy_exact", "oracle"], "k": k, "prompts": prompts,
                             "candidates": 10 * prompts, "resamples": 8,
                             "flips_vs_uniform": [ratio, 1.5], "flips_vs_uniform_lo": [lo, 1.4],
                             "flips_vs_uniform_hi": [hi, 1.6]})

    assert read_summaries(tmp_path).empty
    summary(1.04, 0.89, 1.21, 6, 100).to_csv(tmp_path / "expansion_oracle_warmstart_paper_summary.csv")
    summary(0.99, 0.97, 1.01, 4, 595).to_csv(tmp_path / "expansion_oracle_warmstart_toy_summary.csv")
    frame = read_summaries(tmp_path)
    assert list(frame.drop_duplicates(["policy", "shape"])["shape"]) == ["toy", "paper"]
    text = flip_ratio_sentence(frame, "entropy_exact")
    assert "the warm start, toy tree (K = 4, 595 prompts" in text and "0.99× [0.97, 1.01]" in text
    assert "1.04× [0.89, 1.21]" in text and "perfect picker: 1.50×" in text
    assert text.index("toy tree") < text.index("paper's tree")
    with pytest.raises(ValueError, match="entropy_nll"):
        flip_ratio_sentence(frame, "entropy_nll")
    assert "No expansion oracle records" in flip_ratio_sentence(read_summaries(tmp_path / "none"), "x")


def test_oracle_records_fall_back_to_tiny(tmp_path, monkeypatch):
    from at2po_lib.analysis.expansion_oracle import oracle_records

    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    assert oracle_records("smoke")[1].empty
    (tmp_path / "tiny" / "dissection").mkdir(parents=True)
    pd.DataFrame({"score": ["entropy_exact"], "k": [4]}).to_csv(
        tmp_path / "tiny" / "dissection" / "expansion_oracle_warmstart_toy_summary.csv", index=False)
    name, frame = oracle_records("smoke")
    assert name == "tiny" and list(frame["policy"]) == ["warmstart"]


def test_a_resume_skips_every_chunk_with_a_recorded_prompt():
    """Prompts 0-19 and 20-39 were measured but prompt 20 had no candidate (no row): the
    chunk starting at 20 is done all the same; 40-59 has no row and is measured."""
    done = set(range(0, 20)) | set(range(21, 40))
    assert chunks_to_do(done, 60, 20) == [40]
    assert chunks_to_do(set(), 45, 20) == [0, 20, 40]
    assert chunks_to_do({59}, 60, 20) == [0, 20]


def test_ties_at_the_kth_score_count_in_expectation():
    from at2po_lib.analysis.expansion_oracle import tie_aware_flips

    # three candidates tied at the top for two picks: each counts 2/3 -> 2 x mean(0, .5, 1)
    assert tie_aware_flips([1, 1, 1, 0], [0.0, 0.5, 1.0, 0.2], 2) == pytest.approx(1.0)
    # one above, two tied for the last pick: 0.2 + 1 x mean(0, 1)
    assert tie_aware_flips([2, 1, 1, 0], [0.2, 0.0, 1.0, 0.9], 2) == pytest.approx(0.7)
    # no ties: the top k; more picks than candidates: all of them
    assert tie_aware_flips([3, 2, 1], [0.1, 0.2, 0.4], 2) == pytest.approx(0.3)
    assert tie_aware_flips([3, 2, 1], [0.1, 0.2, 0.4], 5) == pytest.approx(0.7)


def test_a_constant_score_is_a_uniform_pick_and_the_in_sample_picker_an_upper_bound():
    frame = hand_frame()
    frame["sibling_penalty"] = -0.15                          # every candidate has b = 3
    got = per_prompt(frame, k=2).iloc[0]
    assert got["picked_sibling_penalty"] == pytest.approx(got["uniform_expected"])
    # in-sample: ranked and scored on all four re-samples, p_flip 1 and 0.5
    assert got["picked_oracle_in_sample"] == pytest.approx(1.5)
    summary = oracle_summary(frame, k=2, draws=50).set_index("score")
    assert summary.loc["sibling_penalty", "flips_vs_uniform"] == pytest.approx(1.0)
    assert summary.loc["oracle_in_sample", "flips_vs_uniform"] == pytest.approx(1.5 / 0.875)


def test_the_placebo_sets_the_margin_of_better_and_worse():
    from at2po_lib.analysis.expansion_oracle import placebo_margin, versus_uniform

    summaries = pd.DataFrame({"score": ["uniform", "uniform", "authors_score"],
                              "flips_vs_uniform": [1.05, 0.98, 1.2]})
    assert placebo_margin(summaries) == pytest.approx(0.05)
    assert placebo_margin(pd.DataFrame()) == 0.0
    assert versus_uniform(1.04, 1.10, 0.05) == "no different"   # above 1, inside the margin
    assert versus_uniform(1.06, 1.10, 0.05) == "better"
    assert versus_uniform(0.90, 0.96, 0.05) == "no different"
    assert versus_uniform(0.90, 0.94, 0.05) == "worse"


def test_penalty_effect_by_hand():
    """Two prompts; first turns (depth 1, b = 3: penalty 0.15) and deeper turns (b = 0)."""
    from at2po_lib.analysis.expansion_oracle import load_oracle, penalty_effect

    frame = pd.DataFrame({
        "prompt": [0, 0, 0, 1, 1, 1], "depth": [1, 1, 2, 1, 2, 3],
        "siblings_before": [3, 3, 0, 3, 0, 0],
        "entropy_nll": [0.01, 0.25, 0.05, 0.10, 0.01, 0.03],
        "p_flip": [0.5, 0.25, 0.0, 0.75, 0.0, 0.25]})
    frame["authors_score"] = frame["entropy_nll"] - 0.05 * frame["siblings_before"]
    got = penalty_effect(frame, k=1)
    assert got["penalty_first"] == pytest.approx(0.15)
    assert got["penalty_exceeds_entropy"] == pytest.approx(2 / 3)      # not 0.25
    assert got["p_flip_first"] == pytest.approx(0.5) and got["p_flip_deeper"] == pytest.approx(1 / 12)
    # one pick a prompt: at alpha = 0 both prompts pick a first turn (0.25; 0.10); with the
    # penalty prompt 0 keeps its first turn (0.25 - 0.15 = 0.10 > 0.05) and prompt 1 picks
    # its depth-3 turn (0.03 > 0.10 - 0.15)
    assert got["first_in_picks_alpha0"] == pytest.approx(1.0)
    assert got["first_in_picks"] == pytest.approx(0.5)
    # a record written before the score existed gets it from b(n)
    path = _oracle_csv(frame)
    assert (load_oracle(path)["sibling_penalty"] == -0.05 * frame["siblings_before"]).all()


def _oracle_csv(frame: pd.DataFrame):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "expansion_oracle_x_toy.csv"
    frame.assign(original_reward=0.0, resample_rewards="[0.0, 1.0]").drop(
        columns=["p_flip"]).to_csv(path, index=False)
    return path
