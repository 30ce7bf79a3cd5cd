r"""Data of a rollout: turns, trajectories and trees (docs/method.md §1, §5).

Vocabulary
----------
- **Turn**: what the model generates between two tool results: up to a stop string
  (``</search>``; Search-R1's template also ``</answer>``) or EOS. A generation call that stops
  on its token budget with response budget left is continued *in the same node* (authors'
  code, the ``length`` stop in ``vllm_rollout_with_tools_tree_offline.py``).
- **Node** (of a tree): one turn. The root holds the prompt only (no tokens, entropy 0).
  After the tool limit, the environment's notice is inserted *inside* the node (``token_mask``
  0) and generation goes on there, so the node stays one turn and becomes a leaf (authors'
  code). Whatever the environment appends after a node's turn (the search result, the
  corrective message of a retry) is stored on that node as ``obs_ids`` (loss mask 0), so a
  child's context is exactly ``context(parent) + parent.token_ids + parent.obs_ids``. A
  **leaf** is a node whose trajectory ended.
- **Trajectory**: the root→leaf path as one sequence of ids: ``prompt_ids`` followed by
  ``completion_ids`` (turns and observations interleaved). Nothing is ever decoded and
  re-tokenised: ``completion_ids`` is the concatenation of the sampled ids and the
  observation ids, and ``sampled_mask`` is 1 exactly on the sampled ones (TRL calls this
  mask ``env_mask``/``tool_mask``; its own ``completion_mask`` marks padding).

Coordinates: a turn's ``start``/``end`` are offsets into ``completion_ids`` (completion
coordinates), ``[start, end)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

ROOT = 0


@dataclass
class Turn:
    """One model turn inside a trajectory."""

    start: int
    end: int
    """Span ``[start, end)`` in completion coordinates."""
    text: str
    """The turn's text, decoded for parsing and display only."""
    action: Any
    """The parsed :class:`at2po_lib.protocol.actions.Action`."""
    entropy_nll: float
    """Mean negative log-probability of the sampled tokens (authors' estimate)."""
    entropy_exact: float
    """Mean exact entropy of the sampling distribution over the turn's steps."""
    node: int
    """The tree node this turn is (for chains: its index + 1)."""


@dataclass
class Trajectory:
    """A finished root→leaf sequence, ready for reward and training."""

    prompt_ids: list[int]
    completion_ids: list[int]
    sampled_mask: list[int]
    """1 on tokens the model sampled, 0 on observations / notices / corrective messages."""
    turn_ids: list[int]
    """Per completion token: index of its turn in :attr:`turns`, -1 on mask-0 tokens."""
    logps: list[float]
    """Per completion token: log-prob at the sampling temperature (0 where the mask is 0)."""
    turns: list[Turn]
    response_text: str
    """``completion_ids`` decoded (special tokens skipped) for the reward and for display."""
    answer: str | None
    """The extracted prediction (template's answer style), None when there is none."""
    num_tool_calls: int
    num_turns: int
    finish_reason: str
    reward: float = math.nan
    question: str = ""
    golden_answers: list[str] = field(default_factory=list)

    @property
    def num_generated_tokens(self) -> int:
        return sum(self.sampled_mask)


@dataclass
class Node:
    """One turn of a rollout tree (the root holds the prompt only)."""

    id: int
    parent: int
    depth: int
    expansion_round: int
    """0 for the initial chains, 1..L for the expansion rounds (AEPO: the branching step)."""
    start: int = 0
    """Completion offset where this turn's tokens start (= length of the parent's context
    minus the prompt)."""
    token_ids: list[int] = field(default_factory=list)
    """The turn's ids: sampled ones and, after the tool limit, the inserted notice."""
    token_mask: list[int] = field(default_factory=list)
    """Per token of ``token_ids``: 1 sampled (trained), 0 inserted by the environment."""
    logps: list[float] = field(default_factory=list)
    """Per token; 0 on inserted tokens."""
    entropies: list[float] = field(default_factory=list)
    """Exact per-step entropies (NaN when the backend has no full distribution); 0 on inserted
    tokens."""
    topk_entropies: list[float] = field(default_factory=list)
    segment_start: int = 0
    """Index in ``token_ids`` where the latest run of sampled tokens began (after the last
    inserted notice): the text the latest action is parsed from."""
    text: str = ""
    action: Any = None
    obs_ids: list[int] = field(default_factory=list)
    obs_kind: str = ""
    """What ``obs_ids`` hold: ``observation``, ``tool_limit``, ``retry`` or empty."""
    tool_calls: int = 0
    """Tool calls on the root→node path, this turn's included."""
    is_leaf: bool = False
    finish_reason: str = ""
    """Why a leaf ended: ``answer`` (EOS or ``</answer>`` after an answer block), ``eos`` (EOS
    without one), ``invalid`` (policy ``end``: a stop without a usable action, e.g. a search
    with an empty query, which gets EOS as its observation), ``response_length`` (the
    response budget is spent: a turn, or an observation truncated to what was left, whose
    child is then an empty leaf), ``duplicate`` (a copy made to reach the leaf budget); empty on inner nodes."""
    reward: float = math.nan
    children: list[int] = field(default_factory=list)
    duplicate_of: int = -1
    """For ``duplicate`` leaves: the leaf they copy."""
    resampled_from: int = -1
    """For the first node of an expansion chain: the picked node whose turn it re-samples
    (its sibling; ``analysis/decisions.py`` compares their outcomes), -1 otherwise."""

    def append_sampled(self, token_ids, logps, entropies, topk_entropies) -> None:
        """Add sampled tokens (one generation call) to the turn. The first call's id list is
        kept as the backend returned it (never copied or re-encoded); later calls extend a new
        list (lists are never changed in place)."""
        self.token_ids = self.token_ids + list(token_ids) if self.token_ids else token_ids
        self.token_mask = self.token_mask + [1] * len(token_ids)
        self.logps = self.logps + list(logps)
        self.entropies = self.entropies + list(entropies)
        self.topk_entropies = self.topk_entropies + list(topk_entropies)

    def append_inserted(self, token_ids) -> None:
        """Add environment tokens inside the turn (the tool-limit notice): mask 0, log-prob 0;
        the next sampled run starts after them."""
        n = len(token_ids)
        self.token_ids = self.token_ids + list(token_ids)
        self.token_mask = self.token_mask + [0] * n
        self.logps = self.logps + [0.0] * n
        self.entropies = self.entropies + [0.0] * n
        self.topk_entropies = self.topk_entropies + [0.0] * n
        self.segment_start = len(self.token_ids)

    def _sampled(self, values: list[float]) -> list[float]:
        if len(self.token_mask) != len(values):  # a node filled by hand: every token sampled
            return values
        return [v for v, m in zip(values, self.token_mask) if m]

    @property
    def num_sampled(self) -> int:
        """Tokens the model generated in this turn (inserted notices excluded)."""
        return (
            sum(self.token_mask)
            if len(self.token_mask) == len(self.token_ids)
            else len(self.token_ids)
        )

    @property
    def entropy_nll(self) -> float:
        """H(n) = -(1/|y_n|) sum_t log pi(y_t | context) over the turn's sampled tokens:
        docs/method.md §5 (authors' code)."""
        logps = self._sampled(self.logps)
        return -sum(logps) / len(logps) if logps else 0.0

    @property
    def entropy_exact(self) -> float:
        """Mean over the turn's sampled steps of -sum_v p(v) log p(v) (the paper's formula)."""
        values = self._sampled(self.entropies)
        return sum(values) / len(values) if values else 0.0

    def token_entropy_summary(self, estimate: str) -> tuple[float, float]:
        """(largest, first) of :meth:`token_entropies` over the turn's sampled tokens; (0, 0)
        for a turn without any. A one-token decision (``<search>`` vs ``<answer>``, the entity
        named) shows in these where the turn's mean dilutes it; NaN (vLLM's ``exact``) stays."""
        values = self.token_entropies(estimate)
        if not values:
            return 0.0, 0.0
        largest = float("nan") if any(math.isnan(v) for v in values) else float(max(values))
        return largest, float(values[0])

    def token_entropies(self, estimate: str) -> list[float]:
        """Per sampled token: -log pi(y_t) (``sampled_nll``) or -sum_v p(v) log p(v)
        (``exact``); the values whose mean is :attr:`entropy_nll` / :attr:`entropy_exact`."""
        if estimate == "sampled_nll":
            return [-v for v in self._sampled(self.logps)]
        return self._sampled(self.entropies)

    @property
    def sampled_mask(self) -> list[int]:
        """``token_mask``, or all ones for a node filled by hand without one."""
        if len(self.token_mask) == len(self.token_ids):
            return list(self.token_mask)
        return [1] * len(self.token_ids)

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)

    @property
    def context_end(self) -> int:
        """Completion length after this node's turn and observation (its children start here)."""
        return self.end + len(self.obs_ids)


@dataclass
class RolloutTree:
    """All turns sampled for one prompt; node 0 is the root."""

    prompt_index: int
    question: str
    golden_answers: list[str]
    prompt_ids: list[int]
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes.append(Node(id=ROOT, parent=-1, depth=0, expansion_round=0))

    @property
    def root(self) -> Node:
        return self.nodes[ROOT]

    def add_child(self, parent: int, expansion_round: int) -> Node:
        """A new, empty node under ``parent`` (filled by the agent loop)."""
        p = self.nodes[parent]
        node = Node(
            id=len(self.nodes),
            parent=parent,
            depth=p.depth + 1,
            expansion_round=expansion_round,
            start=p.context_end if parent != ROOT else 0,
            tool_calls=p.tool_calls,
        )
        self.nodes.append(node)
        p.children.append(node.id)
        return node

    def leaves(self) -> list[int]:
        return [n.id for n in self.nodes if n.is_leaf]

    def inner_nodes(self) -> list[int]:
        """Nodes that may be expanded: every node that is not a leaf, the root included."""
        return [n.id for n in self.nodes if not n.is_leaf]

    def path(self, node: int) -> list[int]:
        """Node ids from the root's first child down to ``node`` (root excluded)."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.nodes[node].parent
        return out[::-1]

    def completion_ids_before(self, node: int) -> list[int]:
        """Completion ids of ``node``'s context (everything before its turn)."""
        ids: list[int] = []
        for n in self.path(self.nodes[node].parent) if node != ROOT else []:
            ids += self.nodes[n].token_ids + self.nodes[n].obs_ids
        return ids

    def context_ids(self, node: int) -> list[int]:
        """``prompt_ids`` + the completion before ``node``'s turn."""
        return self.prompt_ids + self.completion_ids_before(node)

    def trajectory(self, leaf: int, decode, extract_answer) -> Trajectory:
        """The root→``leaf`` path as a :class:`Trajectory`.

        ``decode(ids) -> str`` renders the response for the reward; ``extract_answer(text)``
        returns the prediction or None.
        """
        completion, mask, turn_ids, logps, turns = [], [], [], [], []
        path = self.path(leaf)
        for n in (self.nodes[i] for i in path):
            if not n.token_ids and not n.obs_ids:
                continue  # the empty leaf after an observation cut to the budget: no turn
            index, start = len(turns), len(completion)
            own = n.sampled_mask
            completion += n.token_ids + n.obs_ids
            mask += own + [0] * len(n.obs_ids)
            turn_ids += [index if m else -1 for m in own] + [-1] * len(n.obs_ids)
            logps += list(n.logps) + [0.0] * len(n.obs_ids)
            turns.append(
                Turn(
                    start=start,
                    end=start + len(n.token_ids),
                    text=n.text,
                    action=n.action,
                    entropy_nll=n.entropy_nll,
                    entropy_exact=n.entropy_exact,
                    node=n.id,
                )
            )
        last = self.nodes[leaf]
        response = decode(completion)
        return Trajectory(
            prompt_ids=list(self.prompt_ids),
            completion_ids=completion,
            sampled_mask=mask,
            turn_ids=turn_ids,
            logps=logps,
            turns=turns,
            response_text=response,
            answer=extract_answer(response),
            num_tool_calls=last.tool_calls,
            num_turns=len(turns),
            finish_reason=last.finish_reason,
            reward=self.nodes[leaf].reward,
            question=self.question,
            golden_answers=list(self.golden_answers),
        )
