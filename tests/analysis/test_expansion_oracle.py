"""The expansion oracle (issue #35 item 4): per-candidate flip probabilities from re-samples,
and the summaries that rank scores against them."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from at2po_lib.analysis.expansion_oracle import SCORES, measure_chunk, oracle_summary, per_prompt
from at2po_lib.rollout.stand_ins import ScriptedBackend


@pytest.fixture(scope="module")
def toy(smoke_toy):
    return smoke_toy  # tests/conftest.py: one smoke ToySetup per module


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
    records = measure_chunk(
        toy.sampler(cfg, backend), [row], chains=4, resamples=300, first_prompt=0
    )
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
    frame = pd.DataFrame(
        {
            "prompt": 0,
            "node": [1, 2, 3, 4],
            "original_reward": 0.0,
            "resample_rewards": [json.dumps(r) for r in resamples],
        }
    )
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
        return pd.DataFrame(
            {
                "score": ["entropy_exact", "oracle"],
                "k": k,
                "prompts": prompts,
                "candidates": 10 * prompts,
                "resamples": 8,
                "flips_vs_uniform": [ratio, 1.5],
                "flips_vs_uniform_lo": [lo, 1.4],
                "flips_vs_uniform_hi": [hi, 1.6],
            }
        )

    assert read_summaries(tmp_path).empty
    summary(1.04, 0.89, 1.21, 6, 100).to_csv(
        tmp_path / "expansion_oracle_warmstart_paper_summary.csv"
    )
    summary(0.99, 0.97, 1.01, 4, 595).to_csv(
        tmp_path / "expansion_oracle_warmstart_toy_summary.csv"
    )
    frame = read_summaries(tmp_path)
    assert list(frame.drop_duplicates(["policy", "shape"])["shape"]) == ["toy", "paper"]
    text = flip_ratio_sentence(frame, "entropy_exact")
    assert "the warm start, toy tree (K = 4, 595 prompts" in text and "0.99× [0.97, 1.01]" in text
    assert "1.04× [0.89, 1.21]" in text and "perfect picker: 1.50×" in text
    assert text.index("toy tree") < text.index("paper's tree")
    with pytest.raises(ValueError, match="entropy_nll"):
        flip_ratio_sentence(frame, "entropy_nll")
    assert "No expansion oracle records" in flip_ratio_sentence(
        read_summaries(tmp_path / "none"), "x"
    )


def test_oracle_records_fall_back_to_tiny(tmp_path, monkeypatch):
    from at2po_lib.analysis.expansion_oracle import oracle_records

    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    assert oracle_records("smoke")[1].empty
    (tmp_path / "tiny" / "dissection").mkdir(parents=True)
    pd.DataFrame({"score": ["entropy_exact"], "k": [4]}).to_csv(
        tmp_path / "tiny" / "dissection" / "expansion_oracle_warmstart_toy_summary.csv", index=False
    )
    name, frame = oracle_records("smoke")
    assert name == "tiny" and list(frame["policy"]) == ["warmstart"]


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
    frame["sibling_penalty"] = -0.15  # every candidate has b = 3
    got = per_prompt(frame, k=2).iloc[0]
    assert got["picked_sibling_penalty"] == pytest.approx(got["uniform_expected"])
    # in-sample: ranked and scored on all four re-samples, p_flip 1 and 0.5
    assert got["picked_oracle_in_sample"] == pytest.approx(1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no quantile over an all-NaN draw
        summary = oracle_summary(frame, k=2, draws=50).set_index("score")
    assert summary.loc["sibling_penalty", "flips_vs_uniform"] == pytest.approx(1.0)
    # constant within its one tree: no rank correlation, so no interval either
    assert summary.loc["sibling_penalty", ["spearman_lo", "spearman_hi"]].isna().all()
    assert summary.loc["oracle_in_sample", "flips_vs_uniform"] == pytest.approx(1.5 / 0.875)


def test_the_placebo_sets_the_margin_of_better_and_worse():
    from at2po_lib.analysis.expansion_oracle import placebo_margin, versus_uniform

    summaries = pd.DataFrame(
        {"score": ["uniform", "uniform", "authors_score"], "flips_vs_uniform": [1.05, 0.98, 1.2]}
    )
    assert placebo_margin(summaries) == pytest.approx(0.05)
    assert placebo_margin(pd.DataFrame()) == 0.0
    assert versus_uniform(1.04, 1.10, 0.05) == "no different"  # above 1, inside the margin
    assert versus_uniform(1.06, 1.10, 0.05) == "better"
    assert versus_uniform(0.90, 0.96, 0.05) == "no different"
    assert versus_uniform(0.90, 0.94, 0.05) == "worse"


def test_penalty_effect_by_hand():
    """Two prompts; first turns (depth 1, b = 3: penalty 0.15) and deeper turns (b = 0)."""
    from at2po_lib.analysis.expansion_oracle import load_oracle, penalty_effect

    frame = pd.DataFrame(
        {
            "prompt": [0, 0, 0, 1, 1, 1],
            "depth": [1, 1, 2, 1, 2, 3],
            "siblings_before": [3, 3, 0, 3, 0, 0],
            "entropy_nll": [0.01, 0.25, 0.05, 0.10, 0.01, 0.03],
            "p_flip": [0.5, 0.25, 0.0, 0.75, 0.0, 0.25],
        }
    )
    frame["authors_score"] = frame["entropy_nll"] - 0.05 * frame["siblings_before"]
    got = penalty_effect(frame, k=1)
    assert got["penalty_first"] == pytest.approx(0.15)
    assert got["penalty_exceeds_entropy"] == pytest.approx(2 / 3)  # not 0.25
    assert got["p_flip_first"] == pytest.approx(0.5) and got["p_flip_deeper"] == pytest.approx(
        1 / 12
    )
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
        columns=["p_flip"]
    ).to_csv(path, index=False)
    return path


# ------------------------------------------------ a record that survives a kill (issue #50 item 2)
# The child measures with a scripted ``measure`` (no policy): chunk c's records depend only on
# (seed, c), as a rollout's do, so a resumed record must equal an uninterrupted one byte for byte.
CHILD = r"""
import json, os, signal, sys, time
from pathlib import Path

import numpy as np

import at2po_lib.util.resumable as resumable
from at2po_lib.analysis import expansion_oracle as eo
from at2po_lib.config.profile import load_profile

out, policy, kill_at, pause = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
chunk, seed, resamples, prompts = (int(a) for a in sys.argv[5:9])
rows = [{"id": f"q{i}", "dataset": "tiny_hotpotqa", "question": "?", "golden_answers": ["a"]}
        for i in range(prompts)]


def measure(first, part):
    time.sleep(pause)
    rng = np.random.default_rng([seed, first // chunk])
    return [{"prompt": first + i, "question_id": r["id"], "dataset": r["dataset"], "node": n,
             "depth": 1, "decision": "branch", "siblings_before": 3,
             **{s: float(rng.random()) for s in eo.SCORES},
             "original_reward": float(rng.integers(0, 2)),
             "resample_rewards": json.dumps([float(x) for x in rng.integers(0, 2, resamples)]),
             "pad": "x" * 2000}
            for i, r in enumerate(part) for n in range(1, 40)]


if kill_at >= 0:  # kill -9 in the middle of the kill_at-th chunk's write
    real, writes = resumable.atomic_write, []

    def torn(path, data):
        if Path(path).name.startswith("chunk_"):
            writes.append(path)
            if len(writes) == kill_at + 1:
                tmp = Path(path).with_name(f".{Path(path).name}.tmp")
                tmp.write_text(data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
        real(path, data)

    resumable.atomic_write = torn
eo.run_oracle(load_profile("smoke"), rows, policy, out, chains=4, resamples=resamples, seed=seed,
              chunk=chunk, meta={"writer": "test"}, log=False, measure=measure)
"""


def _child(
    tmp_path, out, *, kill_at=-1, pause=0.0, chunk=2, seed=0, resamples=4, prompts=6, wait=True
):
    import os
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    policy = tmp_path / "policy"
    policy.mkdir(exist_ok=True)
    (policy / "model.safetensors").write_bytes(b"weights")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AT2PO_ARTIFACTS": str(tmp_path / "artifacts")}
    args = [
        sys.executable,
        str(script),
        str(out),
        str(policy),
        str(kill_at),
        str(pause),
        str(chunk),
        str(seed),
        str(resamples),
        str(prompts),
    ]
    if not wait:
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def _record(path):
    """The record's rows and its meta less the fields that name the moment."""
    from at2po_lib.util.provenance import read_meta

    meta = {k: v for k, v in read_meta(path).items() if k not in ("created",)}
    return path.read_bytes(), meta


@pytest.mark.slow  # four child processes (each imports torch): ~25 s on 2 cores
def test_a_kill_mid_append_then_a_rerun_gives_the_uninterrupted_record(tmp_path):
    """b8f2d3f: kill -9 mid-append, then the same command: ``ParserError: Expected 17 fields``
    on every later rerun; a kill in the first chunk: ``KeyError: 'resample_rewards'``."""
    whole = tmp_path / "whole" / "oracle.csv"
    whole.parent.mkdir()
    assert _child(tmp_path, whole).returncode == 0
    for kill_at in (0, 1):  # in the first chunk's write, and in the second's
        out = tmp_path / f"killed{kill_at}" / "oracle.csv"
        out.parent.mkdir()
        killed = _child(tmp_path, out, kill_at=kill_at)
        assert killed.returncode == -9 and not out.exists()
        assert _child(tmp_path, out).returncode == 0
        assert _record(out) == _record(whole)
        assert sorted(p.name for p in out.parent.iterdir()) == [
            "oracle.csv",
            "oracle.csv.meta.json",
        ]


@pytest.mark.slow  # child processes killed at random moments: ~60 s on 2 cores
def test_kills_at_random_moments_then_a_rerun_give_the_uninterrupted_record(tmp_path):
    import random
    import time

    from at2po_lib.util.staging import staging_path

    whole = tmp_path / "whole" / "oracle.csv"
    whole.parent.mkdir()
    assert _child(tmp_path, whole, prompts=10).returncode == 0
    out = tmp_path / "killed" / "oracle.csv"
    out.parent.mkdir()
    chunks = staging_path(out)
    rng = random.Random(50)
    for _ in range(3):  # each child is killed once it has measured one more chunk: mid-measure
        done = len(list(chunks.glob("chunk_*.json"))) if chunks.is_dir() else 0
        child = _child(tmp_path, out, prompts=10, pause=0.3, wait=False)
        deadline = time.monotonic() + 120
        while (
            (len(list(chunks.glob("chunk_*.json"))) if chunks.is_dir() else 0) <= done
            and child.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.35))  # or mid-write: a chunk is measured in 0.3 s
        child.kill()
        child.wait()
    assert not out.exists()  # never finished: every round was cut
    assert _child(tmp_path, out, prompts=10).returncode == 0
    assert _record(out) == _record(whole)


def _oracle(tmp_path, out, *, chunk=2, seed=0, resamples=4, prompts=6, fail_at=None, calls=None):
    """run_oracle in this process with the child's scripted measure; ``fail_at``: the chunk
    whose measuring raises (a crash half-way)."""
    from at2po_lib.analysis.expansion_oracle import run_oracle
    from at2po_lib.config.profile import load_profile

    namespace: dict = {"chunk": chunk, "seed": seed, "resamples": resamples, "pause": 0.0}
    body = CHILD[CHILD.index("def measure") : CHILD.index("\n\nif kill_at")]
    exec(
        compile(
            "import json, time\nimport numpy as np\nfrom at2po_lib.analysis import "
            "expansion_oracle as eo\n" + body,
            "measure",
            "exec",
        ),
        namespace,
    )
    policy = tmp_path / "policy"
    policy.mkdir(exist_ok=True)
    if not (policy / "model.safetensors").exists():
        (policy / "model.safetensors").write_bytes(b"weights")
    rows = [{"id": f"q{i}", "dataset": "tiny_hotpotqa"} for i in range(prompts)]

    def measure(first, part):
        if calls is not None:
            calls.append(first)
        if fail_at is not None and first // chunk == fail_at:
            raise KeyboardInterrupt
        return namespace["measure"](first, part)

    return run_oracle(
        load_profile("smoke"),
        rows,
        policy,
        out,
        chains=4,
        resamples=resamples,
        seed=seed,
        chunk=chunk,
        meta={"writer": "test"},
        log=False,
        measure=measure,
    )


def test_a_resume_is_keyed_on_the_exact_arguments(tmp_path, isolated_outputs):
    """b8f2d3f: a rerun with another --chunk after chunk 1 finished with prompts 0, 1, 4, 5:
    2 and 3 were never measured. Now the old arguments are named and nothing is measured."""
    from at2po_lib.util.errors import RecordError

    out = tmp_path / "oracle.csv"
    with pytest.raises(KeyboardInterrupt):
        _oracle(tmp_path, out, chunk=2, fail_at=1)
    for other, named in (
        ({"chunk": 3}, "--chunk 2 (this command: 3)"),
        ({"seed": 7}, "--seed 0 (this command: 7)"),
        ({"resamples": 8}, "--resamples 4 (this command: 8)"),
    ):
        calls: list = []
        with pytest.raises(RecordError, match=re.escape(named)):
            _oracle(tmp_path, out, calls=calls, **other)
        assert calls == [] and not out.exists()
    calls = []
    frame = _oracle(tmp_path, out, chunk=2, calls=calls)
    assert calls == [2, 4] and sorted(frame["prompt"].unique()) == [0, 1, 2, 3, 4, 5]


def test_a_finished_record_is_read_not_remeasured_and_other_arguments_are_refused(
    tmp_path, isolated_outputs
):
    """b8f2d3f: a finished record rerun with --seed 7 or --resamples 8 kept the old rows while
    the summary's meta recorded 7 and 8."""
    from at2po_lib.util.errors import RecordError

    out = tmp_path / "oracle.csv"
    first = _oracle(tmp_path, out)
    calls: list = []
    assert _oracle(tmp_path, out, calls=calls).equals(first) and calls == []
    before = out.read_bytes()
    for other, named in (
        ({"seed": 7}, "--seed 0 (this command: 7)"),
        ({"resamples": 8}, "--resamples 4 (this command: 8)"),
        ({"prompts": 8}, "--prompts 6 (this command: 8)"),
    ):
        with pytest.raises(RecordError, match=re.escape(named)):
            _oracle(tmp_path, out, calls=calls, **other)
    assert calls == [] and out.read_bytes() == before
    (tmp_path / "policy" / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(RecordError, match="policy_weights"):
        _oracle(tmp_path, out, calls=calls)


def test_a_record_from_before_keys_is_compared_on_what_its_meta_says(tmp_path, isolated_outputs):
    """The committed records' metas hold seed, prompts, resamples, shape, datasets and the
    command (with --chunk), not a record_key."""
    from at2po_lib.util.errors import RecordError
    from at2po_lib.util.provenance import read_meta, write_meta

    out = tmp_path / "oracle.csv"
    _oracle(tmp_path, out)
    meta = read_meta(out)
    del meta["record_key"]
    legacy = {
        **meta,
        "seed": 0,
        "prompts": 6,
        "resamples": 4,
        "shape": {"chains": 4, "k": 4},
        "datasets": ["tiny_hotpotqa"],
        "command": "at2po dissect expansion --chunk 2",
    }
    write_meta(out, legacy)
    calls: list = []
    _oracle(tmp_path, out, calls=calls)
    assert calls == []
    with pytest.raises(RecordError, match=re.escape("--seed 0 (this command: 7)")):
        _oracle(tmp_path, out, seed=7)
    with pytest.raises(RecordError, match=re.escape("--chunk 2 (this command: 3)")):
        _oracle(tmp_path, out, chunk=3)
    out.write_bytes(out.read_bytes() + b"\n")  # rows that are not the ones its meta describes
    with pytest.raises(RecordError, match="its rows changed"):
        _oracle(tmp_path, out)
    (tmp_path / "orphan.csv").write_text("prompt\n0\n")  # no meta: arguments unknown
    with pytest.raises(RecordError, match="no orphan.csv.meta.json"):
        _oracle(tmp_path, tmp_path / "orphan.csv")


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--prompts", "0"], "--prompts: '0'"),
        (["--chunk", "0"], "--chunk: '0'"),
        (["--resamples", "1"], "--resamples: '1'"),
        (["--prompts", "99999"], "--prompts 99999"),
    ],
)
def test_dissect_expansion_out_of_range_is_one_line(argv, named, isolated_outputs, capsys):
    """b8f2d3f: tracebacks."""
    from at2po_lib.cli import main

    world = isolated_outputs / "artifacts" / "smoke" / "world" / "datasets"
    for name in ("tiny_hotpotqa", "tiny_2wiki", "tiny_musique"):
        (world / name).mkdir(parents=True)
        (world / name / "train.jsonl").write_text(
            json.dumps(
                {
                    "id": "q0",
                    "question": "?",
                    "golden_answers": ["a"],
                    "metadata": {"supporting_ids": []},
                }
            )
            + "\n"
        )
    try:
        code = main(["dissect", "expansion", "--profile", "smoke", *argv])
    except SystemExit as exc:  # argparse: a bad option value
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and named in err and "Traceback" not in err
