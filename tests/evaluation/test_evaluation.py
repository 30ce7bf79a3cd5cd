"""Greedy evaluation: scoring, sample-weighted group averages, tidy output, provenance."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from at2po_lib.protocol.qa_data import MULTI_HOP, SINGLE_HOP, dataset_group
from at2po_lib.evaluation.greedy import (
    SUMMARY_COLUMNS,
    score_rows,
    summarise,
    turn_distribution,
    weighted_group_average,
    write_eval,
)


def _summary(datasets, groups, ns, ems, label="m", seed=0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "profile": "p",
            "label": label,
            "seed": seed,
            "dataset": datasets,
            "group": groups,
            "n": ns,
            "em": ems,
            "f1": ems,
            "mean_turns": 2.0,
            "mean_tool_calls": 1.0,
            "git_revision": "abc",
        }
    )


def test_weighted_average_uses_the_paper_split_sizes():
    # Multi-hop dev/test sizes (docs/method.md §4): HotpotQA 7405, 2Wiki 12576, MuSiQue 2417,
    # Bamboogle 125. EM 0.5, 0.6, 0.2, 0.4:
    #   (0.5*7405 + 0.6*12576 + 0.2*2417 + 0.4*125) / 22523
    # = (3702.5 + 7545.6 + 483.4 + 50) / 22523 = 11781.5 / 22523 = 0.523088...
    # The plain mean of the four columns would be 0.425.
    df = _summary(
        ["hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "nq"],
        [MULTI_HOP] * 4 + [SINGLE_HOP],
        [7405, 12576, 2417, 125, 3610],
        [0.5, 0.6, 0.2, 0.4, 0.3],
    )
    out = weighted_group_average(df).set_index("group")
    assert out.loc[MULTI_HOP, "n"] == 22523
    assert out.loc[MULTI_HOP, "em"] == pytest.approx(11781.5 / 22523)
    assert out.loc[MULTI_HOP, "em"] != pytest.approx(0.425)
    assert out.loc[SINGLE_HOP, "em"] == pytest.approx(0.3)
    assert out.loc[MULTI_HOP, "dataset"] == "multihop avg"
    assert list(weighted_group_average(df).columns) == list(df.columns)


def test_weighted_average_equals_micro_average_of_questions():
    # Two datasets: 3 questions with EM 1,0,1 and 1 question with EM 0.
    # Per dataset: 2/3 and 0; micro-average over the 4 questions: 2/4 = 0.5 (not 1/3).
    df = _summary(["a", "b"], [MULTI_HOP] * 2, [3, 1], [2 / 3, 0.0])
    assert weighted_group_average(df)["em"].iloc[0] == pytest.approx(0.5)


def test_weighted_average_is_idempotent_and_separates_labels_and_seeds():
    df = pd.concat(
        [
            _summary(["a", "b"], [MULTI_HOP] * 2, [1, 3], [1.0, 0.0], label="x", seed=0),
            _summary(["a", "b"], [MULTI_HOP] * 2, [1, 3], [0.0, 1.0], label="x", seed=1),
        ]
    )
    avg = weighted_group_average(df)
    assert sorted(avg["em"].round(4)) == [0.25, 0.75]  # (1*1+3*0)/4 and (1*0+3*1)/4
    again = weighted_group_average(pd.concat([df, avg]))  # avg rows are ignored
    pd.testing.assert_frame_equal(again.reset_index(drop=True), avg.reset_index(drop=True))


def test_weighted_average_rejects_empty_datasets():
    with pytest.raises(ValueError, match="n > 0"):
        weighted_group_average(_summary(["a"], [MULTI_HOP], [0], [0.0]))


def test_dataset_groups_for_tiny_and_paper_names():
    assert dataset_group("tiny_2wiki") == dataset_group("2wikimultihopqa") == MULTI_HOP
    assert dataset_group("tiny_bamboogle") == MULTI_HOP
    assert dataset_group("tiny_popqa") == dataset_group("nq") == SINGLE_HOP
    with pytest.raises(ValueError, match="squad"):
        dataset_group("squad")


def _trajectory(answer, turns):
    from at2po_lib.rollout.structures import Trajectory

    return Trajectory(
        prompt_ids=[1],
        completion_ids=[2],
        sampled_mask=[1],
        turn_ids=[0],
        logps=[0.0],
        turns=[],
        response_text=f"<answer> {answer} </answer>",
        answer=answer,
        num_tool_calls=turns - 1,
        num_turns=turns,
        finish_reason="answer",
    )


def test_score_rows_and_summarise_on_hand_numbers():
    rows = [
        {"id": "1", "question": "q1", "golden_answers": ["New Rato"]},
        {"id": "2", "question": "q2", "golden_answers": ["1620", "in 1620"]},
        {"id": "3", "question": "q3", "golden_answers": ["Belmont"]},
    ]
    trajs = [_trajectory("new rato.", 3), _trajectory("1621", 2), _trajectory(None, 1)]
    details = score_rows(rows, trajs)
    assert details["em"].tolist() == [1.0, 0.0, 0.0]  # SQuAD normalisation: case, punctuation
    assert details["f1"].tolist()[2] == 0.0  # no answer scores 0
    details.insert(0, "group", [MULTI_HOP, MULTI_HOP, SINGLE_HOP])
    details.insert(0, "dataset", ["tiny_hotpotqa", "tiny_hotpotqa", "tiny_nq"])
    summary = summarise(details, "tiny", "warmstart", 0, revision="rev")
    assert list(summary.columns) == SUMMARY_COLUMNS
    hot = summary.set_index("dataset").loc["tiny_hotpotqa"]
    assert (hot["n"], hot["em"], hot["mean_turns"]) == (2, 0.5, 2.5)
    assert summary.set_index("dataset").loc["multihop avg", "em"] == 0.5
    dist = turn_distribution(details)
    assert dist.groupby("group")["share"].sum().tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="3 questions but 2"):
        score_rows(rows, trajs[:2])


def test_write_eval_writes_csv_and_provenance(tmp_path):
    df = _summary(["tiny_nq"], [SINGLE_HOP], [10], [0.3])
    path = write_eval(df, tmp_path / "results" / "eval.csv", seed=0, config={"a": 1})
    back = pd.read_csv(path)
    assert back["em"].tolist() == [0.3] and back["profile"].tolist() == ["p"]
    meta = json.loads((tmp_path / "results" / "eval.csv.meta.json").read_text())
    assert meta["profile"] == "p" and meta["seed"] == 0 and "git_revision" in meta


@pytest.mark.slow
def test_greedy_evaluation_end_to_end_on_smoke(isolated_outputs):
    """An untrained tiny policy through the real rollout, retriever and TinyWorld files."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.evaluation.greedy import evaluate
    from at2po_lib.policy.model import build_policy
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.retrieval.indexes import build_retriever
    from at2po_lib.tinyworld.build import ensure_world, read_corpus

    assert os.environ["AT2PO_ARTIFACTS"].startswith(str(isolated_outputs))
    cfg = load_profile("smoke")
    tok = train_tokenizer(list(read_corpus(ensure_world(cfg)).values()), 600)
    model = build_policy(cfg.policy, tok).eval()
    summary, details = evaluate(
        cfg,
        model,
        tok,
        build_retriever(cfg),
        ["tiny_hotpotqa", "tiny_nq"],
        max_questions=3,
        label="random",
        seed=0,
        return_details=True,
    )
    assert len(details) == 6 and set(details["dataset"]) == {"tiny_hotpotqa", "tiny_nq"}
    assert summary["dataset"].tolist() == [
        "tiny_hotpotqa",
        "tiny_nq",
        "multihop avg",
        "singlehop avg",
    ]
    assert summary["n"].tolist() == [3, 3, 3, 3]
    assert summary["em"].between(0, 1).all() and (summary["label"] == "random").all()
    assert (details["num_turns"] >= 1).all()


def test_outcome_file_round_trip(tmp_path):
    """Per-question outcomes are written and read back as they were (None prediction: '',
    sampled_em NaN where not measured; ids stay strings)."""
    import math

    from at2po_lib.record.outcomes import read_outcomes, write_outcomes

    details = pd.DataFrame(
        {
            "dataset": ["tiny_nq", "tiny_hotpotqa"],
            "group": [SINGLE_HOP, MULTI_HOP],
            "id": ["007", "hq-1"],
            "question": ["q1?", "q2?"],
            "prediction": ["Dadar Bay", None],
            "golden": ["Dadar Bay", "x"],
            "em": [1.0, 0.0],
            "f1": [1.0, 0.0],
            "num_turns": [2, 5],
            "num_tool_calls": [1, 4],
            "finish_reason": ["answer", "length"],
            "sampled_em": [0.75, float("nan")],
        }
    )
    path = write_outcomes(details, tmp_path / "run" / "outcomes.csv")
    back = read_outcomes(path)
    assert "question" not in back.columns and "golden" not in back.columns
    assert back["id"].tolist() == ["007", "hq-1"]
    assert back["prediction"].tolist() == ["Dadar Bay", ""]
    assert back["em"].tolist() == [1.0, 0.0] and back["num_turns"].tolist() == [2, 5]
    assert back["sampled_em"].iloc[0] == 0.75 and math.isnan(back["sampled_em"].iloc[1])
    (tmp_path / "bad.csv").write_text("dataset,em\nx,1\n")
    with pytest.raises(ValueError, match="bad.csv.*missing columns"):
        read_outcomes(tmp_path / "bad.csv")


@pytest.mark.slow
def test_sampled_metric_on_smoke(isolated_outputs):
    """eval.sampled_k adds a per-question mean of k sampled EMs, reproducible for a seed."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.evaluation.greedy import evaluate_questions
    from at2po_lib.policy.model import build_policy
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.retrieval.indexes import build_retriever
    from at2po_lib.tinyworld.build import ensure_world, read_corpus

    cfg = load_profile("smoke", {"eval": {"sampled_k": 3, "sampled_datasets": ["tiny_nq"]}})
    tok = train_tokenizer(list(read_corpus(ensure_world(cfg)).values()), 600)
    model = build_policy(cfg.policy, tok).eval()
    retriever = build_retriever(cfg)
    first = evaluate_questions(cfg, model, tok, retriever, ["tiny_hotpotqa", "tiny_nq"], 2, seed=5)
    again = evaluate_questions(cfg, model, tok, retriever, ["tiny_hotpotqa", "tiny_nq"], 2, seed=5)
    nq = first[first["dataset"] == "tiny_nq"]["sampled_em"]
    assert nq.between(0, 1).all() and len(nq) == 2
    assert first[first["dataset"] == "tiny_hotpotqa"]["sampled_em"].isna().all()
    pd.testing.assert_series_equal(first["sampled_em"], again["sampled_em"])


def test_weighted_average_of_a_metric_measured_on_some_datasets_only():
    """The sampled metric may cover only the multi-hop sets: its group average uses the
    datasets that have it, and is NaN (not 0) for a group that has none."""
    import math

    df = _summary(
        ["tiny_hotpotqa", "tiny_2wiki", "tiny_nq"],
        [MULTI_HOP, MULTI_HOP, SINGLE_HOP],
        [100, 300, 50],
        [0.5, 0.1, 0.9],
    )
    df["sampled_em"] = [0.4, float("nan"), float("nan")]
    out = weighted_group_average(df).set_index("group")
    assert out.loc[MULTI_HOP, "sampled_em"] == pytest.approx(0.4)
    assert math.isnan(out.loc[SINGLE_HOP, "sampled_em"])
    assert out.loc[MULTI_HOP, "em"] == pytest.approx((50 + 30) / 400)


def test_eval_batch_rows_by_hand():
    """eval.batch_size > 0 is used as it is; 0 fills half the free memory: 10 GiB free and
    0.5 GiB a row -> 10 rows, capped by the questions and rollout.max_batch_rows, at least 1."""
    from at2po_lib.evaluation.greedy import eval_batch_rows

    gib = 2**30
    assert eval_batch_rows(32, 1000, 10 * gib, 0.5 * gib, 512) == 32
    assert eval_batch_rows(0, 1000, 10 * gib, 0.5 * gib, 512) == 10
    assert eval_batch_rows(0, 7, 10 * gib, 0.5 * gib, 512) == 7
    assert eval_batch_rows(0, 1000, 10 * gib, 0.5 * gib, 4) == 4
    assert eval_batch_rows(0, 1000, 0.1 * gib, 0.5 * gib, 512) == 1


def test_full_length_row_bytes_by_hand():
    """A 2-layer model, 2 KV heads of 16 dims, vocabulary 500, fp32 on the CPU, 100 + 60
    tokens: 2 * (2*2*2*16*4 = 512 B a token) * 160 + 12 * 500 = 163,840 + 6,000."""
    import dataclasses

    from at2po_lib.config.profile import PolicyConfig, RolloutConfig
    from at2po_lib.evaluation.greedy import full_length_row_bytes
    from at2po_lib.policy.model import build_policy
    from at2po_lib.policy.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["a b c d e f g"] * 20, vocab_size=500)
    model = build_policy(
        PolicyConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
        ),
        tokenizer,
        seed=0,
    )
    cfg = dataclasses.replace(RolloutConfig(), max_prompt_tokens=100, max_response_tokens=60)
    vocab = model.config.vocab_size
    assert full_length_row_bytes(model, cfg) == 2 * 512 * 160 + 12 * vocab
