"""FlashRAG loading on the real NQ sample, validation errors, the offline path, VeRL parquet."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from at2po_lib.protocol.qa_data import (
    GROUPS,
    PAPER_TEST_SPLITS,
    DataError,
    HubUnreachableError,
    load_flashrag,
    read_flashrag_jsonl,
    read_verl_parquet,
    to_trainer_rows,
    to_verl_rows,
    write_verl_parquet,
)

NQ_SAMPLE = Path(__file__).parent.parent / "fixtures" / "flashrag_nq_test_sample.jsonl"


@pytest.fixture
def flashrag_dir(tmp_path: Path) -> Path:
    """The real NQ sample in FlashRAG layout: <dir>/nq/test.jsonl."""
    (tmp_path / "nq").mkdir()
    shutil.copy(NQ_SAMPLE, tmp_path / "nq" / "test.jsonl")
    return tmp_path


def test_read_real_sample():
    rows = read_flashrag_jsonl(NQ_SAMPLE)
    assert len(rows) == 17
    assert rows[0]["id"] == "test_0"
    assert rows[0]["golden_answers"] == ["Wilhelm Conrad Röntgen"]
    assert rows[6]["golden_answers"] == ["Xiu Li Dai", "Dai Xiuli", "Dai Yongge", "Yongge Dai"]
    assert all(row["metadata"] == {} for row in rows)  # the sample has no metadata field
    assert "data_source" not in rows[0]


def test_load_from_local_dir(flashrag_dir):
    rows = load_flashrag("nq", "test", local_dir=flashrag_dir)
    assert len(rows) == 17 and {row["data_source"] for row in rows} == {"nq"}
    assert len(load_flashrag("nq", "test", local_dir=flashrag_dir, limit=5)) == 5


def test_local_dir_missing_split_names_path(flashrag_dir):
    with pytest.raises(DataError, match=r"nq[/\\]dev\.jsonl"):
        load_flashrag("nq", "dev", local_dir=flashrag_dir)


def test_offline_hub_gives_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnreachableError) as info:
        load_flashrag("nq", "test", cache_dir=tmp_path / "empty_cache")
    message = str(info.value)
    assert "HF_HUB_OFFLINE" in message and "local_dir" in message and "nq/test.jsonl" in message


class _HubFileHandler(BaseHTTPRequestHandler):
    """Serves the NQ sample at the hub's ``resolve`` URL of nq/test.jsonl; 404 elsewhere."""

    body = NQ_SAMPLE.read_bytes()
    url = "/datasets/RUC-NLPIR/FlashRAG_datasets/resolve/main/nq/test.jsonl"

    def _headers(self) -> bool:
        found = self.path == self.url
        self.send_response(200 if found else 404)
        if found:
            self.send_header("X-Repo-Commit", "0" * 40)
            self.send_header("ETag", '"nq-test-sample"')
        else:
            self.send_header("X-Error-Code", "EntryNotFound")
        self.send_header("Content-Length", str(len(self.body) if found else 0))
        self.end_headers()
        return found

    def do_HEAD(self):  # noqa: N802 (http.server naming)
        self._headers()

    def do_GET(self):  # noqa: N802
        if self._headers():
            self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def local_hub(monkeypatch):
    """A stand-in for the hub on 127.0.0.1, reached through the real hf_hub_download."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HubFileHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_hub_download_then_offline_cache(local_hub, tmp_path, monkeypatch):
    cache = tmp_path / "hub_cache"
    rows = load_flashrag("nq", "test", cache_dir=cache, endpoint=local_hub)
    assert len(rows) == 17 and rows[16]["golden_answers"] == ["Oak Island"]
    with pytest.raises(DataError, match="has no file nq/dev.jsonl"):
        load_flashrag("nq", "dev", cache_dir=cache, endpoint=local_hub)
    # Offline, a file already in the cache still loads; an uncached one gives the clear error.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert len(load_flashrag("nq", "test", cache_dir=cache, endpoint=local_hub, limit=4)) == 4
    with pytest.raises(HubUnreachableError, match="local_dir"):
        load_flashrag("nq", "train", cache_dir=cache, endpoint=local_hub)


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_row_without_golden_answers_names_file_line_and_id(tmp_path):
    good = json.dumps({"id": "a", "question": "q", "golden_answers": ["x"]})
    bad = json.dumps({"id": "row-b", "question": "q2", "golden_answers": []})
    path = _write_lines(tmp_path / "bad.jsonl", [good, bad])
    with pytest.raises(DataError, match=r"bad\.jsonl:2 \(id 'row-b'\).*golden answers"):
        read_flashrag_jsonl(path)


def test_missing_golden_field(tmp_path):
    path = _write_lines(tmp_path / "bad.jsonl", [json.dumps({"id": "z", "question": "q"})])
    with pytest.raises(DataError, match=r"bad\.jsonl:1.*golden answers"):
        read_flashrag_jsonl(path)


def test_bad_json_names_file_and_line(tmp_path):
    good = [json.dumps({"id": i, "question": "q", "golden_answers": ["x"]}) for i in "ab"]
    path = _write_lines(tmp_path / "broken.jsonl", [*good, '{"id": "c", "question": '])
    with pytest.raises(DataError, match=r"broken\.jsonl:3: not valid JSON"):
        read_flashrag_jsonl(path)


@pytest.mark.parametrize(
    "row, message",
    [
        ({"id": "a", "question": "  ", "golden_answers": ["x"]}, "question"),
        (
            {"id": "a", "question": "q", "golden_answers": [["nested"]]},
            "field 'golden_answers', answer 0 is list",
        ),
        ({"id": "a", "question": "q", "golden_answers": ["x"], "metadata": [1]}, "metadata"),
        ([1, 2], "JSON object"),
    ],
)
def test_other_bad_rows(tmp_path, row, message):
    path = _write_lines(tmp_path / "rows.jsonl", [json.dumps(row)])
    with pytest.raises(DataError, match=message):
        read_flashrag_jsonl(path)


def test_common_qa_row_shapes_load_and_missing_ids_are_generated(tmp_path):
    """ARPO / Search-R1 evaluation files are ``{"question", "answer"}`` without ids."""
    rows = [
        {"question": "who?", "answer": "Ada"},
        {"question": "where?", "answer": ["Paris", "paris, france"]},
        {"question": "when?", "answers": ["1885"], "id": "q7"},
        {"question": "what?", "answer": {"value": "Gold", "aliases": ["Au"]}},
        {"question": "which?", "golden_answers": ["x"], "answer": "ignored"},
    ]
    path = _write_lines(tmp_path / "arpo_eval.jsonl", [json.dumps(r) for r in rows])
    loaded = read_flashrag_jsonl(path)
    assert [r["id"] for r in loaded] == [
        "arpo_eval_0",
        "arpo_eval_1",
        "q7",
        "arpo_eval_3",
        "arpo_eval_4",
    ]
    assert [r["golden_answers"] for r in loaded] == [
        ["Ada"],
        ["Paris", "paris, france"],
        ["1885"],
        ["Gold", "Au"],
        ["x"],
    ]
    assert all("answer" not in r and "answers" not in r for r in loaded)


@pytest.mark.parametrize(
    "row, message",
    [
        (
            {"question": "q", "answer": None},
            r"rows\.jsonl:1 \(id 'rows_0'\): row has no golden answers "
            r"\(expected one of the fields golden_answers, answers, answer; "
            r"row fields: question, answer\)",
        ),
        (
            {"question": "q", "answer": {"text": "x"}},
            r"rows\.jsonl:1 .*field 'answer' must hold golden answers",
        ),
        ({"question": "q", "answers": [None]}, r"field 'answers', answer 0 is NoneType"),
        (
            {"query": "q", "answer": "x"},
            r"field 'question' must be a non-empty string \(row fields: query, answer\)",
        ),
    ],
)
def test_unrecognised_rows_name_file_row_and_field(tmp_path, row, message):
    path = _write_lines(tmp_path / "rows.jsonl", [json.dumps(row)])
    with pytest.raises(DataError, match=message):
        read_flashrag_jsonl(path)


def test_numbers_and_single_string_answers_become_lists_of_strings(tmp_path):
    rows = [
        {"id": 1, "question": "year?", "golden_answers": [1885]},
        {"id": "b", "question": "capital?", "golden_answers": "Paris"},
    ]
    path = _write_lines(tmp_path / "rows.jsonl", [json.dumps(r) for r in rows])
    loaded = read_flashrag_jsonl(path)
    assert loaded[0]["golden_answers"] == ["1885"] and loaded[0]["id"] == "1"
    assert loaded[1]["golden_answers"] == ["Paris"]


def test_missing_file():
    with pytest.raises(DataError, match="file not found"):
        read_flashrag_jsonl("no/such/file.jsonl")


def test_verl_rows_schema_and_parquet_round_trip(tmp_path):
    rows = read_flashrag_jsonl(NQ_SAMPLE)
    verl = to_verl_rows(rows, "nq", "atpo", "test")
    assert verl[2] == {
        "data_source": "nq",
        # the authors' rows: ONE system message, instruction + "\nuser\n" + question
        "prompt": [{"role": "system", "content": verl[2]["prompt"][0]["content"]}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": ["Olivia", "MFSK"]}},
        "extra_info": {"split": "test", "index": 2},
    }
    assert verl[2]["prompt"][0]["content"].endswith(
        "\nuser\nwhich mode is used for short wave broadcast service?"
    )
    path = write_verl_parquet(verl, tmp_path / "out" / "nq_test.parquet")
    assert read_verl_parquet(path) == verl


def test_verl_rows_searchr1_single_message(tmp_path):
    verl = to_verl_rows(read_flashrag_jsonl(NQ_SAMPLE, limit=3), "nq", "searchr1", "test")
    assert [m["role"] for m in verl[0]["prompt"]] == ["user"]
    assert read_verl_parquet(write_verl_parquet(verl, tmp_path / "r1.parquet")) == verl


def test_write_empty_parquet_is_an_error(tmp_path):
    with pytest.raises(DataError, match="empty"):
        write_verl_parquet([], tmp_path / "empty.parquet")


def test_trainer_rows(flashrag_dir):
    rows = load_flashrag("nq", "test", local_dir=flashrag_dir)
    trainer = to_trainer_rows(rows, "tiny")
    assert trainer[0] == {
        "prompt": [{"role": "system", "content": trainer[0]["prompt"][0]["content"]}],
        "golden_answers": ["Wilhelm Conrad Röntgen"],
        "id": "test_0",
        "data_source": "nq",
        "metadata": {},
    }
    assert trainer[0]["prompt"][0]["content"].endswith("who got the first nobel prize in physics?")


def test_trainer_rows_need_a_data_source():
    rows = read_flashrag_jsonl(NQ_SAMPLE, limit=2)
    with pytest.raises(DataError, match="data_source"):
        to_trainer_rows(rows, "atpo")
    assert to_trainer_rows(rows, "atpo", data_source="nq")[1]["data_source"] == "nq"


def test_paper_split_table():
    assert sum(PAPER_TEST_SPLITS[d].size for d in GROUPS["multihop"]) == 7405 + 12576 + 2417 + 125
    assert sum(PAPER_TEST_SPLITS[d].size for d in GROUPS["singlehop"]) == 3610 + 11313 + 14267
    assert {s.group for s in PAPER_TEST_SPLITS.values()} == {"multihop", "singlehop"}
    assert all(PAPER_TEST_SPLITS[d].group == g for g, names in GROUPS.items() for d in names)
    assert (
        PAPER_TEST_SPLITS["bamboogle"].split == "test"
        and PAPER_TEST_SPLITS["musique"].split == "dev"
    )
