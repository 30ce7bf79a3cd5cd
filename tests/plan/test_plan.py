"""``at2po plan``: the formulas of at2po_lib.plan.cost_estimate against hand-computed cases."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest

from at2po_lib.cli import plan as plan_cli
from at2po_lib.config.profile import load_profile
from at2po_lib.plan.cost_estimate import (
    GIB,
    KNOWN_ARCHITECTURES,
    KNOWN_ENCODERS,
    Architecture,
    Hardware,
    PlanError,
    activation_memory,
    architecture_of,
    autocast_copy_bytes,
    copy_out_bytes,
    cuda_context_bytes,
    encoder_bytes,
    faiss_scratch_bytes,
    faiss_shard_bytes,
    fp32_gradient_partition_bytes,
    kept_cache_bytes,
    layer_activation_bytes,
    lm_head_grad_bytes,
    margin_bytes,
    method_beta,
    plan,
    prompt_cache_bytes,
    reference_model_bytes,
    rollout_rows,
    rollout_weights_bytes,
    sampling_bytes,
    training_memory,
    verdict,
    working_kv_bytes,
    zero3_gathered_bytes,
)

P4B, P8B = 4_022_468_096, 8_190_735_360
QWEN3_4B, QWEN3_8B = KNOWN_ARCHITECTURES["Qwen/Qwen3-4B"], KNOWN_ARCHITECTURES["Qwen/Qwen3-8B"]


def test_parameter_counts_match_the_published_backbones():
    # safetensors totals of the hub checkpoints (embeddings counted once when tied)
    assert KNOWN_ARCHITECTURES["Qwen/Qwen3-4B"].parameters() == 4_022_468_096
    assert KNOWN_ARCHITECTURES["Qwen/Qwen3-8B"].parameters() == 8_190_735_360
    assert KNOWN_ARCHITECTURES["Qwen/Qwen2.5-7B"].parameters() == 7_615_616_512


def test_tiny_profile_architecture_counts_the_real_tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    pol = load_profile("tiny").policy
    arch = architecture_of(load_profile("tiny"))
    assert (
        pol.hidden_size,
        pol.num_hidden_layers,
        pol.num_attention_heads,
        pol.num_key_value_heads,
        pol.intermediate_size,
    ) == (128, 4, 4, 2, 512)
    # by hand: d=32; layer 2*128*128 + 2*128*64 + 3*128*512 + 2*128 + 2*32 = 246,080;
    # embeddings V*128 (tied) + 4 layers + final norm 128
    assert arch.parameters() == pol.vocab_size * 128 + 4 * 246_080 + 128
    model = Qwen3ForCausalLM(
        Qwen3Config(
            hidden_size=pol.hidden_size,
            num_hidden_layers=pol.num_hidden_layers,
            num_attention_heads=pol.num_attention_heads,
            num_key_value_heads=pol.num_key_value_heads,
            head_dim=pol.hidden_size // pol.num_attention_heads,
            intermediate_size=pol.intermediate_size,
            vocab_size=pol.vocab_size,
            tie_word_embeddings=True,
        )
    )
    assert sum(p.numel() for p in model.parameters()) == arch.parameters()


@pytest.mark.parametrize(
    "stage, offload, expected",
    [
        ("none", False, (4000, 4000, 8000)),  # fp32 weights, fp32 grads, Adam moments
        ("0", False, (2000, 2000, 12000)),
        ("1", False, (2000, 2000, 3000)),
        ("2", False, (2000, 500, 3000)),
        ("3", False, (500, 500, 3000)),
        ("3", True, (500, 500, 0)),
    ],
)
def test_zero_stages_partition_weights_gradients_and_optimizer_states(stage, offload, expected):
    mem = training_memory(1000, Hardware(gpus=4, zero_stage=stage, offload_optimizer=offload))
    assert (mem["weights"], mem["gradients"], mem["optimizer states"]) == expected


def test_unknown_zero_stage_is_refused():
    with pytest.raises(PlanError, match="zero stage '4'"):
        training_memory(1000, Hardware(gpus=4, zero_stage="4"))


def test_activation_memory_by_hand():
    arch = Architecture(10, 3, 2, 1, 5, 40, 100, True)
    # b*s*h = 2*5*10 = 100: checkpoints 2*3*100 = 600, one SwiGLU layer (21 + 8*40/10)*100 = 5300
    assert activation_memory(arch, rows=2, seq=5, fused_lm_head=True) == 5900
    # + fp32 log-softmax 4*2*5*100 = 4000
    assert activation_memory(arch, rows=2, seq=5, fused_lm_head=False) == 9900


# ------------------------------------------------------- issue #36: the terms by hand
def test_swiglu_layer_activations_of_qwen3_by_hand():
    # Qwen3-8B: I/h = 12288/4096 = 3 -> 21 + 24 = 45; b*s*h = 2*8192*4096 = 67,108,864
    assert layer_activation_bytes(QWEN3_8B, 2, 8192) == 45 * 67_108_864 == 3_019_898_880
    # Qwen3-4B: I/h = 9728/2560 = 3.8 -> 21 + 30.4 = 51.4; b*s*h = 2*8192*2560 = 41,943,040
    assert layer_activation_bytes(QWEN3_4B, 2, 8192) == pytest.approx(51.4 * 41_943_040)


def test_cuda_context_and_nccl_buffers():
    assert cuda_context_bytes(1) == 1 * GIB and cuda_context_bytes(8) == 2 * GIB


def test_fused_lm_head_fp32_weight_gradient_by_hand():
    zero2 = Hardware(gpus=8, zero_stage="2")
    assert lm_head_grad_bytes(QWEN3_8B, zero2, lora=False) == 151_936 * 4_096 * 4 == 2_489_319_424
    assert lm_head_grad_bytes(QWEN3_4B, zero2, lora=False) == 151_936 * 2_560 * 4
    # fp32 gradients already (no DeepSpeed), a frozen head (LoRA), no fused head: nothing extra
    assert lm_head_grad_bytes(QWEN3_8B, Hardware(gpus=1, zero_stage="none"), lora=False) == 0
    assert lm_head_grad_bytes(QWEN3_8B, zero2, lora=True) == 0
    assert (
        lm_head_grad_bytes(
            QWEN3_8B, Hardware(gpus=8, zero_stage="2", fused_lm_head=False), lora=False
        )
        == 0
    )


@pytest.mark.parametrize(
    "stage, offload, expected",
    [
        ("2", False, 4 * P8B / 8),  # 4,095,367,680 B = 3.81 GiB: the ZeRO-2 step term
        ("3", False, 4 * P8B / 8),
        ("1", False, 4 * P8B / 8),
        ("3", True, 0.0),
        ("none", False, 0.0),
        ("0", False, 0.0),
    ],
)
def test_fp32_gradient_partition_at_the_step(stage, offload, expected):
    hw = Hardware(gpus=8, zero_stage=stage, offload_optimizer=offload)
    assert fp32_gradient_partition_bytes(P8B, hw) == expected
    assert fp32_gradient_partition_bytes(P8B, Hardware(gpus=8, zero_stage="2")) == 4_095_367_680


def test_zero3_gathered_parameters_are_capped_by_max_live():
    assert zero3_gathered_bytes(P8B, Hardware(gpus=8, zero_stage="3")) == 2 * 10**9
    assert zero3_gathered_bytes(P4B, Hardware(gpus=8, zero_stage="3")) == 2 * 10**9
    assert zero3_gathered_bytes(1000, Hardware(gpus=8, zero_stage="3")) == 2000
    assert zero3_gathered_bytes(P8B, Hardware(gpus=8, zero_stage="2")) == 0


def test_autocast_copy_only_for_fp32_master_weights_without_deepspeed():
    assert autocast_copy_bytes(P4B, Hardware(gpus=1, zero_stage="none"), lora=False) == 2 * P4B
    assert autocast_copy_bytes(P4B, Hardware(gpus=1, zero_stage="none"), lora=True) == 0
    assert autocast_copy_bytes(P4B, Hardware(gpus=8, zero_stage="3"), lora=False) == 0


def test_faiss_shard_in_fp16_and_the_encoder_on_gpu0_only():
    # wiki-18 x e5 (768) in fp16 over 8 GPUs: 21,015,324 * 768 * 2 / 8
    assert faiss_shard_bytes(21_015_324, 768, Hardware(gpus=8)) == 4_034_942_208
    assert faiss_shard_bytes(21_015_324, 768, Hardware(gpus=8, retriever_on_gpu=False)) == 0
    # e5-base-v2 fp16: weights 2 * 109,482,240; one batch 2 * 512 * 256 * (2*768 + 3072)
    e5 = KNOWN_ENCODERS["intfloat/e5-base-v2"]
    assert encoder_bytes(e5, 512, 256, fp16=True) == 218_964_480 + 1_207_959_552


def test_margin_and_verdict():
    assert margin_bytes(80 * GIB) == 4 * GIB and margin_bytes(40 * GIB) == 3 * GIB
    assert margin_bytes(141 * GIB) == pytest.approx(7.05 * GIB)
    assert verdict(76 * GIB, 80 * GIB) == "fits"
    assert verdict(76.5 * GIB, 80 * GIB) == "tight" and verdict(80 * GIB, 80 * GIB) == "tight"
    assert verdict(80.5 * GIB, 80 * GIB) == "does not fit"


def test_lora_parameters_match_peft():
    """Adapters on every linear layer: the formula against peft's own count (tiny Qwen3), and
    Qwen3-8B r=16 by hand."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from at2po_lib.plan.cost_estimate import LORA_TARGETS

    arch = Architecture(64, 2, 4, 2, 16, 96, 300, True, qk_norm=True)
    model = Qwen3ForCausalLM(
        Qwen3Config(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=96,
            vocab_size=300,
            tie_word_embeddings=True,
        )
    )
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=list(LORA_TARGETS)))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert arch.lora_parameters(4) == trainable
    # per layer (4096+4096)*2 + (4096+1024)*2 + (4096+12288)*3 = 75,776; x 16 x 36
    assert QWEN3_8B.lora_parameters(16) == 75_776 * 16 * 36 == 43_646_976


def test_paper_qwen3_8b_on_8_x_80_gib_zero2_does_not_fit():
    """Issue #36: the plan said 78.1 of 80 GiB, "fits"; with the missing terms it is 81.1,
    and 82.6 with faiss-gpu's scratch (issue #65)."""
    cfg = load_profile("paper-qwen3-8b")
    result = plan(cfg, Hardware(gpus=8, gpu_memory_gib=80, zero_stage="2"))
    mem = result["memory"]
    by_hand = {
        "CUDA context (+ NCCL)": 2 * GIB,
        "weights": 2 * P8B,
        "gradients": 2 * P8B / 8,
        "optimizer states": 12 * P8B / 8,
        "fp32 gradient partition (step)": 4 * P8B / 8,
        "activations (checkpointed)": 2 * 36 * 67_108_864 + 45 * 67_108_864,
        "fused LM head fp32 weight gradient": 2_489_319_424,
        "vLLM weights (bf16)": 2 * P8B,
        "vLLM KV cache": 0.4 * 80 * GIB - 2 * P8B - 2 * GIB,
        "vLLM overhead": 2 * GIB,
        "faiss shard (Flat, fp16)": 4_034_942_208,
        "faiss-gpu scratch": 1.5 * GIB,
        "encoder (GPU 0 only, inference)": 218_964_480 + 1_207_959_552,
    }
    assert mem.keys() == by_hand.keys()
    for key, value in by_hand.items():
        assert mem[key] == pytest.approx(value), key
    assert result["total_bytes"] == pytest.approx(sum(by_hand.values()))
    assert result["total_bytes"] / GIB == pytest.approx(82.64, abs=0.01)
    assert result["verdict"] == "does not fit" and result["fits"] is False


def test_paper_qwen3_4b_on_8_gpus_by_hand():
    cfg = load_profile("paper-qwen3-4b")
    result = plan(cfg, Hardware(gpus=8, gpu_memory_gib=96, zero_stage="3"))
    p = 4_022_468_096
    mem = result["memory"]
    assert mem["weights"] == 2 * p / 8 and mem["optimizer states"] == 12 * p / 8
    share = cfg.train.vllm_gpu_memory_utilization * 96 * GIB
    assert mem["vLLM KV cache"] == pytest.approx(share - 2 * p - 2 * GIB)
    assert mem["faiss shard (Flat, fp16)"] == 21_015_324 * 768 * 2 / 8
    assert mem["ZeRO-3 gathered parameters"] == 2e9 and result["verdict"] == "fits"
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
    assert "| optimizer states | 5.62 |" in out  # 12 * 4.022e9 / 8 / 2**30
    assert "| CPU faiss keeps up | NO |" in out
    assert "| verdict (margin 4.8 GiB) | fits (" in out
    assert plan_cli.main(["--profile", "paper-qwen3-4b", "--gpus", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hardware"]["zero_stage"] == "none"  # one GPU: no DeepSpeed by default
    assert data["memory"]["optimizer states"] == 8 * 4_022_468_096


def test_cli_bad_input_names_it(capsys):
    with pytest.raises(SystemExit) as exited:  # argparse: one line, exit status 2
        plan_cli.main(["--profile", "paper-qwen3-4b", "--gpus", "0"])
    assert exited.value.code == 2 and "argument --gpus: '0'" in capsys.readouterr().err
    assert (
        plan_cli.main(
            [
                "--profile",
                "tiny",
                "--gpus",
                "1",
                "--set",
                "retrieval.method=dense",
                "--set",
                "retrieval.encoder=my/encoder",
            ]
        )
        == 2
    )
    assert "retrieval.encoder='my/encoder'" in capsys.readouterr().err


def test_cli_cards_gives_a_verdict_per_card_size(capsys):
    assert (
        plan_cli.main(["--profile", "paper-qwen3-4b", "--gpus", "8", "--cards", "40,96", "--json"])
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [r["card (GiB)"] for r in rows] == [40.0, 96.0]
    # 40.6 and 63.0 before faiss-gpu's 1.5 GiB scratch was counted (issue #65)
    assert rows[0]["as configured"].startswith("does not fit (42.1")
    assert rows[1]["as configured"].startswith("fits (64.5") and "LoRA r=16" in rows[1]
    assert plan_cli.main(["--profile", "paper-qwen3-4b", "--gpus", "8", "--cards", "40,x"]) == 2
    assert "--cards '40,x'" in capsys.readouterr().err


# ------------------------------------------------- every accelerate config's comment
ACCELERATE = Path(__file__).resolve().parents[2] / "configs" / "accelerate"
PLAN_LINE = re.compile(
    r"^# plan: at2po plan (?P<args>.+?) -> (?P<verdict>fits|tight|does not fit)$"
)


def _plan_lines(path: Path) -> list[tuple[list[str], str]]:
    return [
        (shlex.split(m["args"]), m["verdict"])
        for line in path.read_text().splitlines()
        if (m := PLAN_LINE.match(line))
    ]


@pytest.mark.parametrize(
    "config", sorted(p.name for p in ACCELERATE.glob("*.yaml") if "_cpu_" not in p.name)
)  # CPU: no GPU to plan
def test_every_accelerate_config_comment_agrees_with_the_plan(config, capsys):
    """Each configs/accelerate/*.yaml says what the plan gives for the setting it recommends
    (``# plan: at2po plan ... -> verdict``): the plan must give that verdict, and the command
    must describe the config (processes = --gpus, its ZeRO stage, its optimizer offload)."""
    import yaml

    path = ACCELERATE / config
    lines = _plan_lines(path)
    assert lines, f"{path}: no '# plan: at2po plan ... -> verdict' line"
    accel = yaml.safe_load(path.read_text())
    deepspeed = accel.get("deepspeed_config") or {}
    stage = str(deepspeed.get("zero_stage", "none"))
    offload = deepspeed.get("offload_optimizer_device", "none") == "cpu"
    for argv, expected in lines:
        args = plan_cli.build_parser().parse_args(argv)
        assert args.gpus == accel["num_processes"], f"{config}: {argv}"
        assert args.zero == stage and args.offload_optimizer == offload, f"{config}: {argv}"
        assert plan_cli.main([*argv, "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["verdict"] == expected, f"{config}: {' '.join(argv)}"


# ------------------------------------------------------------- the one-GPU profile
P17B = 1_720_574_976


def test_qwen3_1_7b_by_hand():
    # per layer: q, o 2*2048*2048; k, v 2*2048*1024; MLP 3*2048*6144; norms 2*2048 + 2*128
    layer = 8_388_608 + 4_194_304 + 37_748_736 + 4_096 + 256
    assert layer == 50_336_000
    assert (
        KNOWN_ARCHITECTURES["Qwen/Qwen3-1.7B"].parameters()
        == 151_936 * 2_048 + 28 * layer + 2_048
        == P17B
    )


def test_one_gpu_profile_fits_an_80_gib_card_by_hand():
    cfg = load_profile("paper-qwen3-1.7b-1gpu")
    assert cfg.name == "paper-qwen3-1.7b-1gpu" and cfg.policy.model == "Qwen/Qwen3-1.7B"
    result = plan(
        cfg, Hardware(gpus=1, gpu_memory_gib=80, zero_stage="none", retriever_on_gpu=False)
    )
    bsh = 2 * (2_000 + 6_192) * 2_048
    by_hand = {
        "CUDA context (+ NCCL)": GIB,
        "weights": 4 * P17B,
        "gradients": 4 * P17B,
        "optimizer states": 8 * P17B,
        "bf16 autocast copy of the weights": 2 * P17B,
        "activations (checkpointed)": 2 * 28 * bsh + (21 + 8 * 3) * bsh,
        "vLLM weights (bf16)": 2 * P17B,
        "vLLM KV cache": 0.3 * 80 * GIB - 2 * P17B - 2 * GIB,
        "vLLM overhead": 2 * GIB,
    }
    assert result["memory"] == pytest.approx(by_hand)
    assert result["total_bytes"] / GIB == pytest.approx(57.0, abs=0.05)
    assert result["verdict"] == "fits"
    assert result["retrieval"]["CPU faiss keeps up"] is True  # 352 queries / 30 s < 31 q/s


def test_one_gpu_profile_on_24_48_80_141_gib(capsys):
    argv = [
        "--profile",
        "paper-qwen3-1.7b-1gpu",
        "--gpus",
        "1",
        "--retriever-on-cpu",
        "--cards",
        "24,48,80,141",
        "--json",
    ]
    assert plan_cli.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    verdicts = [(r["as configured"].split(" (")[0], r["LoRA r=16"].split(" (")[0]) for r in rows]
    assert verdicts == [
        ("does not fit", "fits"),
        ("tight", "fits"),
        ("fits", "fits"),
        ("fits", "fits"),
    ]


def test_one_gpu_profile_resolves_a_run_on_one_process():
    from at2po_lib.trainer.resolve import resolve_run

    spec = resolve_run(load_profile("paper-qwen3-1.7b-1gpu"), "at2po", 0, world_size=1)
    assert spec.geometry.updates_per_step == 4  # 16 prompts / 4 per update
    assert (
        spec.trainer["per_device_train_batch_size"] == 2 and spec.trainer["num_generations"] == 22
    )


# ------------------------------------------------------- the rollout phase (issue #47)
def test_rollout_weights_by_hand():
    none, z3 = Hardware(gpus=1, zero_stage="none"), Hardware(gpus=8, zero_stage="3")
    assert rollout_weights_bytes(P4B, none, lora=False, dtype_bytes=2, autocast=True) == 2 * P4B
    assert rollout_weights_bytes(P4B, none, lora=False, dtype_bytes=4, autocast=True) == 2 * P4B
    assert rollout_weights_bytes(P4B, none, lora=False, dtype_bytes=4, autocast=False) == 0
    assert rollout_weights_bytes(P4B, none, lora=True, dtype_bytes=2, autocast=True) == 0
    assert (
        rollout_weights_bytes(P4B, z3, lora=False, dtype_bytes=2, autocast=True) == 2 * P4B * 7 / 8
    )
    assert (
        rollout_weights_bytes(
            P4B, Hardware(gpus=8, zero_stage="2"), lora=False, dtype_bytes=2, autocast=True
        )
        == 0
    )


def test_rollout_kv_terms_by_hand():
    k = 1000  # bytes a token
    assert prompt_cache_bytes(8, 70, k) == 8 * 70 * 1000
    assert kept_cache_bytes(8, 2, 2, 1, 390, k) == 8 * 2 * 390 * 1000  # round 0's chains
    assert kept_cache_bytes(8, 4, 3, 2, 390, k) == 8 * (4 + 3) * 390 * 1000
    assert kept_cache_bytes(8, 6, 0, 0, 390, k) == 0
    assert working_kv_bytes(16, 390, k) == 16 * 391 * 1000
    assert copy_out_bytes(16, 390, k, 28, "round") == 16 * 390 * 1000
    assert copy_out_bytes(16, 390, k, 28, "turn") == 2 * 16 * 390 * 1000 + 16 * 390 * 1000 / 28
    assert sampling_bytes(16, 151_936, 2) == 16 * 151_936 * (2 + 12)


def test_rollout_rows_of_each_expansion():
    from at2po_lib.config.profile import RolloutConfig

    ro = RolloutConfig(tree_m=10, tree_l=2, tree_k=6, chains=16, aepo_budget=16)
    assert rollout_rows(dataclasses.replace(ro, expansion="entropy")) == (10, 6, 2)
    assert rollout_rows(dataclasses.replace(ro, expansion="chain")) == (16, 0, 0)
    assert rollout_rows(dataclasses.replace(ro, expansion="aepo")) == (16, 0, 0)
    # Tree-GRPO at 22 leaves: 2 trees of 1 + 2*5 leaves -> 2 chains, then 10 a round
    assert rollout_rows(dataclasses.replace(ro, expansion="random", tree_grpo_trees=2)) == (
        2,
        10,
        2,
    )


def _q06(tmp_path) -> str:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3",
                "hidden_size": 1024,
                "num_hidden_layers": 28,
                "num_attention_heads": 16,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "intermediate_size": 3072,
                "vocab_size": 151_936,
                "tie_word_embeddings": True,
            }
        )
    )
    return str(tmp_path)


P06 = 596_049_920


def test_both_phases_of_the_gpu_checks_setting_by_hand(tmp_path):
    """The H200 check's setting (Qwen3-0.6B shape, smoke's 2 x 1 x 2 tree, 8 prompts, 320
    response tokens, fp32 master weights, bf16 autocast): the rollout phase by hand, a bf16
    copy and a round session (a GPU's defaults), against the update phase; the larger is the
    total."""
    cfg = load_profile(
        "smoke",
        {"policy": {"model": _q06(tmp_path)}, "train": {"prompts_per_step": 8, "bf16": True}},
    )
    result = plan(
        cfg, Hardware(gpus=1, gpu_memory_gib=140, zero_stage="none", retriever_on_gpu=False)
    )
    k, s = 2 * 28 * 8 * 128 * 2, 256 + 320  # bf16 KV bytes a token; prompt + response
    by_hand = {
        "CUDA context (+ NCCL)": GIB,
        "weights": 4 * P06,
        "gradients": 0,
        "optimizer states": 8 * P06,
        "rollout: weights as run (copy / gathered)": 2 * P06,
        "rollout: prompt caches": 8 * 256 * k,
        "rollout: earlier rounds' caches": 8 * 2 * s * k,  # round 1: round 0's 16 chains kept
        "rollout: working KV buffer": 16 * (s + 1) * k,
        "rollout: copy-out (round grouping)": 16 * s * k,
        "rollout: sampling logits": 16 * 151_936 * 14,
    }
    assert result["phases"]["rollout"] == pytest.approx(by_hand)
    totals = result["phase_totals"]
    assert totals["rollout"] == pytest.approx(sum(by_hand.values()))
    assert totals["update"] == pytest.approx(sum(result["phases"]["update"].values()))
    assert result["total_bytes"] == max(totals.values())
    assert result["peak_phase"] == "rollout" and totals["rollout"] > totals["update"]
    before = plan(
        load_profile(
            "smoke",
            {
                "policy": {"model": _q06(tmp_path)},
                "train": {"prompts_per_step": 8, "bf16": True},
                "rollout": {"decode_dtype": "model", "decode_grouping": "turn"},
            },
        ),
        Hardware(gpus=1, gpu_memory_gib=140, zero_stage="none", retriever_on_gpu=False),
    )
    rows = before["phases"]["rollout"]
    assert rows["rollout: working KV buffer"] == 16 * (s + 1) * 2 * k  # fp32: twice the bytes
    assert rows["rollout: copy-out (turn grouping)"] == pytest.approx(
        2 * 16 * s * 2 * k + 16 * s * 2 * k / 28
    )
    assert rows["rollout: weights as run (copy / gathered)"] == 2 * P06  # autocast's casts


def test_a_vllm_kv_cache_far_below_the_batch_is_flagged(capsys):
    lora24 = plan(
        load_profile("paper-qwen3-1.7b-1gpu", {"policy": {"lora_r": 16}}),
        Hardware(gpus=1, gpu_memory_gib=24, zero_stage="none", retriever_on_gpu=False),
    )
    assert lora24["verdict"] == "fits"
    (warning,) = lora24["warnings"]
    assert "holds 18,679 tokens" in warning and "2,883,584" in warning
    roomy = plan(
        load_profile("paper-qwen3-1.7b-1gpu", {"train": {"vllm_gpu_memory_utilization": 0.9}}),
        Hardware(gpus=1, gpu_memory_gib=141, zero_stage="none", retriever_on_gpu=False),
    )
    assert roomy["warnings"] == []
    assert (
        plan_cli.main(
            [
                "--profile",
                "paper-qwen3-1.7b-1gpu",
                "--gpus",
                "1",
                "--gpu-memory-gib",
                "24",
                "--set",
                "policy.lora_r=16",
            ]
        )
        == 0
    )
    assert "warning: vLLM's KV cache holds 18,679 tokens" in capsys.readouterr().out


def test_one_gpu_puts_the_retriever_on_the_cpu_unless_asked(capsys):
    base = ["--profile", "paper-qwen3-1.7b-1gpu", "--json"]
    assert plan_cli.main([*base, "--gpus", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"]["retriever_on_gpu"] is False
    assert plan_cli.main([*base, "--gpus", "1", "--retriever-on-gpu"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"]["retriever_on_gpu"] is True
    assert plan_cli.main([*base, "--gpus", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"]["retriever_on_gpu"] is True


# ------------------------------------------------------------- models the method adds
def test_reference_model_by_hand():
    p = P17B
    one_gpu = Hardware(gpus=1, zero_stage="none")
    assert reference_model_bytes(p, one_gpu, 1e-3, 4) == 4 * p  # fp32 master copy, whole
    assert 4 * p / GIB == pytest.approx(6.41, abs=0.005)  # issue #65's +6.41 GiB at 1.7B
    # ZeRO-3: TRL prepares the reference with DeepSpeed, partitioned over the 8 GPUs, in bf16
    assert reference_model_bytes(p, Hardware(gpus=8, zero_stage="3"), 1e-3, 2) == 2 * p / 8
    # ZeRO-2: TRL's prepare_deepspeed runs the reference at stage 0, whole on every GPU
    assert reference_model_bytes(p, Hardware(gpus=8, zero_stage="2"), 1e-3, 2) == 2 * p
    assert reference_model_bytes(p, one_gpu, 0.0, 4) == 0  # beta 0: TRL loads none


def test_method_beta_is_the_presets_else_the_profiles():
    cfg = load_profile("paper-qwen3-1.7b-1gpu")
    assert cfg.train.beta == 0.0
    assert method_beta(cfg, "grpo") == method_beta(cfg, "tree_grpo") == 1e-3
    assert method_beta(cfg, "at2po") == method_beta(cfg, "dapo") == 0.0


def test_grpo_and_at2po_differ_by_the_reference_model_and_grpo_does_not_fit_48_gib():
    cfg = load_profile("paper-qwen3-1.7b-1gpu")
    card = Hardware(gpus=1, gpu_memory_gib=48, zero_stage="none", retriever_on_gpu=False)
    at2po, grpo = plan(cfg, card, "at2po"), plan(cfg, card, "grpo")
    extra = {k: v for k, v in grpo["memory"].items() if k not in at2po["memory"]}
    assert extra == {"reference model (beta 0.001)": 4 * P17B}
    assert grpo["total_bytes"] - at2po["total_bytes"] == pytest.approx(4 * P17B)
    assert (at2po["verdict"], grpo["verdict"]) == ("tight", "does not fit")
    assert at2po["total_bytes"] / GIB == pytest.approx(47.4, abs=0.05)
    assert grpo["total_bytes"] / GIB == pytest.approx(53.8, abs=0.05)
    # both phases hold it: the reference is loaded once for the whole run
    assert grpo["phase_totals"]["rollout"] - at2po["phase_totals"]["rollout"] == 4 * P17B


def test_lora_loads_no_reference_model():
    cfg = load_profile("paper-qwen3-1.7b-1gpu", {"policy": {"lora_r": 16}})
    card = Hardware(gpus=1, gpu_memory_gib=48, zero_stage="none", retriever_on_gpu=False)
    assert plan(cfg, card, "grpo")["memory"] == plan(cfg, card, "at2po")["memory"]


def test_faiss_gpu_scratch_on_every_gpu_holding_a_shard():
    assert faiss_scratch_bytes(Hardware(gpus=8)) == 1.5 * GIB
    assert faiss_scratch_bytes(Hardware(gpus=8, retriever_on_gpu=False)) == 0
    cfg = load_profile("paper-qwen3-4b")
    mem = plan(cfg, Hardware(gpus=8, gpu_memory_gib=96, zero_stage="3"))["memory"]
    assert mem["faiss-gpu scratch"] == 1.5 * GIB


def test_cli_method_adds_the_reference_row_and_names_the_method(capsys):
    base = ["--profile", "paper-qwen3-1.7b-1gpu", "--gpus", "1", "--gpu-memory-gib", "48"]
    assert plan_cli.main([*base, "--method", "grpo"]) == 0
    out = capsys.readouterr().out
    assert "method grpo" in out and "| reference model (beta 0.001) | 6.41 | 6.41 |" in out
    assert "does not fit" in out
    with pytest.raises(SystemExit):  # react trains nothing: no memory to plan
        plan_cli.main([*base, "--method", "react"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("at2po plan: error: argument --method: 'react' trains nothing")


def test_no_gpu_index_keeps_the_query_encoder_on_the_cpu():
    from at2po_lib.cli.serve_retriever import build_parser, encoder_device

    parse = build_parser().parse_args
    assert encoder_device(parse(["--profile", "tiny", "--no-gpu-index"])) == "cpu"
    assert encoder_device(parse(["--profile", "tiny", "--no-gpu-index", "--device", "cuda"])) == (
        "cuda"
    )
    assert encoder_device(parse(["--profile", "tiny"])) is None  # the profile's, else cuda
