"""recall@k of supporting passages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from at2po_lib.retrieval.base import Retriever
from at2po_lib.retrieval.recall import (
    example_hits,
    first_hop_ids,
    recall_at_k,
    recall_for_datasets,
    recall_table,
    retrieved_ids,
)


def test_hand_computed_recall():
    retrieved = [["a", "b", "c"], ["x", "y", "z"], ["p", "q", "r"]]
    relevant = [{"b"}, {"z", "w"}, {"nope"}]
    # k=1: q1 0/1, q2 0/2, q3 0/1 → 0
    # k=2: q1 1/1 ("b" at rank 2), q2 0/2, q3 0 → 1/3
    # k=3: q1 1, q2 1/2 ("z" at rank 3, "w" never), q3 0 → 1.5/3 = 0.5
    assert recall_at_k(retrieved, relevant, [3, 1, 2]) == {1: 0.0, 2: pytest.approx(1 / 3), 3: 0.5}


def test_duplicates_count_once_and_k_beyond_the_list_is_fine():
    assert recall_at_k([["a", "a", "a"]], [{"a", "b"}], [2, 10]) == {2: 0.5, 10: 0.5}


@pytest.mark.parametrize(
    ("retrieved", "relevant", "ks", "message"),
    [
        ([["a"]], [{"a"}, {"b"}], [1], "1 retrieved lists but 2"),
        ([], [], [1], "at least one question"),
        ([["a"]], [set()], [1], "question 0 has no relevant ids"),
        ([["a"]], [{"a"}], [0], "positive"),
    ],
)
def test_bad_inputs(retrieved, relevant, ks, message):
    with pytest.raises(ValueError, match=message):
        recall_at_k(retrieved, relevant, ks)


ids = st.sampled_from(list("abcdefgh"))


@given(
    data=st.lists(
        st.tuples(st.lists(ids, max_size=8), st.sets(ids, min_size=1, max_size=3)),
        min_size=1,
        max_size=10,
    ),
)
def test_recall_is_a_non_decreasing_fraction_of_k(data):
    retrieved = [r for r, _ in data]
    relevant = [g for _, g in data]
    values = recall_at_k(retrieved, relevant, range(1, 10))
    assert all(0.0 <= v <= 1.0 for v in values.values())
    assert all(values[k] <= values[k + 1] for k in range(1, 9))


class ListRetriever(Retriever):
    """Returns the corpus ids that contain a query word, in corpus order (a tiny real backend)."""

    def __init__(self, passages: dict[str, str]) -> None:
        self.passages = passages

    def search(self, queries, topk=3):
        out = []
        for query in queries:
            found = [
                pid for pid, text in self.passages.items() if set(query.split()) & set(text.split())
            ]
            out.append(
                [
                    {"document": {"id": pid, "contents": self.passages[pid]}, "score": 1.0}
                    for pid in found[:topk]
                ]
            )
        return out


def test_retrieved_ids_and_recall_table():
    retriever = ListRetriever({"1": "red apple", "2": "green apple", "3": "red car"})
    assert retrieved_ids(retriever, ["apple", "car", "red"], k=5, batch_size=2) == [
        ["1", "2"],
        ["3"],
        ["1", "3"],
    ]
    table = recall_table({"words": retriever}, ["apple", "car"], [{"2"}, {"3"}], ks=(1, 2))
    # k=1: "apple" → ["1"] misses "2"; "car" → ["3"] hits → 0.5. k=2: both hit → 1.0
    assert table.to_dict("records") == [
        {"retriever": "words", "k": 1, "recall": 0.5},
        {"retriever": "words", "k": 2, "recall": 1.0},
    ]


ROWS = [
    {
        "id": "q1",
        "question": "apple colour",
        "metadata": {"supporting_ids": ["2", "3"], "hop_queries": ["green apple", "x"]},
    },
    {
        "id": "q2",
        "question": "car",
        "metadata": {"supporting_ids": ["3"], "hop_queries": ["red car"]},
    },
]


def test_recall_for_datasets_uses_the_first_hop():
    retriever = ListRetriever({"1": "red apple", "2": "green apple", "3": "red car"})
    table = recall_for_datasets(
        {"words": retriever}, {"toy": ROWS}, ks=(1, 2), queries=("question", "hop_query")
    )
    got = {(r["query"], r["k"]): r["recall"] for r in table.to_dict("records")}
    # question: "apple colour" → ["1","2"]; first hop "2" at rank 2. "car" → ["3"] hit at rank 1.
    # hop_query: "green apple" → ["1","2"] (corpus order); "red car" → ["1","3"] ("3" at rank 2).
    assert got == {
        ("question", 1): 0.5,
        ("question", 2): 1.0,
        ("hop_query", 1): 0.0,
        ("hop_query", 2): 1.0,
    }
    assert set(table["questions"]) == {2} and set(table["dataset"]) == {"toy"}


def test_example_hits_marks_the_supporting_passage():
    retriever = ListRetriever({"1": '"Red"\nred apple', "3": '"Car"\nred car'})
    table = example_hits({"words": retriever}, ROWS[1:], k=2)
    assert table[["rank", "title", "supporting"]].to_dict("records") == [
        {"rank": 1, "title": "Car", "supporting": True}
    ]


def test_rows_without_supporting_ids_are_rejected():
    with pytest.raises(ValueError, match="row 'x': no metadata.supporting_ids"):
        first_hop_ids({"id": "x", "question": "q"})
