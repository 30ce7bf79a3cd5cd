r"""``at2po train``: train one method of the paper on one profile and seed, with records.

    at2po train --list-methods
    at2po train --profile tiny --method at2po --seed 0
    at2po train --profile tiny --method grpo --seed 1 --max-steps 20
    at2po train --profile tiny --method at2po --seed 0 --resume      # continue a killed run
    accelerate launch --config_file configs/accelerate/zero3_8gpu.yaml \
        -m at2po_lib.trainer.run --profile paper-qwen3-4b --method at2po --seed 0

What a run does (:func:`train`):

1. resolve the configuration: the profile (``configs/<profile>.yaml`` + ``--set`` overrides),
   the method preset (``methods.py``) and the batch geometry → :class:`AT2POConfig`;
   a run whose ``DONE.json`` carries the same resolved-config hash is skipped (``--force``
   re-runs it);
2. write ``config.yaml`` and ``meta.json`` into ``results/runs/<profile>/<method>/seed<S>/``;
3. train with :class:`AT2POTrainer` from the profile's warm start (``policy.model`` at paper
   scale), recording ``metrics.jsonl`` per step and greedy validation ``eval.jsonl`` every
   ``train.eval_every`` steps, checkpointing every ``train.save_every`` steps;
4. evaluate the final policy greedily on ``eval.datasets`` → ``final_eval.csv``
   (Table 1's cells), then write ``DONE.json``.

``react`` trains nothing: it evaluates the warm start (the toy "ReAct" row) and records it
the same way.

Batch geometry and the resolved configuration: :mod:`.resolve`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..config import ProfileConfig, ProfileError, load_profile, parse_overrides
from . import records
from .methods import format_methods, get_method
from .resolve import (batch_geometry, build_training_args, leaves_per_prompt, method_table,
                      resolved_config, trainer_fields)

__all__ = ["train", "TrainResult", "build_trainer", "main", "batch_geometry",
           "build_training_args", "leaves_per_prompt", "method_table", "resolved_config",
           "trainer_fields"]


# --------------------------------------------------------------------------------- data
def training_rows(profile_cfg: ProfileConfig) -> list[dict[str, Any]]:
    """Prompts of ``train.train_datasets``: TinyWorld ``train`` splits (``tiny_*``) or the
    FlashRAG training splits; each row keeps ``question`` and ``golden_answers``."""
    from ..data import load_flashrag, read_flashrag_jsonl, to_trainer_rows

    out: list[dict[str, Any]] = []
    for name in profile_cfg.train.train_datasets:
        if name.startswith("tiny_"):
            from ..evaluation import world_dataset_path
            from ..tinyworld import ensure_world

            rows = read_flashrag_jsonl(world_dataset_path(ensure_world(profile_cfg), name, "train"))
        else:
            rows = load_flashrag(name, "train")
        rows = list(rows)
        for row, trainer_row in zip(rows, to_trainer_rows(rows, profile_cfg.policy.template, name)):
            trainer_row.pop("metadata", None)  # heterogeneous dicts; not needed for training
            out.append({**trainer_row, "question": row["question"]})
    if not out:
        raise ValueError(f"train.train_datasets={profile_cfg.train.train_datasets} gave no rows")
    return out


def policy_path(profile_cfg: ProfileConfig) -> str:
    """``policy.model`` (paper scale) or the profile's warm start (trained if missing)."""
    if profile_cfg.policy.model:
        return profile_cfg.policy.model
    from ..policy.warmstart import ensure_warmstart

    return str(ensure_warmstart(profile_cfg))


# ------------------------------------------------------------------------- validation
class Validator:
    """Greedy EM per dataset with the trainer's current policy (sharded over processes)."""

    def __init__(self, trainer, profile_cfg: ProfileConfig, retriever, datasets: Sequence[str],
                 max_questions: int | None, label: str, seed: int):
        from ..evaluation import load_eval_rows

        self.trainer, self.cfg, self.retriever = trainer, profile_cfg, retriever
        self.label, self.seed = label, seed
        self.rows = {d: load_eval_rows(profile_cfg, d, max_questions) for d in datasets}

    def __call__(self):
        import pandas as pd
        from accelerate.utils import gather_object

        from ..evaluation import dataset_group, score_rows, summarise
        from ..rollout import rollout_chains
        from .agent import turn_backend

        acc = self.trainer.accelerator
        tokenizer = self.trainer.processing_class
        frames = []
        with self.trainer.policy_for_generation(sync=True) as policy:
            backend = turn_backend(policy, tokenizer, self.cfg.rollout, seed=0, greedy=True)
            for dataset, rows in self.rows.items():
                shard = rows[acc.process_index::acc.num_processes]
                trajectories = []
                for start in range(0, len(shard), self.cfg.eval.batch_size):
                    batch = shard[start:start + self.cfg.eval.batch_size]
                    trajectories += rollout_chains(policy, tokenizer, self.cfg.policy.template,
                                                   self.retriever, [r["question"] for r in batch],
                                                   self.cfg.rollout, greedy=True, backend=backend)
                if shard:
                    frame = score_rows(shard, trajectories)
                    frame.insert(0, "group", dataset_group(dataset))
                    frame.insert(0, "dataset", dataset)
                    frames.append(frame)
        if acc.num_processes > 1:
            frames = [f for f in gather_object(frames) if len(f)]
        return summarise(pd.concat(frames, ignore_index=True), self.cfg.name, self.label,
                         self.seed)


# -------------------------------------------------------------------------------- train
@dataclass
class TrainResult:
    run: records.RunDir
    status: str
    """``trained``, ``resumed``, ``evaluated`` (react) or ``skipped`` (already finished)."""
    wall_time: float
    final_eval: Any = None


def train(profile: str | ProfileConfig, method: str, seed: int = 0, *, resume: bool = False,
          max_steps: int | None = None, force: bool = False,
          profile_overrides: Mapping[str, Any] | None = None,
          trainer_overrides: Mapping[str, Any] | None = None,
          callbacks: Sequence[Any] = (), reward_fn=None) -> TrainResult:
    """Train (or reuse) one run; see the module docstring. Returns where its records live.

    ``callbacks``: extra ``TrainerCallback`` objects; ``reward_fn``: see :func:`build_trainer`
    (a custom reward is not part of the resolved config: use it for tests only).
    """
    cfg = profile if isinstance(profile, ProfileConfig) else load_profile(profile, dict(
        profile_overrides or {}) or None)
    if max_steps is not None:
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=max_steps))
    preset = get_method(method)
    _check_backend(cfg)
    run = records.run_dir(cfg.name, method, seed)
    resolved = resolved_config(cfg, method, seed, trainer_overrides)
    digest = records.config_hash(resolved)
    if not force and records.is_finished(run, digest):
        final = _read_csv(run.final_eval)
        return TrainResult(run, "skipped", json.loads(run.done.read_text()).get("wall_time", 0.0),
                           final)
    checkpoint = None
    if resume and not force:
        records.remove_incomplete_checkpoints(run.checkpoints)
        checkpoint = records.latest_complete_checkpoint(run.checkpoints)
        if checkpoint is not None:
            _check_same_config(run, digest)
            step = json.loads((checkpoint / records.COMPLETE_MARKER).read_text())["step"]
            records.truncate_jsonl(run.metrics, step)
            records.truncate_jsonl(run.eval, step)
    if checkpoint is None:
        if not resume and records.complete_checkpoints(run.checkpoints):
            print(f"{run.root}: an unfinished run is there; starting over (pass --resume to "
                  "continue it)", file=sys.stderr)
        records.clear_run(run)
        run.root.mkdir(parents=True, exist_ok=True)
    records.write_config(run, {**resolved, "config_hash": digest})
    from ..provenance import run_metadata

    meta = run_metadata(cfg.name, seed=seed, config=None, method=method, config_hash=digest,
                        resumed_from=str(checkpoint) if checkpoint else None,
                        hardware=_hardware())
    run.meta.write_text(json.dumps(meta, indent=2, default=str) + "\n")

    start = time.time()
    if preset.trains:
        final = _train_and_evaluate(cfg, method, seed, run, checkpoint, trainer_overrides,
                                    callbacks, reward_fn)
        status = "resumed" if checkpoint else "trained"
    else:
        final = _evaluate_warmstart(cfg, method, seed, run)
        status = "evaluated"
    wall = time.time() - start + _previous_wall_time(run, checkpoint)
    records.mark_finished(run, digest, wall_time=wall, status=status,
                          final_eval=str(run.final_eval) if final is not None else None)
    return TrainResult(run, status, wall, final)


def _check_backend(cfg: ProfileConfig) -> None:
    if cfg.train.use_vllm != (cfg.rollout.backend == "vllm"):
        raise ProfileError(f"profile {cfg.name}: train.use_vllm={cfg.train.use_vllm} but "
                           f"rollout.backend={cfg.rollout.backend!r}; set both for vLLM rollouts")


def _check_same_config(run: records.RunDir, digest: str) -> None:
    if run.config.is_file():
        import yaml

        old = (yaml.safe_load(run.config.read_text()) or {}).get("config_hash")
        if old and old != digest:
            raise ValueError(f"{run.config}: the checkpoint was written with another "
                             f"configuration (hash {old} != {digest}); drop --resume or use --force")


def _previous_wall_time(run: records.RunDir, checkpoint: Path | None) -> float:
    """Wall time spent before the checkpoint a resumed run started from."""
    if checkpoint is None:
        return 0.0
    rows = records.read_jsonl(run.metrics)
    return float(rows[-1].get("wall_time", 0.0)) if rows else 0.0


def _read_csv(path: Path):
    import pandas as pd

    return pd.read_csv(path) if path.is_file() else None


def _hardware() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                            "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    return info


def _final_evaluation(cfg: ProfileConfig, model, tokenizer, retriever, method: str, seed: int,
                      run: records.RunDir):
    from ..evaluation import evaluate, turn_distribution, write_eval

    summary, details = evaluate(cfg, model, tokenizer, retriever, label=method, seed=seed,
                                return_details=True)
    write_eval(summary, run.final_eval, cfg.name, seed, None, method=method,
               turn_distribution=turn_distribution(details).to_dict("records"))
    return summary


def _evaluate_warmstart(cfg: ProfileConfig, method: str, seed: int, run: records.RunDir):
    from ..policy.model import load_policy
    from ..retrieval import build_retriever

    model, tokenizer = load_policy(policy_path(cfg), cfg.policy.dtype)
    return _final_evaluation(cfg, model, tokenizer, build_retriever(cfg), method, seed, run)


def build_trainer(cfg: ProfileConfig, method: str, seed: int, run: records.RunDir,
                  trainer_overrides: Mapping[str, Any] | None = None,
                  start_time: float | None = None, reward_fn=None):
    """The :class:`AT2POTrainer` of one run with its record callbacks (not trained yet).

    ``reward_fn(response_text, golden_answers) -> float`` replaces the rollout's default
    reward (tests use it to get a learning signal from an untrained smoke policy).
    """
    import datasets
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from ..policy.model import torch_dtype
    from ..policy.tokenizer import load_tokenizer
    from ..retrieval import build_retriever
    from .agent import SearchAgent
    from .callbacks import CheckpointMarker, GreedyValidation, MetricsRecorder, StepProgress
    from .trainer import AT2POTrainer

    if "tensorboard" in cfg.train.report_to:
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(run.tensorboard))
    args = build_training_args(cfg, method, seed, run.checkpoints, trainer_overrides)
    args.model_init_kwargs = {"dtype": torch_dtype(cfg.policy.dtype)}
    model = policy_path(cfg)
    tokenizer = load_tokenizer(model)
    retriever = build_retriever(cfg)
    dataset = datasets.Dataset.from_list(training_rows(cfg))
    agent = SearchAgent(tokenizer, cfg.policy.template, retriever, cfg.rollout, reward_fn)
    trainer = AT2POTrainer(model=model, args=args, train_dataset=dataset,
                           processing_class=tokenizer, agent=agent, peft_config=_peft_config(cfg))
    updates = trainer.updates_per_step
    for callback in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(callback)
    validation = None
    if cfg.train.eval_every > 0:
        validator = Validator(trainer, cfg, retriever, cfg.train.val_datasets or cfg.eval.datasets,
                              cfg.train.val_questions or cfg.eval.max_questions, method, seed)
        validation = GreedyValidation(run.eval, validator, cfg.train.eval_every, updates)
        trainer.add_callback(validation)
    trainer.add_callback(MetricsRecorder(run.metrics, updates, start_time=start_time))
    trainer.add_callback(CheckpointMarker(run.checkpoints, updates))
    if cfg.train.progress_bar:
        trainer.add_callback(StepProgress(cfg.train.max_steps, updates,
                                          f"{cfg.name}/{method}/seed{seed}", validation))
    trainer.retriever = retriever
    return trainer


def _train_and_evaluate(cfg: ProfileConfig, method: str, seed: int, run: records.RunDir,
                        checkpoint: Path | None, trainer_overrides: Mapping[str, Any] | None,
                        callbacks: Sequence[Any] = (), reward_fn=None):
    trainer = build_trainer(cfg, method, seed, run, trainer_overrides,
                            start_time=time.time() - _previous_wall_time(run, checkpoint),
                            reward_fn=reward_fn)
    for callback in callbacks:
        trainer.add_callback(callback)
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    if not cfg.train.final_eval:
        return None
    if trainer.accelerator.num_processes > 1 or trainer.is_deepspeed_enabled:
        print(f"final evaluation skipped under {trainer.accelerator.num_processes} processes: run "
              f"`at2po evaluate --profile {cfg.name} --checkpoint "
              f"{records.latest_complete_checkpoint(run.checkpoints)} --label {method} "
              f"--seed {seed}`", file=sys.stderr)
        return None
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    return _final_evaluation(cfg, model.eval(), trainer.processing_class, trainer.retriever,
                             method, seed, run)


def _peft_config(cfg: ProfileConfig):
    if cfg.policy.lora_r <= 0:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.policy.lora_r, lora_alpha=cfg.policy.lora_alpha, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                      "up_proj", "down_proj"])


# ---------------------------------------------------------------------------------- CLI
def _parse_value(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="at2po train", description="Train one method (AT2PO or a baseline) on one profile "
        "and seed; records go to results/runs/<profile>/<method>/seed<S>/.")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--method", help="a preset name (see --list-methods)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run's last complete checkpoint")
    parser.add_argument("--max-steps", type=int, default=None, help="rollout steps (overrides "
                        "train.max_steps)")
    parser.add_argument("--force", action="store_true", help="re-run a finished run")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="profile override, e.g. train.learning_rate=1e-4")
    parser.add_argument("--arg", action="append", default=[], metavar="FIELD=VALUE",
                        help="AT2POConfig override after the preset, e.g. beta=0")
    parser.add_argument("--list-methods", action="store_true")
    args = parser.parse_args(argv)
    if args.list_methods:
        print(format_methods())
        return 0
    if not args.method:
        parser.error("--method is required (see --list-methods)")
    try:
        get_method(args.method)
        profile_overrides = parse_overrides(args.set) or {}
        trainer_overrides = {}
        for text in args.arg:
            if "=" not in text:
                raise ProfileError(f"--arg {text!r} is not FIELD=VALUE")
            key, value = text.split("=", 1)
            trainer_overrides[key] = _parse_value(value)
        result = train(args.profile, args.method, args.seed, resume=args.resume,
                       max_steps=args.max_steps, force=args.force,
                       profile_overrides=profile_overrides, trainer_overrides=trainer_overrides)
    except (KeyError, ProfileError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    print(f"{result.status}: {result.run.root} ({result.wall_time:.1f} s)")
    if result.final_eval is not None:
        print(result.final_eval.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
