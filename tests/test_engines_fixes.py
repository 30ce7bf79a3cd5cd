"""What the engines tier found, checked where it can be without the engines (issue #46): the
warm start validated on the HF backend whatever the rollout backend, refused inside a
multi-process launch, ``policy.head_dim`` for vLLM's CPU attention without moving any recorded
run, and the kernel-scan shim's module filter. The engines themselves: tests/test_engines_*.py
(``./run_tests.sh --engines``)."""

from __future__ import annotations

import sys
import types

import pytest

from at2po_lib.config.profile import load_profile
from at2po_lib.policy.model import build_qwen3_config
from at2po_lib.policy.tokenizer import train_tokenizer
from at2po_lib.rollout import vllm_cpu
from at2po_lib.record import run_folder
from at2po_lib.warmstart import sft as warmstart
from at2po_lib.record.identity import recorded_identity, same_finished_run
from at2po_lib.trainer.resolve import resolve_run
from at2po_lib.util.errors import ProfileError
from at2po_lib.util.paths import results_dir


def test_the_warm_start_is_validated_on_the_hf_backend_whatever_the_profile_says(monkeypatch):
    """The SFT trainer's model is scored between its steps: on ``rollout.backend: vllm`` the
    validation handed that model to the vLLM backend (TypeError at the first check)."""
    seen = []

    def greedy_answers(model, tokenizer, template, retriever, rows, rollout_cfg, batch_size):
        seen.append(rollout_cfg.backend)
        return [
            types.SimpleNamespace(answer=None, num_turns=1, num_tool_calls=0, finish_reason="stop")
            for _ in rows
        ]

    monkeypatch.setattr(warmstart, "greedy_answers", greedy_answers)
    cfg = load_profile("engines")
    assert cfg.rollout.backend == "vllm"
    rows = [{"question": "q", "golden_answers": ["a"]}]
    scores = warmstart.validation_scorer(cfg, None, None, {"tiny_hotpotqa": rows})(object())
    assert seen == ["hf"] and scores["n"] == 1
    assert cfg.rollout.backend == "vllm"  # the profile itself is not changed


@pytest.mark.parametrize("world, refused", [("2", True), ("8", True), ("1", False), ("", False)])
def test_the_warm_start_is_not_trained_inside_a_multi_process_launch(world, refused):
    environ = {"WORLD_SIZE": world} if world else {}
    if refused:
        with pytest.raises(ProfileError, match="at2po warmstart --profile engines"):
            warmstart.check_single_process("engines", environ)
    else:
        warmstart.check_single_process("engines", environ)


def test_head_dim_defaults_to_hidden_over_heads_and_can_be_set_apart():
    tok = train_tokenizer(["a b c"] * 5, vocab_size=300)
    smoke, engines = load_profile("smoke"), load_profile("engines")
    assert smoke.policy.head_dim == 0 and smoke.policy.attention_head_dim() == 16
    assert build_qwen3_config(smoke.policy, tok).head_dim == 16
    assert engines.policy.attention_head_dim() == 32  # vLLM's CPU attention: 32, 64, 80, ...
    config = build_qwen3_config(engines.policy, tok)
    assert (config.head_dim, config.hidden_size, config.num_attention_heads) == (32, 32, 2)


def test_a_run_recorded_before_head_dim_existed_is_the_same_run_at_its_default():
    """``policy.head_dim`` was added after the study was recorded: a record in the earlier
    format (read by scripts/migrate_records.py) without it (and without the older ``rollout.turn_entropy``) is the run of the same
    settings at head_dim 0; with head_dim set, it is another run."""
    from test_migrate_records import migrate_records, profile_format

    spec = resolve_run(load_profile("smoke"), "at2po", 0, world_size=1)
    old = profile_format(spec)
    del old["profile"]["policy"]["head_dim"]
    assert migrate_records.legacy_identity(old) == spec.identity()
    del old["profile"]["rollout"]["turn_entropy"]
    assert migrate_records.legacy_identity(old) == spec.identity()
    other = resolve_run(
        load_profile("smoke", {"policy": {"head_dim": 32}}), "at2po", 0, world_size=1
    )
    assert migrate_records.legacy_identity(old) != other.identity()


def test_every_committed_tiny_run_is_still_read_as_its_configuration():
    """A profile field added without its neutral value for the earlier records would make every
    committed run another configuration (and ``./run_all.sh`` show them as stale): each
    committed run's recorded settings equal the settings the code gives its method and seed
    now, the rollout section aside, which differs by design for the presets that take the
    expansion from the profile (Table 2 step 3 and Table 3's cells ran the exact-entropy
    settings the profile held then, issue #49); every other run is the finished run."""
    dones = sorted(results_dir("runs", "tiny").glob("*/seed*/DONE.json"))
    if not dones:
        pytest.skip("no committed tiny runs")
    tiny, finished = load_profile("tiny"), 0
    for done in dones:
        method, seed = done.parent.parent.name, int(done.parent.name.removeprefix("seed"))
        spec = resolve_run(tiny, method, seed, world_size=1)
        recorded, current = recorded_identity(done.parent / "config.yaml"), spec.identity()
        assert recorded is not None, done
        for identity in (recorded, current):
            identity["settings"].pop("rollout")
        assert recorded == current, done
        digest = run_folder.config_hash(spec.record())
        finished += same_finished_run(run_folder.RunDir(done.parent), digest, spec.identity())
    assert finished >= len(dones) - 24  # 24: the 8 cells x 3 seeds of the exact-entropy variant


class _AnswersAnything:
    """llvmlite's ``ffi.lib``: any attribute, ``__dict__`` included, is a function wrapper."""

    __slots__ = ()

    def __getattr__(self, name):
        return lambda *a: None


def test_the_kernel_scan_filter_finds_and_hides_only_unreadable_modules(monkeypatch):
    odd = types.ModuleType("at2po_odd_module")
    odd.lib = _AnswersAnything()
    plain = types.ModuleType("at2po_plain_module")
    plain.value, plain.cls = object(), int
    monkeypatch.setitem(sys.modules, "at2po_odd_module", odd)
    monkeypatch.setitem(sys.modules, "at2po_plain_module", plain)
    found = vllm_cpu.modules_vllm_cannot_scan({"odd": odd, "plain": plain})
    assert found == ["odd"]
    with vllm_cpu.modules_hidden(["at2po_odd_module"]):
        assert "at2po_odd_module" not in sys.modules and "at2po_plain_module" in sys.modules
    assert sys.modules["at2po_odd_module"] is odd


def test_no_shim_is_installed_without_vllms_cpu_platform(monkeypatch):
    """A vLLM without ``vllm.platforms`` (the stand-in; and the CUDA build answers is_cpu()
    False): nothing patched."""
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    assert vllm_cpu.install_shims(synced_weights=True) == []
