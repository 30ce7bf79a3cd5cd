"""Issue #36, part 1: every evaluation on the vLLM backend uses the policy being evaluated,
through one engine: ``at2po evaluate --checkpoint``, the ReAct (warm start) evaluation, the
sampled metric and the final evaluation after training. vLLM is replaced by the stand-in of
tests/vllm_standin.py, which records the model every engine was built from and answers with the
Hugging Face backend on exactly those weights."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pandas as pd
import pytest

import vllm_standin
from at2po_lib.config.profile import load_profile

VLLM = {"rollout": {"backend": "vllm"}, "train": {"use_vllm": True}}


@pytest.fixture()
def two_policies(isolated_outputs):
    """Two random smoke policies saved with save_pretrained: ``base`` stands for the hub
    weights (``policy.model``), ``trained`` for a checkpoint of a run."""
    from at2po_lib.policy.model import build_policy, save_policy
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.tinyworld.build import ensure_world, read_corpus

    cfg = load_profile("smoke")
    tok = train_tokenizer(list(read_corpus(ensure_world(cfg)).values()), 600)
    paths = {}
    for seed, name in ((0, "base"), (1, "trained")):
        paths[name] = save_policy(
            build_policy(cfg.policy, tok, seed=seed), tok, isolated_outputs / name
        )
    return paths


def _vllm_profile(base, **extra):
    overrides = {
        **VLLM,
        "policy": {"model": str(base)},
        "eval": {"batch_size": 2, **extra.pop("eval", {})},
        **extra,
    }
    return load_profile("smoke", overrides)


@pytest.mark.slow
def test_evaluate_checkpoint_builds_one_engine_from_the_checkpoint(
    two_policies, monkeypatch, isolated_outputs
):
    """``at2po evaluate --checkpoint X``: one engine, from X, with the profile's GPU share,
    for 3 batches of greedy chains and the sampled metric; its answers are the HF backend's on
    X's weights (the stand-in generates with them), not the base's."""
    from at2po_lib.cli import evaluate as evaluate_cli
    from at2po_lib.evaluation.greedy import evaluate
    from at2po_lib.policy.model import load_policy
    from at2po_lib.retrieval.indexes import build_retriever

    vllm_standin.install(monkeypatch)
    out = isolated_outputs / "eval.csv"
    argv = [
        "--profile",
        "smoke",
        "--checkpoint",
        str(two_policies["trained"]),
        "--datasets",
        "tiny_nq",
        "--max-questions",
        "5",
        "--out",
        str(out),
        "--set",
        "rollout.backend=vllm",
        "--set",
        "train.use_vllm=true",
        "--set",
        f"policy.model={two_policies['base']}",
        "--set",
        "eval.batch_size=2",
        "--set",
        "eval.sampled_k=2",
        "--set",
        "eval.sampled_datasets=[tiny_nq]",
        "--set",
        "train.vllm_gpu_memory_utilization=0.3",
    ]
    assert evaluate_cli.main(argv) == 0
    engines = vllm_standin.ENGINES
    assert [e.model_path for e in engines] == [str(two_policies["trained"])]
    assert engines[0].kwargs["gpu_memory_utilization"] == 0.3
    cfg = load_profile("smoke")
    assert engines[0].kwargs["max_model_len"] == (
        cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
    )
    assert engines[0].prompts_seen >= 5 + 5 * 2  # greedy chains and the sampled metric
    written = pd.read_csv(out.with_name("eval_outcomes.csv"), keep_default_na=False)
    assert written["sampled_em"].between(0, 1).all()
    # the same checkpoint on the HF backend answers the same (greedy) questions the same way
    model, tok = load_policy(two_policies["trained"])
    _, hf = evaluate(cfg, model, tok, build_retriever(cfg), ["tiny_nq"], 5, return_details=True)
    assert written["prediction"].tolist() == hf["prediction"].fillna("").tolist()
    assert written["num_turns"].tolist() == hf["num_turns"].tolist()


@pytest.mark.slow
def test_react_evaluation_builds_one_engine_from_the_policy(two_policies, monkeypatch):
    """The ReAct row (the warm start evaluated as it is): one engine from ``policy.model``."""
    from at2po_lib.study import run as run_module
    from at2po_lib.record.run_folder import RunDir

    vllm_standin.install(monkeypatch)
    cfg = _vllm_profile(
        two_policies["base"], eval={"max_questions": 5, "datasets": ["tiny_nq", "tiny_hotpotqa"]}
    )
    run = RunDir(two_policies["base"].parent / "react_run")
    run.root.mkdir()
    summary = run_module._evaluate_warmstart(cfg, "react", 0, run)
    assert [e.model_path for e in vllm_standin.ENGINES] == [str(two_policies["base"])]
    assert (
        vllm_standin.ENGINES[0].kwargs["gpu_memory_utilization"]
        == cfg.train.vllm_gpu_memory_utilization
    )
    assert summary["n"].tolist()[:2] == [5, 5]


class _ColocatedTrainer:
    """What ``_evaluate_trained`` reads of an AT2POTrainer with vLLM colocated, one process:
    its engine (the stand-in, built from the trained checkpoint as after a weight sync)."""

    def __init__(self, engine, tokenizer, retriever):
        self.engine, self.processing_class, self.retriever = engine, tokenizer, retriever
        self.accelerator = SimpleNamespace(
            num_processes=1, is_main_process=True, unwrap_model=lambda m: m
        )
        self.is_deepspeed_enabled, self.use_vllm = False, True
        self.model = SimpleNamespace(name_or_path="Qwen/Qwen3-4B")  # the hub name TRL keeps
        self.syncs: list[bool] = []

    @contextlib.contextmanager
    def policy_for_generation(self, sync: bool = False):
        self.syncs.append(sync)
        yield self.engine


@pytest.mark.slow
def test_final_evaluation_in_one_process_uses_the_synced_colocated_engine(
    two_policies, monkeypatch
):
    """One process, no DeepSpeed, vLLM: the final evaluation (greedy and sampled) runs on the
    trainer's colocated engine after a weight sync; no engine is started from the model's
    ``name_or_path`` (the hub name of the untrained weights)."""
    from at2po_lib.policy.tokenizer import load_tokenizer
    from at2po_lib.retrieval.indexes import build_retriever
    from at2po_lib.study import run as run_module
    from at2po_lib.record.run_folder import RunDir

    standin = vllm_standin.install(monkeypatch)
    cfg = _vllm_profile(
        two_policies["base"],
        eval={
            "max_questions": 3,
            "datasets": ["tiny_nq"],
            "sampled_k": 2,
            "sampled_datasets": ["tiny_nq"],
        },
    )
    engine = standin.LLM(model=str(two_policies["trained"]))
    trainer = _ColocatedTrainer(
        engine, load_tokenizer(two_policies["trained"]), build_retriever(cfg)
    )
    run = RunDir(two_policies["base"].parent / "run")
    run.root.mkdir()
    summary = run_module._evaluate_trained(trainer, cfg, "at2po", 0, run)
    assert trainer.syncs == [True]
    assert vllm_standin.ENGINES == [engine]  # nothing started besides the colocated engine
    assert engine.prompts_seen >= 3 + 3 * 2
    assert summary["sampled_em"].notna().any() and run.final_eval.is_file()


def test_a_model_object_is_refused_on_the_vllm_backend(two_policies, monkeypatch):
    """A model object on the vLLM backend is an error naming the fix, never an engine started
    from its name_or_path."""
    from at2po_lib.evaluation.greedy import evaluate
    from at2po_lib.policy.model import load_policy
    from at2po_lib.rollout.backends import make_backend
    from at2po_lib.rollout.sampling import SamplingSpec  # noqa: F401 - make_backend builds one

    vllm_standin.install(monkeypatch)
    cfg = _vllm_profile(two_policies["base"])
    model, tok = load_policy(two_policies["trained"])
    with pytest.raises(TypeError, match="evaluates a vLLM engine.*load_evaluation_policy"):
        evaluate(cfg, model, tok, retriever=None, datasets=["tiny_nq"], max_questions=1)
    with pytest.raises(TypeError, match="needs a vLLM engine.*name_or_path"):
        make_backend(model, tok, cfg.rollout, ("</search>",))
    assert vllm_standin.ENGINES == []


@pytest.mark.slow
def test_a_lora_checkpoint_is_merged_once_for_the_engine(two_policies, monkeypatch):
    """A LoRA run's checkpoint holds adapters only: the engine loads the base with them merged
    (written once to <checkpoint>/merged), whose outputs are the adapted model's."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    from at2po_lib.plan.cost_estimate import LORA_TARGETS
    from at2po_lib.policy.model import load_policy
    from at2po_lib.rollout.vllm_backend import build_engine

    vllm_standin.install(monkeypatch)
    base, tok = load_policy(two_policies["base"])
    adapted = get_peft_model(
        base, LoraConfig(r=4, target_modules=list(LORA_TARGETS), init_lora_weights=False)
    )
    checkpoint = two_policies["base"].parent / "lora-checkpoint"
    adapted.save_pretrained(checkpoint)
    tok.save_pretrained(checkpoint)
    assert not (checkpoint / "config.json").exists()
    cfg = _vllm_profile(two_policies["base"])
    engine = build_engine(checkpoint, cfg)
    assert engine.model_path == str(checkpoint / "merged")
    ids = torch.tensor([tok.encode("the capital of")])
    fresh, _ = load_policy(two_policies["base"])
    reference = PeftModel.from_pretrained(fresh, str(checkpoint)).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            engine.policy(ids).logits, reference(ids).logits, rtol=1e-4, atol=1e-4
        )
    stamp = (checkpoint / "merged" / "config.json").stat().st_mtime_ns
    assert build_engine(checkpoint, cfg).model_path == str(checkpoint / "merged")
    assert (checkpoint / "merged" / "config.json").stat().st_mtime_ns == stamp  # merged once
