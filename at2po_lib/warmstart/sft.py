"""Warm start: supervised fine-tuning (TRL ``SFTTrainer``) of the tiny policy on scripted
demonstrations, with the checkpoint picked on a validation split so that RL has room to improve.

At paper scale the policy is a pretrained LLM (Qwen3-4B) and there is no warm start; at toy
scale a ~1M-parameter Qwen3 starts from random weights and must first learn the agent format
and to read facts from search results. The recipe (:func:`train_warmstart`):

1. **Data** (:mod:`at2po_lib.policy.sft_data`): demonstrations from ``sft.aux_worlds`` auxiliary TinyWorlds
   (other seeds: other facts, and other names unless ``world.name_seed`` is fixed; optionally
   also the evaluation world's ``train`` split,
   ``sft.main_world_demos``), observations from each world's real retriever. A from-scratch
   model trained on one world memorised its names instead of copying from results (measured:
   training loss 0.5, validation EM 0).
2. **Tokenizer and model**: byte-level BPE on all that text (:mod:`at2po_lib.policy.tokenizer`), a fresh
   ``Qwen3ForCausalLM`` (:mod:`at2po_lib.policy.model`). Every evaluation-world name must be made of tokens
   that some demonstration produces as a target: with the tiny profile's shared name stream
   (``world.name_seed``, copied by the auxiliary worlds) names are one or two such tokens.
   With names of their own, the evaluation world's names were tokens that were never a
   target, and the policy could not produce them.
3. **Pretraining** (optional, ``sft.pretrain_steps``): plain language modelling on the
   auxiliary worlds' passages, and on the evaluation world's with ``sft.pretrain_eval_corpus``
   (the toy counterpart of an LLM that has read Wikipedia; its questions, answers and
   reasoning chains are never trained on). It stands in for a real backbone's pretraining.
4. **SFT** with the loss on model tokens only, optionally mixed (``sft.lm_mix``) with
   language-model chunks of the pretraining text (it partly countered suppressed names
   before the shared name stream; off in the tiny profile). The examples are pre-tokenised
   (``input_ids`` + ``assistant_masks``), TRL turns them into ``labels`` with -100 on prompt
   and observation tokens, and :func:`targets_only_loss` projects through the LM head only
   at labelled positions (on CPU TRL 1.16 projects every position). Batches hold
   demonstrations of similar length in random order (:class:`ShuffledLengthBatches`; the
   long-to-short runs of ``group_by_length`` made the loss cycle). The
   learning rate is constant after a linear warm-up (``constant_with_warmup``), so a
   checkpoint does not depend on ``max_steps``.
5. **Checkpoint selection.** docs/toy_scale.md measured that a converged warm start leaves RL
   nothing to learn and that noisy demonstrations do *not* make the greedy policy imperfect,
   so the demonstrations are clean and the imperfection comes from task difficulty plus
   *where training stops*: every ``sft.eval_every`` steps a callback saves a checkpoint and
   measures greedy EM (the real rollout, :func:`at2po_lib.evaluation.greedy.greedy_answers`) on the
   ``dev`` split of the evaluation world's multi-hop datasets (dev-pool entities: facts in no
   training demonstration, like the test sets; ``sft.eval_questions`` questions). The chosen
   checkpoint has validation EM in ``[sft.target_em_low, sft.target_em_high]``, closest to the
   band's middle (ties: the earlier step); if none does, the one closest to the band, with
   ``in_band: false`` recorded. Training stops once validation EM exceeds the band.

Sampling temperature: nothing here samples; the saved generation config is neutral (see
:mod:`at2po_lib.policy.model`) and the rollout records log-probs at the temperature the trainer
recomputes.

The cache (where a warm start lives, its key, its record and the check of its files) is
:mod:`at2po_lib.warmstart.cache`: reading a warm start needs no trainer.

Outputs (``artifacts_dir(profile)/"policy"``): ``warmstart/`` (model + tokenizer, loadable with
``load_policy``), ``warmstart.json`` beside it (resolved config, cache key, wall times with the
machine load, demo statistics, the validation table, the chosen step),
``warmstart_checkpoints/step-N`` and ``aux_worlds/``.

CPU note: on a shared 2-core machine, idle OpenMP threads spinning made torch several times
slower; ``at2po warmstart`` (:mod:`at2po_lib.cli.warmstart`, the command line of this module)
sets ``OMP_WAIT_POLICY=PASSIVE`` before torch loads (set it yourself in a
notebook, before ``import torch``).
"""

from __future__ import annotations

import copy
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl import SFTConfig as TRLSFTConfig
from trl import SFTTrainer

from ..config.profile import load_profile
from ..evaluation.greedy import greedy_answers, score_rows
from ..policy.checkpoint_files import file_digests
from ..policy.demos import build_sft_examples
from ..policy.model import build_policy, count_parameters, load_policy, save_policy
from ..policy.sft_data import (
    collect_demos,
    corpus_texts,
    pretraining_chunks,
    tokenizer_texts,
    validation_rows,
    world_sources,
)
from ..policy.strategies import STRATEGIES
from ..policy.tokenizer import train_tokenizer
from .cache import (
    cache_key,
    cached_warmstart,
    initial_policy,
    warmstart_dir,
    warmstart_record_path,
    write_record,
)
from ..protocol.prompts import get_template
from ..util.hf_compat import checkpointing_kwargs
from ..util.errors import ProfileError
from ..util.paths import artifacts_dir, recorded_path
from ..util.provenance import git_revision
from ..util.quiet import hf_progress_bars_off
from ..trainer.callbacks import TrainingProgress, in_notebook

if TYPE_CHECKING:
    from ..config.profile import ProfileConfig


# ----------------------------------------------------------------------------- training


def trl_config(sft_cfg, output_dir: Path, max_length: int, max_steps: int | None = None):
    """TRL ``SFTConfig`` for the tiny policy on CPU (float32, no saving: the callback saves)."""
    return TRLSFTConfig(
        output_dir=str(output_dir),
        max_steps=max_steps if max_steps is not None else sft_cfg.max_steps,
        per_device_train_batch_size=sft_cfg.batch_size,
        learning_rate=sft_cfg.learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=sft_cfg.warmup_steps,
        weight_decay=0.0,
        max_grad_norm=1.0,
        seed=sft_cfg.seed,
        data_seed=sft_cfg.seed,
        max_length=max_length,
        packing=False,
        bf16=False,
        fp16=False,
        save_strategy="no",
        logging_steps=max(1, min(sft_cfg.eval_every, 10)),
        report_to=[],
        dataloader_num_workers=0,
        dataloader_pin_memory=False,  # CPU training: pinning needs an accelerator (else it warns)
        # TRL's SFT default, by the name this transformers release reads without a warning
        **checkpointing_kwargs(True),
        disable_tqdm=True,  # TrainingProgress (make_trainer) shows one bar and the loss
        # The sampler is ShuffledLengthBatches (see TargetsOnlySFTTrainer).
    )


def targets_only_loss(model, input_ids, attention_mask, labels, num_items_in_batch=None):
    """Mean next-token NLL over the labelled positions, projecting through the LM head only
    there: ``-sum_{t: y_t != -100} log p(y_t | x_<t) / N``. The same loss as TRL's; TRL 1.16
    scores only labelled positions on CUDA (Triton) but every position elsewhere, and in a
    demonstration ~85% of the positions are prompt and observation tokens (measured on the
    tiny profile: the full projection made an SFT step ~2x a plain forward/backward).

    Returns ``(loss, n_valid, entropy_sum, n_correct)``; the last three feed TRL's metrics."""
    hidden = model.get_decoder()(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False
    ).last_hidden_state
    targets = labels[:, 1:]
    valid = targets != -100
    logits = model.get_output_embeddings()(hidden[:, :-1][valid]).float()
    log_probs = F.log_softmax(logits, dim=-1)
    chosen = targets[valid]
    n_valid = valid.sum()
    denominator = n_valid.clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    loss = -log_probs.gather(-1, chosen[:, None]).sum() / denominator
    with torch.no_grad():
        entropy_sum = -(log_probs.exp() * log_probs).sum()
        n_correct = (log_probs.argmax(-1) == chosen).sum()
    return loss, n_valid, entropy_sum, n_correct


class ShuffledLengthBatches:
    """Sampler: batches of similar length (little padding), in random order.

    Transformers' ``group_by_length`` sorts each "megabatch" of 50 batches longest first, so
    the batches come in runs from long to short: on TinyWorld ~25 steps of multi-hop
    demonstrations (search again after the first result) and then ~25 of single-hop ones
    (answer after it): the loss cycled with that period, and the policy answered after one
    search for every question (greedy multi-hop EM 0 after 900 steps; the effect of the
    sampler alone was not isolated, see docs/warmstart.md).
    Here each group of ``group_batches`` random batches is sorted by length and cut into
    batches, and all batches are then shuffled; ``group_batches=1`` is plain random batching.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, group_batches: int, seed: int):
        if batch_size < 1 or group_batches < 1:
            raise ValueError(
                f"batch_size={batch_size} and group_batches={group_batches} must be >= 1"
            )
        self.lengths, self.batch_size, self.group_batches = list(lengths), batch_size, group_batches
        self.seed, self.epoch = seed, 0

    def __len__(self) -> int:
        return len(self.lengths)

    def batches(self, epoch: int) -> list[list[int]]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.lengths), generator=gen).tolist()
        group = self.batch_size * self.group_batches
        batches = []
        for start in range(0, len(order), group):
            chunk = sorted(order[start : start + group], key=lambda i: -self.lengths[i])
            batches += [
                chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)
            ]
        shuffled = torch.randperm(len(batches), generator=gen).tolist()
        return [batches[i] for i in shuffled]

    def __iter__(self):
        batches = self.batches(self.epoch)
        self.epoch += 1
        for batch in batches:
            yield from batch


def _sft_trainer_class():
    class TargetsOnlySFTTrainer(SFTTrainer):
        """TRL's ``SFTTrainer`` with :func:`targets_only_loss` (no PEFT, no sequence
        parallelism: the tiny from-scratch policy only) and :class:`ShuffledLengthBatches`."""

        def __init__(self, *args, group_batches: int = 4, **kwargs):
            self._sft_group_batches = group_batches
            super().__init__(*args, **kwargs)

        def _get_train_sampler(self, train_dataset=None):
            dataset = self.train_dataset if train_dataset is None else train_dataset
            return ShuffledLengthBatches(
                [len(ids) for ids in dataset["input_ids"]],
                self.args.train_batch_size,
                self._sft_group_batches,
                self.args.seed,
            )

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            mode = "train" if model.training else "eval"
            loss, n_valid, entropy_sum, n_correct = targets_only_loss(
                model,
                inputs["input_ids"],
                inputs.get("attention_mask"),
                inputs["labels"],
                num_items_in_batch,
            )
            n = max(int(n_valid), 1)
            self._metrics[mode]["entropy"].append(float(entropy_sum) / n)
            self._metrics[mode]["mean_token_accuracy"].append(float(n_correct) / n)
            if mode == "train" and "attention_mask" in inputs:
                self._total_train_tokens += int(inputs["attention_mask"].sum())
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            return (loss, None) if return_outputs else loss

    return TargetsOnlySFTTrainer


def make_trainer(
    model,
    tokenizer,
    examples: list[dict],
    sft_cfg,
    output_dir: Path,
    max_length: int,
    callbacks: Sequence[Any] = (),
    max_steps: int | None = None,
    description: str = "SFT",
    progress_points: Callable[[], dict[str, list[tuple[int, float]]]] | None = None,
):
    """An SFT trainer (TRL's, with :func:`targets_only_loss`) over pre-tokenised examples
    ``{"input_ids", "assistant_masks"}``. Progress: one bar and, in a notebook, a live loss
    plot (plus ``progress_points()``, e.g. validation EM) instead of printed log dicts."""
    dataset = Dataset.from_list(examples)
    with hf_progress_bars_off():  # TRL's dataset preparation: one bar per map, milliseconds each
        trainer = _sft_trainer_class()(
            group_batches=sft_cfg.group_batches,
            model=model,
            args=trl_config(sft_cfg, output_dir, max_length, max_steps),
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=list(callbacks),
        )
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(TrainingProgress(description, progress_points))
    return trainer


def masked_loss(model, examples: Sequence[dict], batch_size: int = 16) -> float:
    """Mean cross-entropy over the model tokens (mask 1) of ``examples``: the SFT objective."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for ex in examples:
            ids = torch.tensor([ex["input_ids"]])
            labels = torch.tensor(
                [[t if m else -100 for t, m in zip(ex["input_ids"], ex["assistant_masks"])]]
            )
            n = int((labels[:, 1:] != -100).sum())
            total += float(model(input_ids=ids, labels=labels).loss) * n
            count += n
    return total / max(count, 1)


class CheckpointSelector:
    """Trainer callback: every ``every`` steps, save a checkpoint and score it on validation.

    ``score_fn(model) -> dict`` returns at least ``{"em": multi-hop EM}``; training stops once
    that EM exceeds ``stop_above`` (None: never).
    """

    def __init__(
        self,
        score_fn: Callable[[Any], dict],
        every: int,
        checkpoints_dir: Path,
        tokenizer,
        stop_above: float | None,
    ) -> None:
        self.score_fn, self.every, self.dir = score_fn, every, checkpoints_dir
        self.tokenizer, self.stop_above = tokenizer, stop_above
        self.table: list[dict] = []
        self.seconds = 0.0
        # TrainerCallback is a plain class with no-op hooks; build a subclass instance lazily
        # so this module imports without transformers.
        selector = self

        class _Callback(TrainerCallback):
            def on_step_end(self, args, state, control, model=None, **kwargs):
                return selector.on_step_end(args, state, control, model)

        self.callback = _Callback()

    def on_step_end(self, args, state, control, model):
        step = state.global_step
        if step % self.every and step != state.max_steps:
            return control

        start = time.perf_counter()
        was_training = model.training
        model.eval()
        scores = self.score_fn(model)
        path = save_policy(model, self.tokenizer, self.dir / f"step-{step:05d}")
        model.train(was_training)
        self.table.append({"step": step, "path": str(path), **scores})
        self.seconds += time.perf_counter() - start

        if not in_notebook():  # a notebook plots the validation EM live (TrainingProgress)
            print(f"[warmstart] step {step}: validation {scores}", flush=True)
        if self.stop_above is not None and scores["em"] > self.stop_above:
            control.should_training_stop = True
        return control


def choose_checkpoint(table: Sequence[dict], low: float, high: float) -> tuple[dict, bool]:
    """The row whose ``em`` is in ``[low, high]`` and closest to the middle (earliest on ties);
    else the row closest to the band. Returns ``(row, in_band)``."""
    if not table:
        raise ValueError("no checkpoint was evaluated (is sft.eval_every > sft.max_steps?)")
    middle = (low + high) / 2

    def distance_to_band(row: dict) -> float:
        return max(low - row["em"], row["em"] - high, 0.0)

    inside = [row for row in table if low <= row["em"] <= high]
    if inside:
        return min(inside, key=lambda r: (abs(r["em"] - middle), r["step"])), True
    return min(table, key=lambda r: (distance_to_band(r), r["step"])), False


def validation_scorer(
    profile_cfg: ProfileConfig, tokenizer, retriever, validation: dict[str, list[dict]]
) -> Callable[[Any], dict]:
    """``model -> {"em": multi-hop EM (micro-average), "em_<dataset>": ..., "n": ...}``.

    Always on the Hugging Face backend, whatever ``rollout.backend`` says: the model scored is
    the SFT trainer's, in memory, between two of its steps; a vLLM engine would load weights
    from a folder (and is the RL trainer's, colocated, once the warm start is done)."""
    template = get_template(profile_cfg.policy.template)
    rollout_cfg = replace(profile_cfg.rollout, backend="hf")

    def score(model) -> dict:
        out, hits, total = {}, 0.0, 0
        for name, rows in validation.items():
            trajectories = greedy_answers(
                model,
                tokenizer,
                template,
                retriever,
                rows,
                rollout_cfg,
                profile_cfg.eval.batch_size,
            )
            em = score_rows(rows, trajectories)["em"]
            out[f"em_{name}"] = float(em.mean())
            hits, total = hits + float(em.sum()), total + len(em)
        return {"em": hits / max(total, 1), "n": total, **out}

    return score


# ----------------------------------------------------------------------------- the recipe


def pretrain(
    model, tokenizer, passages: Sequence[str], profile_cfg: ProfileConfig, output_dir: Path
) -> dict:
    """Language-model pretraining on auxiliary-world passages (``sft.pretrain_steps`` steps,
    every token a target); returns timing and loss. Skipped when the step count is 0."""
    sft = profile_cfg.sft
    if sft.pretrain_steps <= 0 or not passages:
        return {"steps": 0, "seconds": 0.0}
    tokens_needed = sft.pretrain_steps * sft.pretrain_batch_size * sft.pretrain_seq_len
    tokens_per_epoch = sum(len(tokenizer.encode(p, add_special_tokens=False)) + 1 for p in passages)
    epochs = max(1, math.ceil(tokens_needed / max(tokens_per_epoch, 1)))
    chunks = pretraining_chunks(passages, tokenizer, sft.pretrain_seq_len, epochs, sft.seed)
    pt_cfg = copy.deepcopy(sft)
    pt_cfg.batch_size = sft.pretrain_batch_size
    trainer = make_trainer(
        model,
        tokenizer,
        chunks,
        pt_cfg,
        output_dir,
        sft.pretrain_seq_len,
        max_steps=sft.pretrain_steps,
        description="warm start: pretraining",
    )
    start = time.perf_counter()
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    return {
        "steps": trainer.state.global_step,
        "seconds": time.perf_counter() - start,
        "chunks": len(chunks),
        "final_loss": losses[-1] if losses else None,
    }


def lm_examples(passages: Sequence[str], tokenizer, sft_cfg, n_demos: int) -> list[dict]:
    """``sft.lm_mix`` language-model chunks to mix into the SFT data: each a
    ``pretrain_seq_len``-token chunk of the passages with every token a target
    (``assistant_masks`` all 1), as many as make up ``lm_mix`` of the mixed set."""
    if not 0.0 <= sft_cfg.lm_mix < 1.0:
        raise ValueError(f"sft.lm_mix={sft_cfg.lm_mix} must lie in [0, 1)")
    wanted = round(n_demos * sft_cfg.lm_mix / (1.0 - sft_cfg.lm_mix))
    if wanted == 0 or not passages:
        return []
    chunks: list[dict] = []
    epochs = 1
    while len(chunks) < wanted:
        chunks = pretraining_chunks(
            passages, tokenizer, sft_cfg.pretrain_seq_len, epochs, sft_cfg.seed + 1
        )
        epochs *= 2
    return [
        {"input_ids": c["input_ids"], "assistant_masks": [1] * len(c["input_ids"])}
        for c in chunks[:wanted]
    ]


def train_warmstart(profile_cfg: ProfileConfig) -> Path:
    """Run the whole recipe and save it: worlds → demonstrations → tokenizer → model →
    (pretraining) → SFT with checkpoint selection."""
    cfg, sft = profile_cfg, profile_cfg.sft
    if cfg.policy.model is not None:
        raise ValueError(
            f"profile {cfg.name!r} sets policy.model={cfg.policy.model!r}: the warm "
            "start trains the tiny from-scratch policy only (policy.model: null)"
        )
    started, load_start = time.perf_counter(), os.getloadavg()
    sources = world_sources(cfg)
    main = sources[0]
    validation = validation_rows(cfg, main.files)
    demos = collect_demos(cfg, sources, validation)
    initial = initial_policy(cfg)
    model, tokenizer, examples, stats = _model_and_examples(cfg, sources, demos, initial)
    prepared = time.perf_counter()

    policy_root = artifacts_dir(cfg.name) / "policy"
    pretraining = (
        {"steps": 0, "seconds": 0.0}
        if initial is not None
        else pretrain(
            model,
            tokenizer,
            corpus_texts(sources, sft.pretrain_eval_corpus),
            cfg,
            policy_root / "trainer",
        )
    )
    checkpoints = policy_root / "warmstart_checkpoints"
    shutil.rmtree(checkpoints, ignore_errors=True)
    if sft.select not in ("band", "last"):
        raise ValueError(f"sft.select={sft.select!r}: expected 'band' or 'last'")
    selector = CheckpointSelector(
        validation_scorer(cfg, tokenizer, main.retriever, validation),
        sft.eval_every,
        checkpoints,
        tokenizer,
        sft.target_em_high if sft.select == "band" else None,
    )
    trainer = make_trainer(
        model,
        tokenizer,
        examples,
        sft,
        policy_root / "trainer",
        cfg.policy.max_position_embeddings,
        [selector.callback],
        description="warm start: SFT",
        progress_points=lambda: {
            "multi-hop dev EM": [(row["step"], row["em"]) for row in selector.table]
        },
    )
    train_start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - train_start
    shutil.rmtree(policy_root / "trainer", ignore_errors=True)

    chosen, in_band = _chosen_checkpoint(selector, trainer, sft)
    out = _install_warmstart(Path(chosen["path"]), cfg.name)
    chosen_model, _ = load_policy(out)

    record = {
        "profile": cfg.name,
        "cache_key": cache_key(cfg),
        "path": recorded_path(out),
        "git_revision": git_revision(),
        "chosen_step": chosen["step"],
        "chosen_validation_em": chosen["em"],
        "in_band": in_band,
        "target_band": [sft.target_em_low, sft.target_em_high],
        "steps_run": trainer.state.global_step,
        "pretrain": pretraining,
        "sft_seconds": train_seconds - selector.seconds,
        "validation_seconds": selector.seconds,
        "sft_plus_validation_seconds": train_seconds,
        "training_seconds": pretraining["seconds"] + train_seconds - selector.seconds,
        "prepare_seconds": prepared - started,
        "total_seconds": time.perf_counter() - started,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "timing_note": "2-core CPU shared with other processes; see the load averages",
        "parameters": count_parameters(chosen_model),
        "vocab_size": len(tokenizer),
        "worlds": [s.name for s in sources],
        "demos": asdict(stats),
        "train_examples": len(examples),
        "strategies": demo_strategy_summary(demos, sft),
        "init_from": initial and {**initial, "path": recorded_path(initial["path"])},
        "validation_questions": {k: len(v) for k, v in validation.items()},
        "selection": [{**row, "path": recorded_path(row["path"])} for row in selector.table],
        "log_history": trainer.state.log_history,
        "config": cfg.to_dict(),
        "files": file_digests(out),  # checked at every load (cached_warmstart)
    }
    write_record(warmstart_record_path(cfg.name), record)
    return out


def _model_and_examples(
    cfg: ProfileConfig, sources: list, demos: list, initial: dict | None
) -> tuple[Any, Any, list, Any]:
    """The policy to fine-tune and its SFT examples: from scratch, a tokenizer trained on the
    worlds' texts and demonstrations and a new model; with ``sft.init_from``, that policy.
    Demonstrations come first, then language-modelling chunks of the corpus."""
    sft = cfg.sft
    model = None
    if initial is None:
        main_text = sft.main_world_demos or sft.pretrain_eval_corpus
        tokenizer = train_tokenizer(
            tokenizer_texts(corpus_texts(sources, main_text), demos), cfg.policy.vocab_size
        )
    else:
        model, tokenizer = load_policy(initial["path"])
    examples, stats = build_sft_examples(
        demos,
        tokenizer,
        cfg.policy.max_position_embeddings,
        require_supported=sft.require_supported,
    )
    if not examples:
        raise ValueError(f"profile {cfg.name!r}: no demonstration survived ({stats})")
    examples += lm_examples(
        corpus_texts(sources, sft.pretrain_eval_corpus), tokenizer, sft, len(examples)
    )
    if initial is None:
        model = build_policy(cfg.policy, tokenizer, seed=sft.seed)
    return model, tokenizer, examples, stats


def _chosen_checkpoint(selector: Any, trainer: Any, sft: Any) -> tuple[dict, bool]:
    """The validated checkpoint to keep (``sft.select``: the band rule of
    :func:`choose_checkpoint`, or the last one) and whether its EM is inside the target band."""
    # The trainer logs a step's loss after the callback ran: attach it now.
    losses = {log["step"]: log["loss"] for log in trainer.state.log_history if "loss" in log}
    for row in selector.table:
        row["train_loss"] = losses.get(row["step"])
    chosen, in_band = choose_checkpoint(selector.table, sft.target_em_low, sft.target_em_high)
    if sft.select == "last":
        chosen = selector.table[-1]
        in_band = sft.target_em_low <= chosen["em"] <= sft.target_em_high
    return chosen, in_band


def _install_warmstart(checkpoint: Path, profile: str) -> Path:
    """Copy ``checkpoint`` to the warm-start folder, replacing the old one by a rename."""
    out = warmstart_dir(profile)
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(checkpoint, staging)
    # The old record goes first: it must never describe the new folder (a kill before the new
    # record is written leaves a folder without one, refused at load with the rebuild command).
    warmstart_record_path(profile).unlink(missing_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def demo_strategy_summary(demos: Sequence[Any], sft) -> dict[str, Any]:
    """The demonstration mix actually trained on: each strategy's count and share."""
    n = len(demos)
    counts = {s: sum(getattr(d, "strategy", "follow") == s for d in demos) for s in STRATEGIES}
    return {
        "strategy_mix": sft.strategy_mix,
        "follow_rate_hard": sft.follow_rate_hard,
        "follow_rate_easy": sft.follow_rate_easy,
        "demos": n,
        "counts": counts,
        "shares": {s: (c / n if n else 0.0) for s, c in counts.items()},
    }


def ensure_warmstart(profile_cfg: ProfileConfig | str, force: bool = False) -> Path:
    """The profile's warm-start policy folder, trained if missing, stale or ``force``."""
    if isinstance(profile_cfg, str):
        profile_cfg = load_profile(profile_cfg)
    if not force:
        cached = cached_warmstart(profile_cfg)
        if cached is not None:
            return cached
    check_single_process(profile_cfg.name)
    return train_warmstart(profile_cfg)


def check_single_process(profile: str, environ: Mapping[str, str] = os.environ) -> None:
    """The warm start trains in one process. Inside a multi-process launch (``WORLD_SIZE`` > 1:
    accelerate, torchrun, DeepSpeed) every process would train its own copy into the same
    folder, and under DeepSpeed the SFT trainer asserts on its batch size: refused, with the
    command that builds it first."""
    world = environ.get("WORLD_SIZE", "1")
    if world.isdigit() and int(world) > 1:
        raise ProfileError(
            f"profile {profile}: the warm start is not built, and it trains in one process, not "
            f"inside this launch of {world} processes: build it first with "
            f"`at2po warmstart --profile {profile}`, then launch again"
        )
