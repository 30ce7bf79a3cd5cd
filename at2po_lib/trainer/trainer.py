r"""``AT2POTrainer``: TRL's ``GRPOTrainer`` with tree rollouts, per-token credit and the ATPO loss.

AT2PO ("Agentic Turn-based Policy Optimization via Tree Search", arXiv 2601.04767) changes
three stages of the GRPO loop (docs/method.md §5–§7); this subclass swaps exactly those and
inherits everything else from ``trl==1.16.0`` (optimisation, gradient accumulation, rollout
buffering over ``steps_per_generation``, old/reference log-probs, logging, checkpointing,
accelerate/DeepSpeed, PEFT, vLLM weight sync):

=====================  =========================================================================
stage                  how it is plugged in
=====================  =========================================================================
rollout (§5, §8)       TRL's ``rollout_func`` hook → :meth:`AT2POTrainer._rollout`: the prompts
                       of a generation batch grow trees (or chains / AEPO branches) with the
                       project's agent; each *leaf* becomes one training row: prompt ids,
                       completion ids (model turns and observations), the observation mask
                       (TRL's ``env_mask`` → ``tool_mask``), sampling log-probs, the reward.
credit (§6)            override of ``_generate_and_score_completions``: calls the parent (which
                       pads, logs rewards and, where needed, computes old/reference log-probs),
                       then replaces its per-row GRPO advantage by the per-*token* advantage
                       (B, T) computed by :mod:`at2po_lib.method.credit` from the trees, and adds
                       ``turn_ids`` (B, T).
loss (§7)              override of ``_compute_loss``: per-token log-probs and entropies at the
                       sampling temperature (``args.temperature``), then
                       :func:`at2po_lib.method.loss.policy_loss` at the method's ratio level
                       and, for the logs, :func:`at2po_lib.method.loss.loss_diagnostics` of the
                       same inputs (the loss is not computed again), both on one CPU thread
                       (:data:`LOSS_THREADS`).
=====================  =========================================================================

Where the log-probabilities come from (``bench_train_step.py`` measures both paths):

- **Scored positions** (``args.loss_logp_positions``). ``"policy"``: only the tokens the policy
  sampled (``completion_mask * tool_mask``) go through the LM head (logits / T, as TRL's fused
  head), which gives log-probs and entropies. By default (``loss_shared_prefix``) the rows of a
  forward are packed into token-trie segments: a prefix that rows share (a prompt, a tree's
  early turns) is computed once and padding is not computed (:mod:`at2po_lib.policy.
  shared_prefix`: a tree-shaped attention mask; log-probs and gradients equal to the per-row
  path to fp32 rounding; ``benchmarks/bench_tiny_step.py`` measures both). Otherwise the
  backbone runs on length-sorted chunks of ``loss_chunk_rows`` rows (0 = one chunk) trimmed to
  their last scored token (:func:`policy_position_logps`). ``"all"``: TRL's fused LM head over every
  completion position (prompt and observations included on CPU, where TRL does not compact).
  ``"auto"`` (default) = ``"policy"`` on a CPU, ``"all"`` on an accelerator — the CPU choice
  is measured (``benchmarks/README.md``); the accelerator choice was **not measured** (the
  H200 check in ``benchmarks/README.md`` times whole steps on this path, not the two paths
  against each other), it keeps TRL's path, whose Triton kernel already scores only labelled
  positions. The same switch computes the reference model's log-probs (``beta >
  0``). ``"policy"`` needs a single-process, non-PEFT, text-only model without logit scaling;
  ``"auto"`` falls back to ``"all"`` otherwise, an explicit ``"policy"`` raises.
- **Old log-probs** (``args.loss_old_logps``), one rule: the old policy of every update of a
  rollout batch is the policy that sampled it. With the HF backend (same weights, same
  temperature, ``log_softmax(logits / T)`` in float32) the rollout already recorded exactly
  those values (``sampling/logp_abs_diff`` ~1e-7), so ``"auto"`` reuses them (TRL receives them
  as ``sampling_per_token_logps``) instead of TRL's extra no-grad forward over the batch. With
  vLLM another engine sampled (other kernels, possibly other precision): ``"auto"`` keeps
  TRL's recomputation with the training model (TRL's vLLM importance-sampling correction stays
  refused by :class:`AT2POConfig`, as the authors' verl applies none). ``"recompute"`` forces
  TRL's path. When a batch feeds exactly one update TRL needs no old log-probs (ratio 1).

Rows and groups: TRL repeats every prompt ``num_generations`` times in a generation batch; here
``num_generations`` is the number of *leaves* per prompt, and the rollout turns each group of
repeats into one tree whose leaves fill exactly those slots. A process must hold whole groups
(``per_device_train_batch_size * steps_per_generation`` a multiple of ``num_generations``),
which :func:`at2po_lib.trainer.resolve.build_training_args` guarantees.

Reproducibility: every rollout step seeds its sampler from ``(args.seed, step, process)``, so a
run resumed from a checkpoint samples exactly what the uninterrupted run sampled.

Private methods it overrides (``trl==1.16.0``, ``transformers`` 5.17-5.24), each with the call
order it relies on tested in ``tests/trainer/test_trl_overrides.py``:

- ``GRPOTrainer._generate_and_score_completions``: calls ``rollout_func`` (:meth:`_rollout`)
  from inside, once per generation batch;
- ``GRPOTrainer._get_per_token_logps_and_entropies``: during that scoring, one no-grad pass per
  planned log-prob set, old (the policy) before reference (the reference model), as
  :meth:`_parent_scoring_passes` queues them;
- ``GRPOTrainer._compute_loss``: once per micro-batch, after the scoring;
- ``Trainer._run_epoch`` (stops a resumed run at ``max_steps``) and ``Trainer._save_checkpoint``
  (reports a full disk with its folder): the first wraps the step, the second follows its
  last update.
"""

from __future__ import annotations

import contextlib
import textwrap
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation

from ..method.credit import sibling_spread
from ..method.tree import as_tree_arrays
from ..method.loss import (
    ATPO_LOSS,
    REFERENCE_CLIP,
    LossBatch,
    LossOptions,
    loss_diagnostics,
    policy_loss,
)
from ..policy.shared_prefix import (
    PACKED_ATTENTION,
    label_log_probs,
    scaled_logits,
    shared_prefix_logps,
)
from ..rollout.backends import torch_threads
from ..rollout.vllm_backend import colocated_engine
from ..rollout.vllm_cpu import install_shims as install_vllm_shims
from ..util.storage import reported_writes
from .at2po_config import AT2POConfig
from .batch import RolloutBatch, group_has_signal, pad_rows, select_groups, token_advantages

_SCALED_HEAD_KEYS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)
"""Config keys of models whose logits TRL's fused head rescales (the policy-position path
reproduces only a plain ``logits / T`` head)."""


# TRL 1.16 reads transformers 5's deprecated `is_gradient_checkpointing` on every rollout.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

_GLOBAL_RNG_ROUND = 1_000
"""Seed-sequence slot of the global torch RNG (rounds below it seed the samplers)."""


def credit_spread_metrics(trees) -> dict[str, float]:
    """How far entropy-softmax credit weights sit from the plain child mean in this batch, under
    both entropy estimates (:func:`at2po_lib.method.credit.sibling_spread`): the mean over
    sibling sets of mean |w - 1/n| and of the siblings' entropy range; empty for chains (no
    sibling sets)."""
    out: dict[str, float] = {}
    for estimate, name in (("nll", "entropy_nll"), ("exact", "entropy_exact")):
        spreads = [
            sibling_spread(t.parent, t.node_arrays[name]) for t in trees if name in t.node_arrays
        ]
        dev = np.concatenate([d for d, _, _ in spreads]) if spreads else np.zeros(0)
        if dev.size and np.isfinite(dev).all():
            out[f"credit/weight_dev_{estimate}"] = float(dev.mean())
            out[f"credit/sibling_range_{estimate}"] = float(
                np.concatenate([r for _, r, _ in spreads]).mean()
            )
    return out


def leaf_reward(
    prompts: list, completions: list, reward: list[float], **kwargs: Any
) -> list[float]:
    """TRL reward function: the reward the rollout already gave each leaf (EM, or the authors'
    −1/0/1 format reward). Logged by TRL as ``rewards/leaf_reward/mean``."""
    return [float(r) for r in reward]


LOSS_THREADS = 1
"""CPU threads of the policy loss, forward and backward, and of its diagnostics. The loss is a
few dozen small vector operations over the batch's model tokens; on two threads each waits for
the other core, and on a busy machine it collapsed (bench: 176 x 2,048 tokens at load 6-7,
one thread 175-203 ms, two 460-766 ms best and up to 2.3 s median; tiny's 16 x 768, 8 against
21 ms best, 13-20 against 172-241 ms median; benchmarks/README.md). The model's forward and
backward keep ``update_num_threads``."""


class _OneThreadLoss(torch.autograd.Function):
    """A scalar loss of ``logp`` computed, and differentiated, on :data:`LOSS_THREADS` CPU
    threads: forward builds the loss's own graph from a detached copy of ``logp``; backward
    runs that graph alone and hands the gradient to the model's graph."""

    @staticmethod
    def forward(ctx, logp, loss_of):
        with torch.enable_grad(), torch_threads(LOSS_THREADS):
            leaf = logp.detach().requires_grad_(True)
            loss = loss_of(leaf)
        ctx.leaf, ctx.loss = leaf, loss
        return loss.detach()

    @staticmethod
    def backward(ctx, grad):
        with torch_threads(LOSS_THREADS):
            (grad_logp,) = torch.autograd.grad(ctx.loss, ctx.leaf, grad)
        return grad_logp, None


def one_thread_loss(loss_of, logp: torch.Tensor) -> torch.Tensor:
    """``loss_of(logp)``, forward and backward on :data:`LOSS_THREADS` threads on a CPU (as is
    elsewhere: threads mean nothing to a GPU kernel). The value and the gradient are
    ``loss_of``'s own."""
    if logp.device.type != "cpu" or not logp.requires_grad:
        return loss_of(logp)
    return _OneThreadLoss.apply(logp, loss_of)


def loss_and_diagnostics(
    batch: LossBatch, options: LossOptions = ATPO_LOSS
) -> tuple[torch.Tensor, dict]:
    """What ``_compute_loss`` computes of a micro-batch: :func:`~at2po_lib.method.loss.
    policy_loss` (differentiable in ``batch.logp``) and, beside it, its
    :func:`~at2po_lib.method.loss.loss_diagnostics`, both on :data:`LOSS_THREADS` CPU
    threads; ``batch`` and ``options`` are ``policy_loss``'s. Where the clip range is not
    :data:`~at2po_lib.method.loss.REFERENCE_CLIP`, the token- and turn-level clipped
    shares at that range too (``clip_frac_token_eps0.2``, ``clip_frac_turn_eps0.2``)."""
    loss = one_thread_loss(lambda x: policy_loss(replace(batch, logp=x), options), batch.logp)
    with torch_threads(LOSS_THREADS if batch.logp.device.type == "cpu" else 0):
        stats = loss_diagnostics(batch, options)
        if (options.eps_low, options.eps_high) != (REFERENCE_CLIP, REFERENCE_CLIP):
            # The clipped shares had the range been GRPO's, under their own names.
            at_reference = loss_diagnostics(
                batch, replace(options, eps_low=REFERENCE_CLIP, eps_high=REFERENCE_CLIP, beta=0.0)
            )
            stats.update(
                {
                    f"clip_frac_{level}_eps{REFERENCE_CLIP:g}": at_reference[f"clip_frac_{level}"]
                    for level in ("token", "turn")
                }
            )
    return loss, stats


def policy_position_logps(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    temperature: float,
    chunk_rows: int = 0,
    compute_entropy: bool = False,
    head_fp32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the completion tokens at ``positions`` only.

    ``input_ids``/``attention_mask`` (B, P + T): TRL's layout (left-padded prompts of width P,
    right-padded completions of width T); ``positions`` (B, T): 1 where a completion token is
    scored. Rows are sorted by the column of their last scored token and run through the
    backbone in chunks of ``chunk_rows`` (0 = all rows at once), each trimmed to its widest row
    (right padding never changes a real token's state); rows with nothing to score are skipped.
    The state that predicts completion token j sits at column P + j − 1; only those states go
    through the LM head, logits / ``temperature``. Returns log-probs (B, T) with the gradient to
    the model and entropies (B, T) without it (or None), both 0 where ``positions`` is 0.
    """
    b, t = positions.shape
    prompt_width = input_ids.size(1) - t
    scored = positions.bool()  # (B, T)
    columns = torch.arange(1, t + 1, device=scored.device)  # (T,)
    need = (scored * columns).amax(dim=1) if t else scored.new_zeros(b, dtype=torch.long)  # (B,)
    rows = torch.nonzero(need > 0).squeeze(1)  # (R,) rows with a scored token
    if rows.numel() == 0:  # keep the graph connected: one row, nothing scored, zero gradient
        rows = torch.zeros(1, dtype=torch.long, device=scored.device)
    rows = rows[torch.argsort(need[rows], descending=True, stable=True)]  # (R,) widest first
    backbone, head = model.base_model, model.get_output_embeddings()
    flat_index, logp_parts, entropy_parts = [], [], []
    for chunk in rows.split(chunk_rows or rows.numel()):
        width = int(need[chunk[0]])  # this chunk's widest row
        ids = input_ids[chunk, : prompt_width + width]  # (c, P + w)
        hidden = backbone(
            input_ids=ids,
            attention_mask=attention_mask[chunk, : prompt_width + width],
            use_cache=False,
        ).last_hidden_state  # (c, P + w, H)
        r, j = torch.nonzero(scored[chunk, :width], as_tuple=True)  # (n,), (n,)
        states = hidden[r, prompt_width + j - 1]  # (n, H)
        logits = scaled_logits(head, states, temperature, head_fp32)  # (n, V)
        labels = ids[r, prompt_width + j]  # (n,)
        every_state = torch.arange(labels.numel(), device=labels.device)  # (n,) one each
        values, entropy = label_log_probs(logits, every_state, labels, compute_entropy)
        logp_parts.append(values)  # (n,)
        if entropy is not None:
            entropy_parts.append(entropy)  # (n,)
        flat_index.append(chunk[r] * t + j)  # (n,) positions in the flattened (B, T)
    index = torch.cat(flat_index)  # (N,)
    values = torch.cat(logp_parts)  # (N,)
    logps = values.new_zeros(b * t).index_put((index,), values).view(b, t)  # (B, T)
    entropies = None
    if compute_entropy:
        entropies = (
            values.new_zeros(b * t).index_put((index,), torch.cat(entropy_parts)).view(b, t)
        )  # (B, T)
    return logps, entropies


class AT2POTrainer(GRPOTrainer):
    """Trainer for AT2PO and the baselines of its Table 1 (GRPO, DAPO, GSPO, Tree-GRPO, AEPO).

    Overrides ``_generate_and_score_completions`` (per-token advantages and turn ids after the
    parent's scoring) and ``_compute_loss`` (``at2po_lib.method.loss.policy_loss`` and its
    ``loss_diagnostics``); the rollout is TRL's ``rollout_func`` hook bound to
    :meth:`_rollout`. ``_get_per_token_logps_and_entropies`` is wrapped to skip padding
    (``loss_chunk_rows``) and to let the parent's scoring skip the no-grad passes this trainer
    serves otherwise (old log-probs from the rollout, reference log-probs at the policy's
    positions; module docstring). Everything else is inherited.

    Args:
        model: a model folder / hub name (loaded by TRL with ``args.model_init_kwargs``) or a
            ``PreTrainedModel``.
        args: :class:`AT2POConfig` (a method preset applied, see ``methods``).
        train_dataset: rows with ``prompt`` (chat messages), ``question``, ``golden_answers``
            and ``id`` (``at2po_lib.protocol.qa_data.to_trainer_rows``).
        processing_class: the policy's tokenizer.
        agent: the environment the rollout runs in: ``agent.sample(policy, rows, args, seed)``
            returns a :class:`RolloutBatch` (:class:`at2po_lib.trainer.search_agent.SearchAgent`).
        callbacks, peft_config: as in ``GRPOTrainer``.
    """

    _tag_names = ["trl", "at2po"]
    _name = "AT2PO"
    _paper = {
        "title": "AT2PO: Agentic Turn-based Policy Optimization via Tree Search",
        "id": "2601.04767",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{at2po2026,
                title   = {{AT2PO: Agentic Turn-based Policy Optimization via Tree Search}},
                year    = 2026,
                eprint  = {arXiv:2601.04767},
            }"""),
    }

    def __init__(
        self,
        model,
        args: AT2POConfig,
        train_dataset,
        processing_class,
        agent,
        callbacks=None,
        peft_config=None,
    ):
        if not isinstance(args, AT2POConfig):
            raise TypeError(f"args must be an AT2POConfig, got {type(args).__name__}")
        self.agent = agent
        self._rollout_inputs: list[dict] | None = None
        self._rollout_extras: dict[str, Any] | None = None
        self.last_rollout: RolloutBatch | None = None
        self._parent_logp_passes: list[tuple[str, bool]] | None = None
        if args.use_vllm:
            # before TRL starts the colocated engine (whose weights it syncs); none on CUDA
            install_vllm_shims(synced_weights=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*rollout_func.*experimental")
            super().__init__(
                model=model,
                reward_funcs=[leaf_reward],
                args=args,
                train_dataset=train_dataset,
                processing_class=processing_class,
                callbacks=callbacks,
                peft_config=peft_config,
                rollout_func=self._rollout,
            )
        per_process_rows = args.per_device_train_batch_size * args.steps_per_generation
        if per_process_rows % self.num_generations:
            raise ValueError(
                f"each process must hold whole prompt groups: per_device_train_batch_size "
                f"({args.per_device_train_batch_size}) * steps_per_generation "
                f"({args.steps_per_generation}) = {per_process_rows} rows is not a multiple "
                f"of num_generations ({self.num_generations} leaves per prompt)"
            )
        self.logp_positions = self._resolve_logp_positions()
        self.old_logps_source = self._resolve_old_logps()
        self.loss_options = args.loss_options()
        """The method's loss options, built once (TRL's clip range and KL weight included)."""

    def _save_checkpoint(self, model, trial):  # noqa: ANN001, ANN202 - transformers' hook
        """transformers' checkpoint save; a full disk is reported as ENOSPC with the folder
        (torch alone said ``basic_ios::clear: iostream error``), see :mod:`at2po_lib.util.storage`."""
        folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
        with reported_writes(folder):
            return super()._save_checkpoint(model, trial)

    def _run_epoch(self, *args: Any, **kwargs: Any) -> Any:  # transformers' hook
        """transformers' epoch, skipped once ``global_step`` has reached ``max_steps``.

        transformers' loop checks the step limit only after an update, so ``train()`` resumed
        from the checkpoint of the last step (a run killed after it) would run update
        ``max_steps + 1`` and end with another model than the uninterrupted run's.
        ``at2po_lib.study.run`` loads such a checkpoint without ``train()`` where it can; this
        guard keeps the limit on the path that must go through ``train()`` (DeepSpeed, whose
        engine alone reads its checkpoint) and on any other caller of ``train()``."""
        if 0 < self.state.max_steps <= self.state.global_step:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    def _policy_positions_unsupported(self) -> str | None:
        """Why the policy-position log-probs cannot run here (None: they can)."""
        model = self.accelerator.unwrap_model(self.model)
        if self.accelerator.num_processes > 1 or model is not self.model:
            return "the model is wrapped for distributed training (its forward must be called)"
        if hasattr(model, "peft_config"):
            return "PEFT models keep TRL's path (adapter switching for the reference model)"
        text_config = model.config.get_text_config()
        scaled = [k for k in _SCALED_HEAD_KEYS if getattr(text_config, k, None) is not None]
        if scaled:
            return f"the model's config rescales its logits ({', '.join(scaled)})"
        if model.get_output_embeddings() is None or model.base_model is model:
            return "the model exposes no separate backbone and LM head"
        return None

    def _resolve_logp_positions(self) -> str:
        """``args.loss_logp_positions`` with ``auto`` resolved (module docstring)."""
        choice = self.args.loss_logp_positions
        reason = self._policy_positions_unsupported()
        if choice == "policy" and reason:
            raise ValueError(
                f"loss_logp_positions='policy' is not supported here: {reason}; use 'all' or 'auto'"
            )
        if choice == "auto":
            # measured on CPU (benchmarks/bench_train_step.py); on an accelerator not measured
            # here: TRL's Triton head already scores only labelled positions.
            return "policy" if self.accelerator.device.type == "cpu" and not reason else "all"
        return choice

    def _resolve_old_logps(self) -> str:
        """``args.loss_old_logps`` with ``auto`` resolved: the rollout's record with the HF
        backend, TRL's recomputation with vLLM (module docstring)."""
        choice = self.args.loss_old_logps
        if choice == "rollout" and self.use_vllm:
            raise ValueError(
                "loss_old_logps='rollout' needs the HF rollout backend: vLLM's "
                "log-probs come from another engine; use 'recompute' or 'auto'"
            )
        if choice == "auto":
            return "recompute" if self.use_vllm else "rollout"
        return choice

    def training_step(self, model, inputs, num_items_in_batch):
        """TRL's step (rollout when due, scoring, loss, backward) with ``update_num_threads``
        torch threads; the rollout inside sets its own (``rollout.num_threads``)."""
        with torch_threads(self.args.update_num_threads):
            return super().training_step(model, inputs, num_items_in_batch)

    # ------------------------------------------------------------------------- rollout
    @property
    def updates_per_step(self) -> int:
        """Optimizer updates per rollout step (one generation batch)."""
        return max(self.args.steps_per_generation // self.args.gradient_accumulation_steps, 1)

    @property
    def rollout_step(self) -> int:
        return self.state.global_step // self.updates_per_step

    def rollout_seed(self, step: int, round_: int = 0) -> int:
        """Sampler seed of a rollout step: a pure function of (seed, step, round, process)."""
        mix = np.random.SeedSequence([self.args.seed, step, round_, self.accelerator.process_index])
        return int(mix.generate_state(1)[0])

    @contextlib.contextmanager
    def policy_for_generation(self, sync: bool = False) -> Iterator[Any]:
        """The model the agent samples from: vLLM's colocated engine (weights synced by TRL
        before ``rollout_func`` runs; ``sync=True`` syncs them here, for validation after an
        update), awake and TP-gathered as TRL's own generation drives it
        (:func:`~at2po_lib.rollout.vllm_backend.colocated_engine`), or the unwrapped training
        model (ZeRO-3 weights gathered by TRL's ``unwrap_model_for_generation``), in eval
        mode, without gradients."""
        if self.use_vllm:
            if self.vllm_mode != "colocate":
                raise NotImplementedError(
                    "AT2POTrainer drives vLLM turn by turn: use vllm_mode='colocate'"
                )
            if sync and self.state.global_step != self._last_loaded_step:
                self.vllm_generation.sync_weights()
                self._last_loaded_step = self.state.global_step
            # TRL's sleep-mode wake/sleep and TP gathering around the agent's turn-by-turn calls
            with colocated_engine(self.vllm_generation) as engine:
                yield engine
            return
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            torch.no_grad(),
        ):
            was_training = unwrapped.training
            unwrapped.eval()
            try:
                yield unwrapped
            finally:
                unwrapped.train(was_training)

    def _prompt_groups(self, inputs: list[dict]) -> list[dict]:
        """One input row per prompt group (TRL repeats each prompt ``num_generations`` times
        in a row); checks that the repeats agree."""
        g = self.num_generations
        if len(inputs) % g:
            raise ValueError(f"{len(inputs)} rollout inputs are not whole groups of {g}")
        heads = inputs[::g]
        for i, head in enumerate(heads):
            ids = {str(row.get("id")) for row in inputs[i * g : (i + 1) * g]}
            if len(ids) != 1:
                raise ValueError(
                    f"prompt group {i} mixes rows {sorted(ids)}: the sampler must "
                    "repeat each prompt num_generations times consecutively"
                )
        return heads

    def _rollout(self, prompts: list, trainer: GRPOTrainer) -> dict[str, Any]:
        """TRL ``rollout_func``: grow the trees of this process's prompt groups and return one
        row per leaf (TRL's keys, plus ``env_mask`` and the ``reward`` column)."""
        if self._rollout_inputs is None or len(self._rollout_inputs) != len(prompts):
            raise RuntimeError(
                "AT2POTrainer._rollout called outside _generate_and_score_completions"
            )
        groups = self._prompt_groups(self._rollout_inputs)
        # which prompts this process rolled out (RankRecord writes them per process)
        self.last_rollout_ids = [str(head.get("id", head.get("question"))) for head in groups]
        step = self.rollout_step
        start = time.perf_counter()
        # Decided before entering: policy_for_generation() puts this same module in eval mode.
        resample = self.args.dynamic_sampling and self.model.training
        with self.policy_for_generation() as policy:
            batch = self.agent.sample(policy, groups, self.args, self.rollout_seed(step))
            rounds = 1
            if resample:
                batch, rounds = self._dynamic_sampling(policy, batch, groups, step)
        expected = len(groups) * self.num_generations
        if len(batch) != expected:
            raise RuntimeError(
                f"the rollout returned {len(batch)} rows for {len(groups)} prompts; "
                f"expected {expected} ({self.num_generations} leaves per prompt)"
            )
        advantages = token_advantages(
            batch,
            self.args.credit_advantage,
            self.args.credit_value,
            self.args.credit_normalize_leaves,
        )
        self.last_rollout = batch
        metrics = {
            "rollout/seconds": time.perf_counter() - start,
            "rollout/turns_mean": float(np.mean(batch.num_turns)),
            "rollout/tool_calls_mean": float(np.mean(batch.num_tool_calls)),
            "rollout/leaves_per_prompt": len(batch) / max(len(groups), 1),
            "rollout/tree_nodes_mean": float(
                np.mean([len(as_tree_arrays(t).parent) for t in batch.trees])
            ),
            "rollout/dynamic_sampling_rounds": float(rounds),
            **credit_spread_metrics(batch.trees),
        }
        if batch.finish_reason:
            # Share of leaves that ended with an answer. TRL's completions/clipped_ratio counts
            # completions that do not end in EOS, which misses an answer written without EOS
            # before the budget ran out and counts an empty query's EOS: the agent's own account.
            metrics["rollout/answered"] = float(
                np.mean([r == "answer" for r in batch.finish_reason])
            )
        self._rollout_extras = {
            "advantages": advantages,
            "turn_ids": batch.turn_node,
            "metrics": metrics,
        }
        return {
            "prompt_ids": batch.prompt_ids,
            "completion_ids": batch.completion_ids,
            "logprobs": batch.old_logps,
            "env_mask": batch.sampled_mask,
            "reward": list(batch.reward),
        }

    def _dynamic_sampling(
        self, policy, batch: RolloutBatch, groups: list[dict], step: int
    ) -> tuple[RolloutBatch, int]:
        """DAPO's dynamic sampling: a prompt whose leaves all share one reward carries no
        signal; replace it by a prompt drawn from the training set whose leaves differ.

        Up to ``dynamic_sampling_rounds`` rollout rounds (the first included, verl's
        ``max_num_gen_batches``); each extra round samples as many fresh prompts as there are
        slots left (prompts drawn with a generator seeded by (seed, step, round)). Slots still
        empty afterwards keep their degenerate groups (advantage 0). Returns the batch and
        the number of rounds used.
        """
        keep = [g for g in range(len(groups)) if group_has_signal(batch, g)]
        parts = [(batch, keep)]
        missing = len(groups) - len(keep)
        rounds = 1
        while missing and rounds < self.args.dynamic_sampling_rounds:
            rng = np.random.default_rng(self.rollout_seed(step, rounds))
            picks = rng.choice(
                len(self.train_dataset), size=missing, replace=missing > len(self.train_dataset)
            )
            fresh = [self.train_dataset[int(i)] for i in picks]
            extra = self.agent.sample(policy, fresh, self.args, self.rollout_seed(step, rounds))
            good = [g for g in range(len(fresh)) if group_has_signal(extra, g)]
            parts.append((extra, good))
            missing -= len(good)
            rounds += 1
        chosen = [(b, g) for b, gs in parts for g in gs][: len(groups)]
        degenerate = [g for g in range(len(groups)) if g not in keep]
        chosen += [(batch, g) for g in degenerate[: len(groups) - len(chosen)]]
        self._metrics["train"]["rollout/dynamic_sampling_kept"].append(len(keep) / len(groups))
        return select_groups(chosen), rounds

    # ----------------------------------------------------------------- credit (scoring)
    def _parent_scoring_passes(self) -> list[tuple[str, bool]]:
        """The no-grad log-prob passes TRL 1.16's scoring will make, in its order, each with
        whether this trainer serves it instead (then the parent gets a placeholder)."""
        passes = []
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self.args.gradient_accumulation_steps % generate_every != 0:  # TRL's own condition
            passes.append(("old", self.old_logps_source == "rollout"))
        if self.beta != 0.0:
            passes.append(("ref", self.logp_positions == "policy" and self.ref_model is not None))
        return passes

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict[str, Any]:
        """Parent's scoring, then old/reference log-probs where this trainer serves them,
        per-token advantages (B, T) and turn ids (B, T)."""
        if self.model.training:
            # The global RNG (TRL shuffles the rows with it) restarts from a function of the
            # step, so a resumed run draws what the uninterrupted run drew.
            torch.manual_seed(self.rollout_seed(self.rollout_step, _GLOBAL_RNG_ROUND))
        self._rollout_inputs = inputs
        planned = self._parent_scoring_passes()
        self._parent_logp_passes = list(planned)
        try:
            output = super()._generate_and_score_completions(inputs)
            if self._parent_logp_passes:
                raise RuntimeError(
                    f"TRL's scoring skipped the log-prob passes "
                    f"{self._parent_logp_passes}: AT2POTrainer expects trl 1.16"
                )
        finally:
            self._rollout_inputs = None
            self._parent_logp_passes = None
        extras, self._rollout_extras = self._rollout_extras, None
        width = output["completion_ids"].shape[1]
        device = output["completion_ids"].device
        mask = output["completion_mask"] * output["tool_mask"]  # (B, T) the policy's tokens
        served = {name for name, skipped in planned if skipped}
        if "old" in served:
            # The rollout's own record of log π_old at the sampling temperature (exact here).
            recorded = output["sampling_per_token_logps"].nan_to_num(0.0)  # (B, T)
            output["old_per_token_logps"] = recorded * mask  # (B, T)
        if "ref" in served:
            prompt_completion = torch.cat([output["prompt_ids"], output["completion_ids"]], 1)
            attention = torch.cat([output["prompt_mask"], output["completion_mask"]], 1)
            with torch.no_grad(), self.accelerator.autocast():
                output["ref_per_token_logps"], _ = self._policy_logps(
                    self.ref_model, prompt_completion, attention, mask, compute_entropy=False
                )  # (B, T)
        output["advantages"] = pad_rows(list(extras["advantages"]), 0.0, width).to(device)  # (B, T)
        turn_ids = [torch.tensor(t, dtype=torch.long) for t in extras["turn_ids"]]
        output["turn_ids"] = pad_rows(turn_ids, -1, width).to(device)  # (B, T)
        mode = "train" if self.model.training else "eval"
        adv_abs = (output["advantages"].abs() * mask).sum() / mask.sum().clamp(min=1)
        for key, value in {**extras["metrics"], "advantages/abs_mean": adv_abs.item()}.items():
            self._metrics[mode][key].append(self._mean_over_processes(value))
        return output

    # ------------------------------------------------------------------------- loss
    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        """The parent's log-probs, run on length-sorted chunks trimmed to their own width.

        Tree leaves differ a lot in length (a one-turn answer vs four searches with their
        observations); TRL pads every row to the longest, and attention costs grow with the
        square of that width. With ``args.loss_chunk_rows > 0`` rows are sorted by completion
        length, cut into chunks of that many rows, and each chunk is passed to the parent
        without its all-padding right columns; outputs are padded back to (B, T) with zeros
        (masked positions) and returned in the original row order. Values are unchanged
        (padding never reaches a real token); text-only inputs only.

        During the parent's scoring, a no-grad pass this trainer serves itself (old log-probs
        from the rollout, reference log-probs at the policy's positions) returns a zero
        placeholder (B, T), replaced right after the parent returns.
        """
        if self._parent_logp_passes:
            _, served_here = self._parent_logp_passes.pop(0)
            if served_here:
                return (
                    input_ids.new_zeros((input_ids.size(0), logits_to_keep), dtype=torch.float32),
                    None,
                    None,
                )
        chunk_rows = self.args.loss_chunk_rows
        if not chunk_rows or compute_aux_loss or any(v is not None for v in multimodal.values()):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        prompt_width = input_ids.size(1) - logits_to_keep
        lengths = attention_mask[:, prompt_width:].sum(dim=1)  # (B,) completions are right-padded
        order = torch.argsort(lengths, descending=True)
        logps, entropies = [], []
        for chunk in order.split(chunk_rows):
            width = max(int(lengths[chunk].max()), 1)
            chunk_logps, chunk_entropies, _ = super()._get_per_token_logps_and_entropies(
                model,
                input_ids[chunk, : prompt_width + width],
                attention_mask[chunk, : prompt_width + width],
                width,
                compute_entropy=compute_entropy,
            )
            logps.append(torch.nn.functional.pad(chunk_logps, (0, logits_to_keep - width)))
            if compute_entropy:
                entropies.append(
                    torch.nn.functional.pad(chunk_entropies, (0, logits_to_keep - width))
                )
        restore = torch.argsort(order)
        logps = torch.cat(logps)[restore]  # (B, T)
        return logps, (torch.cat(entropies)[restore] if compute_entropy else None), None

    def _policy_logps(
        self,
        model,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
        compute_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (B, T) (and entropies) at the policy's ``positions`` only, at the sampling
        temperature: shared prefixes computed once (``args.loss_shared_prefix``), else per row
        in chunks of ``args.loss_chunk_rows``."""
        attention = getattr(model.config, "_attn_implementation", None)
        if self.args.loss_shared_prefix and attention in PACKED_ATTENTION:
            return shared_prefix_logps(
                model,
                input_ids,
                attention_mask,
                positions,
                self.temperature,
                compute_entropy=compute_entropy,
                head_fp32=self.args.cast_lm_head_to_fp32,
            )
        return policy_position_logps(
            model,
            input_ids,
            attention_mask,
            positions,
            self.temperature,
            self.args.loss_chunk_rows,
            compute_entropy=compute_entropy,
            head_fp32=self.args.cast_lm_head_to_fp32,
        )

    def _compute_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        """``policy_loss`` on this micro-batch, scaled for gradient accumulation like TRL."""
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]  # (B, P)
        completion_ids, completion_mask = (
            inputs["completion_ids"],
            inputs["completion_mask"],
        )  # (B, T)
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P + T)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)  # (B, P + T)
        # Loss mask: the model's own tokens (observations have tool_mask 0, padding mask 0).
        mask = completion_mask * inputs["tool_mask"]  # (B, T)
        if self.logp_positions == "policy":
            with self.accelerator.autocast():
                per_token_logps, entropies = self._policy_logps(
                    model, input_ids, attention_mask, mask, compute_entropy=True
                )  # (B, T), (B, T)
        else:
            per_token_logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
            )  # (B, T), (B, T)
        # TRL skips the old log-probs when the batch is used for exactly one update: ratio = 1.
        old_per_token_logps = inputs.get("old_per_token_logps")  # (B, T) or None
        if old_per_token_logps is None:
            old_per_token_logps = per_token_logps.detach()  # (B, T)
        args = self.args
        batch = LossBatch(
            per_token_logps,
            old_per_token_logps,
            inputs["advantages"],
            mask,
            turn_ids=inputs["turn_ids"],
            ref_logp=inputs.get("ref_per_token_logps"),
            token_entropy=entropies,
        )
        loss, stats = loss_and_diagnostics(batch, self.loss_options)
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        if args.loss_aggregation == "token-mean":
            # Token mean over the whole accumulated batch (TRL's normaliser of its "dapo").
            normalizer = (
                inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            )
            if mode == "train":
                normalizer = normalizer * accumulation / self.args.steps_per_generation
            loss = loss * mask.sum() / normalizer
        else:
            loss = loss / accumulation
        self._log_loss_metrics(mode, stats, per_token_logps, entropies, mask, inputs)
        return loss

    def _log_loss_metrics(
        self, mode: str, stats: dict[str, float], per_token_logps, entropies, mask, inputs
    ) -> None:
        m = mask.float()  # (B, T)
        entropy = ((entropies.detach() * m).sum() / m.sum().clamp(min=1)).item()
        # policy_loss names its statistics after what they measure; they are logged once,
        # under TRL's names, and recorded as logged (callbacks.MetricsRecorder).
        values = {
            "entropy": entropy,
            "clip_ratio/low_mean": stats["clip_frac_low"],
            "clip_ratio/high_mean": stats["clip_frac_high"],
            "clip_ratio/region_mean": stats["clip_frac"],
            "approx_kl": stats["approx_kl"],
            "ratio_mean": stats["ratio_mean"],
            "turn_kl_entropy": stats["turn_kl_entropy"],
            "single_turn_rows": float(stats["single_turn_rows"]),
        }
        if "ref_kl" in stats:
            values["kl"] = stats["ref_kl"]
        # The same update's clipped share at both ratio levels, at this method's clip range and
        # at GRPO's 0.2 (the reading depends on the range; the paper says a turn-level
        # ratio clips far fewer tokens than a token-level one), from the diagnostics of the
        # loss's own inputs: logged when the old log-probs are real (without them every ratio
        # is 1).
        if inputs.get("old_per_token_logps") is not None:
            for suffix in ("", f"_eps{REFERENCE_CLIP:g}"):
                for level in ("token", "turn"):
                    if f"clip_frac_{level}{suffix}" in stats:
                        values[f"clip_ratio/{level}_level{suffix}"] = stats[
                            f"clip_frac_{level}{suffix}"
                        ]
        sampling = inputs.get("sampling_per_token_logps")
        first_update = self._step % (self.args.steps_per_generation * self.num_iterations) == 0
        if sampling is not None and mode == "train" and first_update:
            # |trainer log-prob − sampler log-prob|: ~0 when both use the same temperature
            # (measured on the first micro-batch of a rollout, before the policy moved).
            diff = (per_token_logps.detach() - sampling).abs().nan_to_num(0.0)  # (B, T)
            values["sampling/logp_abs_diff"] = ((diff * m).sum() / m.sum().clamp(min=1)).item()
        for key, value in values.items():
            self._metrics[mode][key].append(self._mean_over_processes(value))

    def _mean_over_processes(self, value: float) -> float:
        if self.accelerator.num_processes == 1:
            return float(value)
        tensor = torch.tensor([float(value)], device=self.accelerator.device)
        return self.accelerator.gather(tensor).mean().item()
