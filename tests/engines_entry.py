"""Scenarios of the engines tier (tests/test_engines_vllm.py), each in a fresh process: a vLLM
engine is a spawned process (or, colocated, owns this one's distributed state), so every
scenario runs under a ``__main__`` guard and prints one JSON line, ``RESULT {...}``, that the
test reads.

    python tests/engines_entry.py sync --shims none|kernel_scan|all
    python tests/engines_entry.py rollout
    python tests/engines_entry.py colocated
    python tests/engines_entry.py evaluate
    python tests/engines_entry.py zero3-digest
    accelerate launch --config_file configs/accelerate/zero3_cpu_2proc.yaml \
        tests/engines_entry.py zero3-resume --crash none|mid-step|resume
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from at2po_lib.util.process_group import process_group_left_at_end


os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def emit(**result) -> None:
    """The scenario's result as one ``RESULT {json}`` line on standard output, in one
    ``write`` call: the ranks of a launch share the stream, and a line that ``print`` wrote
    in pieces (the buffer's earlier text first) took the other rank's output before its end
    once. One write of at most ``PIPE_BUF`` bytes (4,096 on Linux) to a pipe is never
    interleaved (the 2-rank scenarios' lines are ~2.2 kB; a longer line of a one-process
    scenario has no other writer)."""
    sys.stdout.flush()
    sys.stderr.flush()
    line = memoryview(("RESULT " + json.dumps(result) + "\n").encode())
    while line:
        line = line[os.write(sys.stdout.fileno(), line) :]


# ----------------------------------------------------------------------------------- sync
def scenario_sync(shims: str, work: Path) -> dict:
    """An engine started in this process (as TRL's colocated one) after bm25s has loaded numba,
    then TRL's sync loop (``load_weights`` per parameter) with changed weights: the tokens
    before and after the sync against the HF model's."""
    import bm25s  # noqa: F401 - the BM25 retriever's import, which loads numba and llvmlite
    import torch

    from at2po_lib.config.profile import PolicyConfig
    from at2po_lib.policy.model import build_policy, save_policy
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.rollout import vllm_cpu

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process, as colocated
    installed = []
    if shims in ("kernel_scan", "all"):
        installed.append("kernel_scan" if vllm_cpu.install_kernel_scan_shim() else "-")
    if shims == "all":
        installed.append("weight_sync" if vllm_cpu.install_weight_sync_shim() else "-")
    tok = train_tokenizer(["the capital of avaria is belmont </search>"] * 20, vocab_size=300)
    torch.manual_seed(0)
    model = build_policy(
        PolicyConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=128,
        ),
        tok,
    ).eval()
    save_policy(model, tok, work / "policy")
    prompts = [tok.encode(text) for text in ("the capital of", "avaria is", "belmont")]

    def hf_greedy() -> list[list[int]]:
        with torch.no_grad():
            return [
                model.generate(
                    torch.tensor([p]),
                    max_new_tokens=6,
                    do_sample=False,
                    attention_mask=torch.ones(1, len(p), dtype=torch.long),
                )[0, len(p) :].tolist()
                for p in prompts
            ]

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    try:
        llm = LLM(
            model=str(work / "policy"),
            dtype="float32",
            enforce_eager=True,
            gpu_memory_utilization=0.05,
            max_model_len=256,
            skip_tokenizer_init=True,
        )
    except Exception as exc:  # what a user would see: the engine does not start
        return {"installed": installed, "error": f"{type(exc).__name__}: {exc}", "stage": "start"}
    params = SamplingParams(temperature=0.0, max_tokens=6)

    def engine_greedy() -> list[list[int]]:
        outs = llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
        )
        return [list(o.outputs[0].token_ids) for o in outs]

    before_hf, before = hf_greedy(), engine_greedy()
    with torch.no_grad():
        generator = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.5)
    after_hf = hf_greedy()
    stale = engine_greedy()
    runner_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    try:
        for name, param in model.named_parameters():  # TRL's colocated sync_weights, verbatim
            runner_model.load_weights([(name, param.data)])
        llm.reset_prefix_cache()
    except Exception as exc:
        return {"installed": installed, "error": f"{type(exc).__name__}: {exc}", "stage": "sync"}
    return {
        "installed": installed,
        "error": None,
        "before": before,
        "before_hf": before_hf,
        "stale": stale,
        "after": engine_greedy(),
        "after_hf": after_hf,
    }


# -------------------------------------------------------------------------------- rollout
def _turns(traj) -> list[dict]:
    """Each sampled turn's ids, log-probs and action."""
    return [
        {
            "ids": traj.completion_ids[t.start : t.end],
            "logps": traj.logps[t.start : t.end],
            "action": str(t.action.kind),
        }
        for t in traj.turns
    ]


def _trajectory(traj) -> dict:
    return {
        "turns": _turns(traj),
        "finish": traj.finish_reason,
        "answer": traj.answer,
        "tool_calls": traj.num_tool_calls,
        "completion": traj.completion_ids,
        "mask": traj.sampled_mask,
    }


def scenario_rollout(work: Path, questions: int = 12) -> dict:
    """The tiny profile's shipped warm start (head_dim 32) answers the same test questions
    greedily on the HF backend and on one vLLM engine (float32, as the profile), there through
    the rollout's queue and through one ``generate`` call per turn depth: every turn."""
    from dataclasses import replace

    from at2po_lib.config.profile import load_profile
    from at2po_lib.evaluation.greedy import load_eval_rows
    from at2po_lib.policy.model import load_policy
    from at2po_lib.protocol.prompts import get_template
    from at2po_lib.retrieval.indexes import build_retriever
    from at2po_lib.rollout.agent import Sampler, SearchEnv
    from at2po_lib.rollout.trees import rollout_chains
    from at2po_lib.rollout.vllm_backend import build_engine
    from at2po_lib.study.run import policy_path

    cfg = load_profile("tiny")
    folder = policy_path(cfg)
    model, tok = load_policy(folder)
    template = get_template(cfg.policy.template)
    retriever = build_retriever(cfg)
    rows = [
        row
        for name in ("tiny_hotpotqa", "tiny_2wiki", "tiny_nq")
        for row in load_eval_rows(cfg, name, questions // 3)
    ]
    texts = [row["question"] for row in rows]
    env = SearchEnv(tok, template, retriever, cfg.rollout)
    hf = rollout_chains(Sampler.from_model(model.eval(), env, greedy=True), texts)
    # vLLM's core in this process, one scheduler step a ``step`` call, as TRL's colocated
    # engine runs it: the queue's rows then join at the same steps in every run (a spawned core
    # runs ahead of the host, so a resumed row joins when its request arrives)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    engine = build_engine(folder, cfg, enforce_eager=True, gpu_memory_utilization=0.05)
    out = {"hf": [_trajectory(t) for t in hf], "head_dim": cfg.policy.attention_head_dim()}
    # the queue (one per round, the default) and the old path (one generate a turn depth)
    for name, grouping in (("vllm", "auto"), ("vllm_turn", "turn")):
        vllm_cfg = replace(cfg.rollout, backend="vllm", decode_grouping=grouping)
        sampler = Sampler.from_model(
            engine, SearchEnv(tok, template, retriever, vllm_cfg), greedy=True
        )
        backend = sampler.backend
        vl = rollout_chains(sampler, texts)
        out[name] = [_trajectory(t) for t in vl]
        out[f"{name}_calls"] = {
            "grouping": backend.grouping,
            "generate": backend.calls,
            "queues": backend.sessions,
        }
    out["sampled"] = _sampled_trees(engine, tok, template, retriever, texts[:4], cfg.rollout)
    return out


def _sampled_trees(engine, tok, template, retriever, texts, rollout_cfg) -> dict:
    """Entropy trees sampled through the queue by a fresh backend, as the trainer makes one per
    rollout step from its rollout seed: twice with seed 7, once with 8, the prefix cache reset
    before each (as TRL's weight sync resets it). Each tree's node ids, per seed."""
    from dataclasses import replace

    from at2po_lib.rollout.agent import Sampler, SearchEnv
    from at2po_lib.rollout.trees import rollout

    env = SearchEnv(tok, template, retriever, replace(rollout_cfg, backend="vllm"))
    grown = {}
    for name, seed in (("first", 7), ("again", 7), ("other", 8)):
        engine.reset_prefix_cache()
        trees = rollout(Sampler.from_model(engine, env, seed), texts, None, expansion="entropy")
        grown[name] = [[node.token_ids for node in tree.nodes] for tree in trees]
    return grown


# ------------------------------------------------------------------------------ colocated
def _move_weights(text: str, golden) -> float:
    """A reward that varies between leaves of any policy (the smoke policy never answers):
    the parity of the response's length, so every group has a gradient."""
    return float(len(text) % 2)


def _bf16_copy(trainer):
    """A bf16 copy of the training model (the colocated engine's dtype), its ZeRO-3 shards
    gathered first (a collective: every rank takes part)."""
    import contextlib

    import torch

    model = trainer.accelerator.unwrap_model(trainer.model)
    gather = contextlib.nullcontext()
    if trainer.is_deepspeed_enabled:
        import deepspeed

        gather = deepspeed.zero.GatheredParameters(list(model.parameters()))
    with gather, torch.no_grad():
        state = {k: v.detach().to(torch.bfloat16).clone() for k, v in model.state_dict().items()}
    copy = type(model)(model.config).to(torch.bfloat16).eval()
    copy.load_state_dict(state)
    return copy


def _divergence_gaps(
    model, prompts: list[list[int]], engine: list[list[int]], hf: list[list[int]]
) -> list[float]:
    """For each row where the engine's greedy answer and the HF model's part, the HF model's
    log-probability margin of its own token over the engine's at the first token they differ:
    near 0 where the two kernels break a near-tie differently, large where the engine holds
    other weights."""
    import torch

    gaps = []
    for prompt, ours, theirs in zip(prompts, engine, hf):
        if ours == theirs:
            continue
        j = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + theirs[:j]])).logits[0, -1].float()
        logps = torch.log_softmax(logits, dim=-1)
        gaps.append(float(logps[theirs[j]] - logps[ours[j]]))
    return gaps


def _greedy_prompts(cfg, tok) -> list[list[int]]:
    """The prompt ids of 8 test questions (4 HotpotQA, 4 NQ) that the colocated scenarios
    answer greedily."""
    from at2po_lib.evaluation.greedy import load_eval_rows
    from at2po_lib.protocol.prompts import build_messages, get_template, prompt_ids

    template = get_template(cfg.policy.template)
    rows = [row for name in ("tiny_hotpotqa", "tiny_nq") for row in load_eval_rows(cfg, name, 4)]
    return [prompt_ids(tok, build_messages(template, row["question"])) for row in rows]


def _engine_greedy(trainer, prompts: list[list[int]]) -> list[list[int]]:
    """The colocated engine's greedy answers (8 tokens), its weights as they are (no sync)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=8)
    with trainer.policy_for_generation() as engine:
        outs = engine.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    return [list(o.outputs[0].token_ids) for o in outs]


def _hf_greedy(copy, prompts: list[list[int]], pad_token_id: int) -> list[list[int]]:
    """The greedy answers (8 tokens) of ``copy`` (:func:`_bf16_copy`), ``transformers``'
    kernels."""
    import torch

    with torch.no_grad():
        return [
            copy.generate(
                torch.tensor([p]),
                max_new_tokens=8,
                do_sample=False,
                attention_mask=torch.ones(1, len(p), dtype=torch.long),
                pad_token_id=pad_token_id,
            )[0, len(p) :].tolist()
            for p in prompts
        ]


def scenario_colocated(work: Path) -> dict:
    """TRL's colocated engine in the trainer (profile ``engines``, one process; the 2-process
    ZeRO-3 case is ``zero3-resume``'s): greedy answers of the engine and of the HF model before
    training, after one rollout step (the engine not yet synced: stale), and after the sync."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.record import run_folder
    from at2po_lib.study.run import build_trainer

    cfg = load_profile(
        "engines",
        {"train": {"learning_rate": 5e-2, "eval_every": 0, "max_steps": 1, "final_eval": False}},
    )
    trainer = build_trainer(
        cfg, "grpo", 0, run_folder.RunDir(work / "run"), reward_fn=_move_weights
    )
    pad = trainer.processing_class.pad_token_id
    prompts = _greedy_prompts(cfg, trainer.processing_class)

    before, before_hf = (
        _engine_greedy(trainer, prompts),
        _hf_greedy(_bf16_copy(trainer), prompts, pad),
    )
    trainer.train()
    stale, after_hf = (
        _engine_greedy(trainer, prompts),
        _hf_greedy(_bf16_copy(trainer), prompts, pad),
    )
    with trainer.policy_for_generation(sync=True):
        pass
    after = _engine_greedy(trainer, prompts)
    return {
        "before": before,
        "before_hf": before_hf,
        "stale": stale,
        "after": after,
        "after_hf": after_hf,
        "after_gaps": _divergence_gaps(_bf16_copy(trainer), prompts, after, after_hf),
        "global_step": trainer.state.global_step,
        "engine_dtype": _engine_dtype(trainer),
    }


def _engine_dtype(trainer) -> str:
    return str(trainer.vllm_generation.llm.llm_engine.model_config.dtype)


# --------------------------------------------------------------------------- zero3-resume
RESUME_OVERRIDES = {
    "train": {"learning_rate": 5e-2, "eval_every": 0, "max_steps": 2, "final_eval": False}
}
"""The engines profile's run that ``zero3-resume`` trains, kills and resumes: 2 rollout steps
of 2 updates (one prompt each, its 4 leaves 2 a process), a checkpoint after each, no
validation or final evaluation; the colocated scenario's learning rate, so that one step moves
the greedy answers."""


def _engine_answers(work: Path, cfg, updates_per_step: int):
    """A ``TrainerCallback`` (built here: ``transformers`` is imported by the scenario, after
    what the other scenarios import first) that records each process's colocated engine, to
    ``<work>/answers-rank<R>.json``, with :func:`engines_guard.assert_synced`'s keys:

    - at the start of a run from scratch, the engine's greedy answers and those of a bf16 copy
      of the model (``before``, ``before_hf``: the initial weights);
    - before the second rollout step's first update (its rollout, and so its sync, not yet
      run), the engine's (``stale``: the weights of the last sync, the initial ones) and the
      copy's (``after_hf``: the first step's weights, the checkpoint a resume starts from,
      ZeRO-3 shards gathered), with this process's share of the parameters;
    - after that update, the engine's (``after``: synced by the step's rollout, the first sync
      after a resume) and, where they part from the copy's, the copy's log-prob margin at the
      first difference (``after_gaps``).

    Its ``trainer`` is set once the trainer is built."""
    from transformers import TrainerCallback

    class EngineAnswers(TrainerCallback):
        trainer = None
        answers: dict = {}

        def _prompts(self) -> list[list[int]]:
            return _greedy_prompts(cfg, self.trainer.processing_class)

        def on_train_begin(self, args, state, control, **kwargs):
            if state.global_step == 0:  # a run from scratch
                pad = self.trainer.processing_class.pad_token_id
                self.answers = {
                    "before": _engine_greedy(self.trainer, self._prompts()),
                    "before_hf": _hf_greedy(_bf16_copy(self.trainer), self._prompts(), pad),
                }

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step != updates_per_step:
                return
            trainer = self.trainer
            self.copy = _bf16_copy(trainer)  # a collective: every process is here
            model = trainer.accelerator.unwrap_model(trainer.model)
            ds_plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
            self.answers.update(
                stale=_engine_greedy(trainer, self._prompts()),
                after_hf=_hf_greedy(
                    self.copy, self._prompts(), trainer.processing_class.pad_token_id
                ),
                engine_dtype=_engine_dtype(trainer),
                world_size=trainer.accelerator.num_processes,
                zero_stage=ds_plugin.zero_stage if ds_plugin is not None else None,
                local_numel=sum(getattr(p, "ds_tensor", p).numel() for p in model.parameters()),
                full_numel=sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters()),
            )

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step != updates_per_step + 1:
                return
            after = _engine_greedy(self.trainer, self._prompts())
            self.answers.update(
                after=after,
                after_gaps=_divergence_gaps(
                    self.copy, self._prompts(), after, self.answers["after_hf"]
                ),
            )
            rank = self.trainer.accelerator.process_index
            (work / f"answers-rank{rank}.json").write_text(json.dumps(self.answers))

    return EngineAnswers()


def scenario_zero3_resume(work: Path, crash: str) -> dict:
    """``at2po train``'s ``train`` on the engines profile (:data:`RESUME_OVERRIDES`), under a
    ZeRO-3 launch with each process's colocated engine: ``--crash none`` runs it through,
    ``--crash mid-step`` dies after the second step's first update (the first step's checkpoint
    saved), ``--crash resume`` continues that run from its checkpoint. The engine's answers
    around the second step's first sync: :func:`_engine_answers`."""
    import at2po_lib.study.run as run_module
    from rehearsal_entry import Crash, CrashAfterUpdate

    from at2po_lib.config.profile import load_profile

    updates = 2  # prompts_per_step 2 / mini_batch_prompts 1
    recorder = _engine_answers(work, load_profile("engines", RESUME_OVERRIDES), updates)
    build = run_module.build_trainer

    def built(*args, **kwargs):  # hands the trainer to the recorder
        recorder.trainer = build(*args, **kwargs)
        return recorder.trainer

    run_module.build_trainer = built
    callbacks = [recorder] + ([CrashAfterUpdate(updates + 1)] if crash == "mid-step" else [])
    try:
        result = run_module.train(
            "engines",
            "at2po",
            0,
            force=crash != "resume",
            resume=crash == "resume",
            profile_overrides=RESUME_OVERRIDES,
            reward_fn=_move_weights,
            callbacks=callbacks,
        )
    except Crash as crashed:
        return {"crashed": str(crashed)}
    return {"crashed": None, "status": result.status}


# --------------------------------------------------------------------------- zero3-digest
def scenario_zero3_digest(port: int) -> dict:
    """Two tiny models of different weights (seeds 0 and 1), each copied into a ZeRO-3-partitioned
    model (``deepspeed.zero.Init``, one process on DeepSpeed's CPU accelerator): the per-rank
    digest of each partitioned copy against the digest of its full source model."""
    import copy

    import deepspeed

    from at2po_lib.config.profile import PolicyConfig
    from at2po_lib.policy.model import build_policy
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.trainer.rank_record import weights_digest

    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    deepspeed.init_distributed(dist_backend="gloo")
    tok = train_tokenizer(["the capital of avaria is belmont"] * 20, vocab_size=300)
    tiny = PolicyConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=128,
    )
    sources = [build_policy(tiny, tok, seed=seed) for seed in (0, 1)]
    ds_config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}

    def partitioned(source):
        """A copy of ``source`` whose parameters ZeRO-3 partitions (``zero.Init(module=...)``)."""
        model = copy.deepcopy(source)
        deepspeed.zero.Init(module=model, config_dict_or_path=ds_config)
        return model

    copies = [partitioned(source) for source in sources]
    return {
        "full": [weights_digest(source) for source in sources],
        "zero3": [weights_digest(copy) for copy in copies],
        "placeholder_numel": sum(p.numel() for p in copies[0].parameters()),
        "full_numel": sum(p.numel() for p in sources[0].parameters()),
    }


# ------------------------------------------------------------------------------- evaluate
def scenario_evaluate(work: Path) -> dict:
    """``at2po evaluate`` on the engines profile (a vLLM engine from the checkpoint, the
    sampled metric on it) and the ReAct row (the warm start evaluated through an engine), with
    every engine start counted."""
    import at2po_lib.evaluation.greedy as evaluation
    from at2po_lib.cli import evaluate as evaluate_cli
    from at2po_lib.cli import train as train_cli
    from at2po_lib.config.profile import load_profile
    from at2po_lib.study.run import policy_path

    starts: list[str] = []
    real = evaluation.build_engine

    def counted(path, profile_cfg, *args, **kwargs):
        starts.append(str(path))
        return real(path, profile_cfg, *args, **kwargs)

    evaluation.build_engine = counted
    cfg = load_profile("engines")
    checkpoint = policy_path(cfg)
    out = work / "eval.csv"
    code = evaluate_cli.main(
        [
            "--profile",
            "engines",
            "--checkpoint",
            checkpoint,
            "--out",
            str(out),
            "--set",
            "eval.sampled_k=2",
        ]
    )
    evaluate_starts = list(starts)
    react = train_cli.main(["--profile", "engines", "--method", "react", "--seed", "0"])
    import pandas as pd

    frame = pd.read_csv(out) if out.is_file() else None
    return {
        "evaluate_code": code,
        "react_code": react,
        "evaluate_starts": evaluate_starts,
        "react_starts": starts[len(evaluate_starts) :],
        "checkpoint": str(checkpoint),
        "columns": list(frame.columns) if frame is not None else [],
        "sampled_em": (
            frame["sampled_em"].dropna().tolist()
            if frame is not None and "sampled_em" in frame
            else []
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "scenario",
        choices=[
            "sync",
            "rollout",
            "colocated",
            "evaluate",
            "zero3-digest",
            "zero3-resume",
        ],
    )
    parser.add_argument("--shims", default="all", choices=["none", "kernel_scan", "all"])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--port", type=int, default=29517, help="zero3-digest: a free port")
    parser.add_argument(
        "--crash", default="none", choices=["none", "mid-step", "resume"], help="zero3-resume"
    )
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    try:
        with process_group_left_at_end():  # zero3-resume: the launch's group, before exit
            result = run_scenario(args)
    except Exception:
        traceback.print_exc()
        return 1
    emit(**result)
    return 3 if result.get("crashed") else 0


def run_scenario(args: argparse.Namespace) -> dict:
    """The chosen scenario's result."""
    if args.scenario == "sync":
        return scenario_sync(args.shims, args.work)
    if args.scenario == "rollout":
        return scenario_rollout(args.work)
    if args.scenario == "colocated":
        return scenario_colocated(args.work)
    if args.scenario == "evaluate":
        return scenario_evaluate(args.work)
    if args.scenario == "zero3-resume":  # under a ZeRO-3 launch
        return scenario_zero3_resume(args.work, args.crash)
    return scenario_zero3_digest(args.port)


if __name__ == "__main__":
    sys.exit(main())
