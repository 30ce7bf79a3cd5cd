r"""``AT2POConfig``: TRL's ``GRPOConfig`` plus the trainer's knobs of AT2PO's credit and loss.

Every field TRL already has keeps TRL's name and meaning (``epsilon``, ``epsilon_high``, ``beta``,
``num_generations``, ``temperature``, ``use_vllm``, ...). New fields are prefixed by the stage
they act on (docs/method.md §6–§8):

- ``credit_*``: how leaf rewards become per-token advantages (:mod:`at2po_lib.method.credit`);
- ``loss_*``: the ratio level, aggregation and AEPO's options of
  :func:`at2po_lib.method.loss.policy_loss`, which the trainer calls with
  :meth:`AT2POConfig.loss_options` (with TRL's ``epsilon``, ``epsilon_high`` and ``beta``);
- ``dynamic_sampling*``: DAPO's refill of prompts whose leaves all share one reward.

The rollout is not configured here: its shape (expansion, M, L, K, alpha, chains, AEPO's
budget) lives in one place, the profile's ``rollout`` section
(:class:`at2po_lib.config.profile.RolloutConfig`), which the sampler reads as is. The run derives TRL's
``num_generations`` from it once (:func:`at2po_lib.trainer.resolve.resolve_run`:
``RolloutConfig.leaves_per_prompt()``, the number of *leaves* (training rows) per prompt, which
is what TRL's grouping needs).

Aggregation is named as verl names it (``loss_aggregation``: ``token-mean``,
``seq-mean-token-mean``); :data:`TRL_LOSS_TYPES` is the one map to TRL's ``loss_type``, which is
derived from it (``token-mean`` → ``dapo``: the token mean over the whole accumulated batch, TRL's
normaliser; ``seq-mean-token-mean`` → ``grpo``: per-sequence token means averaged over the
micro-batch). The authors' GSPO and ATPO losses aggregate seq-mean-token-mean (the default here);
their GRPO/AEPO configs and DAPO token-mean (see :mod:`at2po_lib.method.presets`).

Paper vs TRL defaults changed here: clip 3e-3/4e-3 (ATPO), ``vllm_importance_sampling_correction``
off (the authors' verl recomputes the old log-probs with the trainer and applies no vLLM
correction; ``policy_loss`` has no per-token IS weight), ``activation_checkpointing`` and
``bf16`` off (TRL turns both on; the toy profile runs in float32 on a CPU, paper profiles
switch them on).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from ..util.hf_compat import checkpointing_field
from ..method.credit import ADVANTAGE_MODES, VALUE_MODES
from ..method.outcome import OUTCOME_ADVANTAGES
from ..method.loss import EPS_HIGH, EPS_LOW, LEVELS, TURN_RATIOS, LossOptions

CREDIT_ADVANTAGES = (*ADVANTAGE_MODES, *OUTCOME_ADVANTAGES)
LOGP_POSITIONS = ("auto", "policy", "all")
OLD_LOGPS = ("auto", "rollout", "recompute")
TRL_LOSS_TYPES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo"}
"""verl's aggregation name (``loss_aggregation``) → TRL's ``loss_type``: the one place they meet.
``policy_loss`` aggregates by the verl name; the trainer rescales ``token-mean`` to the window."""


@dataclass
class AT2POConfig(GRPOConfig):
    r"""Configuration of :class:`~at2po_lib.trainer.trainer.AT2POTrainer` (arXiv 2601.04767).

    Inherits every ``GRPOConfig`` field; adds the ``credit_*``, ``loss_*`` and
    ``dynamic_sampling*`` fields below and changes the defaults named in the module docstring.
    Named presets of these fields (one per method of Table 1–3) are in
    :mod:`at2po_lib.method.presets`.
    """

    # ---------------------------------------------------------------- dynamic sampling (§8)
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO: drop prompts whose leaves all share one reward and refill from new prompts."
        },
    )
    dynamic_sampling_rounds: int = field(
        default=3,
        metadata={
            "help": "DAPO: rollout rounds per step at most (the first included), verl's "
            "max_num_gen_batches; groups still degenerate after that are kept."
        },
    )

    # ------------------------------------------------------------------------- credit (§6)
    credit_advantage: str = field(
        default="node_value",
        metadata={
            "help": "node_value | diff_parent | diff_global | diff_localglobal (turn-wise credit), "
            "vanilla (GRPO over the prompt's leaves) or tree_grpo (Tree-GRPO's sum)."
        },
    )
    credit_value: str = field(
        default="entropy_softmax",
        metadata={
            "help": "Node value from children: entropy_softmax (code) | entropy_linear (paper) | "
            "child_mean | leaf_mean."
        },
    )
    credit_normalize_leaves: bool = field(
        default=True,
        metadata={
            "help": "Normalise leaf rewards within the tree before propagation (docs/method.md §6.1)."
        },
    )

    # --------------------------------------------------------------------------- loss (§7)
    loss_level: str = field(
        default="turn",
        metadata={
            "help": "Importance-ratio level: token (GRPO/DAPO/AEPO), sequence (GSPO), turn (ATPO)."
        },
    )
    loss_aggregation: str = field(
        default="seq-mean-token-mean",
        metadata={
            "help": "verl's loss_agg_mode: token-mean (over the whole update) or seq-mean-token-mean "
            "(mean over sequences of their token means); TRL's loss_type follows from it."
        },
    )
    loss_turn_ratio: str = field(
        default="geometric",
        metadata={
            "help": "Turn ratio: geometric (code, length-normalised) or product (paper text)."
        },
    )
    loss_entropy_balanced_clip: bool = field(
        default=False, metadata={"help": "AEPO: an upper-clipped token keeps a scaled gradient."}
    )
    loss_entropy_aware_adv: float = field(
        default=0.0,
        metadata={
            "help": "AEPO: gamma in A * (1 + gamma * z(H_t)); 0 turns it off (AEPO uses 0.2)."
        },
    )
    loss_chunk_rows: int = field(
        default=0,
        metadata={
            "help": "Compute log-probs in chunks of this many rows of similar length, each trimmed "
            "to its own longest completion (saves the padding's compute on CPU); 0 = TRL's "
            "single padded batch."
        },
    )
    loss_shared_prefix: bool = field(
        default=True,
        metadata={
            "help": "With loss_logp_positions='policy': pack the rows of a forward into token-trie "
            "segments, each prefix that rows share computed once (at2po_lib.policy.shared_prefix; "
            "the same log-probs and gradients to fp32 rounding); False: one forward per "
            "length-sorted chunk of loss_chunk_rows rows. How the sums are laid out, not what "
            "they compute: not among a run's settings."
        },
    )
    loss_logp_positions: str = field(
        default="auto",
        metadata={
            "help": "Positions whose log-probs are computed for the loss (and the reference model): "
            "policy (only the sampled tokens: backbone, gather, LM head), all (TRL's fused "
            "head over every completion position) or auto (policy on CPU, measured; all on "
            "an accelerator, not measured). See at2po_lib.trainer.trainer."
        },
    )
    update_num_threads: int = field(
        default=0,
        metadata={
            "help": "torch intra-op threads of the update stage (scoring, loss and backward; the "
            "rollout has rollout.num_threads); 0 = torch's default (one per core). "
            "Measured on the tiny step (benchmarks/bench_train_step.py --threads-study): one "
            "thread 4.3x faster at load ~5 on 2 cores; on a quiet machine one thread was "
            "1.35-1.43x slower."
        },
    )
    loss_old_logps: str = field(
        default="auto",
        metadata={
            "help": "Old log-probs: rollout (the sampler's record: exact with the HF backend), "
            "recompute (TRL's extra forward) or auto (rollout with HF, recompute with vLLM)."
        },
    )

    # ---------------------------------------------------------- TRL fields with new defaults
    epsilon: float = field(default=EPS_LOW, metadata={"help": f"Lower clip (ATPO: {EPS_LOW:g})."})
    epsilon_high: float | None = field(
        default=EPS_HIGH, metadata={"help": f"Upper clip (ATPO: {EPS_HIGH:g})."}
    )
    loss_type: str | None = field(
        default=None,
        metadata={
            "help": "TRL's name of the aggregation, derived from loss_aggregation (TRL_LOSS_TYPES); "
            "leave it unset."
        },
    )
    vllm_importance_sampling_correction: bool = field(
        default=False,
        metadata={
            "help": "Off: the authors recompute old log-probs with the trainer and apply no vLLM "
            "correction. Turning it on is refused (policy_loss takes no per-token weight)."
        },
    )
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Deprecated alias of activation_checkpointing (transformers 5)."},
    )
    activation_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Recompute activations in the backward pass (None = off; paper profiles: on)."
        },
    )
    bf16: bool | None = field(default=False, metadata={"help": "bfloat16 mixed precision."})
    logging_steps: float = field(default=1, metadata={"help": "Optimizer steps per log row."})

    def __post_init__(self) -> None:
        self._check_choices()
        self.loss_type = self._trl_loss_type()
        if checkpointing_field() == "gradient_checkpointing" and self.activation_checkpointing:
            # transformers < 5.18 (the GPU list's 5.17.0) reads only the older name
            self.gradient_checkpointing = True
        super().__post_init__()

    def loss_options(self) -> LossOptions:
        """The loss's options of this config: ``loss_*``, and TRL's clip range and KL weight as
        TRL's trainer reads them (``epsilon_high`` None: ``epsilon``)."""
        return LossOptions(
            level=self.loss_level,
            eps_low=self.epsilon,
            eps_high=self.epsilon_high if self.epsilon_high is not None else self.epsilon,
            agg=self.loss_aggregation,
            turn_ratio=self.loss_turn_ratio,
            beta=self.beta,
            entropy_balanced_clip=self.loss_entropy_balanced_clip,
            entropy_aware_adv=self.loss_entropy_aware_adv,
        )

    # ------------------------------------------------------------------------------------
    def _trl_loss_type(self) -> str:
        """TRL's ``loss_type`` of ``loss_aggregation``; a contradicting explicit one is an error."""
        derived = TRL_LOSS_TYPES[self.loss_aggregation]
        if self.loss_type is not None and self.loss_type != derived:
            raise ValueError(
                f"AT2POConfig.loss_type={self.loss_type!r} contradicts "
                f"loss_aggregation={self.loss_aggregation!r} (TRL's {derived!r}); "
                "set loss_aggregation only"
            )
        return derived

    def _check_choices(self) -> None:
        choices = {
            "credit_advantage": (self.credit_advantage, CREDIT_ADVANTAGES),
            "credit_value": (self.credit_value, VALUE_MODES),
            "loss_level": (self.loss_level, LEVELS),
            "loss_aggregation": (self.loss_aggregation, tuple(TRL_LOSS_TYPES)),
            "loss_turn_ratio": (self.loss_turn_ratio, TURN_RATIOS),
            "loss_logp_positions": (self.loss_logp_positions, LOGP_POSITIONS),
            "loss_old_logps": (self.loss_old_logps, OLD_LOGPS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ValueError(f"AT2POConfig.{name}={value!r}; expected one of {allowed}")
        if self.update_num_threads < 0:
            raise ValueError("update_num_threads must be >= 0 (0 = torch's default)")
        if self.loss_chunk_rows < 0:
            raise ValueError("loss_chunk_rows must be >= 0")
        if self.dynamic_sampling_rounds < 1:
            raise ValueError("dynamic_sampling_rounds must be >= 1")
        if self.mask_truncated_completions:
            raise ValueError(
                "mask_truncated_completions=True is not supported by AT2POTrainer: TRL calls a "
                "completion truncated when it does not end in EOS, and a search agent's leaf "
                "may end otherwise (the response budget, an observation cut to it, an empty "
                "query's EOS kept as an observation); the authors' code trains those rows. "
                "The agent records why each leaf ended (rollout/answered in metrics.jsonl, "
                "finish_reason in outcomes.csv). Set it to False."
            )
        if self.vllm_importance_sampling_correction:
            raise ValueError(
                "vllm_importance_sampling_correction=True is not supported by AT2POTrainer: "
                "policy_loss applies no per-token importance weight (the authors' verl setup "
                "applies none either). Set it to False."
            )
