r"""AEPO's online, entropy-triggered branching (docs/method.md §8; the AEPO baseline of Table 1).

AEPO ("Agentic Entropy-Balanced Policy Optimization") grows a budget of ``aepo_budget``
trajectories per prompt while rolling out, instead of expanding a finished tree::

    start aepo_initial chains per prompt;
    after every round of turns (once the tool results are appended), for each prompt p with
    remaining = budget - rollouts(p) > 0 and each chain c of p that goes on, up to beam - 1
    times (and while slots remain):
        H_now  = turn entropy of c's last turn,  H_init = turn entropy of c's first turn
        prob   = (u + w * (H_now - H_init)) * max(0, 1 - penalty * consecutive(p)),  u ~ U(0, 1)
        branch if clip(prob, 0, 1) >= threshold: a copy of c continues from the same context
    a prompt with no chain going on and rollouts(p) < budget gets one fresh chain per round;
    consecutive(p) += 1 if p got new chains this round, else it is reset to 0.

Turn entropy (AEPO code): over the first ``aepo_entropy_tokens`` (20) tokens of the turn, the
*sum* of the top-10 truncated entropies ``-sum_{top-10} p log p``, divided by ``log |V|``.
Constants (AEPO code): w = 0.2, threshold 0.5, penalty 0.05, beam 2, budget 16, initial 8.

Differences from the AEPO code, named: the code keeps ``H_init`` in a dictionary keyed by row
index that is never cleared between batches (a stale value after the first batch); here each
chain's ``H_init`` is the entropy of the first turn it generated (for a branch: its first turn
after branching, which is what the code does on its first batch). The code's optional dynamic
choice of the initial number of chains (``enable_dynamic_rollouts``) is not implemented; the
AEPO scripts run with a fixed ``initial_rollouts``.

In tree form a branch is a new child of the branching chain's last node (a sibling of that
chain's next turn); ``expansion_round`` records the round in which a chain was created, so the
result exports like any other tree and each leaf is one training row.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

import numpy as np

from .agent import Chain, Forest, RolloutState, Sampler, start_chain
from .structures import ROOT, Node, RolloutTree
from .turns import TurnResult


def aepo_turn_entropy(node: Node, vocab_size: int, num_tokens: int = 20) -> float:
    """Sum of the first ``num_tokens`` top-k entropies of the turn, / log |V| (AEPO code)."""
    return float(sum(node.topk_entropies[:num_tokens])) / math.log(vocab_size)


def branch_probability(
    u: float,
    h_now: float,
    h_init: float,
    consecutive: int,
    weight: float = 0.2,
    penalty: float = 0.05,
) -> float:
    """clip((u + weight * (H_now - H_init)) * max(0, 1 - penalty * consecutive), 0, 1)."""
    factor = max(0.0, 1.0 - penalty * consecutive)
    return min(1.0, max(0.0, (u + weight * (h_now - h_init)) * factor))


class AEPOBrancher:
    """The ``on_round`` hook of :func:`~.agent.run_chains` that implements AEPO's branching."""

    def __init__(
        self,
        trees: Sequence[RolloutTree],
        state: RolloutState,
        rollout_cfg,
        vocab_size: int,
        budget: int,
        initial: int,
        rng: np.random.Generator,
    ) -> None:
        self.trees, self.state, self.cfg = trees, state, rollout_cfg
        self.vocab_size, self.budget, self.rng = vocab_size, budget, rng
        self.rollouts = [initial] * len(trees)
        self.consecutive = [0] * len(trees)
        self.round = 0

    def __call__(self, continuing: list[Chain], results: list[TurnResult]) -> list[Chain]:
        self.round += 1
        cfg = self.cfg
        by_tree: dict[int, list[Chain]] = defaultdict(list)
        for chain in continuing:
            by_tree[chain.tree_index].append(chain)
        new: list[Chain] = []
        grew = set()
        for t, chains in by_tree.items():
            remaining = self.budget - self.rollouts[t]
            made = 0
            for chain in chains:
                if chain.node.token_ids:  # the same turn goes on: no tool call to branch after
                    continue
                last = chain.tree.nodes[chain.node.parent]  # the turn just generated
                h_now = aepo_turn_entropy(last, self.vocab_size, cfg.aepo_entropy_tokens)
                if chain.first_turn_entropy is None:
                    chain.first_turn_entropy = h_now
                tries = min(cfg.aepo_beam - 1, remaining - made)
                for _ in range(max(tries, 0)):
                    prob = branch_probability(
                        float(self.rng.random()),
                        h_now,
                        chain.first_turn_entropy,
                        self.consecutive[t],
                        cfg.aepo_entropy_weight,
                        cfg.aepo_branch_penalty,
                    )
                    if prob < cfg.aepo_branch_threshold:
                        continue
                    source = chain.box if self.state.share_prefixes else None
                    new.append(start_chain(chain.tree, t, last.id, self.round, source))
                    made += 1
            if made:
                self.rollouts[t] += made
                grew.add(t)
        for t, tree in enumerate(self.trees):
            if t not in by_tree and self.rollouts[t] < self.budget:
                new.append(
                    start_chain(tree, t, ROOT, self.round, self.state.box_for_context_of(t, ROOT))
                )
                self.rollouts[t] += 1
                grew.add(t)
        for t in range(len(self.trees)):
            self.consecutive[t] = self.consecutive[t] + 1 if t in grew else 0
        return new


def check_aepo(sampler: Sampler, budget: int | None) -> int:
    """AEPO's budget (default ``rollout.aepo_budget``), once it is checked that it can be
    grown: ``1 <= rollout.aepo_initial <= budget`` and a backend that records top-k entropies."""
    cfg = sampler.env.cfg
    budget = budget if budget is not None else cfg.aepo_budget
    if not 1 <= cfg.aepo_initial <= budget:
        raise ValueError(f"AEPO needs 1 <= initial ({cfg.aepo_initial}) <= budget ({budget})")
    if not getattr(sampler.backend, "records_topk", True):
        # NaN entropies would make every branching probability NaN, and NaN < threshold is
        # False: every chain would branch
        raise ValueError(
            "AEPO branches on top-k entropies, which this backend does not record: build it "
            "with make_backend(..., topk_logprobs=True) (the vLLM backend asks the engine for "
            "top-k log-probs only then)"
        )
    return budget


def grow_aepo(forest: Forest, budget: int, rng: np.random.Generator) -> list[RolloutTree]:
    """AEPO rollouts: exactly ``budget`` leaves per question (:func:`check_aepo`), grown by
    entropy-triggered branching from ``rollout.aepo_initial`` chains per question."""
    cfg, initial = forest.sampler.env.cfg, forest.sampler.env.cfg.aepo_initial
    vocab_size = len(forest.sampler.env.tokenizer.get_vocab())
    brancher = AEPOBrancher(forest.trees, forest.state, cfg, vocab_size, budget, initial, rng)
    forest.grow(forest.from_roots(initial), on_round=brancher)
    return forest.trees
