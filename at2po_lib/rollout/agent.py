r"""The multi-turn search agent on token ids: environment, turn loop, greedy chains (docs/method.md §1).

One trajectory::

    prompt = chat_template(build_messages(template, question), add_generation_prompt=True)
    repeat:
        turn   = sample until </search>, </answer>, EOS or the turn budget     (loss mask 1)
        action = parse_action(decode(turn))
        search -> obs = encode(render_observation(template, retriever.search(query)))  (mask 0)
        answer -> leaf

Rules (authors' code unless named otherwise):

- **Token ids only.** Turns are appended as the sampled ids and observations as the ids of the
  observation text encoded *on its own*; the trajectory is never decoded and re-tokenised
  (docs/method.md §1: re-tokenisation drift destabilised Tree-GRPO on Qwen3). Text is decoded per
  turn only to parse the action, and per trajectory only for the reward and for display.
- **Tool limit.** At most ``max_tool_calls`` (6) searches; a later search gets the template's
  tool-limit notice (mask 0) instead of results, and generation goes on.
- **Invalid action** (no well-formed tag, or an empty query): ``end`` the branch as a leaf
  (authors' code) or ``retry`` after the template's corrective message (Search-R1).
  ``rollout.invalid_action = "template"`` uses the template's own policy.
- **Lengths.** A turn gets at most ``min(max_turn_tokens, max_response_tokens - used)``
  tokens; a turn cut by that budget ends the branch (``turn_length`` / ``response_length``).
  An observation that does not fit in the response budget (with one token to spare) ends the
  branch (``no_room``): the authors' code truncates the observation to the model length
  instead. A prompt longer than ``max_prompt_tokens`` is an error naming the question.
- **Log-probabilities** are recorded at the sampling temperature (``log_softmax(logits/T)``,
  :mod:`.sampling`); the trainer must recompute them with the same ``T``.

Rewards are pluggable (``reward_fn(response_text, golden_answers) -> float``). The default
(:func:`default_reward_fn`): the authors' ``atpo_reward`` (-1 on a bad format, else EM) for
templates with a boxed answer (``atpo``), plain exact match of the extracted answer for the
others (``tiny``, ``searchr1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..actions import Action, parse_action
from ..prompts import (PromptTemplate, build_messages, get_template, invalid_action_message,
                       prompt_ids, render_observation, tool_limit_notice)
from ..retrieval.base import DEFAULT_TOPK
from .turns import TurnBackend, TurnRequest, TurnResult
from .backends import make_backend
from .kvcache import KVPrefix
from .structures import ROOT, Node, RolloutTree, Trajectory

__all__ = ["SearchEnv", "Chain", "run_chains", "rollout_chains", "default_reward_fn",
           "score_trees"]

RewardFn = Callable[[str, Sequence[str]], float]
STOP_SEQUENCES = ("</search>", "</answer>")


def default_reward_fn(template: PromptTemplate) -> RewardFn:
    """``atpo_reward`` for boxed-answer templates, EM of the extracted answer otherwise."""
    from ..reward import atpo_reward, exact_match, extract_prediction

    if template.answer_style == "boxed":
        return lambda response, golden: atpo_reward(response, list(golden))
    return lambda response, golden: exact_match(extract_prediction(response, "plain"), list(golden))


class SearchEnv:
    """Everything between the model and the world: prompts, actions, observations, rewards."""

    def __init__(self, tokenizer, template: str | PromptTemplate, retriever, rollout_cfg,
                 reward_fn: RewardFn | None = None, topk: int | None = None) -> None:
        # topk None: the retriever's default_topk (the profile's retrieval.topk when the
        # retriever came from build_retriever), so rollouts see what demonstrations saw.
        if topk is None:
            topk = getattr(retriever, "default_topk", DEFAULT_TOPK)
        self.tokenizer, self.retriever, self.cfg, self.topk = tokenizer, retriever, rollout_cfg, topk
        self.template = get_template(template)
        policy = rollout_cfg.invalid_action
        if policy == "template":
            policy = self.template.on_invalid_action
        if policy not in ("end", "retry"):
            raise ValueError(f"rollout.invalid_action={policy!r}; expected end, retry or template")
        self.invalid_policy = policy
        self.reward_fn = reward_fn or default_reward_fn(self.template)
        self.tool_limit_ids = self.encode(tool_limit_notice(self.template))
        self.retry_ids = self.encode(invalid_action_message(self.template))

    # -- text <-> ids ----------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def prompt_ids(self, question: str, index: int = 0) -> list[int]:
        ids = prompt_ids(self.tokenizer, build_messages(self.template, question))
        if len(ids) > self.cfg.max_prompt_tokens:
            raise ValueError(f"question {index} ({question[:60]!r}...) has a prompt of {len(ids)} "
                             f"tokens > rollout.max_prompt_tokens={self.cfg.max_prompt_tokens}")
        return ids

    # -- actions and observations -----------------------------------------------------------

    def parse(self, text: str) -> Action:
        return parse_action(text, self.template)

    def search(self, queries: Sequence[str]) -> list[list[int]]:
        """Observation ids for each query (one batched retriever call)."""
        if not queries:
            return []
        hits = self.retriever.search(list(queries), topk=self.topk)
        return [self.encode(render_observation(self.template, [h["document"] for h in row]))
                for row in hits]

    def extract_answer(self, response: str) -> str | None:
        from ..reward import extract_prediction

        return extract_prediction(response, self.template.answer_style)

    def reward(self, response: str, golden_answers: Sequence[str]) -> float:
        return float(self.reward_fn(response, golden_answers))


@dataclass
class PrefixBox:
    """The KV prefix of one chain (its latest turn's cache). Every node the chain generated
    points at the box; any node's context is a prefix of the box's sequence."""

    prefix: KVPrefix | None = None


@dataclass
class Chain:
    """A trajectory being rolled out: it generates ``node``'s turn next."""

    tree: RolloutTree
    node: Node
    context: list[int]
    """``tree.context_ids(node.id)``, kept incrementally."""
    box: PrefixBox = field(default_factory=PrefixBox)
    tree_index: int = 0
    first_turn_entropy: float | None = None
    """AEPO's H_init: the entropy of the first turn this chain generated."""


@dataclass
class RolloutState:
    """Bookkeeping shared by the tree builders: which KV prefix covers which node."""

    boxes: dict[tuple[int, int], PrefixBox] = field(default_factory=dict)
    root_boxes: dict[int, PrefixBox] = field(default_factory=dict)
    share_prefixes: bool = True

    def box_for_context_of(self, tree_index: int, node_id: int) -> PrefixBox | None:
        """A box whose sequence starts with the context of ``node_id``'s turn (None when
        prefixes are not shared between chains)."""
        if not self.share_prefixes:
            return None
        if node_id == ROOT:
            return self.root_boxes[tree_index]
        return self.boxes[(tree_index, node_id)]


OnRound = Callable[[list[Chain], list[TurnResult]], list[Chain]]


def _turn_budget(cfg, completion_len: int) -> int:
    return min(cfg.max_turn_tokens, cfg.max_response_tokens - completion_len)


def _finish(node: Node, reason: str) -> None:
    node.is_leaf, node.finish_reason = True, reason


def _apply_turn(env: SearchEnv, chain: Chain, result: TurnResult) -> str | None:
    """Store the sampled turn on the chain's node; return the query to search, if any."""
    node, cfg = chain.node, env.cfg
    node.token_ids, node.logps = result.token_ids, result.logps
    node.entropies, node.topk_entropies = result.entropies, result.topk_entropies
    node.text = env.decode(result.token_ids)
    node.action = action = env.parse(node.text)
    chain.context = chain.context + result.token_ids
    chain.box.prefix = result.prefix
    used = node.end
    if action.kind == "answer":
        _finish(node, "answer")
    elif action.kind == "search":
        if node.tool_calls >= cfg.max_tool_calls:
            node.obs_ids, node.obs_kind = list(env.tool_limit_ids), "tool_limit"
        else:
            node.tool_calls += 1
            return action.query
    elif not result.stopped:  # cut by the budget: no closing tag could come
        _finish(node, "response_length" if used >= cfg.max_response_tokens else "turn_length")
    elif env.invalid_policy == "retry":
        node.obs_ids, node.obs_kind = list(env.retry_ids), "retry"
    else:
        _finish(node, "invalid")
    return None


def _continue(chain: Chain, cfg, expansion_round: int) -> Chain | None:
    """After the observation: a new child node to generate, or None if the branch ends."""
    node = chain.node
    if node.is_leaf:
        return None
    if node.end + len(node.obs_ids) >= cfg.max_response_tokens:
        node.obs_ids, node.obs_kind = [], ""
        _finish(node, "no_room")
        return None
    chain.context = chain.context + node.obs_ids
    chain.node = chain.tree.add_child(node.id, expansion_round)
    return chain


def run_chains(backend: TurnBackend, env: SearchEnv, chains: list[Chain], state: RolloutState,
               on_round: OnRound | None = None) -> None:
    """Roll every chain out to a leaf, all chains' turns batched together round by round.

    ``on_round(continuing, results)`` (AEPO) sees the chains that go on after each round, with
    the results of their last turn, and may return extra chains to add.
    """
    active = list(chains)
    while active:
        for chain in active:
            state.boxes[(chain.tree_index, chain.node.id)] = chain.box
        requests = [TurnRequest(c.context, _turn_budget(env.cfg, len(c.context) - len(c.tree.prompt_ids)),
                                c.box.prefix) for c in active]
        results = backend.generate_turns(requests)
        queries: list[tuple[Chain, str]] = []
        for chain, result in zip(active, results):
            query = _apply_turn(env, chain, result)
            if query is not None:
                queries.append((chain, query))
        for (chain, _), obs in zip(queries, env.search([q for _, q in queries])):
            chain.node.obs_ids, chain.node.obs_kind = obs, "observation"
        by_chain = {id(c): r for c, r in zip(active, results)}
        continuing = []
        for chain in active:
            round_ = chain.node.expansion_round
            if _continue(chain, env.cfg, round_) is not None:
                continuing.append(chain)
        if on_round is not None:
            continuing += on_round(continuing, [by_chain[id(c)] for c in continuing])
        active = continuing


def start_chain(tree: RolloutTree, tree_index: int, parent: int, expansion_round: int,
                box_source: PrefixBox | None) -> Chain:
    """A new chain whose first turn is a new child of ``parent`` (re-using the KV prefix of
    ``box_source``, whose sequence starts with the parent's full context)."""
    node = tree.add_child(parent, expansion_round)
    prefix = box_source.prefix if box_source is not None else None
    return Chain(tree=tree, node=node, context=tree.context_ids(node.id), box=PrefixBox(prefix),
                 tree_index=tree_index)


def make_trees(env: SearchEnv, questions: Sequence[str],
               golden_answers: Sequence[Sequence[str]] | None,
               prompt_ids: Sequence[int] | None = None) -> list[RolloutTree]:
    """One empty tree (root only) per question."""
    golden = golden_answers if golden_answers is not None else [[] for _ in questions]
    if len(golden) != len(questions):
        raise ValueError(f"{len(questions)} questions but {len(golden)} golden-answer lists")
    ids = prompt_ids if prompt_ids is not None else range(len(questions))
    return [RolloutTree(prompt_index=int(pid), question=q, golden_answers=list(g),
                        prompt_ids=env.prompt_ids(q, i))
            for i, (pid, q, g) in enumerate(zip(ids, questions, golden))]


def init_state(backend: TurnBackend, trees: Sequence[RolloutTree],
               share_prefixes: bool = True) -> RolloutState:
    """Prefill every prompt once; all chains of a prompt then share its KV prefix.

    ``share_prefixes=False`` (benchmarks) gives every new chain an empty cache instead: a chain
    still reuses its own cache from turn to turn, but the prompt and, for a branch, the
    ancestor's context are recomputed.
    """
    state = RolloutState(share_prefixes=share_prefixes)
    prefixes = backend.prefill([t.prompt_ids for t in trees]) if share_prefixes else [None] * len(trees)
    for i, prefix in enumerate(prefixes):
        state.root_boxes[i] = PrefixBox(prefix)
    return state


def score_trees(env: SearchEnv, trees: Sequence[RolloutTree]) -> None:
    """Fill ``reward`` on every leaf with the environment's reward function."""
    for tree in trees:
        for leaf in tree.leaves():
            traj = tree.trajectory(leaf, env.decode, env.extract_answer)
            tree.nodes[leaf].reward = env.reward(traj.response_text, tree.golden_answers)


def rollout_chains(model, tokenizer, template, retriever, questions: Sequence[str], rollout_cfg,
                   greedy: bool = True, golden_answers: Sequence[Sequence[str]] | None = None,
                   seed: int = 0, backend: TurnBackend | None = None,
                   reward_fn: RewardFn | None = None) -> list[Trajectory]:
    """One chain per question (greedy by default: validation, docs/method.md §5), batched.

    Returns one :class:`Trajectory` per question, in order; ``reward`` is filled when
    ``golden_answers`` are given.
    """
    env = SearchEnv(tokenizer, template, retriever, rollout_cfg, reward_fn)
    backend = backend or make_backend(model, tokenizer, rollout_cfg, STOP_SEQUENCES, seed=seed,
                                      greedy=greedy)
    trees = make_trees(env, questions, golden_answers)
    state = init_state(backend, trees)
    chains = [start_chain(t, i, ROOT, 0, state.root_boxes[i]) for i, t in enumerate(trees)]
    run_chains(backend, env, chains, state)
    if golden_answers is not None:
        score_trees(env, trees)
    return [t.trajectory(t.leaves()[0], env.decode, env.extract_answer) for t in trees]
