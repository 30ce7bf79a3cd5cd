r"""Training rows of one rollout batch and their per-token advantages (docs/method.md §6, §8).

:class:`RolloutBatch` holds one row per leaf (prompt ids, completion ids with the observation
mask, turn node ids, sampling log-probs, reward) plus the trees the rows came from, as
:class:`at2po_lib.method.tree.TreeArrays`. :func:`token_advantages` turns a batch into the (R, T)
advantages the loss sees, always through :mod:`at2po_lib.method.credit`; :func:`group_has_signal`
and :func:`select_groups` serve DAPO's dynamic sampling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..method import credit, outcome
from ..method.tree import Forest, TreeArrays, as_tree_arrays


@dataclass
class RolloutBatch:
    """Training rows of one generation batch (one per leaf) and the trees they came from.

    Row fields are lists of length R (rows); ``trees`` holds the batch's trees (a prompt may
    own several: Tree-GRPO's ``random`` expansion grows ``rollout.tree_grpo_trees`` per
    prompt). ``row_tree`` indexes ``trees``; ``turn_node`` ids are local to the row's tree (−1
    on observation tokens); ``group`` is the row's prompt slot (0..P−1). Trees given in another
    form :func:`~at2po_lib.method.tree.as_tree_arrays` accepts are converted on construction.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    sampled_mask: list[list[int]]
    turn_node: list[list[int]]
    old_logps: list[list[float]]
    reward: list[float]
    row_tree: list[int]
    row_leaf: list[int]
    group: list[int]
    trees: list[TreeArrays]
    num_turns: list[int]
    num_tool_calls: list[int]
    finish_reason: list[str] = field(default_factory=list)
    """Why each row's leaf ended (``answer``, ``response_length``, ``invalid``,
    ``no_room``; see ``rollout.agent``); empty when the rows were built by hand."""

    def __post_init__(self) -> None:
        self.trees = [as_tree_arrays(t) for t in self.trees]

    def __len__(self) -> int:
        return len(self.reward)


def token_advantages(
    batch: RolloutBatch,
    advantage: str,
    value: str = "entropy_softmax",
    normalize_leaves: bool = True,
) -> torch.Tensor:
    r"""Per-token advantages (R, T) of a rollout batch, from :mod:`at2po_lib.method.credit`.

    - turn-wise modes (``node_value``, ``diff_parent``, ...): ``credit.batch_token_advantages``
      over the batch's trees (every token of turn n gets A_n, docs/method.md §6);
    - ``vanilla`` and ``tree_grpo`` (``outcome.OUTCOME_ADVANTAGES``), broadcast to the row's
      model tokens. ``vanilla``: GRPO over the leaves of each prompt, ``outcome.grpo_advantages``;
    - ``tree_grpo``: ``outcome.tree_grpo_advantages``: GRPO over all leaves of the prompt
      (``group``) plus GRPO over the leaves of the row's tree (``row_tree``). With the
      ``random`` expansion each of a prompt's trees is one of Tree-GRPO's separate trees
      (docs/method.md §5, §8); a tree with a single leaf is an error (its tree-level term
      would be its raw reward).

    T is the longest completion; observation and padding tokens get 0.
    """
    turn_node = pad_rows([torch.tensor(t, dtype=torch.long) for t in batch.turn_node], -1)
    is_model = turn_node >= 0
    if advantage in credit.ADVANTAGE_MODES:
        forest = Forest.from_trees(batch.trees, dtype=torch.float64)
        return credit.batch_token_advantages(
            forest,
            turn_node,
            torch.tensor(batch.row_tree),
            value_mode=value,
            adv_mode=advantage,
            normalize_leaves=normalize_leaves,
        ).float()
    if advantage not in outcome.OUTCOME_ADVANTAGES:
        raise ValueError(f"unknown credit_advantage {advantage!r}")
    row_adv = outcome.OUTCOME_ADVANTAGES[advantage](
        torch.tensor(batch.reward, dtype=torch.float64),
        torch.tensor(batch.row_tree),
        torch.tensor(batch.group),
    )
    return torch.where(is_model, row_adv[:, None], torch.zeros((), dtype=row_adv.dtype)).float()


def pad_rows(rows: Sequence[torch.Tensor], fill: float, width: int | None = None) -> torch.Tensor:
    """Right-pad 1-D tensors into (R, width)."""
    width = max([len(r) for r in rows] + [1]) if width is None else width
    out = torch.full((len(rows), width), fill, dtype=rows[0].dtype if rows else torch.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r[:width]
    return out


# ------------------------------------------------------------------------------ groups
def group_rows(batch: RolloutBatch, group: int) -> list[int]:
    """Row indices of one prompt group."""
    return [i for i, g in enumerate(batch.group) if g == group]


def group_has_signal(batch: RolloutBatch, group: int) -> bool:
    """Do the leaves of this prompt group differ in reward (DAPO keeps only those)?"""
    rewards = [batch.reward[i] for i in group_rows(batch, group)]
    return len(set(rewards)) > 1


def select_groups(chosen: list[tuple[RolloutBatch, int]]) -> RolloutBatch:
    """Concatenate the rows of the chosen (batch, group) pairs, renumbering groups and trees."""
    fields: dict[str, list] = {name: [] for name in RolloutBatch.__dataclass_fields__}
    for new_group, (batch, group) in enumerate(chosen):
        rows = group_rows(batch, group)
        tree_ids = sorted({batch.row_tree[i] for i in rows})
        remap = {old: len(fields["trees"]) + k for k, old in enumerate(tree_ids)}
        fields["trees"] += [batch.trees[t] for t in tree_ids]
        for i in rows:
            for name in (
                "prompt_ids",
                "completion_ids",
                "sampled_mask",
                "turn_node",
                "old_logps",
                "reward",
                "row_leaf",
                "num_turns",
                "num_tool_calls",
            ):
                fields[name].append(getattr(batch, name)[i])
            if batch.finish_reason:
                fields["finish_reason"].append(batch.finish_reason[i])
            fields["row_tree"].append(remap[batch.row_tree[i]])
            fields["group"].append(new_group)
    if len(fields["finish_reason"]) != len(fields["reward"]):
        fields["finish_reason"] = []  # some batch had none: keep none rather than misalign
    return RolloutBatch(**fields)
