"""One decode call per expansion round (``rollout.decode_grouping = round``, at2po_lib.rollout.session):
the row cache's columns by hand, the same trees as the per-turn grouping when greedy, log-probs
equal to a full recompute when sampled, one host sync a decode step."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from host_syncs import counted_syncs

from at2po_lib.config.profile import PolicyConfig
from at2po_lib.policy.model import build_policy
from at2po_lib.protocol.prompts import render_observation
from at2po_lib.rollout.agent import SearchEnv, turn_stops
from at2po_lib.rollout.backends import HFBackend, make_backend
from at2po_lib.rollout.export import recompute_gap, training_rows
from at2po_lib.rollout.kvcache import RowCache
from at2po_lib.rollout.sampling import SamplingSpec
from at2po_lib.rollout.trees import rollout
from at2po_lib.rollout.turns import TurnRequest


@pytest.fixture(scope="module")
def toy(smoke_toy):
    return smoke_toy


def test_write_columns_by_hand():
    # lengths L = [2, 0, 5], new tokens n = [1, 2, 0], q = 2: query j writes L + (j + n) mod q;
    # the real tokens (right-aligned) land at L .. L + n - 1, the padding just after them
    columns = RowCache.write_columns(torch.tensor([2, 0, 5]), torch.tensor([1, 2, 0]), 2)
    assert columns.tolist() == [[3, 2], [0, 1], [5, 6]]


class ScriptedGreedy(torch.nn.Module):
    """A real model whose next-token logits get +50 on a token chosen by the row's last input
    token (and, after an observation, by its position): greedy, every chain searches until
    ``answer_from`` and then answers. Its numbers depend on each row alone, never on how rows
    are grouped; caches, masks and positions are the real model's."""

    def __init__(self, model, tokenizer, template, answer_from: int) -> None:
        super().__init__()
        self.inner, self.config = model, model.config
        self.generation_config = model.generation_config
        ids = tokenizer.convert_tokens_to_ids
        word = tokenizer.encode("the", add_special_tokens=False)[0]
        answer = tokenizer.encode("paris", add_special_tokens=False)[0]
        follow = torch.full((len(tokenizer),), -1, dtype=torch.long)
        follow[ids("<search>")] = word
        follow[word] = ids("</search>")
        follow[ids("<answer>")] = answer
        follow[answer] = ids("</answer>")
        follow[ids("</answer>")] = tokenizer.eos_token_id
        self.follow = follow
        self.obs_end = tokenizer.encode(
            render_observation(template, [{"contents": "x"}]), add_special_tokens=False
        )[-1]
        self.search, self.answer = ids("<search>"), ids("<answer>")
        self.answer_from = answer_from

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(
        self,
        input_ids,
        attention_mask=None,
        position_ids=None,
        cache=None,
        use_cache=True,
        logits_to_keep=1,
    ):
        out = self.inner(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
        )
        last, position = input_ids[:, -1], position_ids[:, -1]
        after_obs = torch.where(position < self.answer_from, self.search, self.answer)
        nxt = torch.where(last == self.obs_end, after_obs, self.follow[last])
        nxt = torch.where(last == self.prompt_end, self.search, nxt)
        out.logits[:, -1] += torch.zeros_like(out.logits[:, -1]).scatter_(
            1, nxt.clamp(min=0)[:, None], torch.where(nxt >= 0, 50.0, 0.0)[:, None]
        )
        return out


def grow(
    toy,
    grouping: str,
    expansion: str,
    temperature: float,
    seed: int = 1,
    n: int = 3,
    model=None,
    **backend_kwargs,
):
    cfg = dataclasses.replace(
        toy.cfg.rollout, temperature=temperature, tree_m=2, tree_l=2, tree_k=2
    )
    model = model or toy.model
    backend = make_backend(
        model,
        toy.tokenizer,
        cfg,
        turn_stops(toy.template),
        seed=seed,
        grouping=grouping,
        **backend_kwargs,
    )
    assert backend.grouping == grouping
    questions, golden = toy.questions(n)
    trees = rollout(toy.sampler(cfg, backend, seed=seed), questions, golden, expansion=expansion)
    return trees, backend


def scripted(toy):
    env = SearchEnv(toy.tokenizer, toy.template, toy.retriever, toy.cfg.rollout)
    prompts = [env.prompt_ids(q) for q in toy.questions(3)[0]]
    model = ScriptedGreedy(
        toy.model, toy.tokenizer, toy.template, answer_from=min(map(len, prompts)) + 150
    )
    model.prompt_end = prompts[0][-1]
    return model


@pytest.mark.parametrize("expansion", ["chain", "entropy"])
def test_greedy_round_grouping_grows_the_turn_groupings_trees(toy, expansion):
    """Greedy, the rows' numbers do not depend on how they are grouped: the same trees
    (tokens, finish reasons, leaves) and log-probs within float error, with chains of several
    turns that end at different steps (so rows rejoin a running call)."""
    model = scripted(toy)
    (turn, by_turn), (round_, by_round) = (
        grow(toy, g, expansion, 0.0, model=model) for g in ("turn", "round")
    )
    rows = [training_rows(turn), training_rows(round_)]
    assert [r["completion_ids"] for r in rows[0]] == [r["completion_ids"] for r in rows[1]]
    assert [r["sampled_mask"] for r in rows[0]] == [r["sampled_mask"] for r in rows[1]]
    for a, b in zip(*rows):
        assert max((abs(x - y) for x, y in zip(a["old_logps"], b["old_logps"])), default=0) < 1e-4
    assert [[n.finish_reason for n in t.nodes] for t in turn] == [
        [n.finish_reason for n in t.nodes] for t in round_
    ]
    assert max(n.depth for t in turn for n in t.nodes) >= 2, "want multi-turn chains"
    assert by_round.stats.generated_tokens == by_turn.stats.generated_tokens


def test_sampled_round_grouping_rows_match_a_full_recompute(toy):
    """Sampled entropy trees grown in one call per round (branches start from closed rows'
    caches): every row's log-probs equal one plain forward pass over the row (1e-5)."""
    trees, _ = grow(toy, "round", "entropy", 1.0, seed=3)
    assert all(len(t.leaves()) == 2 + 2 * 2 for t in trees)
    assert max(n.depth for t in trees for n in t.nodes) >= 2
    rows = training_rows(trees)
    assert recompute_gap(toy.model, rows, 1.0, "cpu", limit=len(rows)) < 1e-5


def test_dropping_closed_rows_changes_nothing(toy):
    """Compaction at every closed row, or never: the same trees."""
    base, _ = grow(toy, "round", "entropy", 0.0, n=2, compact_below=0.0)
    eager, _ = grow(toy, "round", "entropy", 0.0, n=2, compact_below=1.01)
    ids = [[r["completion_ids"] for r in training_rows(t)] for t in (base, eager)]
    assert ids[0] == ids[1]


def _session_syncs(backend, contexts, budget: int) -> int:
    with (
        counted_syncs() as counts,
        backend.open_session([TurnRequest(c, budget) for c in contexts], capacity=1) as session,
    ):
        ended = []
        while len(ended) < len(contexts):
            ended += session.next_turns()
        assert all(len(r.token_ids) == budget and not r.stopped for _, r in ended)
        for row, _ in ended:
            session.close(row)
        assert session.next_turns() == []
    return sum(counts.values())


def test_one_host_sync_per_decode_step_in_a_round_session(toy):
    """Greedy rows that never stop, in a buffer that must grow: 14 steps read back from the
    device exactly 10 more times than 4 steps."""
    plain = build_policy(
        PolicyConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
        ),
        toy.tokenizer,
        seed=4,
    ).eval()
    backend = HFBackend(
        plain, toy.tokenizer, SamplingSpec(temperature=0.0), ("never once",), grouping="round"
    )
    questions, _ = toy.questions(4)
    contexts = [toy.tokenizer.encode(q) for q in questions]
    short, long = (_session_syncs(backend, contexts, n) for n in (4, 14))
    assert long - short == 10


def test_a_row_must_be_resumed_or_closed(toy):
    backend = HFBackend(
        toy.model, toy.tokenizer, SamplingSpec(temperature=0.0), (), grouping="round"
    )
    contexts = [toy.tokenizer.encode(q) for q in toy.questions(2)[0]]
    with backend.open_session([TurnRequest(c, 3) for c in contexts], 64) as session:
        ended = session.next_turns()
        with pytest.raises(RuntimeError, match="neither resumed nor closed"):
            session.next_turns()
        row, result = ended[0]
        with pytest.raises(ValueError, match="does not go past"):
            session.resume(row, contexts[row], 3)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_static_step_a_graph_records_gives_the_eager_steps_tokens(toy, temperature):
    """decode_capture=on runs, on a CPU, the decode step a CUDA graph records (static inputs,
    attention over the cache's full width, recorded again after rows are dropped): the same
    tokens as the eager step, greedy (the scripted multi-turn policy) and sampled (same seed),
    log-probs within float error. The recording itself needs CUDA (the device check)."""
    model = scripted(toy) if temperature == 0.0 else toy.model
    (eager, _), (static, backend) = (
        grow(toy, "round", "entropy", temperature, seed=5, model=model, capture=capture)
        for capture in ("off", "on")
    )
    assert (
        backend.capture
        and not make_backend(
            toy.model, toy.tokenizer, toy.cfg.rollout, (), grouping="round"
        ).capture
    )  # auto: CPU off
    rows = [training_rows(eager), training_rows(static)]
    assert [r["completion_ids"] for r in rows[0]] == [r["completion_ids"] for r in rows[1]]
    for a, b in zip(*rows):
        assert max((abs(x - y) for x, y in zip(a["old_logps"], b["old_logps"])), default=0) < 1e-5
    assert max(n.depth for t in static for n in t.nodes) >= 2
