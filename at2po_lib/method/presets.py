r"""Every trained row of the paper's tables as a named preset: a rollout shape and the trainer's
fields.

A preset names its rollout (``expansion``: the one rollout knob a method chooses, applied to the
profile's ``rollout`` section) and a small dict of ``AT2POConfig`` overrides: which credit
(``credit_*``), which ratio level, clip and aggregation (``loss_level``, ``epsilon``,
``epsilon_high``, ``loss_aggregation``), plus a method's extras (KL, dynamic sampling, AEPO's
options). Sizes (leaves per prompt, batch, learning rate) come from the profile, so one preset
serves ``smoke``, ``tiny`` and ``paper-*``.

Table 1 (docs/method.md §8):

=============  =========  ============================  ========  ==================  ===========
method         rollout    advantage                     ratio     clip low / high     aggregation
=============  =========  ============================  ========  ==================  ===========
react          —          (no training: evaluation only)
grpo           chain      GRPO (group-normalised)       token     0.2 / 0.2, KL 1e-3  token-mean
dapo           chain      GRPO + dynamic sampling       token     0.2 / 0.28          token-mean
gspo           chain      GRPO                          sequence  3e-4 / 4e-4         seq-mean-
                                                                                      token-mean
tree_grpo      random     Tree-GRPO (prompt + tree)     token     0.2 / 0.2, KL 1e-3  token-mean
aepo           aepo       GRPO                          token     0.2 / 0.2, balanced  token-mean
at2po          entropy    entropy_softmax / node_value  turn      3e-3 / 4e-3         seq-mean-
                                                                                      token-mean
=============  =========  ============================  ========  ==================  ===========

Aggregation as each method's authors configure it, in verl's names (``loss_agg_mode``,
docs/method.md §8): ``token-mean`` for GRPO, AEPO, DAPO and Tree-GRPO (the token mean over the
whole update), ``seq-mean-token-mean`` for GSPO and ATPO; the one map to TRL's ``loss_type`` is
:data:`at2po_lib.trainer.at2po_config.TRL_LOSS_TYPES`. The KL (GRPO,
Tree-GRPO: 1e-3) is verl's low-var-KL, the k3 estimator clamped per token at ±10
(:func:`.loss.low_var_kl`), against the warm-start policy.

``aepo`` is the AEPO baseline as the AT2PO authors ran it (``AEPO/scripts/AEPO_qwen3_4B.sh``):
clip 0.2 / 0.2 with entropy-balanced clipping; its script enables the entropy-balanced
advantage, but with ``entropy_coeff: 0`` their actor never computes the token entropies and the
term is skipped, so the preset has none. ``aepo_paper`` is the AEPO paper's formulation
(DAPO's clip-higher 0.2 / 0.28, entropy-aware advantage A·(1 + 0.2·z(H_t))): a named option,
not a row of the paper's Table 1.

Table 2 (progressive ablation): ``ablation_random_tree_grpo`` (random tree + GRPO advantage +
token loss) → ``ablation_atpo_loss`` (+ turn loss) → ``ablation_entropy_tree`` (+ entropy
expansion) → ``at2po`` (+ turn-wise credit). The random tree of steps 1-2 is the authors' own
ablation mode (``expansion_mode=random``: AT2PO's single tree, K nodes picked uniformly without
replacement and re-sampled as siblings, ``expansion="random_siblings"``), so step 3 changes only
how nodes are picked; the ``tree_grpo`` row keeps Tree-GRPO's own expansion. Table 3:
``credit_<value>_<advantage>`` for every value mode × advantage mode of :mod:`.credit`
(``credit_entropy_softmax_node_value``
is AT2PO itself).

Expansion settings. Every entropy-tree preset takes the two settings of its expansion from the
profile's ``rollout`` section, whose defaults are the authors' code's (``at2po_lib/config/profile.py``:
a turn's entropy is the mean NLL of its sampled tokens, their rollout's ``node.entropy =
-sum(logprobs) / len(logprobs)``, and the sibling penalty α = 0.05, hard-coded there). A
*variant* is a preset that differs from a paper row in named settings and carries its own name:

==================  ===========================================================================
``at2po_exact``     AT2PO with the exact entropy and α = 0.001 (:data:`EXACT_EXPANSION`, the
                    ``rollout`` settings it fixes over the profile's; its 21 study runs were
                    trained as ``at2po`` when the ``tiny`` profile held these values)
``grpo_tree_budget``  GRPO with as many chains per prompt as AT2PO's tree has leaves (M + L·K):
                    does the tree beat simply sampling as many chains?
==================  ===========================================================================

Budgets: AT2PO grows M + L·K leaves per prompt (22 at paper scale); GRPO/DAPO/GSPO sample
``rollout.chains`` chains and AEPO grows ``rollout.aepo_budget`` leaves, which every shipped
profile sets to the same number (16 at paper scale, docs/method.md §8; a test checks it).
The ``tiny`` profile scales both down in the same 22:16 proportion (8 tree leaves, 6 chains).
All three come from :meth:`at2po_lib.config.profile.RolloutConfig.leaves_per_prompt` (``rollout.chains``,
M + L·K, ``rollout.aepo_budget``).

Deviations that remain (named here so they stay visible):

- GRPO: verl's dual clip (c = 3 on negative advantages) of the authors' GRPO path is not applied
  (TRL has none; :mod:`.loss`).
- DAPO: no overlong reward shaping (the authors' search-agent setting, docs/method.md §8, lists
  clip-higher, dynamic sampling and token-level aggregation only); groups still degenerate
  after ``dynamic_sampling_rounds`` rollout rounds are kept with advantage 0 (verl's
  ``max_num_gen_batches`` would stop the step instead).
- Tree-GRPO and the Table 2 ablations use the same tree budget as AT2PO. The Table 2 step 1
  (random tree, GRPO) aggregates token-mean like GRPO and has no KL, like the AT2PO it leads to.
- Budgets: GRPO/DAPO/GSPO/AEPO 16 leaves vs AT2PO 22 at paper scale, as in the paper.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Mapping

from .credit import ADVANTAGE_MODES, VALUE_MODES
from .loss import EPS_HIGH, EPS_LOW

_TOKEN_CLIP = {"epsilon": 0.2, "epsilon_high": 0.2}
_CLIP_HIGHER = {"epsilon": 0.2, "epsilon_high": 0.28}
_TOKEN_MEAN = {"loss_aggregation": "token-mean"}
_TURN_LOSS = {
    "loss_level": "turn",
    "epsilon": EPS_LOW,
    "epsilon_high": EPS_HIGH,
    "loss_aggregation": "seq-mean-token-mean",
}
_GRPO_CREDIT = {"credit_advantage": "vanilla"}

EXACT_EXPANSION: Mapping[str, Any] = {"entropy_estimate": "exact", "tree_alpha": 0.001}
"""What the ``at2po_exact`` variant changes: the exact entropy and α = 0.001 (the ``tiny``
profile's earlier settings, chosen from measurements of an earlier, near-deterministic
regime). AT2PO itself takes the profile's, the authors' (sampled-token NLL, α = 0.05)."""
TREE_LEAVES = "M+L*K"
"""A ``rollout.chains`` value of a preset: as many chains as the profile's tree has leaves."""


@dataclass(frozen=True)
class Method:
    """One named training recipe."""

    name: str
    summary: str
    """One line for ``at2po train --list-methods``."""
    table: str
    """Where it appears in the paper (``Table 1``, ``Table 2 step 1``, ``Table 3``)."""
    expansion: str = "entropy"
    """The rollout (``rollout.expansion``): ``chain``, ``random`` (Tree-GRPO), ``entropy``
    (AT2PO) or ``aepo``; every size of it comes from the profile's ``rollout`` section."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """``AT2POConfig`` fields this method sets (applied over the profile's values)."""
    trains: bool = True
    """False for ``react``: the warm-start policy is evaluated as is."""
    rollout: Mapping[str, Any] = field(default_factory=dict)
    """``rollout`` settings this method fixes over the profile's: what a variant changes
    (``at2po_exact``: the exact entropy and α = 0.001; ``chains``: :data:`TREE_LEAVES` for the
    tree's leaf count). A ``--set rollout.<key>`` of a fixed key is refused, naming the method."""


def _method(
    name: str,
    summary: str,
    table: str,
    expansion: str,
    *,
    rollout: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> Method:
    return Method(
        name,
        summary,
        table,
        expansion,
        dict(overrides),
        rollout=dict(rollout or {}),
    )


def credit_method(value: str, advantage: str) -> str:
    """The Table 3 preset of one credit cell: ``credit_<value>_<advantage>``."""
    return f"credit_{value}_{advantage}"


_TABLE1 = [
    Method(
        "react", "no RL: the warm-start (ReAct) policy, evaluated only", "Table 1", trains=False
    ),
    _method(
        "grpo",
        "chains, GRPO advantage, token ratio, clip 0.2, low-var KL 1e-3, token-mean (no dual clip)",
        "Table 1",
        "chain",
        loss_level="token",
        **_TOKEN_MEAN,
        beta=1e-3,
        **_GRPO_CREDIT,
        **_TOKEN_CLIP,
    ),
    _method(
        "dapo",
        "chains, clip-higher 0.2/0.28, dynamic sampling, token-mean (no overlong shaping)",
        "Table 1",
        "chain",
        loss_level="token",
        **_TOKEN_MEAN,
        dynamic_sampling=True,
        **_GRPO_CREDIT,
        **_CLIP_HIGHER,
    ),
    _method(
        "gspo",
        "chains, sequence ratio, clip 3e-4/4e-4, seq-mean-token-mean",
        "Table 1",
        "chain",
        loss_level="sequence",
        loss_aggregation="seq-mean-token-mean",
        epsilon=3e-4,
        epsilon_high=4e-4,
        **_GRPO_CREDIT,
    ),
    _method(
        "tree_grpo",
        "random tree, Tree-GRPO advantage, token ratio, clip 0.2, low-var KL 1e-3, token-mean",
        "Table 1",
        "random",
        credit_advantage="tree_grpo",
        loss_level="token",
        **_TOKEN_MEAN,
        beta=1e-3,
        **_TOKEN_CLIP,
    ),
    _method(
        "aepo",
        "AEPO branching, entropy-balanced clip 0.2/0.2, no entropy-aware "
        "advantage, token-mean (the authors' AEPO_qwen3_4B.sh)",
        "Table 1",
        "aepo",
        loss_level="token",
        **_TOKEN_MEAN,
        loss_entropy_balanced_clip=True,
        loss_entropy_aware_adv=0.0,
        **_GRPO_CREDIT,
        **_TOKEN_CLIP,
    ),
    _method(
        "at2po",
        "entropy tree (the profile's expansion settings: sampled-token NLL, alpha "
        "0.05 by default, the authors' code), turn-wise credit (entropy_softmax/node_value), "
        "turn loss",
        "Table 1",
        "entropy",
        credit_value="entropy_softmax",
        credit_advantage="node_value",
        **_TURN_LOSS,
    ),
]

_VARIANTS = [
    _method(
        "at2po_exact",
        "AT2PO with the exact entropy and alpha 0.001 instead of the "
        "profile's (the tiny profile's settings before issue #49)",
        "variant",
        "entropy",
        rollout=EXACT_EXPANSION,
        credit_value="entropy_softmax",
        credit_advantage="node_value",
        **_TURN_LOSS,
    ),
    _method(
        "grpo_tree_budget",
        "GRPO with as many chains as AT2PO's tree has leaves (M + L*K)",
        "variant",
        "chain",
        rollout={"chains": TREE_LEAVES},
        loss_level="token",
        **_TOKEN_MEAN,
        beta=1e-3,
        **_GRPO_CREDIT,
        **_TOKEN_CLIP,
    ),
]

_OPTIONS = [
    _method(
        "aepo_paper",
        "AEPO as its paper writes it: branching, entropy-balanced clip-higher "
        "0.2/0.28, entropy-aware advantage 0.2, token-mean",
        "option",
        "aepo",
        loss_level="token",
        **_TOKEN_MEAN,
        loss_entropy_balanced_clip=True,
        loss_entropy_aware_adv=0.2,
        **_GRPO_CREDIT,
        **_CLIP_HIGHER,
    ),
]

_TABLE2 = [
    _method(
        "ablation_random_tree_grpo",
        "step 1: random tree (uniform sibling picks), GRPO advantage, token ratio, token-mean",
        "Table 2 step 1",
        "random_siblings",
        loss_level="token",
        **_TOKEN_MEAN,
        **_GRPO_CREDIT,
        **_TOKEN_CLIP,
    ),
    _method(
        "ablation_atpo_loss",
        "step 2: + ATPO turn-level loss",
        "Table 2 step 2",
        "random_siblings",
        **_GRPO_CREDIT,
        **_TURN_LOSS,
    ),
    _method(
        "ablation_entropy_tree",
        "step 3: + entropy-guided expansion",
        "Table 2 step 3",
        "entropy",
        **_GRPO_CREDIT,
        **_TURN_LOSS,
    ),
]

_TABLE3 = [
    _method(
        credit_method(value, adv),
        f"entropy tree + turn loss, credit value={value}, advantage={adv}",
        "Table 3",
        "entropy",
        credit_value=value,
        credit_advantage=adv,
        **_TURN_LOSS,
    )
    for value in VALUE_MODES
    for adv in ADVANTAGE_MODES
]

METHODS: dict[str, Method] = {
    m.name: m for m in (*_TABLE1, *_OPTIONS, *_VARIANTS, *_TABLE2, *_TABLE3)
}
"""Every preset by name (Table 1, named options, variants, Table 2's steps, Table 3's grid)."""

TABLE1_METHODS = tuple(m.name for m in _TABLE1)
"""Table 1's rows in the paper's order (the reports read it from here)."""
TABLE2_METHODS = (*(m.name for m in _TABLE2), "at2po")
"""Table 2's progressive steps, ending at AT2PO."""
TABLE3_METHODS = tuple(m.name for m in _TABLE3)
"""Table 3's credit grid, value mode-major."""

TABLE3_ADVANTAGES = ("node_value", "diff_parent")
"""The advantage modes Table 3's study trains by default (the paper's main contrast)."""

STUDY_TABLES: dict[str, tuple[str, ...]] = {
    "1": tuple(TABLE1_METHODS),
    "2": tuple(m for m in TABLE2_METHODS if m != "at2po"),
    "3": tuple(
        f"credit_{value}_{adv}"
        for value in VALUE_MODES
        for adv in TABLE3_ADVANTAGES
        if (value, adv) != ("entropy_softmax", "node_value")
    ),
}
"""Runs each table adds to the study (Tables 2 and 3 reuse Table 1's AT2PO runs)."""
VARIANT_METHODS = tuple(m.name for m in _VARIANTS)
"""The variants (module docstring): reported beside Table 1's rows under their own names."""
TABLE1_REPORTED = (*TABLE1_METHODS, *VARIANT_METHODS)
"""Table 1's rows as the reports show them: the paper's, then the variants."""


def matching_at2po(rollout: Mapping[str, Any]) -> str:
    """The AT2PO preset that grows its trees with ``rollout``'s expansion settings (a mapping
    with ``entropy_estimate`` and ``tree_alpha``, e.g. what a Table 2 step 3 or Table 3 run
    recorded): ``at2po_exact`` for :data:`EXACT_EXPANSION`, else ``at2po`` (which takes them
    from the profile). Table 2's step 4 and Table 3's default cell are that preset's runs, so
    that they differ from the step before / the other cells in credit only."""
    if all(rollout.get(key) == value for key, value in EXACT_EXPANSION.items()):
        return "at2po_exact"
    return "at2po"


def get_method(name: str) -> Method:
    """The preset called ``name``; an unknown name lists the closest known ones."""
    if name not in METHODS:
        close = difflib.get_close_matches(name, METHODS, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise KeyError(f"unknown method {name!r}{hint}; `at2po train --list-methods` lists all")
    return METHODS[name]


def list_methods() -> list[Method]:
    return list(METHODS.values())


def format_methods() -> str:
    """The ``--list-methods`` table: name, where in the paper, summary."""
    width = max(map(len, METHODS))
    lines = [f"{'method':<{width}}  {'paper':<14}  summary"]
    lines += [f"{m.name:<{width}}  {m.table:<14}  {m.summary}" for m in METHODS.values()]
    return "\n".join(lines)
