"""``at2po plan``: the formulas of at2po_lib.planning against hand-computed cases."""

from __future__ import annotations

import json

import pytest

from at2po_lib.cli import plan as plan_cli
from at2po_lib.config import load_profile
from at2po_lib.planning import (GIB, KNOWN_ARCHITECTURES, Architecture, Hardware, PlanError,
                                activation_memory, architecture_of, plan, training_memory)


def test_parameter_counts_match_the_published_backbones():
    # safetensors totals of the hub checkpoints (embeddings counted once when tied)
    assert KNOWN_ARCHITECTURES["Qwen/Qwen3-4B"].parameters() == 4_022_468_096
    assert KNOWN_ARCHITECTURES["Qwen/Qwen3-8B"].parameters() == 8_190_735_360
    assert KNOWN_ARCHITECTURES["Qwen/Qwen2.5-7B"].parameters() == 7_615_616_512


def test_tiny_profile_architecture_counts_the_real_tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    pol = load_profile("tiny").policy
    arch = architecture_of(load_profile("tiny"))
    assert (pol.hidden_size, pol.num_hidden_layers, pol.num_attention_heads,
            pol.num_key_value_heads, pol.intermediate_size) == (128, 4, 4, 2, 512)
    # by hand: d=32; layer 2*128*128 + 2*128*64 + 3*128*512 + 2*128 + 2*32 = 246,080;
    # embeddings V*128 (tied) + 4 layers + final norm 128
    assert arch.parameters() == pol.vocab_size * 128 + 4 * 246_080 + 128
    model = Qwen3ForCausalLM(Qwen3Config(
        hidden_size=pol.hidden_size, num_hidden_layers=pol.num_hidden_layers,
        num_attention_heads=pol.num_attention_heads, num_key_value_heads=pol.num_key_value_heads,
        head_dim=pol.hidden_size // pol.num_attention_heads,
        intermediate_size=pol.intermediate_size, vocab_size=pol.vocab_size,
        tie_word_embeddings=True))
    assert sum(p.numel() for p in model.parameters()) == arch.parameters()


@pytest.mark.parametrize("stage, offload, expected", [
    ("none", False, (4000, 4000, 8000)),   # fp32 weights, fp32 grads, Adam moments
    ("0", False, (2000, 2000, 12000)),
    ("1", False, (2000, 2000, 3000)),
    ("2", False, (2000, 500, 3000)),
    ("3", False, (500, 500, 3000)),
    ("3", True, (500, 500, 0)),
])
def test_zero_stages_partition_weights_gradients_and_optimizer_states(stage, offload, expected):
    mem = training_memory(1000, Hardware(gpus=4, zero_stage=stage, offload_optimizer=offload))
    assert (mem["weights"], mem["gradients"], mem["optimizer states"]) == expected


def test_unknown_zero_stage_is_refused():
    with pytest.raises(PlanError, match="zero stage '4'"):
        training_memory(1000, Hardware(gpus=4, zero_stage="4"))


def test_activation_memory_by_hand():
    arch = Architecture(10, 3, 2, 1, 5, 40, 100, True)
    # b*s*h = 2*5*10 = 100: checkpoints 2*3*100 = 600, one layer 34*100 = 3400
    assert activation_memory(arch, rows=2, seq=5, fused_lm_head=True) == 4000
    # + fp32 log-softmax 4*2*5*100 = 4000
    assert activation_memory(arch, rows=2, seq=5, fused_lm_head=False) == 8000


def test_paper_qwen3_4b_on_8_gpus_by_hand():
    cfg = load_profile("paper-qwen3-4b")
    result = plan(cfg, Hardware(gpus=8, gpu_memory_gib=96, zero_stage="3"))
    p = 4_022_468_096
    mem = result["memory"]
    assert mem["weights"] == 2 * p / 8 and mem["optimizer states"] == 12 * p / 8
    share = cfg.train.vllm_gpu_memory_utilization * 96 * GIB
    assert mem["vLLM KV cache"] == pytest.approx(share - 2 * p - 2 * GIB)
    assert mem["faiss shard (Flat)"] == 21_015_324 * 768 * 4 / 8
    assert result["total_bytes"] == pytest.approx(sum(mem.values()))
    step, ret = result["step"], result["retrieval"]
    assert step["leaves per prompt"] == 22 and step["trajectories"] == 64 * 22
    assert step["generated tokens (upper bound)"] == 64 * 22 * cfg.rollout.max_response_tokens
    assert ret["queries (upper bound)"] == 64 * 22 * 6 == 8448
    assert ret["queries (expected)"] == pytest.approx(64 * (10 * 3.7 + 12 * 3.7 / 2))
    assert ret["needed rate (q/s)"] == pytest.approx(1408 / 30)
    assert ret["CPU Flat rate (q/s)"] == pytest.approx(1e12 / (2 * 21_015_324 * 768))
    assert ret["CPU faiss keeps up"] is False  # ~31 q/s against ~47 q/s needed


def test_vllm_share_too_small_for_the_weights_is_an_error_naming_the_knob():
    cfg = load_profile("paper-qwen3-8b", {"train": {"vllm_gpu_memory_utilization": 0.1}})
    with pytest.raises(PlanError, match="vllm_gpu_memory_utilization=0.1"):
        plan(cfg, Hardware(gpus=8, gpu_memory_gib=80))


def test_cli_prints_the_table_and_json(capsys):
    assert plan_cli.main(["--profile", "paper-qwen3-4b", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "| optimizer states | 5.62 |" in out          # 12 * 4.022e9 / 8 / 2**30
    assert "| CPU faiss keeps up | NO |" in out
    assert plan_cli.main(["--profile", "paper-qwen3-4b", "--gpus", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hardware"]["zero_stage"] == "none"       # one GPU: no DeepSpeed by default
    assert data["memory"]["optimizer states"] == 8 * 4_022_468_096


def test_cli_bad_input_names_it(capsys):
    assert plan_cli.main(["--profile", "paper-qwen3-4b", "--gpus", "0"]) == 2
    assert "--gpus 0" in capsys.readouterr().err
    assert plan_cli.main(["--profile", "tiny", "--gpus", "1",
                          "--set", "retrieval.method=dense",
                          "--set", "retrieval.encoder=my/encoder"]) == 2
    assert "retrieval.encoder='my/encoder'" in capsys.readouterr().err
