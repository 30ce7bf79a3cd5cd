r"""Tree rollouts: independent chains, random expansion (Tree-GRPO), entropy-guided expansion
(AT2PO), docs/method.md §5.

Entropy-guided expansion (AT2PO), per prompt (all prompts' turns are batched together)::

    1. the root (prompt only, H = 0) gets M children, each rolled out as a full chain;
    2. repeat L times (round r = 1..L):
         pick K nodes by score(n) = H(n) - alpha * b(n) (at2po_lib.method.expansion);
         for each pick, add a new child of n's parent (for the root: of the root) -- i.e.
         re-sample turn n from the same context -- and roll it out to a leaf;
    3. keep exactly M + L*K leaves.

H(n) is the turn's mean sampled-token NLL (authors' code, ``rollout.entropy_estimate =
"sampled_nll"``) or its mean exact entropy (``"exact"``, the paper's -sum p log p); ties keep
breadth-first order (at2po_lib.method.expansion). ``rollout.turn_entropy = "max"`` (ours, not
the paper's) takes the largest per-token value instead of the mean.

Random siblings (the authors' ablation mode ``expansion_mode=random``,
``ToolTreeNode.sample_expansion_nodes``; Table 2's steps 1-2): AT2PO's single tree and its
sibling re-sampling, with the K picks of a round drawn uniformly *without replacement* among
the non-leaf nodes (root included; with replacement when there are fewer than K, as their
``random.choices``).

Random expansion (Tree-GRPO, its ``generation_ts.py`` / ``tree_node.py``), per prompt::

    1. m = rollout.tree_grpo_trees separate trees; each root gets ONE chain;
    2. repeat L times: in every tree pick n nodes uniformly, with replacement, among the root
       and the non-leaf nodes, and for each pick p add a new child of p -- i.e. CONTINUE
       AFTER p, from p's full state (its context, its turn and its observation) -- rolled
       out to a leaf;
    3. each tree ends with 1 + L*n leaves (one per chain), all kept (its scripts set
       ``ts_k = 1 + ts_l * ts_n``).

A picked node p is never a leaf and always gains a child, so every inner node of such a tree
that branches has >= 2 leaves below it, and every tree has >= 2 leaves: no group of one in
Tree-GRPO's tree-level advantage (at2po_lib.method.outcome.tree_grpo_advantages). Shape at AT2PO's
leaf budget B = M + L*K (so every tree method trains on the same number of rows): m trees of
B / m leaves, n = (B / m - 1) / L expansions per tree and round (:func:`tree_grpo_shape`;
paper M=10, L=2, K=6 -> m=2 trees, n=5; the original's scripts use m=2, n=2, L=1). The
trees are returned prompt-major, m per prompt, sharing ``prompt_index``.

Table 2's steps 1-2 ("GRPO with a random tree") use ``random_siblings``, the authors' own
ablation mode, so that step 3 (+ entropy-guided expansion) changes the node choice only; the
Tree-GRPO row of Table 1 keeps Tree-GRPO's own ``random`` expansion.

Leaf count. Every chain ends in exactly one leaf and every pick starts one chain, so the leaf
counts above hold by construction. :func:`equalize_leaves` still enforces them (authors'
code): surplus leaves are pruned at random together with ancestors left childless; a
shortfall is filled with ``duplicate`` copies of the last leaf (siblings holding the same turn).

KV reuse: the prompt is prefilled once per prompt and shared by all its chains (all its trees
for ``random``); a re-sampled or continued turn starts from a slice of the cache of the chain
that generated the node (see :mod:`.kvcache`), so only its own new tokens are computed.
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np

from ..config.choices import EXPANSIONS
from ..method.expansion import select_entropy, select_random, select_random_siblings
from .aepo import check_aepo, grow_aepo
from .agent import Forest, Sampler, score_trees, start_chain
from .structures import ROOT, RolloutTree, Trajectory


# ----------------------------------------------------------------------------- selection


TURN_ENTROPIES = ("mean", "max")


def node_entropy(tree: RolloutTree, estimate: str, reduce: str = "mean") -> np.ndarray:
    """H(n) for every node (root 0) with the chosen estimate, reduced over the turn's sampled
    tokens by ``reduce`` (``rollout.turn_entropy``): ``mean`` is the paper's H(n) =
    (1/|y_n|) sum_t H_t; ``max`` = max_t H_t, an option of ours (docs/method.md §11) that lets
    one uncertain token -- a decision such as ``<search>`` vs ``<answer>`` -- stand out from
    the near-certain tokens around it."""
    if estimate not in ("sampled_nll", "exact"):
        raise ValueError(f"rollout.entropy_estimate={estimate!r}; expected sampled_nll or exact")
    if reduce not in TURN_ENTROPIES:
        raise ValueError(f"rollout.turn_entropy={reduce!r}; expected one of {TURN_ENTROPIES}")
    if reduce == "mean":
        attr = "entropy_nll" if estimate == "sampled_nll" else "entropy_exact"
        return np.array([0.0 if n.id == ROOT else getattr(n, attr) for n in tree.nodes])
    # max() of a list holding NaN depends on its order: propagate NaN explicitly
    return np.array(
        [0.0 if n.id == ROOT else _max_or_zero(n.token_entropies(estimate)) for n in tree.nodes]
    )


def _max_or_zero(values: list[float]) -> float:
    if not values:
        return 0.0
    return float("nan") if any(np.isnan(values)) else float(max(values))


def pick_nodes(
    tree: RolloutTree,
    k: int,
    alpha: float,
    estimate: str,
    rng: np.random.Generator | None = None,
    reduce: str = "mean",
) -> list[int]:
    """The K picks of one round in one tree: entropy-guided (AT2PO), or uniform without
    replacement when ``rng`` is given (``random_siblings``)."""
    parent = np.array([n.parent for n in tree.nodes])
    is_leaf = np.array([n.is_leaf for n in tree.nodes])
    if rng is not None:
        return [int(i) for i in select_random_siblings(parent, is_leaf, k, rng)]
    entropy = node_entropy(tree, estimate, reduce)
    if np.isnan(entropy).any():
        raise ValueError(
            f"rollout.entropy_estimate={estimate!r} gave NaN turn entropies: the "
            "backend has no full distributions (vLLM); use 'sampled_nll'"
        )
    return [int(i) for i in select_entropy(entropy, parent, is_leaf, k, alpha)]


def tree_grpo_shape(rollout_cfg) -> tuple[int, int, int]:
    """Tree-GRPO's (m trees, L rounds, n expansions per tree and round) at AT2PO's leaf budget
    B = M + L*K: m = ``rollout.tree_grpo_trees``, n = (B / m - 1) / L, so m * (1 + L*n) = B.
    Raises naming the numbers when they do not divide or leave a tree with one leaf."""
    m, rounds = rollout_cfg.tree_grpo_trees, rollout_cfg.tree_l
    budget = rollout_cfg.leaves_per_prompt("random")
    per_tree = budget // m if m >= 1 else 0
    if m < 1 or rounds < 1 or budget % m or (per_tree - 1) % rounds or per_tree < 2:
        raise ValueError(
            f"random (Tree-GRPO) expansion: M + L*K = {rollout_cfg.tree_m} + {rounds} * "
            f"{rollout_cfg.tree_k} = {budget} leaves cannot be split into "
            f"rollout.tree_grpo_trees = {m} trees of 1 + L*n leaves (L = {rounds} >= 1, "
            "n >= 1 whole); change tree_grpo_trees or the tree shape"
        )
    return m, rounds, (per_tree - 1) // rounds


# ----------------------------------------------------------------------------- leaf budget


def equalize_leaves(tree: RolloutTree, target: int, rng: np.random.Generator) -> RolloutTree:
    """Exactly ``target`` leaves: prune random surplus leaves (and ancestors left childless),
    or add ``duplicate`` copies of the last leaf as its siblings. Returns a re-indexed tree
    (node ids stay in creation order)."""
    leaves = tree.leaves()
    if len(leaves) == target:
        return tree
    if len(leaves) < target:
        if not leaves:
            raise ValueError(f"tree of prompt {tree.prompt_index} has no leaf to duplicate")
        source = tree.nodes[leaves[-1]]
        for _ in range(target - len(leaves)):
            dup = tree.add_child(source.parent, source.expansion_round)
            for name in (
                "token_ids",
                "token_mask",
                "logps",
                "entropies",
                "topk_entropies",
                "segment_start",
                "text",
                "action",
                "obs_ids",
                "obs_kind",
                "tool_calls",
                "finish_reason",
                "reward",
            ):
                setattr(dup, name, copy.copy(getattr(source, name)))
            dup.is_leaf, dup.duplicate_of = True, source.id
        return tree
    drop = set(rng.choice(leaves, size=len(leaves) - target, replace=False).tolist())
    children = {n.id: list(n.children) for n in tree.nodes}
    removed = set()
    for leaf in drop:
        node = leaf
        while node != ROOT:
            removed.add(node)
            parent = tree.nodes[node].parent
            children[parent].remove(node)
            if children[parent]:
                break
            node = parent
    return _reindex(tree, removed)


def _reindex(tree: RolloutTree, removed: set[int]) -> RolloutTree:
    kept = [n for n in tree.nodes if n.id not in removed]
    new_id = {n.id: i for i, n in enumerate(kept)}
    nodes = []
    for n in kept:
        m = copy.copy(n)
        m.id = new_id[n.id]
        m.parent = new_id[n.parent] if n.parent >= 0 else -1
        m.children = [new_id[c] for c in n.children if c in new_id]
        m.duplicate_of = new_id.get(n.duplicate_of, -1)
        m.resampled_from = new_id.get(n.resampled_from, -1)
        nodes.append(m)
    return RolloutTree(
        tree.prompt_index, tree.question, tree.golden_answers, tree.prompt_ids, nodes=nodes
    )


# ----------------------------------------------------------------------------- rollout


def rollout(
    sampler: Sampler,
    questions: Sequence[str],
    golden_answers: Sequence[Sequence[str]] | None,
    *,
    expansion: str | None = None,
    num_leaves: int | None = None,
    prompt_ids: Sequence[int] | None = None,
    share_prefixes: bool = True,
) -> list[RolloutTree]:
    """Trees for every question, of every rollout shape; leaves scored with the environment's
    reward function when golden answers are given. Convert with :func:`.export.tree_arrays` /
    :func:`.export.training_rows`.

    expansion (default ``rollout.expansion``): ``chain`` (``num_leaves`` or ``rollout.chains``
    independent chains, GRPO-style: one tree per question), ``random`` (Tree-GRPO:
    ``rollout.tree_grpo_trees`` trees per question, prompt-major, sharing ``prompt_index``),
    ``random_siblings`` (the authors' ablation: AT2PO's tree with uniform picks), ``entropy``
    (AT2PO: one tree per question) or ``aepo`` (:mod:`.aepo`: ``num_leaves`` or
    ``rollout.aepo_budget`` leaves). Tree expansions always give M + L*K leaves per question.
    prompt_ids: the caller's id of each question (``RolloutTree.prompt_index``).
    share_prefixes: start new chains from the cached prompt / ancestor context (default);
    False recomputes them (benchmarks compare the two).
    """
    cfg = sampler.env.cfg
    expansion = expansion or cfg.expansion
    if expansion not in EXPANSIONS:
        raise ValueError(f"expansion={expansion!r}; expected one of {', '.join(EXPANSIONS)}")
    if expansion == "aepo":
        num_leaves = check_aepo(sampler, num_leaves)
    copies = tree_grpo_shape(cfg)[0] if expansion == "random" else 1
    forest = Forest.plant(sampler, questions, golden_answers, prompt_ids, share_prefixes, copies)
    rng = np.random.default_rng(sampler.seed)
    if expansion == "aepo":
        trees = grow_aepo(forest, num_leaves, rng)
    elif expansion == "random":
        trees = _grow_tree_grpo(forest, rng)
    else:
        trees = _grow_at2po(forest, expansion, num_leaves, rng)
    if golden_answers is not None:
        score_trees(sampler.env, trees)
    return trees


def rollout_chains(
    sampler: Sampler,
    questions: Sequence[str],
    golden_answers: Sequence[Sequence[str]] | None = None,
) -> list[Trajectory]:
    """One chain per question (validation samples greedily: ``Sampler.from_model(...,
    greedy=True)``, docs/method.md §5), batched: one :class:`Trajectory` per question, in order;
    ``reward`` is filled when ``golden_answers`` are given."""
    trees = rollout(sampler, questions, golden_answers, expansion="chain", num_leaves=1)
    env = sampler.env
    return [t.trajectory(t.leaves()[0], env.decode, env.extract_answer) for t in trees]


def resample_turns(forest: Forest, picks: Sequence[Sequence[int]], round_: int) -> list[int]:
    """Re-sample every picked turn of every tree (``picks[i]``: node ids of tree ``i``, a node
    as often as it is picked): a new child of its parent (for the root: of the root) -- the
    turn drawn again from the same context -- rolled out to a leaf. Returns the re-samples'
    first nodes, in the order of ``picks``."""
    chains = []
    for i, (tree, nodes) in enumerate(zip(forest.trees, picks)):
        for n in nodes:
            parent = n if n == ROOT else tree.nodes[n].parent
            chain = start_chain(tree, i, parent, round_, forest.state.box_for_context_of(i, n))
            chain.node.resampled_from = n
            chains.append(chain)
    firsts = [chain.node.id for chain in chains]
    forest.grow(chains)
    return firsts


def _grow_at2po(
    forest: Forest, expansion: str, num_chains: int | None, rng: np.random.Generator
) -> list[RolloutTree]:
    """``chain``, ``entropy`` and ``random_siblings``: one tree per question (module docstring)."""
    cfg = forest.sampler.env.cfg
    target = (
        num_chains
        if expansion == "chain" and num_chains is not None
        else cfg.leaves_per_prompt(expansion)
    )
    forest.grow(forest.from_roots(target if expansion == "chain" else cfg.tree_m))
    rounds = 0 if expansion == "chain" else cfg.tree_l
    for round_ in range(1, rounds + 1):
        picks = [
            pick_nodes(
                tree,
                cfg.tree_k,
                cfg.tree_alpha,
                cfg.entropy_estimate,
                rng if expansion == "random_siblings" else None,
                cfg.turn_entropy,
            )
            for tree in forest.trees
        ]
        resample_turns(forest, picks, round_)
    return [equalize_leaves(t, target, rng) for t in forest.trees]


def _grow_tree_grpo(forest: Forest, rng: np.random.Generator) -> list[RolloutTree]:
    """``random``: m separate trees per question (planted as copies), each expanded n times
    per round by continuing after uniformly picked nodes (module docstring)."""
    _, rounds, n = tree_grpo_shape(forest.sampler.env.cfg)
    state = forest.state
    forest.grow(forest.from_roots(1))
    for round_ in range(1, rounds + 1):
        chains = []
        for i, tree in enumerate(forest.trees):
            is_leaf = np.array([node.is_leaf for node in tree.nodes])
            for picked in select_random(is_leaf, n, rng).tolist():
                # Continue after the picked node: the new turn is its child, generated from
                # the picked node's context + turn + observation.
                chains.append(
                    start_chain(tree, i, picked, round_, state.box_for_context_of(i, picked))
                )
        forest.grow(chains)
    return [equalize_leaves(t, 1 + rounds * n, rng) for t in forest.trees]
