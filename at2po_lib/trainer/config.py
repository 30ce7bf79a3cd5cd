r"""``AT2POConfig``: TRL's ``GRPOConfig`` plus the knobs of AT2PO's three stages.

Every field TRL already has keeps TRL's name and meaning (``epsilon``, ``epsilon_high``, ``beta``,
``num_generations``, ``loss_type``, ``temperature``, ``use_vllm``, ...). New fields are prefixed
by the stage they act on (docs/method.md §5–§7):

- ``tree_*``: how the rollout grows (chains, Tree-GRPO's random tree, AT2PO's entropy tree,
  AEPO's branching) and DAPO's dynamic sampling (``tree_dynamic_sampling``);
- ``credit_*``: how leaf rewards become per-token advantages (``at2po_lib.credit``);
- ``loss_*``: the ratio level and AEPO's options of ``at2po_lib.losses.policy_loss``.

Meaning of ``num_generations`` here: the number of *leaves* (training rows) per prompt, which is
what TRL's grouping needs. It is derived from the tree shape (``tree_m + tree_l * tree_k``:
22 for the paper's M=10, L=2, K=6) for the tree expansions, is the number of chains for
``chain`` and AEPO's rollout budget for ``aepo`` (16 in the paper, docs/method.md §8).

``loss_type`` keeps TRL's aggregation names; only the three that ``policy_loss`` reproduces are
allowed: ``grpo`` = verl's "seq-mean-token-mean" (the authors' setting for their GSPO and ATPO
losses, so the default here; TRL's default is ``dapo``), ``dapo`` = token mean over the whole
accumulated batch (TRL's normaliser; the authors' GRPO/AEPO configs and DAPO aggregate
token-mean, see ``methods``), ``bnpo`` = token mean over each micro-batch.

Paper vs TRL defaults changed here: clip 3e-3/4e-3 (ATPO), ``vllm_importance_sampling_correction``
off (the authors' verl recomputes the old log-probs with the trainer and applies no vLLM
correction; ``policy_loss`` has no per-token IS weight), ``activation_checkpointing`` and
``bf16`` off (TRL turns both on; the toy profile runs in float32 on a CPU, paper profiles
switch them on).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from ..config import RolloutConfig, tree_leaves
from ..hf_compat import checkpointing_field

TREE_EXPANSIONS = ("chain", "random", "random_siblings", "entropy", "aepo")
TREE_SHAPED = ("random", "random_siblings", "entropy")
"""Expansions that grow M + L*K leaves per prompt."""
CREDIT_ADVANTAGES = ("node_value", "diff_parent", "diff_global", "diff_localglobal", "vanilla",
                     "tree_grpo")
CREDIT_VALUES = ("entropy_softmax", "entropy_linear", "child_mean", "leaf_mean")
LOSS_LEVELS = ("token", "sequence", "turn")
LOGP_POSITIONS = ("auto", "policy", "all")
OLD_LOGPS = ("auto", "rollout", "recompute")
LOSS_TYPES = {"grpo": "seq-mean-token-mean", "dapo": "token-mean", "bnpo": "token-mean"}
"""TRL ``loss_type`` → ``policy_loss`` aggregation (``dapo`` is rescaled to the window)."""


@dataclass
class AT2POConfig(GRPOConfig):
    r"""Configuration of :class:`~at2po_lib.trainer.AT2POTrainer` (arXiv 2601.04767).

    Inherits every ``GRPOConfig`` field; adds the ``tree_*``, ``credit_*`` and ``loss_*`` fields
    below and changes the defaults named in the module docstring. Named presets of these fields
    (one per method of Table 1–3) are in :mod:`at2po_lib.trainer.methods`.
    """

    # ----------------------------------------------------------------------- rollout (§5, §8)
    tree_expansion: str = field(default="entropy", metadata={
        "help": "chain (independent chains: GRPO/DAPO/GSPO), random (Tree-GRPO), "
                "random_siblings (the authors' ablation: AT2PO's tree, uniform picks; Table 2), "
                "entropy (AT2PO) or aepo (AEPO's entropy-triggered branching)."})
    tree_m: int = field(default=10, metadata={"help": "M: chains from the root (docs/method.md §5)."})
    tree_l: int = field(default=2, metadata={"help": "L: expansion rounds."})
    tree_k: int = field(default=6, metadata={"help": "K: nodes re-sampled per round."})
    tree_alpha: float = field(default=0.05, metadata={
        "help": "alpha in score = H(n) - alpha * (siblings of n); hard-coded 0.05 in the code."})
    tree_aepo_initial: int = field(default=8, metadata={
        "help": "AEPO: chains sampled before branching (its budget is num_generations)."})
    tree_aepo_beam: int = field(default=2, metadata={"help": "AEPO: branches per branching."})
    tree_dynamic_sampling: bool = field(default=False, metadata={
        "help": "DAPO: drop prompts whose leaves all share one reward and refill from new prompts."})
    tree_dynamic_sampling_rounds: int = field(default=3, metadata={
        "help": "DAPO: rollout rounds per step at most (the first included), verl's "
                "max_num_gen_batches; groups still degenerate after that are kept."})

    # ------------------------------------------------------------------------- credit (§6)
    credit_advantage: str = field(default="node_value", metadata={
        "help": "node_value | diff_parent | diff_global | diff_localglobal (turn-wise credit), "
                "vanilla (GRPO over the prompt's leaves) or tree_grpo (Tree-GRPO's sum)."})
    credit_value: str = field(default="entropy_softmax", metadata={
        "help": "Node value from children: entropy_softmax (code) | entropy_linear (paper) | "
                "child_mean | leaf_mean."})
    credit_normalize_leaves: bool = field(default=True, metadata={
        "help": "Normalise leaf rewards within the tree before propagation (docs/method.md §6.1)."})

    # --------------------------------------------------------------------------- loss (§7)
    loss_level: str = field(default="turn", metadata={
        "help": "Importance-ratio level: token (GRPO/DAPO/AEPO), sequence (GSPO), turn (ATPO)."})
    loss_turn_ratio: str = field(default="geometric", metadata={
        "help": "Turn ratio: geometric (code, length-normalised) or product (paper text)."})
    loss_entropy_balanced_clip: bool = field(default=False, metadata={
        "help": "AEPO: an upper-clipped token keeps a scaled gradient."})
    loss_entropy_aware_adv: float = field(default=0.0, metadata={
        "help": "AEPO: gamma in A * (1 + gamma * z(H_t)); 0 turns it off (AEPO uses 0.2)."})
    loss_chunk_rows: int = field(default=0, metadata={
        "help": "Compute log-probs in chunks of this many rows of similar length, each trimmed "
                "to its own longest completion (saves the padding's compute on CPU); 0 = TRL's "
                "single padded batch."})
    loss_logp_positions: str = field(default="auto", metadata={
        "help": "Positions whose log-probs are computed for the loss (and the reference model): "
                "policy (only the sampled tokens: backbone, gather, LM head), all (TRL's fused "
                "head over every completion position) or auto (policy on CPU, measured; all on "
                "an accelerator, not measured). See at2po_lib.trainer.trainer."})
    update_num_threads: int = field(default=0, metadata={
        "help": "torch intra-op threads of the update stage (scoring, loss and backward; the "
                "rollout has rollout.num_threads); 0 = torch's default (one per core). "
                "Measured on the tiny step (benchmarks/bench_train_step.py --threads-study): one "
                "thread 4.3x faster at load ~5 on 2 cores; on a quiet machine one thread was "
                "1.35-1.43x slower (issue #16)."})
    loss_old_logps: str = field(default="auto", metadata={
        "help": "Old log-probs: rollout (the sampler's record: exact with the HF backend), "
                "recompute (TRL's extra forward) or auto (rollout with HF, recompute with vLLM)."})

    # ---------------------------------------------------------- TRL fields with new defaults
    num_generations: int | None = field(default=None, metadata={
        "help": "Leaves per prompt; None derives it from the tree (see the module docstring)."})
    epsilon: float = field(default=3e-3, metadata={"help": "Lower clip (ATPO: 3e-3)."})
    epsilon_high: float | None = field(default=4e-3, metadata={"help": "Upper clip (ATPO: 4e-3)."})
    loss_type: str = field(default="grpo", metadata={
        "help": "Aggregation: grpo (seq-mean-token-mean), dapo (token mean over the accumulated "
                "batch) or bnpo (token mean per micro-batch)."})
    vllm_importance_sampling_correction: bool = field(default=False, metadata={
        "help": "Off: the authors recompute old log-probs with the trainer and apply no vLLM "
                "correction. Turning it on is refused (policy_loss takes no per-token weight)."})
    gradient_checkpointing: bool | None = field(default=None, metadata={
        "help": "Deprecated alias of activation_checkpointing (transformers 5)."})
    activation_checkpointing: bool | None = field(default=None, metadata={
        "help": "Recompute activations in the backward pass (None = off; paper profiles: on)."})
    bf16: bool | None = field(default=False, metadata={"help": "bfloat16 mixed precision."})
    logging_steps: float = field(default=1, metadata={"help": "Optimizer steps per log row."})

    def __post_init__(self) -> None:
        self._check_choices()
        self.num_generations = self.leaves_per_prompt()
        if checkpointing_field() == "gradient_checkpointing" and self.activation_checkpointing:
            # transformers < 5.18 (the GPU list's 5.17.0) reads only the older name
            self.gradient_checkpointing = True
        super().__post_init__()

    # ------------------------------------------------------------------------------------
    def leaves_per_prompt(self) -> int:
        """Training rows per prompt implied by the rollout shape (checks ``num_generations``)."""
        if self.tree_expansion in TREE_SHAPED:
            leaves = tree_leaves(self.tree_m, self.tree_l, self.tree_k)
            if self.num_generations is not None and self.num_generations != leaves:
                raise ValueError(
                    f"num_generations={self.num_generations} contradicts the tree: "
                    f"tree_m + tree_l * tree_k = {self.tree_m} + {self.tree_l} * {self.tree_k} "
                    f"= {leaves} leaves per prompt (leave num_generations unset)")
            return leaves
        if self.tree_expansion == "chain":
            return self.num_generations if self.num_generations is not None else self.tree_m
        # aepo: the budget of leaves per prompt; unset, the profile default (16, the paper's).
        # A run always sets it (at2po_lib.trainer.resolve: rollout.aepo_budget).
        budget = (self.num_generations if self.num_generations is not None
                  else RolloutConfig.aepo_budget)
        if budget < self.tree_aepo_initial:
            raise ValueError(f"AEPO budget num_generations={budget} is below "
                             f"tree_aepo_initial={self.tree_aepo_initial}")
        return budget

    def _check_choices(self) -> None:
        choices = {
            "tree_expansion": (self.tree_expansion, TREE_EXPANSIONS),
            "credit_advantage": (self.credit_advantage, CREDIT_ADVANTAGES),
            "credit_value": (self.credit_value, CREDIT_VALUES),
            "loss_level": (self.loss_level, LOSS_LEVELS),
            "loss_turn_ratio": (self.loss_turn_ratio, ("geometric", "product")),
            "loss_type": (self.loss_type, tuple(LOSS_TYPES)),
            "loss_logp_positions": (self.loss_logp_positions, LOGP_POSITIONS),
            "loss_old_logps": (self.loss_old_logps, OLD_LOGPS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ValueError(f"AT2POConfig.{name}={value!r}; expected one of {allowed}")
        if self.tree_expansion in TREE_SHAPED and (self.tree_m < 1 or self.tree_l < 0
                                                             or self.tree_k < 0):
            raise ValueError(f"tree shape M={self.tree_m}, L={self.tree_l}, K={self.tree_k}: "
                             "need M >= 1 and L, K >= 0")
        if self.update_num_threads < 0:
            raise ValueError("update_num_threads must be >= 0 (0 = torch's default)")
        if self.loss_chunk_rows < 0:
            raise ValueError("loss_chunk_rows must be >= 0")
        if self.tree_dynamic_sampling_rounds < 1:
            raise ValueError("tree_dynamic_sampling_rounds must be >= 1")
        if self.mask_truncated_completions:
            raise ValueError(
                "mask_truncated_completions=True is not supported by AT2POTrainer: TRL calls a "
                "completion truncated when it does not end in EOS, and a search agent's leaf "
                "may end otherwise (the response budget, an observation cut to it, an empty "
                "query's EOS kept as an observation); the authors' code trains those rows. "
                "The agent records why each leaf ended (rollout/answered in metrics.jsonl, "
                "finish_reason in outcomes.csv). Set it to False.")
        if self.vllm_importance_sampling_correction:
            raise ValueError(
                "vllm_importance_sampling_correction=True is not supported by AT2POTrainer: "
                "policy_loss applies no per-token importance weight (the authors' verl setup "
                "applies none either). Set it to False.")
