r"""The outcome baselines (docs/method.md §6): advantages of whole rows, not of turns.

GRPO and Tree-GRPO give every model token of a trajectory (a leaf) one advantage, from the
leaf's reward alone; AT2PO's turn-wise credit (:mod:`.credit`) is what they are compared with.
Both are registered by name in :data:`OUTCOME_ADVANTAGES`, beside AT2PO's node advantages
(``credit.ADVANTAGE_MODES``), and read by the trainer from there::

    vanilla   (GRPO):      A_i = (r_i - mean_prompt(r)) / (std_prompt(r) + eps)
    tree_grpo (Tree-GRPO): A_i = GRPO(r_i | leaves of the prompt) + GRPO(r_i | leaves of the tree)
"""

from __future__ import annotations

import torch


def group_equal(values: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per element: do all elements of its group hold the same value? (max == min)."""
    big = torch.finfo(values.dtype).max
    kw = dict(dtype=values.dtype, device=values.device)
    gmax = torch.full((num_groups,), -big, **kw).scatter_reduce(
        0, group, values, reduce="amax", include_self=True
    )
    gmin = torch.full((num_groups,), big, **kw).scatter_reduce(
        0, group, values, reduce="amin", include_self=True
    )
    return (gmax == gmin)[group]


def grpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    eps: float = 1e-6,
    scale: str = "std",
    unbiased: bool = True,
) -> torch.Tensor:
    r"""GRPO outcome advantages (R,) for rewards (R,) grouped by ``group_ids`` (R,)::

        A_i = (r_i - mean_g(r)) / (std_g(r) + eps)      scale="std"  (GRPO)
        A_i =  r_i - mean_g(r)                           scale="none" (Dr. GRPO)

    ``unbiased=True`` (ddof 1) matches verl's and TRL's ``torch.std``; ``unbiased=False`` gives
    the population std used for AT2PO's leaf normalisation. A group of one sample keeps its raw
    reward (mean 0, std 1), as verl does. Groups whose rewards are all equal get exactly 0.
    """
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    rewards = torch.as_tensor(rewards)
    rewards = rewards if rewards.is_floating_point() else rewards.double()
    group_ids = torch.as_tensor(group_ids)
    if rewards.ndim != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} "
            "must both be (R,)"
        )
    if bool(torch.isnan(rewards).any()):
        raise ValueError(f"rewards has NaN at row {int(torch.nonzero(torch.isnan(rewards))[0])}")
    _, group = torch.unique(group_ids, return_inverse=True)
    g = int(group.max()) + 1 if group.numel() else 0
    count = torch.bincount(group, minlength=g).to(rewards.dtype)
    zeros = torch.zeros(g, dtype=rewards.dtype, device=rewards.device)
    mean = zeros.clone().index_add_(0, group, rewards) / count
    single = count[group] == 1
    centred = torch.where(single, rewards, rewards - mean[group])
    all_equal = group_equal(rewards, group, g) & ~single
    centred = torch.where(all_equal, torch.zeros_like(rewards), centred)
    if scale == "none":
        return centred
    ss = zeros.clone().index_add_(0, group, (rewards - mean[group]) ** 2)
    std = (ss / (count - (1 if unbiased else 0)).clamp(min=1)).sqrt()
    std = torch.where(single, torch.ones_like(centred), std[group])
    return centred / (std + eps)


def tree_grpo_advantages(
    leaf_rewards: torch.Tensor, tree_ids: torch.Tensor, prompt_ids: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    r"""Tree-GRPO's advantage (its default ``tree`` estimator) for one row per leaf (R,)::

        A_i = GRPO(r_i | all leaves of the prompt) + GRPO(r_i | leaves of the same tree)

    Both terms normalise the raw rewards with the unbiased std, as the authors' verl code does.
    Trees are grouped by the pair (prompt id, tree id), so tree ids may restart per prompt.
    A tree whose leaves all share one reward gets a tree-level term of exactly 0.

    A tree with a single leaf is an error: GRPO's rule for a group of one (mean 0, std 1)
    would hand that leaf its raw reward as the tree-level term, a bias. Tree-GRPO's own
    expansion never makes one (every tree holds 1 + L*n >= 2 leaves; docs/method.md §5).
    (Their ``tree_2norm`` variant, which normalises within the tree *after* the prompt-level
    normalisation, is not offered here.)
    """
    prompt_ids, tree_ids = torch.as_tensor(prompt_ids), torch.as_tensor(tree_ids)
    if tree_ids.shape != prompt_ids.shape:
        raise ValueError(
            f"tree_ids {tuple(tree_ids.shape)} and prompt_ids "
            f"{tuple(prompt_ids.shape)} must have the same shape"
        )
    pairs, pair = torch.unique(
        torch.stack([prompt_ids, tree_ids], dim=1), dim=0, return_inverse=True
    )
    sizes = torch.bincount(pair, minlength=len(pairs))
    if bool((sizes == 1).any()):
        p, t = (int(v) for v in pairs[int(torch.nonzero(sizes == 1)[0])])
        raise ValueError(
            f"Tree-GRPO: tree {t} of prompt {p} has a single leaf; its tree-level "
            "advantage would be its raw reward (each tree needs >= 2 leaves)"
        )
    inter = grpo_advantages(leaf_rewards, prompt_ids, eps=eps)
    inner = grpo_advantages(leaf_rewards, pair, eps=eps)
    return inter + inner


OUTCOME_ADVANTAGES = {
    "vanilla": lambda rewards, tree_ids, prompt_ids: grpo_advantages(rewards, prompt_ids),
    "tree_grpo": lambda rewards, tree_ids, prompt_ids: tree_grpo_advantages(
        rewards, tree_ids, prompt_ids
    ),
}
"""Advantages (R,) of whole rows, not nodes, from each row's leaf reward, tree id and prompt id
(R,): GRPO over a prompt's leaves (:func:`grpo_advantages`) and Tree-GRPO's prompt + tree sum
(:func:`tree_grpo_advantages`)."""
