"""The agent loop on token ids: tool limit, invalid actions, length limits, observations, and
the no-re-tokenisation guarantee. Rules are checked with a scripted backend (exact actions);
the id bookkeeping with a real tiny Qwen3 (tag-biased, random weights) on a smoke TinyWorld."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from at2po_lib.prompts import invalid_action_message, render_observation, tool_limit_notice
from at2po_lib.rollout.agent import SearchEnv, rollout_chains
from at2po_lib.rollout.backends import HFBackend
from at2po_lib.rollout.sampling import SamplingSpec
from at2po_lib.rollout.toy import ScriptedBackend, ToySetup
from at2po_lib.rollout.trees import rollout_trees


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AT2PO_ARTIFACTS", str(tmp_path_factory.mktemp("artifacts")))
        torch.set_num_threads(1)  # a tiny model on shared cores: one thread is fastest
        yield ToySetup("smoke", seed=0)


def cfg_with(toy, **changes):
    return dataclasses.replace(toy.cfg.rollout, **changes)


def run_script(toy, script, n=1, **changes):
    cfg = cfg_with(toy, **changes)
    questions, golden = toy.questions(n)
    backend = ScriptedBackend(toy.tokenizer, script)
    trees = rollout_trees(None, toy.tokenizer, toy.template, toy.retriever, questions, golden, cfg,
                          expansion="chain", num_chains=1, backend=backend)
    return trees, backend


def chain_nodes(tree):
    return [tree.nodes[i] for i in tree.path(tree.leaves()[0])]


def test_tool_limit_inserts_the_notice_and_generation_goes_on(toy):
    trees, _ = run_script(toy, lambda ctx, rng: "<search> capital </search>", max_tool_calls=2,
                          max_response_tokens=900)
    nodes = chain_nodes(trees[0])
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    assert [n.obs_kind for n in nodes[:2]] == ["observation", "observation"]
    assert len(nodes) > 3  # the third search got the notice and the chain went on
    for n in nodes[2:-1]:
        assert n.obs_kind == "tool_limit"
        assert n.obs_ids == env.encode(tool_limit_notice(toy.template))
    assert [n.tool_calls for n in nodes[:4]] == [1, 2, 2, 2]
    assert nodes[-1].finish_reason in ("no_room", "response_length")


def test_invalid_action_ends_the_branch_by_default(toy):
    trees, _ = run_script(toy, lambda ctx, rng: "no tag here <|im_end|>")
    (node,) = chain_nodes(trees[0])
    assert node.is_leaf and node.finish_reason == "invalid" and node.action.kind == "invalid"


def test_invalid_action_retry_appends_the_corrective_message(toy):
    questions, golden = toy.questions(1)
    gold = golden[0][0]

    def script(ctx, rng):  # first turn invalid, then the right answer
        return f"<answer> {gold} </answer>" if len(ctx) > len(script.prompt) else "oops <|im_end|>"

    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    script.prompt = env.prompt_ids(questions[0])
    trees, _ = run_script(toy, script, invalid_action="retry")
    first, second = chain_nodes(trees[0])
    assert first.obs_kind == "retry"
    assert first.obs_ids == env.encode(invalid_action_message(toy.template))
    assert second.finish_reason == "answer"
    traj = trees[0].trajectory(second.id, env.decode, env.extract_answer)
    # the corrective message is masked out of the loss
    assert traj.sampled_mask == [1] * len(first.token_ids) + [0] * len(first.obs_ids) + \
        [1] * len(second.token_ids)
    assert traj.answer == gold and traj.reward == 1.0 and traj.num_turns == 2


def test_empty_query_is_invalid(toy):
    trees, _ = run_script(toy, lambda ctx, rng: "<search>  </search>")
    (node,) = chain_nodes(trees[0])
    assert node.finish_reason == "invalid" and node.action.reason == "empty search query"


def test_turn_cut_by_its_budget_ends_the_branch(toy):
    trees, _ = run_script(toy, lambda ctx, rng: "word " * 40, max_turn_tokens=8)
    (node,) = chain_nodes(trees[0])
    assert len(node.token_ids) == 8 and node.finish_reason == "turn_length"


def test_observation_without_room_makes_a_leaf(toy):
    trees, backend = run_script(toy, lambda ctx, rng: "<search> capital </search>",
                                max_response_tokens=30)
    (node,) = chain_nodes(trees[0])
    assert node.finish_reason == "no_room" and node.obs_ids == []
    assert len(backend.requests) == 1


def test_prompt_longer_than_the_limit_is_an_error(toy):
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, cfg_with(toy, max_prompt_tokens=5))
    with pytest.raises(ValueError, match="question 3"):
        env.prompt_ids("what is the capital of somewhere far away", index=3)


def test_turn_budget_shrinks_with_the_response_budget(toy):
    trees, backend = run_script(toy, lambda ctx, rng: "<search> capital </search>",
                                max_response_tokens=400, max_turn_tokens=16)
    used = [len(r.context) - len(trees[0].prompt_ids) for r in backend.requests]
    assert all(r.max_new_tokens == min(16, 400 - u) for r, u in zip(backend.requests, used))


class RecordingBackend(HFBackend):
    """The real backend, remembering every sampled turn."""

    def generate_turns(self, requests):
        results = super().generate_turns(requests)
        self.log = getattr(self, "log", []) + [(list(q.context), r) for q, r in zip(requests, results)]
        return results


def test_ids_are_sampled_ids_plus_observation_ids_never_retokenised(toy):
    cfg = toy.cfg.rollout
    questions, golden = toy.questions(6)
    backend = RecordingBackend(toy.model, toy.tokenizer, SamplingSpec(temperature=1.0),
                               ("</search>", "</answer>"), seed=0)
    trees = rollout_trees(toy.model, toy.tokenizer, toy.template, toy.retriever, questions,
                          golden, cfg, backend=backend, seed=0)
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, cfg)
    # Observations hold the profile's top-k (smoke inherits tiny's 2), as the demonstrations do.
    assert env.topk == toy.cfg.retrieval.topk == 2
    context_of = {id(r.token_ids): ctx for ctx, r in backend.log}  # sampled list -> its context
    searched = 0
    for tree in trees:
        for leaf in tree.leaves():
            traj = tree.trajectory(leaf, env.decode, env.extract_answer)
            expect = []
            for node in (tree.nodes[i] for i in tree.path(leaf)):
                # the node holds the backend's own list, sampled from exactly this context
                assert context_of[id(node.token_ids)] == tree.context_ids(node.id)
                expect += node.token_ids
                if node.obs_kind == "observation":
                    searched += 1
                    hits = toy.retriever.search([node.action.query], topk=2)[0]
                    obs = env.encode(render_observation(toy.template, [h["document"] for h in hits]))
                    assert node.obs_ids == obs
                expect += node.obs_ids
            assert traj.completion_ids == expect
            assert traj.response_text == env.decode(traj.completion_ids)
    assert searched > 0, "the biased toy policy should search at least once"


def test_greedy_chains_are_deterministic_and_complete(toy):
    questions, golden = toy.questions(3)
    args = (toy.model, toy.tokenizer, toy.template, toy.retriever, questions, toy.cfg.rollout)
    a = rollout_chains(*args, greedy=True, golden_answers=golden)
    b = rollout_chains(*args, greedy=True)
    assert [t.completion_ids for t in a] == [t.completion_ids for t in b]
    for t in a:
        assert t.num_turns == len(t.turns) and t.finish_reason
        assert len(t.completion_ids) == len(t.sampled_mask) == len(t.logps) == len(t.turn_ids)
        assert t.reward in (0.0, 1.0)
        for i, turn in enumerate(t.turns):
            assert set(t.turn_ids[turn.start:turn.end]) == {i}
