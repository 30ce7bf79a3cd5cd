"""Stop strings as a token automaton (at2po_lib.rollout.stops): the transition table by hand,
agreement with a search in the decoded text, one build per vocabulary."""

from __future__ import annotations

import copy
import json
import random

import numpy as np
import pytest
import torch

from at2po_lib.policy.tokenizer import train_tokenizer
from at2po_lib.rollout import stops
from at2po_lib.rollout.stops import StopMatcher, state_after, transition_table


@pytest.fixture(scope="module")
def tokenizer(fixtures_dir):
    lines = (fixtures_dir / "wiki18_sample.jsonl").read_text().splitlines()[:80]
    texts = [json.loads(x)["contents"] for x in lines] + ["</ search > </s e a r c h>"]
    return train_tokenizer(texts, vocab_size=400)


def test_transition_table_by_hand():
    # stop "</s>" (m = 4): the state is the longest prefix of "</s>" ending the text so far
    texts = ["<", "/", "s>", "x", "</s>", "a</", "", "s", "<<", "/s>!"]
    table = transition_table(texts, "</s>")
    assert table.shape == (4, len(texts))
    expected = {  # state -> next state per text
        0: [1, 0, 0, 0, 4, 2, 0, 0, 1, 0],
        1: [1, 2, 0, 0, 4, 2, 1, 0, 1, 4],  # "<" + "/s>!" completes the string
        2: [1, 0, 4, 0, 4, 2, 2, 3, 1, 0],  # "</" + "s>" completes; "</" + "s" -> "</s"
        3: [1, 0, 0, 0, 4, 2, 3, 0, 1, 0],  # "</s" + "<" -> "<" (state 1)
    }
    for q, row in expected.items():
        assert table[q].tolist() == row, f"state {q}"


def test_table_equals_the_definition_on_a_periodic_string():
    # "abab" has the border "ab": after "aba" a "b" completes, an "a" falls back to "a"... the
    # pruned computation must agree with state_after everywhere
    texts = ["a", "b", "ab", "ba", "bab", "aba", "abab", "x", "", "bb", "aab"]
    table = transition_table(texts, "abab")
    for q in range(4):
        assert table[q].tolist() == [state_after("abab", q, t) for t in texts]


def test_the_automaton_stops_where_the_decoded_text_first_holds_the_string(tokenizer):
    """Random token sequences: the automaton's first hit is the first token after which the
    decoded text contains the stop string."""
    stop = "</search>"
    matcher = StopMatcher.build(tokenizer, [stop], len(tokenizer))
    texts = stops.token_texts(tokenizer)
    parts = [i for i, t in enumerate(texts) if t and any(c in stop for c in t)]
    rng = random.Random(0)
    hits = 0
    for _ in range(300):
        ids = [rng.choice(parts) for _ in range(12)]
        if rng.random() < 0.5:  # splice in a spelling of the stop string
            at = rng.randrange(len(ids))
            ids[at:at] = tokenizer.encode(stop, add_special_tokens=False)
        expected = next(
            (i for i in range(len(ids)) if stop in tokenizer.decode(ids[: i + 1])), None
        )
        state = matcher.initial(1)
        got = None
        for i, token in enumerate(ids):
            state, hit = matcher.advance(state, torch.tensor([token]))
            if bool(hit[0]):
                got = i
                break
        assert got == expected, [texts[j] for j in ids]
        hits += got is not None
        if got is not None:
            assert matcher.completed_by_last(ids[: got + 1]) == stop
    assert hits > 50


def test_ids_past_the_tokenizer_keep_the_state(tokenizer):
    matcher = StopMatcher.build(tokenizer, ["</search>"], len(tokenizer) + 8)
    first = tokenizer.encode("</", add_special_tokens=False)
    state = matcher.initial(1)
    for token in first:
        state, _ = matcher.advance(state, torch.tensor([token]))
    before = int(state[0, 0])
    assert before > 0
    state, hit = matcher.advance(state, torch.tensor([len(tokenizer) + 3]))
    assert int(state[0, 0]) == before and not bool(hit[0])
    # on the host too, past the table's width (a model's padding ids beyond the tokenizer's)
    host = StopMatcher.build(tokenizer, ["</search>"], len(tokenizer))
    spelled = tokenizer.encode("</search>", add_special_tokens=False)
    assert (
        host.completed_by_last(spelled[:-1] + [len(tokenizer) + 99] + spelled[-1:]) == "</search>"
    )


def test_tables_are_built_once_per_vocabulary(tokenizer, monkeypatch):
    """A second matcher, or one for another tokenizer object with the same vocabulary, decodes
    and computes nothing again: one decoded vocabulary, one table per stop string."""
    monkeypatch.setattr(stops, "_TEXTS", {})
    monkeypatch.setattr(stops, "_TABLES", {})
    monkeypatch.setattr(stops, "_PADDED", {})
    decoded = []
    original = stops.transition_table

    def counting(texts, stop):
        decoded.append(stop)
        return original(texts, stop)

    monkeypatch.setattr(stops, "transition_table", counting)
    first = StopMatcher.build(tokenizer, ["</search>", "</answer>"], len(tokenizer))
    again = StopMatcher.build(tokenizer, ["</search>"], len(tokenizer))
    same_vocab = copy.deepcopy(tokenizer)
    assert stops.vocabulary_fingerprint(same_vocab) == stops.vocabulary_fingerprint(tokenizer)
    third = StopMatcher.build(same_vocab, ["</answer>"], len(tokenizer))
    assert len(stops._TEXTS) == 1 and decoded == ["</search>", "</answer>"]
    assert np.array_equal(first.host[0, :10], again.host[0, :10])
    assert np.array_equal(first.host[1, :10], third.host[0, :10])


def test_token_texts_are_the_tokenizers_own_decodes(tokenizer, monkeypatch):
    monkeypatch.setattr(stops, "_TEXTS", {})
    texts = stops.token_texts(tokenizer)
    assert texts == [tokenizer.decode([i]) for i in range(len(tokenizer))]
