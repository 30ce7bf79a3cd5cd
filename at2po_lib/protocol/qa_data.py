"""The QA datasets: FlashRAG rows from the HF hub or a local folder, VeRL parquet, trainer rows.

docs/method.md §3:

- "Source: ``RUC-NLPIR/FlashRAG_datasets`` on the HF hub, rows ``{id, question,
  golden_answers, metadata}``."
- Multi-hop setting: train on HotpotQA ``train``; test on HotpotQA dev (7,405), 2WikiMultihopQA
  dev (12,576), MuSiQue dev (2,417), Bamboogle test (125). Single-hop setting: train on NQ
  ``train``; test on NQ test (3,610), TriviaQA test (11,313), PopQA test (14,267).
- "Training rows (VeRL parquet): ``data_source``, ``prompt`` (chat messages), ``ability``
  ("fact-reasoning"), ``reward_model = {"style": "rule", "ground_truth": {"target":
  golden_answers}}``, ``extra_info = {"split", "index"}``."

The hub repository stores one JSONL file per split: ``<name>/<split>.jsonl``; a local copy in
the same layout (``<local_dir>/<name>/<split>.jsonl``) works without network::

    rows = load_flashrag("nq", "test", local_dir="data/flashrag")  # or from the hub
    write_verl_parquet(to_verl_rows(rows, "nq", "atpo", "test"), "data/nq_test.parquet")
    trainer_rows = to_trainer_rows(rows, "atpo")
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..config.profile import check_name
from ..util.errors import ProfileError
from .prompts import PromptTemplate, build_messages, get_template

# Imported inside the functions that use them: huggingface_hub; only a download needs the hub
# client.
# Imported inside the functions that use them: pyarrow; only parquet files need pyarrow (FlashRAG's
# JSONL does not).

HUB_REPO = "RUC-NLPIR/FlashRAG_datasets"
ABILITY = "fact-reasoning"


class DataError(ValueError):
    """A data file or row that does not validate; the message names the file and row."""


class HubUnreachableError(RuntimeError):
    """The HF hub could not be reached (offline mode or a network error)."""


# ----------------------------------------------------------------------------- paper splits


@dataclass(frozen=True)
class BenchmarkSplit:
    """One test set of the paper (docs/method.md §3, §4: sizes weight the "Avg" columns)."""

    dataset: str
    group: str
    flashrag_name: str
    split: str
    size: int


PAPER_TEST_SPLITS: dict[str, BenchmarkSplit] = {
    s.dataset: s
    for s in (
        BenchmarkSplit("hotpotqa", "multihop", "hotpotqa", "dev", 7405),
        BenchmarkSplit("2wikimultihopqa", "multihop", "2wikimultihopqa", "dev", 12576),
        BenchmarkSplit("musique", "multihop", "musique", "dev", 2417),
        BenchmarkSplit("bamboogle", "multihop", "bamboogle", "test", 125),
        BenchmarkSplit("nq", "singlehop", "nq", "test", 3610),
        BenchmarkSplit("triviaqa", "singlehop", "triviaqa", "test", 11313),
        BenchmarkSplit("popqa", "singlehop", "popqa", "test", 14267),
    )
}
"""The seven test sets of Table 1 with their full sizes."""

GROUPS: dict[str, tuple[str, ...]] = {
    "multihop": ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle"),
    "singlehop": ("nq", "triviaqa", "popqa"),
}
"""Benchmark groups; each is a separate training run."""

TRAIN_SPLITS: dict[str, tuple[str, str]] = {
    "multihop": ("hotpotqa", "train"),
    "singlehop": ("nq", "train"),
}
"""Training (dataset, split) of each group."""

MULTI_HOP = "multihop"
SINGLE_HOP = "singlehop"
"""Group labels, the keys of :data:`GROUPS`."""
_TINY_ALIASES = {"2wiki": "2wikimultihopqa"}
"""TinyWorld short names that differ from the paper's dataset names."""


def paper_dataset(name: str) -> str:
    """The paper dataset a (TinyWorld) name stands for: ``tiny_2wiki`` → ``2wikimultihopqa``."""
    key = name.lower().removeprefix("tiny_")
    return _TINY_ALIASES.get(key, key)


def dataset_group(name: str) -> str:
    """``multihop`` or ``singlehop`` for a paper or TinyWorld dataset name."""
    key = paper_dataset(name)
    if key not in PAPER_TEST_SPLITS:
        raise ValueError(
            f"dataset {name!r} belongs to no group; known: "
            f"{', '.join(PAPER_TEST_SPLITS)} (optionally with a tiny_ prefix)"
        )
    return PAPER_TEST_SPLITS[key].group


# ----------------------------------------------------------------------------- reading


ANSWER_FIELDS = ("golden_answers", "answers", "answer")
"""Where QA files keep the gold answers, first found wins: FlashRAG/Search-R1 ``golden_answers``
(a list), ``answers`` (a list, e.g. NQ exports), ARPO/Search-R1 evaluation files ``answer`` (a
string or list). A dict value with ``aliases``/``value`` (TriviaQA's shape) gives both."""


def _answer_list(value: Any, field: str, label: str) -> list[str]:
    """The gold answers of one row as strings; errors name the row and the field."""
    if isinstance(value, dict) and ("aliases" in value or "value" in value):
        aliases = value.get("aliases") or []
        value = ([value["value"]] if value.get("value") is not None else []) + list(aliases)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise DataError(
            f"{label}: field {field!r} must hold golden answers (a non-empty string or "
            f"list of strings), got {type(value).__name__} {str(value)[:60]!r}"
        )
    answers = []
    for i, answer in enumerate(value):
        # Numbers occur in some QA sets; they are compared as text.
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(answer, str):
            raise DataError(
                f"{label}: field {field!r}, answer {i} is {type(answer).__name__}, not a string"
            )
        answers.append(answer)
    return answers


def _validate_row(row: Any, where: str, default_id: str | None = None) -> dict[str, Any]:
    """Check one QA row and return a clean FlashRAG-shaped copy. ``where`` names file and line.

    Accepted shapes: ``{id, question, golden_answers, metadata?}`` (FlashRAG) and the common
    variants with ``answer``/``answers`` instead of ``golden_answers`` (:data:`ANSWER_FIELDS`);
    a row without ``id`` gets ``default_id`` (its position in the file) when one is given.
    """
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    row_id = row.get("id")
    if row_id is None:
        if default_id is None:
            raise DataError(f"{where}: row has no 'id'")
        row_id = default_id
    label = f"{where} (id {row_id!r})"
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(
            f"{label}: field 'question' must be a non-empty string "
            f"(row fields: {', '.join(map(str, row)) or 'none'})"
        )
    field = next((f for f in ANSWER_FIELDS if row.get(f) is not None), None)
    if field is None:
        raise DataError(
            f"{label}: row has no golden answers (expected one of the fields "
            f"{', '.join(ANSWER_FIELDS)}; row fields: {', '.join(map(str, row))})"
        )
    clean_answers = _answer_list(row[field], field, label)
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise DataError(f"{label}: field 'metadata' must be an object")
    clean = {k: v for k, v in row.items() if k not in ANSWER_FIELDS}
    clean.update(id=str(row_id), question=question, golden_answers=clean_answers, metadata=metadata)
    return clean


def read_flashrag_jsonl(
    path: str | Path, limit: int | None = None, data_source: str | None = None
) -> list[dict]:
    """Read and validate a QA JSONL file: ``{id, question, golden_answers, metadata?}``
    (FlashRAG), or the same with ``answer``/``answers`` and without ``id`` (ARPO and Search-R1
    evaluation files); a missing id becomes ``<file stem>_<row index>``.

    Bad JSON, a row without golden answers or without a question raise :class:`DataError`
    naming the file, the line, the field and (when readable) the row id. ``limit`` keeps the first rows;
    ``data_source`` is stored on every row (used by :func:`to_trainer_rows`).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    rows: list[dict] = []
    first_line: dict[str, int] = {}  # id -> line, so a repeated id names both lines
    with path.open("rb") as handle:
        for line_number, data in enumerate(handle, start=1):
            if limit is not None and len(rows) >= limit:
                break
            where = f"{path}:{line_number}"
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{where}: not UTF-8 text ({err.reason} at byte {err.start} of "
                    "the line; re-encode the file as UTF-8)"
                ) from None
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except (json.JSONDecodeError, RecursionError, ValueError) as err:
                why = (
                    f"{err.msg} at column {err.colno}"
                    if isinstance(err, json.JSONDecodeError)
                    else "nested too deeply"
                    if isinstance(err, RecursionError)
                    else str(err)
                )
                raise DataError(f"{where}: not valid JSON ({why})") from None
            row = _validate_row(raw, where, default_id=f"{path.stem}_{len(rows)}")
            if row["id"] in first_line:
                raise DataError(
                    f"{where}: id {row['id']!r} repeats the id of line "
                    f"{first_line[row['id']]} (ids must be unique in a file)"
                )
            first_line[row["id"]] = line_number
            if data_source is not None:
                row["data_source"] = data_source
            rows.append(row)
    return rows


def _hub_offline() -> bool:
    """Offline when ``HF_HUB_OFFLINE`` is set now or was set when huggingface_hub was imported."""
    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    try:
        from huggingface_hub import constants

        return flag or bool(constants.is_offline_mode())
    except (ImportError, AttributeError):
        return flag


def _download_from_hub(
    name: str, split: str, cache_dir: str | Path | None, revision: str | None, endpoint: str | None
) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    filename = f"{name}/{split}.jsonl"
    offline = _hub_offline()
    hint = (
        f"Download the file once elsewhere (huggingface-cli download {HUB_REPO} {filename} "
        f"--repo-type dataset --local-dir DIR) and pass local_dir=DIR (at2po train|evaluate --data-dir DIR, "
        f"or --set data.local_dir=DIR), which must hold {filename}."
    )
    try:
        # local_files_only while offline: a file already in the cache still loads.
        return Path(
            hf_hub_download(
                HUB_REPO,
                filename,
                repo_type="dataset",
                cache_dir=cache_dir,
                revision=revision,
                endpoint=endpoint,
                local_files_only=offline,
            )
        )
    except LocalEntryNotFoundError as err:  # offline, or the network failed and nothing is cached
        why = (
            "HF_HUB_OFFLINE is set"
            if offline
            else f"the hub could not be reached ({err.__class__.__name__})"
        )
        raise HubUnreachableError(
            f"cannot load {HUB_REPO}/{filename}: {why} and the file is not cached. {hint}"
        ) from err
    except (EntryNotFoundError, RepositoryNotFoundError) as err:
        raise DataError(
            f"{HUB_REPO} has no file {filename} (dataset {name!r}, split {split!r})"
        ) from err
    except HfHubHTTPError as err:  # reached, but the server failed (5xx, rate limit)
        raise HubUnreachableError(
            f"cannot load {HUB_REPO}/{filename}: the hub answered with an error ({err}). {hint}"
        ) from err
    except OSError as err:  # connection errors from the HTTP client are OSErrors too
        raise HubUnreachableError(
            f"cannot load {HUB_REPO}/{filename}: network error {err}. {hint}"
        ) from err


def load_flashrag(
    name: str,
    split: str,
    local_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    limit: int | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
) -> list[dict]:
    """Rows of one FlashRAG dataset split, validated, each with ``data_source = name``.

    ``local_dir`` reads ``<local_dir>/<name>/<split>.jsonl`` (no network); otherwise the file
    comes from the ``RUC-NLPIR/FlashRAG_datasets`` hub repository (cached in ``cache_dir``).
    Raises :class:`HubUnreachableError` when the hub cannot be reached and the file is not
    cached, saying how to pass ``local_dir`` instead. ``endpoint`` is the hub URL (None: the
    ``HF_ENDPOINT`` setting, normally huggingface.co; a mirror works too); ``revision`` pins a
    commit of the dataset repository.
    """
    path = flashrag_path(name, split, local_dir, cache_dir, revision, endpoint)
    return read_flashrag_jsonl(path, limit=limit, data_source=name)


def flashrag_path(
    name: str,
    split: str,
    local_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
) -> Path:
    """The file of one FlashRAG split (:func:`load_flashrag`'s arguments): under ``local_dir``,
    else downloaded to (or found in) the hub cache; :class:`DataError` or
    :class:`HubUnreachableError` when there is none."""
    try:  # both become path components: "../x" must not read outside local_dir
        check_name(name, "dataset name")
        check_name(split, "split name")
    except ProfileError as exc:
        raise DataError(str(exc)) from None
    if local_dir is None:
        return _download_from_hub(name, split, cache_dir, revision, endpoint)
    path = Path(local_dir) / name / f"{split}.jsonl"
    if not path.is_file():
        raise DataError(
            f"{path}: file not found (expected FlashRAG layout <local_dir>/{name}/{split}.jsonl)"
        )
    return path


def evaluation_split(name: str) -> str:
    """The split a FlashRAG dataset is evaluated on: the paper's (``PAPER_TEST_SPLITS``), else
    ``test``."""
    return PAPER_TEST_SPLITS[name].split if name in PAPER_TEST_SPLITS else "test"


# ----------------------------------------------------------------------------- converting


def to_verl_rows(
    rows: Sequence[dict], data_source: str, template: PromptTemplate | str, split: str
) -> list[dict]:
    """VeRL parquet rows (docs/method.md §3): prompt messages, rule reward with golden targets."""
    t = get_template(template)
    return [
        {
            "data_source": data_source,
            "prompt": build_messages(t, row["question"]),
            "ability": ABILITY,
            "reward_model": {
                "style": "rule",
                "ground_truth": {"target": list(row["golden_answers"])},
            },
            "extra_info": {"split": split, "index": index},
        }
        for index, row in enumerate(rows)
    ]


def write_verl_parquet(rows: Iterable[dict], path: str | Path) -> Path:
    """Write VeRL rows to parquet (parent folders created); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(rows)
    if not rows:
        raise DataError(f"{path}: refusing to write an empty parquet file")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def read_verl_parquet(path: str | Path) -> list[dict]:
    """Read VeRL rows back as plain dicts and lists."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    return pq.read_table(path).to_pylist()


def to_trainer_rows(
    rows: Sequence[dict], template: PromptTemplate | str, data_source: str | None = None
) -> list[dict]:
    """Rows the trainer reads: ``prompt`` messages, ``golden_answers``, ``id``, ``data_source``,
    ``metadata``. ``data_source`` overrides the rows' own (set by :func:`load_flashrag`)."""
    t = get_template(template)
    out = []
    for index, row in enumerate(rows):
        source = data_source if data_source is not None else row.get("data_source")
        if not source:
            raise DataError(
                f"row {index} (id {row.get('id')!r}) has no data_source; pass data_source="
            )
        out.append(
            {
                "prompt": build_messages(t, row["question"]),
                "golden_answers": list(row["golden_answers"]),
                "id": str(row["id"]),
                "data_source": source,
                "metadata": dict(row.get("metadata") or {}),
            }
        )
    return out
