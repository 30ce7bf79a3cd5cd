"""The shipped tiny warm start (results/tiny/warmstart/): found without training, invalidated by
a changed configuration, and reproducing its committed greedy evaluation question by question."""

from __future__ import annotations

import json

import pytest

from at2po_lib.config.profile import load_profile
from at2po_lib.util.paths import repo_root
from at2po_lib.warmstart import cache as warmstart_cache
from at2po_lib.policy.checkpoint_files import file_digests

SHIPPED = repo_root() / "results" / "tiny" / "warmstart"
# The warm start on every test question: the regime pilot's ReAct run (docs/warmstart.md)
OUTCOMES = (
    repo_root()
    / "results"
    / "tiny"
    / "pilot"
    / "runs"
    / "tiny"
    / "react"
    / "seed0"
    / "outcomes.csv"
)


@pytest.fixture()
def fresh_clone_artifacts(tmp_path, monkeypatch):
    """No local cache (a fresh clone); results are read from the repository."""
    monkeypatch.setenv("AT2PO_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.delenv("AT2PO_RESULTS", raising=False)
    return tmp_path


def test_shipped_copy_has_weights_tokenizer_and_provenance():
    assert (SHIPPED / "model.safetensors").stat().st_size < 8_000_000  # "a few MB"
    record = json.loads((SHIPPED / warmstart_cache.SHIPPED_RECORD).read_text())
    for key in ("cache_key", "git_revision", "chosen_step", "selection", "config"):
        assert key in record, key
    assert "log_history" not in record and record["path"] is None
    assert [row["step"] for row in record["selection"]] == sorted(
        row["step"] for row in record["selection"]
    )


def test_fresh_clone_uses_a_matching_shipped_copy_and_a_changed_config_does_not(
    fresh_clone_artifacts, monkeypatch
):
    """The selection logic, on a copy of the shipped record whose key is set to the current
    configuration's (whether the real shipped copy is current is the next test)."""
    cfg = load_profile("tiny")
    copy = fresh_clone_artifacts / "shipped"
    copy.mkdir()
    (copy / "model.safetensors").write_bytes(b"weights")
    record = json.loads((SHIPPED / warmstart_cache.SHIPPED_RECORD).read_text())
    record["cache_key"] = warmstart_cache.cache_key(cfg)
    record["files"] = file_digests(copy)  # the fake weights' own digests
    (copy / warmstart_cache.SHIPPED_RECORD).write_text(json.dumps(record))
    monkeypatch.setattr(warmstart_cache, "shipped_warmstart_dir", lambda profile: copy)
    assert warmstart_cache.cached_warmstart(cfg) == copy
    changed = load_profile("tiny", {"sft": {"max_steps": 1999}})
    assert warmstart_cache.cached_warmstart(changed) is None
    # a changed trajectory format invalidates it too (issue #22)
    assert (
        warmstart_cache.cached_warmstart(load_profile("tiny", {"policy": {"template": "atpo"}}))
        is None
    )
    assert (
        warmstart_cache.cached_warmstart(load_profile("tiny", {"rollout": {"max_turn_tokens": 8}}))
        is None
    )
    # settings that do not touch SFT keep it valid (how a server is reached, Tree-GRPO's trees)
    same = load_profile(
        "tiny", {"retrieval": {"timeout_s": 5.0}, "rollout": {"tree_grpo_trees": 4}}
    )
    assert warmstart_cache.cached_warmstart(same) == copy


def test_the_shipped_copy_is_current(fresh_clone_artifacts):
    """Fails while results/tiny/warmstart/ was trained for another configuration or format
    (after issue #22 until it is retrained: `at2po warmstart --profile tiny`, then shipped)."""
    cfg = load_profile("tiny")
    assert warmstart_cache.read_warmstart_record("tiny")["cache_key"] == warmstart_cache.cache_key(
        cfg
    ), "the shipped tiny warm start is stale: retrain and ship it"
    assert warmstart_cache.cached_warmstart(cfg) == SHIPPED


def test_ship_refuses_without_a_matching_local_warm_start(fresh_clone_artifacts):
    with pytest.raises(FileNotFoundError, match="no local warm start"):
        warmstart_cache.ship_warmstart(load_profile("tiny"))


@pytest.mark.slow
def test_shipped_warm_start_reproduces_its_committed_evaluation(fresh_clone_artifacts):
    """Greedy decoding of the first batch (eval.batch_size questions, the same batch as in the
    committed run) of two test sets gives the committed predictions and EM exactly."""
    import pandas as pd

    from at2po_lib.evaluation.greedy import evaluate_questions
    from at2po_lib.record.outcomes import read_outcomes
    from at2po_lib.policy.model import load_policy
    from at2po_lib.retrieval.indexes import build_retriever

    cfg = load_profile("tiny")
    shipped = warmstart_cache.cached_warmstart(cfg)
    assert shipped is not None, "the shipped tiny warm start is stale: retrain and ship it"
    model, tokenizer = load_policy(shipped, cfg.policy.dtype)
    batch = cfg.eval.batch_size
    details = evaluate_questions(
        cfg,
        model.eval(),
        tokenizer,
        build_retriever(cfg),
        ["tiny_hotpotqa", "tiny_nq"],
        max_questions=batch,
    )
    committed = read_outcomes(OUTCOMES)
    committed = pd.concat(
        [committed[committed["dataset"] == d].head(batch) for d in ("tiny_hotpotqa", "tiny_nq")],
        ignore_index=True,
    )
    assert details["id"].astype(str).tolist() == committed["id"].tolist()
    assert details["prediction"].fillna("").tolist() == committed["prediction"].tolist()
    assert details["em"].tolist() == committed["em"].tolist()
    assert details["num_turns"].tolist() == committed["num_turns"].tolist()
