r"""``at2po train``: train one method of the paper on one profile and seed, with records.

    at2po train --list-methods
    at2po train --profile tiny --method at2po --seed 0
    at2po train --profile tiny --method grpo --seed 1 --set train.max_steps=20
    at2po train --profile tiny --method at2po --seed 0 --resume      # continue a killed run
    accelerate launch --config_file configs/accelerate/zero3_8gpu.yaml \
        -m at2po_lib.cli train --profile paper-qwen3-4b --method at2po --seed 0

(the command line is :mod:`at2po_lib.cli.train`; this module is the Python API).

What a run does (:func:`train`):

1. resolve the run once: the profile (``configs/<profile>.yaml`` + ``--set`` overrides), the
   method preset (``methods.py``) and the batch geometry → a
   :class:`~at2po_lib.trainer.resolve.RunSpec` (the rollout configuration and the
   :class:`AT2POConfig` fields, from the same numbers);
   a finished run of the same configuration (its ``DONE.json`` carries this record's hash, or
   its ``config.yaml`` the same effective settings: :mod:`at2po_lib.record.identity`) is skipped (``--force``
   re-runs it); a finished run with *another* configuration is never replaced without
   ``--force`` (:class:`RunExistsError`);
2. write ``config.yaml`` and ``meta.json`` into the staging folder
   ``results/runs/<profile>/<method>/.seed<S>.staging/``, where the whole run is built (a
   killed run resumes from there with ``--resume``);
3. train with :class:`AT2POTrainer` from the profile's warm start (``policy.model`` at paper
   scale), recording ``metrics.jsonl`` per step and greedy validation ``eval.jsonl`` every
   ``train.eval_every`` steps, checkpointing every ``train.save_every`` steps;
4. evaluate the final policy greedily on ``eval.datasets`` → ``final_eval.csv``
   (Table 1's cells), then write ``DONE.json``;
5. swap the staging folder in as ``results/runs/<profile>/<method>/seed<S>/`` atomically
   (:mod:`at2po_lib.util.staging`): a re-run that fails or is killed at any point leaves the
   previous finished run exactly as it was.

``react`` trains nothing: it evaluates the warm start (the toy "ReAct" row) and records it
the same way.

Periodic validation (:class:`Validator`) and the final evaluation run the greedy loop of
:func:`at2po_lib.evaluation.greedy.score_datasets`. Batch geometry and the run spec: :mod:`at2po_lib.trainer.resolve`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import datasets
import pandas as pd
import yaml
from accelerate.utils import gather_object
from peft import LoraConfig
from transformers import TrainerState
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from ..config.profile import ProfileConfig, load_profile
from ..protocol.qa_data import load_flashrag, read_flashrag_jsonl, to_trainer_rows
from ..evaluation.greedy import (
    evaluate_questions,
    load_eval_rows,
    load_evaluation_policy,
    score_datasets,
    summarise,
    turn_distribution,
    world_dataset_path,
    write_eval,
)
from ..method.presets import get_method
from ..record.outcomes import write_outcomes
from ..policy.model import torch_dtype
from ..protocol.preflight import check_run_inputs
from ..policy.tokenizer import load_tokenizer
from ..retrieval.indexes import build_retriever
from ..tinyworld.build import ensure_world
from ..util.errors import ProfileError
from ..util.locks import folder_lock
from ..util.paths import recorded_path
from ..util.provenance import hardware, run_metadata
from ..util.quiet import hf_progress_bars_off
from ..util.staging import recover, staging_path, swap_in
from ..trainer import rank_record
from ..record import run_folder
from ..trainer.callbacks import (
    CheckpointMarker,
    GreedyValidation,
    MetricsRecorder,
    StepProgress,
    TreeRecord,
)
from ..record.identity import same_configuration, same_finished_run
from ..trainer.resolve import RunSpec, check_fixed_rollout, resolve_run
from ..trainer.search_agent import SearchAgent, turn_backend
from ..trainer.trainer import AT2POTrainer
from ..warmstart.sft import ensure_warmstart

# Imported inside the functions that use them: deepspeed; DeepSpeed is optional, installed only in
# the GPU environment.

__all__ = ["train", "TrainResult", "build_trainer", "training_prompts"]


# --------------------------------------------------------------------------------- data
def training_prompts(profile_cfg: ProfileConfig) -> list[dict[str, Any]]:
    """Prompts of ``train.train_datasets``: TinyWorld ``train`` splits (``tiny_*``) or the
    FlashRAG training splits; each row keeps ``question`` and ``golden_answers``. (Not
    :func:`at2po_lib.rollout.export.training_rows`, which turns rollout trees into one row per leaf.)"""
    out: list[dict[str, Any]] = []
    for name in profile_cfg.train.train_datasets:
        if name.startswith("tiny_"):
            rows = read_flashrag_jsonl(world_dataset_path(ensure_world(profile_cfg), name, "train"))
        else:
            rows = load_flashrag(name, "train", local_dir=profile_cfg.data.local_dir)
        rows = list(rows)
        for row, trainer_row in zip(rows, to_trainer_rows(rows, profile_cfg.policy.template, name)):
            # The metadata dicts differ between datasets (a Dataset needs one schema); the
            # trees' decision labels need the plan only (empty where there is none).
            trainer_row["metadata"] = {"hop_queries": list(_plan(row))}
            out.append({**trainer_row, "question": row["question"]})
    if not out:
        raise ValueError(f"train.train_datasets={profile_cfg.train.train_datasets} gave no rows")
    return out


def _plan(row: dict[str, Any]) -> list[str]:
    """A question's plan (TinyWorld's ``metadata.hop_queries``), or [] (FlashRAG rows)."""
    meta = row.get("metadata")
    return [str(q) for q in meta.get("hop_queries") or []] if isinstance(meta, dict) else []


def policy_path(profile_cfg: ProfileConfig) -> str:
    """``policy.model`` (paper scale) or the profile's warm start (trained if missing)."""
    if profile_cfg.policy.model:
        return profile_cfg.policy.model

    return str(ensure_warmstart(profile_cfg))


# ------------------------------------------------------------------------- validation
class Validator:
    """Greedy EM per dataset with the trainer's current policy (sharded over processes)."""

    def __init__(
        self,
        trainer,
        profile_cfg: ProfileConfig,
        retriever,
        datasets: Sequence[str],
        max_questions: int | None,
        label: str,
        seed: int,
    ):
        self.trainer, self.cfg, self.retriever = trainer, profile_cfg, retriever
        self.label, self.seed = label, seed
        self.rows = {d: load_eval_rows(profile_cfg, d, max_questions) for d in datasets}

    def __call__(self):
        return summarise(self.details(), self.cfg.name, self.label, self.seed)

    def details(self):
        """Per-question results of every process's shard, gathered (on every process)."""
        acc = self.trainer.accelerator
        tokenizer = self.trainer.processing_class
        shards = {
            dataset: rows[acc.process_index :: acc.num_processes]
            for dataset, rows in self.rows.items()
        }
        with self.trainer.policy_for_generation(sync=True) as policy:
            backend = turn_backend(
                policy,
                tokenizer,
                self.cfg.rollout,
                seed=0,
                greedy=True,
                template=self.cfg.policy.template,
            )
            frames = score_datasets(self.cfg, policy, tokenizer, self.retriever, shards, backend)
        if acc.num_processes > 1:
            frames = [f for f in gather_object(frames) if len(f)]
        return pd.concat(frames, ignore_index=True)


# -------------------------------------------------------------------------------- train
@dataclass
class TrainResult:
    run: run_folder.RunDir
    status: str
    """``trained``, ``resumed``, ``evaluated`` (react), ``skipped`` (already finished with this
    configuration) or ``reused`` (finished with another one, ``reuse_finished=True``)."""
    wall_time: float
    final_eval: Any = None


def train(profile: str | ProfileConfig, method: str, seed: int = 0, **options: Any) -> TrainResult:
    """Train (or reuse) one run while holding its folder's exclusive lock
    (:mod:`at2po_lib.util.locks`): a second process on the same run stops at once with
    :class:`~at2po_lib.util.locks.FolderLockedError` naming the first one's PID. The options are
    :func:`_train_locked`'s; see there and the module docstring."""
    get_method(method)  # an unknown name (say "../x") fails before any folder is made from it
    check_fixed_rollout(method, options.get("profile_overrides"))
    cfg = (
        profile
        if isinstance(profile, ProfileConfig)
        else load_profile(profile, dict(options.pop("profile_overrides", None) or {}) or None)
    )
    if not _is_main_process():
        # Under several processes only rank 0 writes the run folder, so only it holds the
        # lock; the other ranks of its launch share its run (a second launch's rank 0 is
        # refused by the lock, and its other ranks then fail at their first collective).
        return _train_locked(cfg, method, seed, **options)
    with folder_lock(
        run_location(cfg, method, seed, options.get("runs_root")).root, "training run"
    ):
        return _train_locked(cfg, method, seed, **options)


def run_location(
    cfg: ProfileConfig, method: str, seed: int, runs_root: Path | None = None
) -> run_folder.RunDir:
    """Where a run's folder lives: ``<runs_root>/<method>/seed<S>/``; by default
    ``results/runs/<profile key>/`` (:func:`run_folder.run_profile_key`) is the runs root."""
    if runs_root is None:
        return run_folder.run_dir(run_folder.run_profile_key(cfg), method, seed)
    return run_folder.RunDir(Path(runs_root) / method / f"seed{seed}")


def _train_locked(
    profile: str | ProfileConfig,
    method: str,
    seed: int = 0,
    *,
    resume: bool = False,
    force: bool = False,
    profile_overrides: Mapping[str, Any] | None = None,
    trainer_overrides: Mapping[str, Any] | None = None,
    callbacks: Sequence[Any] = (),
    reward_fn=None,
    reuse_finished: bool = False,
    runs_root: Path | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Train (or reuse) one run; see the module docstring. Returns where its records live.

    ``reuse_finished``: a finished run made with *another* configuration is returned as it is
    (status ``reused``, a note on stderr names both config hashes) instead of raising
    :class:`RunExistsError`; notebooks use it so that committed records are shown, not retrained
    (``./run_all.sh --retrain`` sets ``force`` instead).

    ``profile_overrides``: nested profile values (``{"train": {"max_steps": 20}}``, what
    ``--set train.max_steps=20`` gives); ``trainer_overrides``: ``AT2POConfig`` fields the
    profile does not set, applied after the method preset (``--set trainer.beta=0``).
    ``callbacks``: extra ``TrainerCallback`` objects; ``reward_fn``: see :func:`build_trainer`
    (a custom reward is not part of the resolved config: use it for tests only).
    ``runs_root``: the folder the run's ``<method>/seed<S>/`` lies in (:func:`run_location`;
    a study block keeps its runs apart this way); ``provenance``: more ``meta.json`` fields
    (a block's record), beside the revision and hardware every run records.
    """
    cfg = (
        profile
        if isinstance(profile, ProfileConfig)
        else load_profile(profile, dict(profile_overrides or {}) or None)
    )
    preset = get_method(method)
    _check_backend(cfg)
    check_run_inputs(cfg, trains=preset.trains)  # datasets and loggers, before any work
    if preset.trains:
        check_optimizer_offload()
    run = run_location(cfg, method, seed, runs_root)
    spec = resolve_run(cfg, method, seed, trainer_overrides)
    resolved = spec.record()
    digest = run_folder.config_hash(resolved)
    # A run recorded under another hash is this run when it ran the same effective settings
    # (at2po_lib.record.identity.run_identity: another preset's name, a removed field at its
    # neutral value); new runs record this one's hash.
    identity = spec.identity()
    # Under several processes (accelerate launch, torchrun) only the main process changes the
    # run folder; the others read it. Training's collectives keep them in step: no process
    # writes a checkpoint before the main process has set the staging folder up.
    main = _is_main_process()
    if main:
        _recover_run_folder(run)
    if not force:
        done = _finished_run(run, identity, digest, reuse_finished)
        if done is not None:
            return done
    # Everything below writes into the staging folder; the committed run is untouched until
    # the new one is complete (at2po_lib.util.staging).
    work = run_folder.RunDir(staging_path(run.root))
    checkpoint = _prepare_staging(
        work, run, identity, digest, resume=resume, force=force, main=main
    )
    if main:
        _write_run_header(work, cfg, method, seed, resolved, digest, checkpoint, provenance)

    start = time.time()
    if preset.trains:
        final = _train_and_evaluate(spec, work, checkpoint, callbacks, reward_fn)
        status = "resumed" if checkpoint else "trained"
    else:
        final = _evaluate_warmstart(cfg, method, seed, work)
        status = "evaluated"
    wall = time.time() - start + _previous_wall_time(work, checkpoint)
    if main:
        run_folder.mark_finished(
            work,
            digest,
            wall_time=wall,
            status=status,
            final_eval=recorded_path(run.final_eval) if final is not None else None,
            world_size=_world_size(),
        )
        swap_in(work.root, run.root)  # atomic: the previous run is replaced only now
    return TrainResult(run, status, wall, final)


def _finished_run(
    run: run_folder.RunDir, identity: dict[str, Any], digest: str, reuse_finished: bool
) -> TrainResult | None:
    """A finished run of this configuration (``skipped``), or of another one when
    ``reuse_finished`` (``reused``); another configuration's finished run otherwise is a
    :class:`RunExistsError`; None when nothing is finished there."""
    if same_finished_run(run, digest, identity):
        final = _read_csv(run.final_eval)
        return TrainResult(
            run, "skipped", json.loads(run.done.read_text()).get("wall_time", 0.0), final
        )
    if run_folder.is_finished(run) and reuse_finished:
        print(
            f"{run.root}: reusing a finished run made with another configuration (config "
            f"hash {_done_hash(run)}, now {digest}); retrain with force=True / --retrain",
            file=sys.stderr,
        )
        return TrainResult(
            run,
            "reused",
            json.loads(run.done.read_text()).get("wall_time", 0.0),
            _read_csv(run.final_eval),
        )
    if run_folder.is_finished(run):
        raise RunExistsError(
            f"{run.root}: a finished run with another configuration is there (config hash "
            f"{_done_hash(run)}, now {digest}); pass --force (force=True) to replace it. The "
            "finished run is kept until the new one has finished."
        )
    return None


def _prepare_staging(
    work: run_folder.RunDir,
    run: run_folder.RunDir,
    identity: dict[str, Any],
    digest: str,
    *,
    resume: bool,
    force: bool,
    main: bool,
) -> Path | None:
    """The staging folder to train in: with ``resume`` (and not ``force``), its last complete
    checkpoint (records cut back to that step), returned; else (or without one) an empty
    folder, and None."""
    checkpoint = None
    if resume and not force:
        if main:
            run_folder.remove_incomplete_checkpoints(work.checkpoints)
        checkpoint = run_folder.latest_complete_checkpoint(work.checkpoints)
        if checkpoint is not None:
            _check_same_config(work, digest, identity)
            step = json.loads((checkpoint / run_folder.COMPLETE_MARKER).read_text())["step"]
            if main:
                run_folder.truncate_jsonl(work.metrics, step)
                run_folder.truncate_jsonl(work.eval, step)
                _truncate_rank_records(work, step)
    if checkpoint is None and main:
        if not resume and run_folder.complete_checkpoints(work.checkpoints):
            print(
                f"{work.root}: an unfinished run is there; starting over (pass --resume to "
                "continue it)",
                file=sys.stderr,
            )
        shutil.rmtree(work.root, ignore_errors=True)  # only ever the unfinished staging copy
        work.root.mkdir(parents=True)
    return checkpoint


def _write_run_header(
    work: run_folder.RunDir,
    cfg: ProfileConfig,
    method: str,
    seed: int,
    resolved: dict[str, Any],
    digest: str,
    checkpoint: Path | None,
    provenance: Mapping[str, Any] | None = None,
) -> None:
    """The run's resolved config (with its hash) and ``meta.json`` (revision, hardware, what it
    resumed from)."""
    run_folder.write_config(work, {**resolved, "config_hash": digest})
    meta = run_metadata(
        cfg.name,
        seed=seed,
        config=None,
        method=method,
        config_hash=digest,
        resumed_from=str(checkpoint.relative_to(work.root)) if checkpoint else None,
        hardware=hardware(),
        world_size=_world_size(),
        **dict(provenance or {}),
    )
    work.meta.write_text(json.dumps(meta, indent=2, default=str) + "\n")


def _world_size() -> int:
    """Processes of this run (``WORLD_SIZE``, set by accelerate launch / torchrun; 1 alone)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _is_main_process() -> bool:
    """``RANK`` 0, or no launcher at all."""
    return int(os.environ.get("RANK", "0")) == 0


def _truncate_rank_records(work: run_folder.RunDir, step: int) -> None:
    """Per-process records past the checkpoint's step go, as metrics rows do (resume)."""
    for path in sorted((work.root / "ranks").glob("rank*.jsonl")):
        run_folder.truncate_jsonl(path, step, key="rollout_step")


# ---------------------------------------------------------------- run folder (staging)
class RunExistsError(ProfileError):
    """A finished run with another configuration would be replaced without ``force`` (a
    :class:`ProfileError`, so the command line reports it as a usage error, exit status 2)."""


def _run_is_complete(folder: Path) -> bool:
    return (folder / "DONE.json").is_file()


def _recover_run_folder(run: run_folder.RunDir) -> None:
    """Finish or undo a swap that a crash interrupted (:func:`at2po_lib.util.staging.recover`)."""
    recover(run.root, _run_is_complete)


def _done_hash(run: run_folder.RunDir) -> str | None:
    try:
        return json.loads(run.done.read_text()).get("config_hash")
    except (OSError, json.JSONDecodeError):
        return None


def _check_backend(cfg: ProfileConfig) -> None:
    if cfg.train.use_vllm != (cfg.rollout.backend == "vllm"):
        raise ProfileError(
            f"profile {cfg.name}: train.use_vllm={cfg.train.use_vllm} but "
            f"rollout.backend={cfg.rollout.backend!r}; set both for vLLM rollouts"
        )


def _check_same_config(run: run_folder.RunDir, digest: str, identity: dict[str, Any]) -> None:
    """Refuse to resume a checkpoint written with another configuration (``digest``: this
    configuration's hash; ``identity``: its settings, for a record of them under another hash)."""
    if run.config.is_file() and not same_configuration(run.config, digest, identity):
        old = (yaml.safe_load(run.config.read_text()) or {}).get("config_hash")
        raise ValueError(
            f"{run.config}: the checkpoint was written with another "
            f"configuration (hash {old}, now {digest}); drop --resume or use --force"
        )


def _previous_wall_time(run: run_folder.RunDir, checkpoint: Path | None) -> float:
    """Wall time spent before the checkpoint a resumed run started from."""
    if checkpoint is None:
        return 0.0
    rows = run_folder.read_jsonl(run.metrics)
    return float(rows[-1].get("wall_time", 0.0)) if rows else 0.0


def _read_csv(path: Path):
    return pd.read_csv(path) if path.is_file() else None


def _final_evaluation(
    cfg: ProfileConfig,
    details: pd.DataFrame,
    method: str,
    seed: int,
    run: run_folder.RunDir,
    **meta: Any,
) -> pd.DataFrame:
    """The final evaluation's record from its per-question results, however they were
    answered: ``outcomes.csv`` and ``final_eval.csv`` (the summary, returned) with its meta
    (the turn distribution, and ``meta``)."""
    summary = summarise(details, cfg.name, method, seed)
    write_outcomes(details, run.outcomes)
    write_eval(
        summary,
        run.final_eval,
        cfg.name,
        seed,
        None,
        method=method,
        turn_distribution=turn_distribution(details).to_dict("records"),
        **meta,
    )
    return summary


def _evaluate_warmstart(cfg: ProfileConfig, method: str, seed: int, run: run_folder.RunDir):
    model, tokenizer = load_evaluation_policy(cfg, policy_path(cfg))  # vLLM: one engine
    details = evaluate_questions(cfg, model, tokenizer, build_retriever(cfg), seed=seed)
    return _final_evaluation(cfg, details, method, seed, run)


def check_optimizer_offload(environ=os.environ) -> None:
    """Refuse up front an optimizer offload DeepSpeed cannot run: ``offload_optimizer_device:
    cpu`` (zero3_offload_8gpu.yaml) steps with DeepSpeedCPUAdam, which a deepspeed wheel does
    not prebuild; it is JIT-compiled at the first step, and that needs a C++ compiler and the
    CUDA toolkit (nvcc) -- otherwise the run dies after the model was loaded."""
    if environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none").lower() != "cpu":
        return
    try:
        from deepspeed.git_version_info import installed_ops

        if installed_ops.get("cpu_adam"):
            return
    except ImportError:
        pass
    cuda_home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    missing = [
        tool
        for tool in ("c++", "nvcc")
        if shutil.which(tool, path=environ.get("PATH")) is None
        and not (tool == "nvcc" and cuda_home and Path(cuda_home, "bin", "nvcc").is_file())
    ]
    if missing:
        raise ProfileError(
            "offload_optimizer_device: cpu needs DeepSpeedCPUAdam, which this deepspeed did not "
            f"prebuild and cannot compile here (no {' and no '.join(missing)}). Install a "
            "compiler and the CUDA toolkit (conda install -c conda-forge gxx_linux-64 cuda-nvcc "
            "cuda-cudart-dev), or reinstall deepspeed with DS_BUILD_CPU_ADAM=1, or train "
            "without offload (configs/accelerate/zero3_8gpu.yaml)"
        )


def uses_deepspeed(args) -> bool:
    """Whether this process trains under DeepSpeed: ``args.deepspeed`` or an ``accelerate
    launch`` with a DeepSpeed config (it sets ``ACCELERATE_USE_DEEPSPEED=true``)."""
    return bool(getattr(args, "deepspeed", None)) or os.environ.get(
        "ACCELERATE_USE_DEEPSPEED", ""
    ).lower() in {"1", "true"}


def master_weights_dtype(policy_dtype: str, deepspeed: bool, lora: bool = False) -> str:
    """The dtype the trained weights are loaded in. DeepSpeed (ZeRO, bf16 on) keeps fp32
    master weights in its optimizer, so the model may load in ``policy.dtype``; plain torch
    (``single_gpu.yaml``, ``python -m``) would update the bf16 weights themselves, where AdamW's
    step at lr 1e-6 (≈ lr·sign(g) per weight) is below half a bf16 ulp (2^-8 relative) of
    most weights and rounds to zero. So without DeepSpeed a half-precision ``policy.dtype``
    loads as float32 (the master copy) and ``train.bf16`` autocasts the compute. With LoRA
    the base is frozen and peft keeps the adapters in fp32 (its ``autocast_adapter_dtype``):
    the base loads in ``policy.dtype`` (half the memory of an fp32 copy)."""
    if policy_dtype in {"bfloat16", "float16"} and not deepspeed and not lora:
        return "float32"
    return policy_dtype


def build_trainer(
    cfg: ProfileConfig,
    method: str,
    seed: int,
    run: run_folder.RunDir,
    trainer_overrides: Mapping[str, Any] | None = None,
    start_time: float | None = None,
    reward_fn=None,
    spec: RunSpec | None = None,
):
    """The :class:`AT2POTrainer` of one run with its record callbacks (not trained yet).

    ``spec``: the run's :class:`RunSpec` when the caller resolved it already (else it is
    resolved here from ``cfg``, ``method``, ``seed`` and ``trainer_overrides``).
    ``reward_fn(response_text, golden_answers) -> float`` replaces the rollout's default
    reward (tests use it to get a learning signal from an untrained smoke policy).
    """
    if "tensorboard" in cfg.train.report_to:
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(run.tensorboard))
    spec = spec or resolve_run(cfg, method, seed, trainer_overrides)
    args = spec.training_args(run.checkpoints)
    args.model_init_kwargs = {
        "dtype": torch_dtype(
            master_weights_dtype(cfg.policy.dtype, uses_deepspeed(args), lora=cfg.policy.lora_r > 0)
        )
    }
    model = policy_path(cfg)
    tokenizer = load_tokenizer(model)
    retriever = build_retriever(cfg)
    dataset = datasets.Dataset.from_list(training_prompts(cfg))
    agent = SearchAgent(tokenizer, cfg.policy.template, retriever, spec.rollout, reward_fn)

    with hf_progress_bars_off():  # "Loading weights" of the policy: noise in notebook outputs
        trainer = AT2POTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            agent=agent,
            peft_config=_peft_config(cfg),
        )
    updates = trainer.updates_per_step
    for callback in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(callback)
    validation = None
    if cfg.train.eval_every > 0:
        validator = Validator(
            trainer,
            cfg,
            retriever,
            cfg.train.val_datasets or cfg.eval.datasets,
            cfg.train.val_questions or cfg.eval.max_questions,
            method,
            seed,
        )
        validation = GreedyValidation(
            run.eval,
            validator,
            cfg.train.eval_every,
            updates,
            before_train=cfg.train.val_before_train,
        )
        trainer.add_callback(validation)
    trainer.add_callback(MetricsRecorder(run.metrics, updates, start_time=start_time))
    trainer.add_callback(CheckpointMarker(run.checkpoints, updates))
    trainer.add_callback(TreeRecord(trainer, run.trees, (1, cfg.train.max_steps)))

    if rank_record.enabled():
        trainer.add_callback(rank_record.RankRecord(trainer, run.root / "ranks"))
    if cfg.train.progress_bar:
        trainer.add_callback(
            StepProgress(
                cfg.train.max_steps, updates, f"{cfg.name}/{method}/seed{seed}", validation
            )
        )
    trainer.retriever = retriever
    return trainer


def _train_and_evaluate(
    spec: RunSpec,
    run: run_folder.RunDir,
    checkpoint: Path | None,
    callbacks: Sequence[Any] = (),
    reward_fn=None,
):
    cfg, method, seed = spec.profile, spec.method, spec.seed
    trainer = build_trainer(
        cfg,
        method,
        seed,
        run,
        spec.trainer_overrides,
        start_time=time.time() - _previous_wall_time(run, checkpoint),
        reward_fn=reward_fn,
        spec=spec,
    )
    for callback in callbacks:
        trainer.add_callback(callback)

    if (
        checkpoint is not None
        and _checkpoint_rollout_step(checkpoint) >= cfg.train.max_steps
        and _loads_without_training(trainer)
    ):
        # Killed after its last checkpoint: the training is done. Transformers' loop runs one
        # update before it checks max_steps, so resuming there would train an extra update and
        # evaluate another model than the uninterrupted run's: load the weights instead.
        _load_final_checkpoint(trainer, checkpoint)
    else:
        with (
            hf_progress_bars_off()
        ):  # "Writing model shards" per checkpoint; StepProgress is the bar
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    if not cfg.train.final_eval:
        return None
    return _evaluate_trained(trainer, cfg, method, seed, run)


def _checkpoint_rollout_step(checkpoint: Path) -> int:
    """The rollout step a complete checkpoint was saved at (its COMPLETE marker)."""
    return int(json.loads((checkpoint / run_folder.COMPLETE_MARKER).read_text())["step"])


def _loads_without_training(trainer) -> bool:
    """Whether the last checkpoint's weights can be loaded as they are, without ``train()``.

    Yes in one process and under several processes without DeepSpeed (DDP): before ``train()``
    every process holds the whole, unwrapped model, so each loads the same full weights file
    and the processes agree bit for bit, as after an update's all-reduce. No under DeepSpeed:
    its engine, which alone reads a ZeRO checkpoint (optimizer and parameter shards; under
    ZeRO-3 the model built here holds only this process's partition), exists only inside
    ``train()``. That path resumes through ``train()``, where
    :meth:`AT2POTrainer._run_epoch` stops before any update once ``max_steps`` is reached.
    """
    return not trainer.is_deepspeed_enabled


def _load_final_checkpoint(trainer, checkpoint: Path) -> None:
    """The checkpoint's weights into the (not yet wrapped) model on every process, and its
    ``trainer_state.json`` as the trainer's state, so ``state.global_step`` is the run's last
    (``max_steps`` updates) as after the uninterrupted run's ``train()``."""
    trainer._load_from_checkpoint(str(checkpoint))
    state = checkpoint / "trainer_state.json"
    if state.is_file():
        trainer.state = TrainerState.load_from_json(str(state))


def _evaluate_trained(trainer, cfg: ProfileConfig, method: str, seed: int, run: run_folder.RunDir):
    """The final evaluation of the trained policy: sharded over several processes (or under
    ZeRO); in one process on vLLM the colocated engine after a weight sync (the trained weights,
    no second engine); else the unwrapped model (LoRA merged)."""
    if trainer.accelerator.num_processes > 1 or trainer.is_deepspeed_enabled:
        details = _sharded_details(trainer, cfg, method, seed)
        if not trainer.accelerator.is_main_process:
            return None
        processes = trainer.accelerator.num_processes
        return _final_evaluation(cfg, details, method, seed, run, processes=processes)
    tokenizer, retriever = trainer.processing_class, trainer.retriever
    if trainer.use_vllm:
        with trainer.policy_for_generation(sync=True) as engine:
            details = evaluate_questions(cfg, engine, tokenizer, retriever, seed=seed)
    else:
        model = trainer.accelerator.unwrap_model(trainer.model)
        if hasattr(model, "merge_and_unload"):
            model = model.merge_and_unload()
        details = evaluate_questions(cfg, model.eval(), tokenizer, retriever, seed=seed)
    return _final_evaluation(cfg, details, method, seed, run)


def _sharded_details(trainer, cfg: ProfileConfig, method: str, seed: int) -> pd.DataFrame:
    """The final evaluation's per-question results under several processes (or ZeRO): each
    process answers every W-th question of each test set with the trainer's generation policy
    (weights gathered under ZeRO-3), and the frames are gathered on every process. The sampled
    metric (``eval.sampled_k``) is single-process only: refused here rather than left out
    silently."""
    if cfg.eval.sampled_k > 0:
        raise ProfileError(
            f"eval.sampled_k={cfg.eval.sampled_k}: the sampled metric runs in one "
            "process; set eval.sampled_k=0 for a multi-process run and compute it "
            "afterwards with `at2po evaluate --checkpoint ...`"
        )
    validator = Validator(
        trainer, cfg, trainer.retriever, cfg.eval.datasets, cfg.eval.max_questions, method, seed
    )
    return validator.details()


def _peft_config(cfg: ProfileConfig):
    if cfg.policy.lora_r <= 0:
        return None

    return LoraConfig(
        r=cfg.policy.lora_r,
        lora_alpha=cfg.policy.lora_alpha,
        task_type="CAUSAL_LM",
        target_modules=[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
    )
