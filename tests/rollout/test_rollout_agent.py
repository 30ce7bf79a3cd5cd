"""The agent loop on token ids: tool limit, invalid actions, length limits, observations, and
the no-re-tokenisation guarantee. Rules are checked with a scripted backend (exact actions);
the id bookkeeping with a real tiny Qwen3 (tag-biased, random weights) on a smoke TinyWorld."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from at2po_lib.protocol.prompts import invalid_action_message, render_observation, tool_limit_notice
from at2po_lib.rollout.agent import SearchEnv
from at2po_lib.rollout.backends import HFBackend
from at2po_lib.rollout.turns import TurnResult
from at2po_lib.rollout.export import training_rows, tree_arrays
from at2po_lib.rollout.sampling import SamplingSpec
from at2po_lib.rollout.stand_ins import ScriptedBackend, ToySetup
from at2po_lib.rollout.trees import rollout, rollout_chains


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AT2PO_ARTIFACTS", str(tmp_path_factory.mktemp("artifacts")))
        torch.set_num_threads(1)  # a tiny model on shared cores: one thread is fastest
        yield ToySetup("smoke", seed=0)


def cfg_with(toy, **changes):
    return dataclasses.replace(toy.cfg.rollout, **changes)


def run_script(toy, script, n=1, **changes):
    return run_script_with(toy, ScriptedBackend(toy.tokenizer, script), n, **changes)


def run_script_with(toy, backend, n=1, **changes):
    cfg = cfg_with(toy, **changes)
    questions, golden = toy.questions(n)
    trees = rollout(toy.sampler(cfg, backend), questions, golden, expansion="chain", num_leaves=1)
    return trees, backend


def chain_nodes(tree):
    return [tree.nodes[i] for i in tree.path(tree.leaves()[0])]


EOS = "<|im_end|>"


def test_tool_limit_inserts_the_notice_in_the_same_node_which_becomes_a_leaf(toy):
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    notice = env.encode(tool_limit_notice(toy.template))

    def script(ctx, rng):  # search until the notice is in the context, then answer
        if ctx[-len(notice) :] == notice:
            return f"<answer> done </answer>{EOS}"
        return "<search> capital </search>"

    trees, backend = run_script(toy, script, max_tool_calls=2, max_response_tokens=900)
    nodes = chain_nodes(trees[0])
    assert [n.obs_kind for n in nodes] == ["observation", "observation", "tool_limit"]
    assert [n.tool_calls for n in nodes] == [1, 2, 2]
    last = nodes[-1]
    # the third search, the notice (mask 0) and the answer are ONE node, a leaf
    search_ids = env.encode("<search> capital </search>")
    answer_ids = env.encode(f"<answer> done </answer>{EOS}")
    assert last.token_ids == search_ids + notice + answer_ids
    assert last.token_mask == [1] * len(search_ids) + [0] * len(notice) + [1] * len(answer_ids)
    assert last.is_leaf and last.finish_reason == "answer" and last.obs_ids == []
    assert len(backend.requests) == 4  # 3 searches + the answer, the last in the same node
    traj = trees[0].trajectory(last.id, env.decode, env.extract_answer)
    assert traj.sampled_mask[-len(answer_ids) - len(notice) :] == [0] * len(notice) + [1] * len(
        answer_ids
    )
    assert traj.num_turns == 3 and traj.num_tool_calls == 2
    # the notice carries no log-prob and does not enter the node's entropy
    assert last.entropy_nll == pytest.approx(
        -sum(lp for lp, m in zip(last.logps, last.token_mask) if m) / sum(last.token_mask)
    )


def test_the_seventh_search_creates_no_expansion_candidate(toy):
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    notice = env.encode(tool_limit_notice(toy.template))

    def script(ctx, rng):
        if ctx[-len(notice) :] == notice:
            return f"<answer> done </answer>{EOS}"
        return "<search> capital </search>"

    trees, _ = run_script(toy, script, max_response_tokens=2000)  # max_tool_calls = 6
    tree = trees[0]
    nodes = chain_nodes(tree)
    assert len(nodes) == 7 and nodes[-1].is_leaf and nodes[-1].obs_kind == "tool_limit"
    # candidates: the root and the six nodes whose search ran; the 7th search's node is a leaf
    assert tree.inner_nodes() == [0] + [n.id for n in nodes[:6]]
    arrays = tree_arrays(tree)
    assert int(arrays.node_arrays["num_tokens"][nodes[-1].id]) == sum(nodes[-1].token_mask)


def test_eos_ends_the_trajectory_and_is_trained(toy):
    questions, golden = toy.questions(1)
    gold = golden[0][0]
    trees, _ = run_script(toy, lambda ctx, rng: f"<answer> {gold} </answer>{EOS}")
    (node,) = chain_nodes(trees[0])
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    traj = trees[0].trajectory(node.id, env.decode, env.extract_answer)
    assert node.finish_reason == "answer"
    assert traj.completion_ids[-1] == toy.tokenizer.eos_token_id and traj.sampled_mask[-1] == 1
    assert traj.answer == gold and traj.reward == 1.0
    row = training_rows(trees)[0]
    assert row["completion_ids"][-1] == toy.tokenizer.eos_token_id and row["sampled_mask"][-1] == 1


def test_no_stop_at_answer_text_after_it_reaches_the_reward(toy):
    """</answer> is no stop: the turn runs to EOS and the reward sees what came after it."""
    questions, golden = toy.questions(1)
    gold = golden[0][0]

    def script(ctx, rng):
        return f"<answer> {gold} </answer> <answer> no </answer>{EOS}"

    trees, backend = run_script(toy, script)
    (node,) = chain_nodes(trees[0])
    assert len(backend.requests) == 1 and node.text.count("</answer>") == 2
    seen = []
    env = SearchEnv(
        toy.tokenizer,
        toy.template,
        toy.retriever,
        toy.cfg.rollout,
        reward_fn=lambda response, golden: seen.append(response) or 0.0,
    )
    from at2po_lib.rollout.agent import score_trees

    score_trees(env, trees)
    assert seen and seen[0].count("</answer>") == 2


def test_invalid_action_ends_the_branch_at_eos_by_default(toy):
    trees, _ = run_script(toy, lambda ctx, rng: f"no tag here {EOS}")
    (node,) = chain_nodes(trees[0])
    assert node.is_leaf and node.finish_reason == "eos" and node.action.kind == "invalid"


def test_invalid_action_retry_appends_the_corrective_message(toy):
    questions, golden = toy.questions(1)
    gold = golden[0][0]

    def script(ctx, rng):  # first turn invalid, then the right answer
        return f"<answer> {gold} </answer>{EOS}" if len(ctx) > len(script.prompt) else f"oops {EOS}"

    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    script.prompt = env.prompt_ids(questions[0])
    trees, _ = run_script(toy, script, invalid_action="retry")
    first, second = chain_nodes(trees[0])
    assert first.obs_kind == "retry"
    assert first.obs_ids == env.encode(invalid_action_message(toy.template))
    assert second.finish_reason == "answer"
    traj = trees[0].trajectory(second.id, env.decode, env.extract_answer)
    # the corrective message is masked out of the loss
    assert traj.sampled_mask == [1] * len(first.token_ids) + [0] * len(first.obs_ids) + [1] * len(
        second.token_ids
    )
    assert traj.answer == gold and traj.reward == 1.0 and traj.num_turns == 2


@pytest.mark.parametrize(
    "turn", ["<search>  </search>", '<search> "" </search>', "no opening tag </search>"]
)
def test_empty_query_appends_eos_and_ends_the_branch(toy, turn):
    trees, backend = run_script(toy, lambda ctx, rng: turn)
    (node,) = chain_nodes(trees[0])
    assert node.finish_reason == "invalid" and node.action.reason == "empty search query"
    assert node.obs_ids == [toy.tokenizer.eos_token_id] and node.obs_kind == "eos"
    assert len(backend.requests) == 1 and node.tool_calls == 1


def test_queries_lose_their_double_quotes(toy):
    seen = []

    class Recording:
        default_topk = 2

        def search(self, queries, topk):
            seen.extend(queries)
            return toy.retriever.search(queries, topk=topk)

    cfg = cfg_with(toy, max_tool_calls=1)
    questions, golden = toy.questions(1)

    def env_script(ctx, rng):
        return '<search> "capital" city </search>' if not seen else f"<answer> x </answer>{EOS}"

    sampler = toy.sampler(cfg, ScriptedBackend(toy.tokenizer, env_script), retriever=Recording())
    rollout(sampler, questions, golden, expansion="chain", num_leaves=1)
    assert seen == ["capital city"]


class QueueBackend:
    """Returns prepared generation results in order (exact stop flags and tokens)."""

    keeps_cache = False

    def __init__(self, results):
        from at2po_lib.rollout.turns import BackendStats

        self.results, self.requests, self.stats = list(results), [], BackendStats()

    def prefill(self, contexts):
        return [None] * len(contexts)

    def generate_turns(self, requests):
        self.requests += list(requests)
        return [self.results.pop(0) for _ in requests]


def result(ids, stopped):
    return TurnResult(
        token_ids=list(ids),
        logps=[-0.5] * len(ids),
        entropies=[0.1] * len(ids),
        topk_entropies=[0.1] * len(ids),
        stopped=stopped,
    )


def test_a_call_stopped_on_length_continues_in_the_same_node(toy):
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    first = env.encode("<search> capital")  # cut by the call's budget, no stop
    rest = env.encode(" city </search>")
    answer = env.encode(f"<answer> x </answer>{EOS}")
    backend = QueueBackend([result(first, False), result(rest, True), result(answer, True)])
    trees, _ = run_script_with(toy, backend, max_turn_tokens=len(first))
    nodes = chain_nodes(trees[0])
    assert len(nodes) == 2  # one search node (two calls) and the answer node
    assert nodes[0].token_ids == first + rest and nodes[0].token_mask == [1] * len(first + rest)
    assert nodes[0].action.query == "capital city" and nodes[0].obs_kind == "observation"
    # the second call continued the same context, with the rest of the budget
    assert backend.requests[1].context == trees[0].prompt_ids + first
    assert nodes[1].finish_reason == "answer"


def test_turn_cap_reached_goes_on_until_the_response_budget(toy):
    trees, backend = run_script(
        toy, lambda ctx, rng: "word " * 40, max_turn_tokens=8, max_response_tokens=30
    )
    (node,) = chain_nodes(trees[0])
    assert len(node.token_ids) == 30 and node.finish_reason == "response_length"
    assert [r.max_new_tokens for r in backend.requests] == [8, 8, 8, 6]


def test_no_turn_cap_by_default_a_call_gets_the_rest_of_the_budget(toy):
    assert toy.cfg.rollout.max_turn_tokens == 0
    trees, backend = run_script(
        toy,
        lambda ctx, rng: "<search> capital </search>",
        max_response_tokens=400,
        max_tool_calls=2,
    )
    used = [len(r.context) - len(trees[0].prompt_ids) for r in backend.requests]
    assert [r.max_new_tokens for r in backend.requests] == [400 - u for u in used]


def test_observation_that_does_not_fit_is_truncated_and_its_child_is_an_empty_leaf(toy):
    trees, backend = run_script(
        toy, lambda ctx, rng: "<search> capital </search>", max_response_tokens=30
    )
    tree = trees[0]
    parent, child = chain_nodes(tree)
    assert len(parent.token_ids) < 30 and parent.obs_kind == "observation"
    assert parent.end + len(parent.obs_ids) == 30  # the observation was cut to what was left
    full = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout).search(
        ["capital"]
    )[0]
    assert parent.obs_ids == full[: len(parent.obs_ids)] and len(full) > len(parent.obs_ids)
    assert child.is_leaf and child.token_ids == [] and child.finish_reason == "response_length"
    assert not parent.is_leaf and parent.id in tree.inner_nodes()  # still a candidate
    assert len(backend.requests) == 1
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    traj = tree.trajectory(child.id, env.decode, env.extract_answer)
    assert len(traj.completion_ids) == 30 and traj.num_turns == 1  # the empty leaf is no turn
    assert traj.finish_reason == "response_length"


def test_a_continuation_after_a_node_whose_observation_filled_the_budget_is_an_empty_leaf(toy):
    """Tree-GRPO continues after a picked inner node; the node whose observation was cut to
    the budget is one (above). Its continuation asks for no tokens: an empty leaf at the
    budget, as the chain's own child is, and no generation call of 0 tokens."""
    backend = ScriptedBackend(toy.tokenizer, lambda ctx, rng: "<search> capital </search>")
    cfg = cfg_with(toy, max_response_tokens=30)
    questions, golden = toy.questions(1)
    continued = 0
    for seed in range(8):  # Tree-GRPO's random picks: the seeds that pick the full node
        trees = rollout(toy.sampler(cfg, backend, seed=seed), questions, golden, expansion="random")
        for tree in trees:
            for node in tree.nodes[1:]:
                parent = tree.nodes[node.parent]
                if node.expansion_round > 0 and parent.end + len(parent.obs_ids) == 30:
                    assert node.is_leaf and node.token_ids == []
                    assert node.finish_reason == "response_length"
                    continued += 1
    assert continued > 0, "no seed picked a node whose observation filled the budget"
    assert min(r.max_new_tokens for r in backend.requests) >= 1


def test_prompt_longer_than_the_limit_is_an_error(toy):
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, cfg_with(toy, max_prompt_tokens=5))
    with pytest.raises(ValueError, match="question 3"):
        env.prompt_ids("what is the capital of somewhere far away", index=3)


def test_turn_budget_shrinks_with_the_response_budget(toy):
    trees, backend = run_script(
        toy,
        lambda ctx, rng: "<search> capital </search>",
        max_response_tokens=400,
        max_turn_tokens=16,
    )
    used = [len(r.context) - len(trees[0].prompt_ids) for r in backend.requests]
    assert all(r.max_new_tokens == min(16, 400 - u) for r, u in zip(backend.requests, used))


def test_prompt_is_one_system_message_without_a_user_turn(toy):
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    text = toy.tokenizer.decode(env.prompt_ids("who founded the city"))
    assert text.startswith("<|im_start|>system\n") and "<|im_start|>user" not in text
    assert "who founded the city?<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")


class RecordingBackend(HFBackend):
    """The real backend, remembering every sampled turn."""

    def generate_turns(self, requests):
        results = super().generate_turns(requests)
        self.log = getattr(self, "log", []) + [
            (list(q.context), r) for q, r in zip(requests, results)
        ]
        return results


def test_ids_are_sampled_ids_plus_observation_ids_never_retokenised(toy):
    cfg = toy.cfg.rollout
    questions, golden = toy.questions(6)
    backend = RecordingBackend(
        toy.model, toy.tokenizer, SamplingSpec(temperature=1.0), ("</search>",), seed=0
    )
    trees = rollout(toy.sampler(cfg, backend), questions, golden)
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, cfg)
    # Observations hold the profile's top-k (smoke inherits tiny's 2), as the demonstrations do.
    assert env.topk == toy.cfg.retrieval.topk == 2
    searched = 0
    for tree in trees:
        for leaf in tree.leaves():
            traj = tree.trajectory(leaf, env.decode, env.extract_answer)
            expect = []
            for node in (tree.nodes[i] for i in tree.path(leaf)):
                # the node holds the backend's own ids, sampled from exactly this context
                if len(node.token_ids) == 0:
                    continue  # an empty leaf after an observation cut to the budget
                context = tree.context_ids(node.id)
                assert any(
                    ctx == context and node.token_ids[: len(r.token_ids)] == r.token_ids
                    for ctx, r in backend.log
                )
                expect += node.token_ids
                if node.obs_kind == "observation":
                    searched += 1
                    hits = toy.retriever.search([node.action.query], topk=2)[0]
                    obs = env.encode(
                        render_observation(toy.template, [h["document"] for h in hits])
                    )
                    cut = node.end + len(obs) > cfg.max_response_tokens  # truncated to the budget
                    assert node.obs_ids == (obs[: len(node.obs_ids)] if cut else obs)
                expect += node.obs_ids
            assert traj.completion_ids == expect
            assert traj.response_text == env.decode(traj.completion_ids)
    assert searched > 0, "the biased toy policy should search at least once"


def test_greedy_chains_are_deterministic_and_complete(toy):
    questions, golden = toy.questions(3)
    a = rollout_chains(toy.sampler(greedy=True), questions, golden_answers=golden)
    b = rollout_chains(toy.sampler(greedy=True), questions)
    assert [t.completion_ids for t in a] == [t.completion_ids for t in b]
    for t in a:
        assert t.num_turns == len(t.turns) and t.finish_reason
        assert len(t.completion_ids) == len(t.sampled_mask) == len(t.logps) == len(t.turn_ids)
        assert t.reward in (0.0, 1.0)
        for i, turn in enumerate(t.turns):
            assert set(t.turn_ids[turn.start : turn.end]) == {i}
