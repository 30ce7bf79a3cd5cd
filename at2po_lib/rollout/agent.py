r"""The multi-turn search agent on token ids: environment, turn loop, greedy chains (docs/method.md §1).

One trajectory (authors' code, ``vllm_rollout_with_tools_tree_offline.py``,
``_process_node_outputs`` and ``_create_child_nodes_from_tool_results``)::

    prompt = chat_template(build_messages(template, question), add_generation_prompt=True)
    repeat:
        sample until a stop string (</search>), EOS, or the call's token budget   (loss mask 1)
        </search>, calls left  -> query = clean(last <search> ... </search>); obs = render(search)
                                  -> a child node: obs (mask 0) + the next turn
        </search>, limit hit   -> the notice is inserted (mask 0) and generation goes on IN THE
                                  SAME NODE, which can then only end (a leaf)
        EOS                    -> leaf
        budget of the call hit -> response budget left: go on in the same node; else leaf

Rules (authors' code unless named otherwise):

- **Token ids only.** Turns are appended as the sampled ids and observations as the ids of the
  observation text encoded *on its own*; the trajectory is never decoded and re-tokenised
  (docs/method.md §1: re-tokenisation drift destabilised Tree-GRPO on Qwen3). Text is decoded per
  turn only to parse the action, and per trajectory only for the reward and for display.
- **Stops.** The template's ``stops`` (``</search>``; Search-R1's also ``</answer>``) and EOS.
  A final answer therefore runs on to EOS, which is sampled, kept in the turn and trained, and
  the reward's format check sees whatever was written after ``</answer>``.
- **Turn length.** No per-turn cap by default (``rollout.max_turn_tokens = 0``): a call gets
  the whole remaining response budget. With a cap, a call that reaches it continues in the
  same node (the authors' ``length`` handling).
- **Tool limit.** At most ``max_tool_calls`` (6) searches; at a later ``</search>`` the
  template's tool-limit notice is inserted inside the node (mask 0) and the same node goes on,
  so no node after the limit is an expansion candidate with a value of its own.
- **Empty query** (nothing between the last ``<search>`` and ``</search>`` after cleaning):
  EOS is appended and the branch ends (``invalid``). The authors' EOS is trained (mask 1);
  here it has mask 0, as the HF backend's recorded old log-probs hold none for a token that
  was not sampled (docs/method.md §11).
- **Invalid action** under the ``retry`` policy (Search-R1): a turn that stops without a
  usable action gets the corrective message and a retry; under ``end`` (authors') EOS ends the
  branch whatever the text holds.
- **Observation too long.** An observation that does not fit in the response budget is cut to
  what is left; its child is an empty leaf (``response_length``), as the authors' code builds
  the child and marks it a leaf when the response budget is spent. A prompt longer than
  ``max_prompt_tokens`` is an error naming the question.
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

from ..protocol.actions import Action, last_tag_content, parse_action
from ..protocol.prompts import (
    PromptTemplate,
    build_messages,
    clean_query,
    get_template,
    invalid_action_message,
    prompt_ids,
    render_observation,
    tool_limit_notice,
)
from ..retrieval.base import DEFAULT_TOPK
from ..protocol.reward import atpo_reward, exact_match, extract_prediction
from .backends import make_backend
from .kvcache import KVPrefix
from .stops import StopMatcher
from .structures import ROOT, Node, RolloutTree
from .turns import TurnBackend, TurnRequest, TurnResult

__all__ = [
    "SearchEnv",
    "Sampler",
    "Forest",
    "Chain",
    "run_chains",
    "default_reward_fn",
    "score_trees",
    "turn_stops",
]

RewardFn = Callable[[str, Sequence[str]], float]
STOP_SEQUENCES = ("</search>",)
"""The authors' stops (the ``atpo`` and ``tiny`` templates'); :func:`turn_stops` gives a
template's own."""


def turn_stops(template: str | PromptTemplate) -> tuple[str, ...]:
    """The strings that end a turn besides EOS for ``template`` (its ``stops`` field)."""
    return tuple(get_template(template).stops)


def default_reward_fn(template: PromptTemplate) -> RewardFn:
    """``atpo_reward`` for boxed-answer templates, EM of the extracted answer otherwise."""
    if template.answer_style == "boxed":
        return lambda response, golden: atpo_reward(response, list(golden))
    return lambda response, golden: exact_match(extract_prediction(response, "plain"), list(golden))


class SearchEnv:
    """Everything between the model and the world: prompts, actions, observations, rewards."""

    def __init__(
        self,
        tokenizer,
        template: str | PromptTemplate,
        retriever,
        rollout_cfg,
        reward_fn: RewardFn | None = None,
        topk: int | None = None,
    ) -> None:
        # topk None: the retriever's default_topk (the profile's retrieval.topk when the
        # retriever came from build_retriever), so rollouts see what demonstrations saw.
        if topk is None:
            topk = getattr(retriever, "default_topk", DEFAULT_TOPK)
        self.tokenizer, self.retriever, self.cfg, self.topk = (
            tokenizer,
            retriever,
            rollout_cfg,
            topk,
        )
        self.template = get_template(template)
        policy = rollout_cfg.invalid_action
        if policy == "template":
            policy = self.template.on_invalid_action
        if policy not in ("end", "retry"):
            raise ValueError(f"rollout.invalid_action={policy!r}; expected end, retry or template")
        self.invalid_policy = policy
        if rollout_cfg.max_turn_tokens < 0:
            raise ValueError(
                f"rollout.max_turn_tokens={rollout_cfg.max_turn_tokens}; expected 0 "
                "(no per-turn cap) or a positive cap"
            )
        self.reward_fn = reward_fn or default_reward_fn(self.template)
        self.tool_limit_ids = self.encode(tool_limit_notice(self.template))
        self.retry_ids = self.encode(invalid_action_message(self.template))
        self.stops = turn_stops(self.template)
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos_token_id: a turn could never end")
        self.eos_id = int(eos)
        self.matcher = StopMatcher.build(tokenizer, self.stops, len(tokenizer))

    # -- text <-> ids ----------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def prompt_ids(self, question: str, index: int = 0) -> list[int]:
        ids = prompt_ids(self.tokenizer, build_messages(self.template, question))
        if len(ids) > self.cfg.max_prompt_tokens:
            raise ValueError(
                f"question {index} ({question[:60]!r}...) has a prompt of {len(ids)} "
                f"tokens > rollout.max_prompt_tokens={self.cfg.max_prompt_tokens}"
            )
        return ids

    # -- actions and observations -----------------------------------------------------------

    def parse(self, text: str) -> Action:
        return parse_action(text, self.template)

    def stop_string(self, token_ids: Sequence[int]) -> str | None:
        """The stop string a stopped generation call ended on, or None when it ended on EOS
        (a special token: it decodes to nothing). A stop string ends a call as soon as it is
        complete, so its last character is in the call's last token (which may carry text after
        it): the backends' own automaton (:mod:`.stops`) says which string that token
        completes."""
        ids = list(token_ids)
        if not ids or not self.decode(ids[-1:]):
            return None
        return self.matcher.completed_by_last(ids)

    def query_of(self, text: str) -> str:
        """The cleaned query of a turn that stopped at ``</search>`` ('' when there is none)."""
        content = last_tag_content(text, "search")
        return clean_query(self.template, content) if content is not None else ""

    def search(self, queries: Sequence[str]) -> list[list[int]]:
        """Observation ids for each (cleaned) query (one batched retriever call)."""
        if not queries:
            return []
        hits = self.retriever.search(list(queries), topk=self.topk)
        return [
            self.encode(render_observation(self.template, [h["document"] for h in row]))
            for row in hits
        ]

    def extract_answer(self, response: str) -> str | None:
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
    """Tokens the next generation call may sample: the rest of the response budget, or less
    when a per-turn cap is set (``max_turn_tokens > 0``)."""
    left = cfg.max_response_tokens - completion_len
    return min(cfg.max_turn_tokens, left) if cfg.max_turn_tokens > 0 else left


def _finish(node: Node, reason: str) -> None:
    node.is_leaf, node.finish_reason = True, reason


SAME_NODE, NEW_CHILD, SEARCH, LEAF = "same", "child", "search", "leaf"
"""What follows a generation call: more generation in the same node, a child after the
retry message, a search (then a child), or nothing (a leaf)."""


def _apply_turn(env: SearchEnv, chain: Chain, result: TurnResult) -> tuple[str, str | None]:
    """Store a generation call's tokens on the chain's node and decide what comes next;
    returns ``(next, query)`` with ``query`` set for :data:`SEARCH`."""
    node, cfg = chain.node, env.cfg
    node.append_sampled(result.token_ids, result.logps, result.entropies, result.topk_entropies)
    chain.context = chain.context + result.token_ids
    chain.box.prefix = result.prefix
    node.text = env.decode(node.token_ids)
    segment = env.decode(node.token_ids[node.segment_start :])
    node.action = action = env.parse(segment)
    budget_left = cfg.max_response_tokens - node.end > 0
    if not result.stopped:  # the call's token budget ended it
        if not budget_left:
            _finish(node, "response_length")
            return LEAF, None
        return SAME_NODE, None
    stop = env.stop_string(result.token_ids)
    if stop == "</search>":
        return _after_search_stop(env, node, segment)
    # EOS, or a template's other stop (Search-R1's </answer>)
    if action.kind == "answer":
        _finish(node, "answer")
        return LEAF, None
    if env.invalid_policy == "retry":
        node.obs_ids, node.obs_kind = list(env.retry_ids), "retry"
        return NEW_CHILD, None
    _finish(node, "eos" if stop is None else "invalid")
    return LEAF, None


def _after_search_stop(env: SearchEnv, node: Node, segment: str) -> tuple[str, str | None]:
    """A call that ended at ``</search>``: search, the tool-limit notice, or an empty query."""
    if node.tool_calls >= env.cfg.max_tool_calls:
        node.append_inserted(env.tool_limit_ids)
        node.obs_kind = "tool_limit"
        if env.cfg.max_response_tokens - node.end > 0:
            return SAME_NODE, None
        _finish(node, "response_length")
        return LEAF, None
    node.tool_calls += 1
    query = env.query_of(segment)
    if query:
        # the query the tool gets decides, even if an </answer> closed earlier in the turn
        node.action = Action("search", query=query, content=query, end=len(segment))
        return SEARCH, query
    node.action = Action("invalid", content="", reason="empty search query", end=len(segment))
    if env.invalid_policy == "retry":
        node.obs_ids, node.obs_kind = list(env.retry_ids), "retry"
        return NEW_CHILD, None
    node.obs_ids, node.obs_kind = [env.eos_id], "eos"
    _finish(node, "invalid")
    return LEAF, None


def _continue(chain: Chain, cfg, expansion_round: int) -> Chain | None:
    """After the observation: a new child node to generate, or None if the branch ends.

    An observation that does not fit in the response budget is cut to what is left and its
    child is an empty leaf (authors' code: the child exists, and is a leaf because the
    response budget is spent)."""
    node = chain.node
    if node.is_leaf:
        return None
    left = cfg.max_response_tokens - node.end
    if len(node.obs_ids) >= left:
        node.obs_ids = node.obs_ids[: max(left, 0)]
        child = chain.tree.add_child(node.id, expansion_round)
        _finish(child, "response_length")
        return None
    chain.context = chain.context + node.obs_ids
    chain.node = chain.tree.add_child(node.id, expansion_round)
    return chain


def run_chains(
    backend: TurnBackend,
    env: SearchEnv,
    chains: list[Chain],
    state: RolloutState,
    on_round: OnRound | None = None,
) -> None:
    """Roll every chain out to a leaf, all chains' turns batched together.

    A backend whose ``grouping`` is ``round`` (the HF backend on a GPU, :mod:`.decoding`; the
    vLLM backend's queue, :mod:`.vllm_queue`) runs every turn of every chain in one decode call
    (:func:`_run_in_one_call`); otherwise one generation call per turn depth.
    ``on_round(continuing, results)`` (AEPO) sees the chains that go on after each turn depth,
    with the results of their last generation call, and may return extra chains to add (it needs the turn depths: always per turn). A chain whose node
    already holds tokens goes on inside the same turn (a length stop, the tool-limit notice);
    the others start a new turn after a tool result.
    """
    chains = [chain for chain in chains if _budget_left(env, chain)]
    if on_round is None and getattr(backend, "grouping", "turn") == "round" and chains:
        _run_in_one_call(backend, env, chains, state)
        return
    active = list(chains)
    while active:
        for chain in active:
            state.boxes[(chain.tree_index, chain.node.id)] = chain.box
        results = backend.generate_turns([_request(env, c) for c in active])
        continuing = _after_turns(env, active, results)
        if on_round is not None:
            by_chain = {id(c): r for c, r in zip(active, results)}
            continuing += on_round(continuing, [by_chain[id(c)] for c in continuing])
        active = continuing


def _budget_left(env: SearchEnv, chain: Chain) -> bool:
    """Whether ``chain``'s first turn has a token to sample; if not, its node is an empty leaf
    at the response budget. A node whose observation was cut to the budget stays a candidate
    for expansion (:func:`_continue`), and Tree-GRPO continues *after* a picked node: that
    continuation is such an empty leaf, as :func:`_continue` makes one."""
    if _turn_budget(env.cfg, len(chain.context) - len(chain.tree.prompt_ids)) >= 1:
        return True
    _finish(chain.node, "response_length")
    return False


def _request(env: SearchEnv, chain: Chain) -> TurnRequest:
    """The next generation call of ``chain``: its context, budget and cache."""
    budget = _turn_budget(env.cfg, len(chain.context) - len(chain.tree.prompt_ids))
    return TurnRequest(chain.context, budget, chain.box.prefix)


def _after_turns(env: SearchEnv, chains: list[Chain], results: list[TurnResult]) -> list[Chain]:
    """Apply each chain's generation call, run the searches they asked for (one batched
    retriever call), and return the chains that go on (context updated)."""
    queries: list[tuple[Chain, str]] = []
    steps: list[str] = []
    for chain, result in zip(chains, results):
        step, query = _apply_turn(env, chain, result)
        steps.append(step)
        if step == SEARCH:
            queries.append((chain, query))
    for (chain, _), obs in zip(queries, env.search([q for _, q in queries])):
        chain.node.obs_ids, chain.node.obs_kind = obs, "observation"
    continuing = []
    for chain, step in zip(chains, steps):
        if step == SAME_NODE:  # the same turn goes on (its node already has tokens),
            # after the inserted notice if there is one
            chain.context = chain.tree.context_ids(chain.node.id) + chain.node.token_ids
            continuing.append(chain)
        elif step != LEAF and _continue(chain, env.cfg, chain.node.expansion_round) is not None:
            continuing.append(chain)
    return continuing


def _run_in_one_call(backend, env: SearchEnv, chains: list[Chain], state: RolloutState) -> None:
    """:func:`run_chains` in one decode call (``RoundSession``; vLLM: ``QueueSession``) per
    ``backend.max_batch_size`` chains (HF: ``rollout.max_batch_rows``; vLLM: None, all of them,
    its scheduler bounding the running rows): a chain whose turn ends is resumed with its next
    context while the others decode, and closed at its leaf, when its box gets the chain's
    cache (for the branches of later rounds)."""
    size = backend.max_batch_size or len(chains)
    for start in range(0, len(chains), size):
        _run_session(backend, env, chains[start : start + size], state)


def _run_session(backend, env: SearchEnv, chains: list[Chain], state: RolloutState) -> None:
    for chain in chains:
        state.boxes[(chain.tree_index, chain.node.id)] = chain.box
    capacity = max(len(c.tree.prompt_ids) for c in chains) + env.cfg.max_response_tokens + 1
    with backend.open_session([_request(env, c) for c in chains], capacity) as session:
        while finished := session.next_turns():
            ended = [chains[row] for row, _ in finished]
            going = {id(c) for c in _after_turns(env, ended, [r for _, r in finished])}
            for (row, _), chain in zip(finished, ended):
                if id(chain) in going:
                    state.boxes[(chain.tree_index, chain.node.id)] = chain.box
                    session.resume(row, chain.context, _request(env, chain).max_new_tokens)
                else:
                    chain.box.prefix = session.close(row)


def start_chain(
    tree: RolloutTree,
    tree_index: int,
    parent: int,
    expansion_round: int,
    box_source: PrefixBox | None,
) -> Chain:
    """A new chain whose first turn is a new child of ``parent`` (re-using the KV prefix of
    ``box_source``, whose sequence starts with the parent's full context)."""
    node = tree.add_child(parent, expansion_round)
    prefix = box_source.prefix if box_source is not None else None
    return Chain(
        tree=tree,
        node=node,
        context=tree.context_ids(node.id),
        box=PrefixBox(prefix),
        tree_index=tree_index,
    )


def make_trees(
    env: SearchEnv,
    questions: Sequence[str],
    golden_answers: Sequence[Sequence[str]] | None,
    prompt_ids: Sequence[int] | None = None,
) -> list[RolloutTree]:
    """One empty tree (root only) per question."""
    golden = golden_answers if golden_answers is not None else [[] for _ in questions]
    if len(golden) != len(questions):
        raise ValueError(f"{len(questions)} questions but {len(golden)} golden-answer lists")
    ids = prompt_ids if prompt_ids is not None else range(len(questions))
    return [
        RolloutTree(
            prompt_index=int(pid),
            question=q,
            golden_answers=list(g),
            prompt_ids=env.prompt_ids(q, i),
        )
        for i, (pid, q, g) in enumerate(zip(ids, questions, golden))
    ]


def init_state(
    backend: TurnBackend, trees: Sequence[RolloutTree], share_prefixes: bool = True
) -> RolloutState:
    """Prefill every prompt once; all chains of a prompt then share its KV prefix.

    ``share_prefixes=False`` (benchmarks) gives every new chain an empty cache instead: a chain
    still reuses its own cache from turn to turn, but the prompt and, for a branch, the
    ancestor's context are recomputed.
    """
    state = RolloutState(share_prefixes=share_prefixes)
    prefixes = (
        backend.prefill([t.prompt_ids for t in trees]) if share_prefixes else [None] * len(trees)
    )
    for i, prefix in enumerate(prefixes):
        state.root_boxes[i] = PrefixBox(prefix)
    return state


def score_trees(env: SearchEnv, trees: Sequence[RolloutTree]) -> None:
    """Fill ``reward`` on every leaf with the environment's reward function."""
    for tree in trees:
        for leaf in tree.leaves():
            traj = tree.trajectory(leaf, env.decode, env.extract_answer)
            tree.nodes[leaf].reward = env.reward(traj.response_text, tree.golden_answers)


@dataclass(frozen=True)
class Sampler:
    """What a rollout runs on, built once: the environment (prompts, tools, reward), the
    policy's turn generator, and the seed of both (the backend's sampling and the tree's picks).
    Every rollout shape takes it (:func:`at2po_lib.rollout.trees.rollout`)."""

    env: SearchEnv
    backend: TurnBackend
    seed: int = 0

    @classmethod
    def from_model(cls, model, env: SearchEnv, seed: int = 0, greedy: bool = False) -> Sampler:
        """The backend ``rollout.backend`` names around ``model`` (a Hugging Face model, or a
        ready vLLM engine), stopping at the environment's template's stops."""
        backend = make_backend(model, env.tokenizer, env.cfg, env.stops, seed=seed, greedy=greedy)
        return cls(env, backend, seed)


@dataclass
class Forest:
    """The trees of one rollout while they grow, and what grows them: every tree starts as its
    prompt (the root), every prompt prefilled once (:func:`init_state`); chains are then started
    (:func:`start_chain`) and rolled out together (:meth:`grow`)."""

    sampler: Sampler
    trees: list[RolloutTree]
    state: RolloutState

    @classmethod
    def plant(
        cls,
        sampler: Sampler,
        questions: Sequence[str],
        golden_answers: Sequence[Sequence[str]] | None,
        prompt_ids: Sequence[int] | None = None,
        share_prefixes: bool = True,
        copies: int = 1,
    ) -> Forest:
        """``copies`` empty trees per question, prompt-major (Tree-GRPO grows several), whose
        roots share the question's one prefill."""
        ids = list(prompt_ids) if prompt_ids is not None else list(range(len(questions)))
        golden = golden_answers if golden_answers is not None else [[] for _ in questions]
        trees = make_trees(
            sampler.env,
            [q for q in questions for _ in range(copies)],
            [g for g in golden for _ in range(copies)],
            [p for p in ids for _ in range(copies)],
        )
        state = init_state(sampler.backend, trees[::copies], share_prefixes)
        state.root_boxes = {i: state.root_boxes[i // copies] for i in range(len(trees))}
        return cls(sampler, trees, state)

    def from_roots(self, per_tree: int) -> list[Chain]:
        """``per_tree`` new chains from every root (a tree's first round)."""
        return [
            start_chain(t, i, ROOT, 0, self.state.box_for_context_of(i, ROOT))
            for i, t in enumerate(self.trees)
            for _ in range(per_tree)
        ]

    def grow(self, chains: list[Chain], on_round: OnRound | None = None) -> None:
        """Roll ``chains`` out to their leaves (:func:`run_chains`)."""
        run_chains(self.sampler.backend, self.sampler.env, chains, self.state, on_round)
