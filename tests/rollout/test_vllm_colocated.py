"""Issue #36, part 2: the colocated engine driven as TRL's ``VLLMGeneration.generate`` drives
it: sleep mode (weights re-pushed, KV cache woken, engine asleep again afterwards) and tensor
parallelism (a TP group's ranks submit identical requests; a rank that finishes first keeps
joining until all have). vLLM is the stand-in of tests/vllm_standin.py; TP runs in two real
processes over gloo. ``vllm_mode: server`` is refused when the profile loads."""

from __future__ import annotations

import json
import os
import socket
from types import SimpleNamespace

import pytest
import torch

import vllm_standin
from at2po_lib.config.profile import ProfileError, load_profile
from at2po_lib.rollout.turns import TurnRequest
from at2po_lib.rollout.vllm_backend import ColocatedEngine, colocated_engine


class FakeGeneration:
    """TRL's ``VLLMGeneration`` as the trainer sees it: the engine, the sleep-mode flag it keeps
    (level-2 sleep at start, as TRL's ``_init_vllm``), ``sync_weights`` (wake the weights, load
    the training model's), TP size and group."""

    def __init__(self, llm, sleep_mode: bool, tensor_parallel_size: int = 1, tp_group=None):
        self.llm, self.enable_sleep_mode = llm, sleep_mode
        self.tensor_parallel_size, self.tp_group = tensor_parallel_size, tp_group
        self.syncs = 0
        if sleep_mode:
            llm.sleep(level=2)
        self._llm_weights_sleeping = sleep_mode

    def sync_weights(self):
        self.syncs += 1
        if self.enable_sleep_mode:
            self.llm.wake_up(tags=["weights"])
            self._llm_weights_sleeping = False
        self.llm.load_weights()
        self.llm.reset_prefix_cache()


def _tokenizer():
    from at2po_lib.policy.tokenizer import train_tokenizer

    return train_tokenizer(
        ["<search> the capital of avaria </search> <answer> x </answer>"] * 20, vocab_size=300
    )


def _trainer_with(generation, step: int = 3):
    """What ``AT2POTrainer.policy_for_generation`` reads of the trainer with vLLM colocated."""
    return SimpleNamespace(
        use_vllm=True,
        vllm_mode="colocate",
        vllm_generation=generation,
        state=SimpleNamespace(global_step=step),
        _last_loaded_step=step,
    )


def test_sleep_mode_is_woken_for_the_rollout_and_put_back_to_sleep(monkeypatch):
    """TRL syncs weights before rollout_func but never wakes the KV cache: the trainer's
    generation context does, for all of the agent's turns, then sleeps the engine again; the
    next rollout re-pushes the discarded weights first."""
    from at2po_lib.rollout.sampling import SamplingSpec
    from at2po_lib.rollout.vllm_backend import VLLMBackend
    from at2po_lib.trainer.trainer import AT2POTrainer

    vllm_standin.install(monkeypatch)
    llm = vllm_standin.EchoLLM("Qwen/Qwen3-4B")
    generation = FakeGeneration(llm, sleep_mode=True)
    trainer = _trainer_with(generation)
    tok = _tokenizer()
    for rollout in range(2):
        with AT2POTrainer.policy_for_generation(trainer) as engine:
            backend = VLLMBackend(engine, tok, SamplingSpec(1.0), ("</search>",), seed=rollout)
            first = backend.generate_turns([TurnRequest([5, 6], 3), TurnRequest([9], 2)])
            backend.generate_turns([TurnRequest([5, 6] + first[0].token_ids, 2)])
        assert first[0].token_ids == [7, 8, 9] and first[1].token_ids == [10, 11]
        assert generation._llm_weights_sleeping and llm.asleep and not llm.weights_loaded
    assert generation.syncs == 2  # the weights a level-2 sleep discarded, pushed again
    one_rollout = [
        "wake_up(weights)",
        "load_weights",
        "reset_prefix_cache",
        "wake_up(kv_cache)",
        "sleep(2)",
    ]
    assert llm.events == ["sleep(2)"] + one_rollout * 2
    assert llm.generate_calls == 4


def test_without_sleep_mode_the_engine_is_used_as_it_is(monkeypatch):
    vllm_standin.install(monkeypatch)
    llm = vllm_standin.EchoLLM("m")
    generation = FakeGeneration(llm, sleep_mode=False)
    with colocated_engine(generation) as engine:
        out = engine.generate(
            [{"prompt_token_ids": [1]}], vllm_standin.SamplingParams(max_tokens=1)
        )
    assert out[0].outputs[0].token_ids == [2] and llm.events == [] and generation.syncs == 0


def test_an_error_inside_leaves_the_engine_asleep_and_skips_the_drain(monkeypatch):
    vllm_standin.install(monkeypatch)
    llm = vllm_standin.EchoLLM("m")
    generation = FakeGeneration(llm, sleep_mode=True)
    with pytest.raises(ValueError, match="boom"):
        with colocated_engine(generation):
            raise ValueError("boom")
    assert llm.events[-1] == "sleep(2)" and generation._llm_weights_sleeping


# ------------------------------------------------------------------------ tensor parallel
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Rank 0 generates three turns of different sizes, rank 1 one turn: the TP group must still
# make the same calls on both ranks, in the same order, and each rank get its own answers.
TP_TURNS = {0: [[[1], [2, 3]], [[10]], [[20], [21], [22]]], 1: [[[100, 101]]]}


def _tp_rank(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        group = torch.distributed.new_group([0, 1])
        llm = vllm_standin.EchoLLM("m")
        generation = FakeGeneration(llm, sleep_mode=True, tensor_parallel_size=2, tp_group=group)
        answers = []
        with colocated_engine(generation) as engine:
            for turn in TP_TURNS[rank]:
                outs = engine.generate(
                    [{"prompt_token_ids": p} for p in turn],
                    [vllm_standin.SamplingParams(max_tokens=2, seed=rank) for _ in turn],
                )
                answers.append([o.outputs[0].token_ids for o in outs])
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"answers": answers, "inputs": llm.inputs, "events": llm.events}, f)
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.integration
def test_tensor_parallel_ranks_submit_the_same_requests_and_drain(tmp_path):
    """Two processes of one TP group (gloo): identical ``llm.generate`` inputs on both ranks,
    each rank's answers are its own prompts', and the rank with fewer turns does not leave
    the other waiting (the test would time out)."""
    import torch.multiprocessing as mp

    ctx = mp.start_processes(
        _tp_rank, args=(_free_port(), str(tmp_path)), nprocs=2, start_method="spawn", join=False
    )
    for _ in range(600):  # 60 s: a hang fails instead of blocking the suite
        if ctx.join(timeout=0.1):
            break
    else:
        for process in ctx.processes:
            process.kill()
        pytest.fail("the TP group hung")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["inputs"] == ranks[1]["inputs"]  # one engine's ranks, one request list
    assert len(ranks[0]["inputs"]) == 3  # rank 1 joined rank 0's three calls (one of its own)
    for rank in (0, 1):
        expected = [[[p[-1] + 1, p[-1] + 2] for p in turn] for turn in TP_TURNS[rank]]
        assert ranks[rank]["answers"] == expected
        assert ranks[rank]["events"][-1] == "sleep(2)"


def test_tp_slices_follow_each_ranks_own_request_count():
    """Ranks may bring different numbers of requests: rank 1's share starts after rank 0's."""
    calls = []

    def gather(obj):
        calls.append(obj)
        return [([{"prompt_token_ids": [1]}, {"prompt_token_ids": [2]}], ["a", "b"]), obj]

    llm = vllm_standin.EchoLLM("m")
    params = vllm_standin.SamplingParams(max_tokens=1)
    generation = SimpleNamespace(llm=llm, tensor_parallel_size=2, tp_group=None)
    engine = ColocatedEngine(generation, all_gather=gather, group_rank=1)
    llm.generate = lambda prompts, sampling_params, use_tqdm: [
        p["prompt_token_ids"] for p in prompts
    ]
    assert engine.generate([{"prompt_token_ids": [7]}], [params]) == [[7]]
    assert engine.generate([], [params]) == [] and len(calls) == 1


def test_vllm_server_mode_is_refused_when_the_profile_loads():
    with pytest.raises(ProfileError, match=r"train.vllm_mode='server': expected colocate"):
        load_profile("paper-qwen3-4b", {"train": {"vllm_mode": "server"}})
