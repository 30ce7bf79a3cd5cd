"""Corpus access: offsets, lookup by row, streaming, checksum, and errors naming file and line."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.retrieval.corpus import Corpus, CorpusError, parse_passage, split_contents

FIXTURE = Path(__file__).parent.parent / "fixtures" / "wiki18_sample.jsonl"


def write_rows(path: Path, rows: list[dict], trailer: str = "\n") -> Path:
    # ensure_ascii=False: raw multi-byte UTF-8 (and U+2028, which str.splitlines would split on)
    path.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + trailer, encoding="utf-8"
    )
    return path


def test_fixture_rows_match_a_naive_parse(tmp_path):
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    corpus = Corpus(FIXTURE, cache_dir=tmp_path / "cache")
    assert len(corpus) == 1000
    picked = [0, 1, 499, 998, 999]
    assert corpus.get(picked) == [
        {"id": rows[i]["id"], "contents": rows[i]["contents"]} for i in picked
    ]
    # The offsets are saved with the checksum and reloaded (memory-mapped) by a new Corpus.
    assert (tmp_path / "cache" / "corpus_offsets.npy").is_file()
    saved = json.loads((tmp_path / "cache" / "corpus_offsets.json").read_text())
    assert saved["checksum"] == corpus.checksum() and saved["passages"] == 1000
    again = Corpus(FIXTURE, cache_dir=tmp_path / "cache")
    assert again.get([999]) == corpus.get([999])
    assert isinstance(again.offsets(), np.memmap)


def test_streaming_chunks_cover_every_row_once_and_resume_at_a_row():
    corpus = Corpus(FIXTURE)
    chunks = list(corpus.iter_chunks(300))
    assert [(start, len(rows)) for start, rows in chunks] == [
        (0, 300),
        (300, 300),
        (600, 300),
        (900, 100),
    ]
    tail = list(corpus.iter_chunks(300, start_row=650))
    assert [(start, len(rows)) for start, rows in tail] == [(650, 300), (950, 50)]
    assert tail[0][1][0] == corpus.get([650])[0]


def test_gzip_streams_and_has_the_same_checksum_as_the_plain_file(tmp_path):
    gz = tmp_path / "wiki.jsonl.gz"
    with open(FIXTURE, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain, packed = Corpus(FIXTURE), Corpus(gz)
    assert packed.checksum() == plain.checksum()
    assert len(packed) == 1000
    first = next(packed.iter_chunks(10, start_row=995))
    assert first[0] == 995 and first[1] == plain.get(range(995, 1000))
    with pytest.raises(CorpusError, match="gzip -dk"):
        packed.get([0])


def test_checksum_format_and_sensitivity(tmp_path):
    rows = [{"id": str(i), "contents": f'"T{i}"\ntext {i}'} for i in range(5)]
    a = Corpus(write_rows(tmp_path / "a.jsonl", rows))
    size = (tmp_path / "a.jsonl").stat().st_size
    version, nbytes, passages, digest = a.checksum().split(":")
    assert (version, int(nbytes), int(passages), len(digest)) == ("v1", size, 5, 32)
    b = Corpus(write_rows(tmp_path / "b.jsonl", rows[:4]))  # a truncated corpus
    c = Corpus(
        write_rows(tmp_path / "c.jsonl", [*rows[:4], {"id": "4", "contents": '"T4"\ntext X'}])
    )
    assert len({a.checksum(), b.checksum(), c.checksum()}) == 3


def test_cached_checksum_is_recomputed_when_the_file_changes(tmp_path):
    path = write_rows(tmp_path / "a.jsonl", [{"id": "0", "contents": "x"}])
    first = Corpus(path, cache_dir=tmp_path / "cache").checksum()
    write_rows(path, [{"id": "0", "contents": "x"}, {"id": "1", "contents": "y"}])
    second = Corpus(path, cache_dir=tmp_path / "cache")
    assert second.checksum() != first and len(second) == 2


def test_bad_json_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "0", "contents": "a"}\n{"id": "1", "contents": "b"\n{"id": "2", "contents": "c"}\n'
    )
    corpus = Corpus(path)
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: not valid JSON"):
        list(corpus.iter_chunks(10))
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2"):
        corpus.get([1])
    assert corpus.get([2]) == [{"id": "2", "contents": "c"}]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('["a", "b"]', "expected a JSON object"),
        ('{"id": "1"}', "'contents' must be a string"),
        ('{"id": "1", "contents": 5}', "'contents' must be a string"),
        ('{"contents": "x"}', "'id' must be a string or integer"),
        ('{"id": true, "contents": "x"}', "'id' must be a string or integer"),
    ],
)
def test_malformed_rows_are_rejected(line, message):
    with pytest.raises(CorpusError, match=rf"c\.jsonl:7: .*{message}"):
        parse_passage(line, "c.jsonl", 7)


def test_integer_ids_become_strings():
    assert parse_passage('{"id": 12, "contents": "x"}', "c", 1) == {"id": "12", "contents": "x"}


def test_empty_line_inside_is_an_error_but_trailing_ones_are_ignored(tmp_path):
    inside = tmp_path / "inside.jsonl"
    inside.write_text('{"id": "0", "contents": "a"}\n\n{"id": "1", "contents": "b"}\n')
    with pytest.raises(CorpusError, match=r"inside\.jsonl:2: empty line"):
        len(Corpus(inside))
    with pytest.raises(CorpusError, match=r"inside\.jsonl:2: empty line"):
        list(Corpus(inside).iter_chunks(5))
    trailing = write_rows(
        tmp_path / "trailing.jsonl", [{"id": "0", "contents": "a"}], trailer="\n\n\n"
    )
    corpus = Corpus(trailing)
    assert len(corpus) == 1 and [len(c) for _, c in corpus.iter_chunks(5)] == [1]


def test_missing_file_and_row_out_of_range(tmp_path):
    with pytest.raises(CorpusError, match="not found"):
        Corpus(tmp_path / "nope.jsonl")
    corpus = Corpus(FIXTURE)
    with pytest.raises(IndexError, match="row 1000 out of range"):
        corpus.get([1000])


def test_split_contents():
    assert split_contents('"Evan Morris"\nEvan L. Morris was\na lobbyist') == (
        "Evan Morris",
        "Evan L. Morris was\na lobbyist",
    )
    assert split_contents("no title line") == ("no title line", "")


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=40, deadline=None)
@given(
    contents=st.lists(texts, min_size=1, max_size=30),
    newline_at_end=st.booleans(),
    block=st.integers(1, 64),
)
def test_offsets_and_streaming_agree_with_the_rows_written(
    tmp_path_factory, contents, newline_at_end, block
):
    """Whatever the text (newlines escaped by JSON, unicode) and the scan block size, row i is
    the i-th row written, by lookup and by streaming."""
    import at2po_lib.retrieval.corpus as corpus_module

    path = tmp_path_factory.mktemp("h") / "c.jsonl"
    rows = [{"id": str(i), "contents": c} for i, c in enumerate(contents)]
    write_rows(path, rows, trailer="\n" if newline_at_end else "")
    original = corpus_module._SCAN_BLOCK
    corpus_module._SCAN_BLOCK = block  # tiny blocks: newlines straddle block boundaries
    try:
        corpus = Corpus(path)
        assert len(corpus) == len(rows)
        assert corpus.get(range(len(rows))) == rows
        assert [r for _, chunk in corpus.iter_chunks(7) for r in chunk] == rows
    finally:
        corpus_module._SCAN_BLOCK = original
