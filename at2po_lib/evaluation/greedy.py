"""Greedy evaluation (docs/method.md §4, §5 "Validation: greedy single chain"): one greedy chain per
test question, exact match and F1 per dataset, sample-weighted group averages, turn counts.

The paper's protocol: temperature 0, one sample, full test splits, EM x100 per dataset, and
"Avg" columns that are **sample-weighted** — the micro-average over every question of the
group, ``Σ_d n_d · EM_d / Σ_d n_d`` — not the mean of the dataset columns. Weighting by the
split sizes (HotpotQA 7,405, 2Wiki 12,576, MuSiQue 2,417, Bamboogle 125) reproduces 34 of the
38 published averages within 0.02 (docs/method.md §4). Here EM and F1 are fractions in [0, 1].

Tidy output, one row per (profile, label, seed, dataset)::

    profile label seed dataset group n em f1 mean_turns mean_tool_calls git_revision

with extra rows ``dataset = "multihop avg"`` / ``"singlehop avg"`` from
:func:`weighted_group_average`.

:func:`score_datasets` is the one greedy evaluation loop: :func:`evaluate` and the trainer's
periodic validation (:class:`at2po_lib.study.run.Validator`) both run it. On the vLLM backend
the ``model`` every function here takes is the engine that holds the evaluated weights (one
engine for the whole evaluation, greedy and sampled: :func:`load_evaluation_policy`, or the
trainer's colocated engine after a weight sync), never a model object. The command line
(``at2po evaluate``) is :mod:`at2po_lib.cli.evaluate`; dataset groups live in
:mod:`at2po_lib.protocol.qa_data`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ..protocol.qa_data import dataset_group, evaluation_split, load_flashrag, read_flashrag_jsonl
from ..policy.model import load_policy
from ..policy.tokenizer import load_tokenizer
from ..protocol.prompts import get_template
from ..protocol.reward import exact_match, f1_score
from ..rollout.agent import Sampler, SearchEnv
from ..rollout.trees import rollout_chains
from ..rollout.decoding import HALF_DTYPES, decode_dtype
from ..rollout.vllm_backend import build_engine, is_engine
from ..tinyworld.build import ensure_world
from ..util.provenance import git_revision, run_metadata, write_meta

if TYPE_CHECKING:
    from ..config.profile import ProfileConfig

SUMMARY_COLUMNS = [
    "profile",
    "label",
    "seed",
    "dataset",
    "group",
    "n",
    "em",
    "f1",
    "mean_turns",
    "mean_tool_calls",
    "git_revision",
]


def load_evaluation_policy(profile_cfg: ProfileConfig, checkpoint: str | Path) -> tuple[Any, Any]:
    """``(policy, tokenizer)`` that evaluates ``checkpoint`` on the profile's rollout backend:
    the Hugging Face model (``hf``), or one vLLM engine started here, once, from the checkpoint
    itself with the profile's GPU share (``vllm``: :func:`~.rollout.vllm_backend.build_engine`;
    no Hugging Face copy of the weights is loaded beside it)."""
    if profile_cfg.rollout.backend == "vllm":
        return build_engine(checkpoint, profile_cfg), load_tokenizer(checkpoint)

    return load_policy(checkpoint, profile_cfg.policy.dtype)


def check_evaluation_policy(profile_cfg: ProfileConfig, policy: Any) -> None:
    """On the vLLM backend the policy evaluated must be an engine holding its weights (the
    trainer's colocated engine after a weight sync, or :func:`load_evaluation_policy`'s): a
    model object would have each batch start an engine from its ``name_or_path``."""
    if profile_cfg.rollout.backend != "vllm":
        return

    if not is_engine(policy):
        raise TypeError(
            f"profile {profile_cfg.name}: rollout.backend='vllm' evaluates a vLLM engine, got "
            f"{type(policy).__name__}; use load_evaluation_policy(profile, checkpoint) or the "
            "trainer's policy_for_generation(sync=True)"
        )


def load_eval_rows(
    profile_cfg: ProfileConfig, dataset: str, max_questions: int | None = None
) -> list[dict[str, Any]]:
    """Test rows of one dataset: TinyWorld's ``test.jsonl`` for ``tiny_*`` names, else the
    FlashRAG split the paper reports (``data.PAPER_TEST_SPLITS``). The first ``max_questions`` rows."""
    if dataset.startswith("tiny_"):
        world = ensure_world(profile_cfg)
        rows = read_flashrag_jsonl(world_dataset_path(world, dataset, "test"))
    else:
        rows = load_flashrag(
            dataset, evaluation_split(dataset), local_dir=profile_cfg.data.local_dir
        )
    rows = list(rows)
    return rows if max_questions is None else rows[:max_questions]


def world_dataset_path(world: Any, dataset: str, split: str) -> Path:
    """``datasets/<name>/<split>.jsonl`` inside a TinyWorld (``WorldFiles``)."""
    root = Path(getattr(world, "datasets_dir", None) or Path(world.root) / "datasets")
    path = root / dataset / f"{split}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"TinyWorld has no {split} split for {dataset!r}: {path}")
    return path


def score_rows(rows: Sequence[Mapping[str, Any]], trajectories: Sequence[Any]) -> pd.DataFrame:
    """Per-question scores: EM and F1 of each trajectory's extracted answer (None scores 0)."""
    if len(rows) != len(trajectories):
        raise ValueError(f"{len(rows)} questions but {len(trajectories)} trajectories")
    records = []
    for row, traj in zip(rows, trajectories):
        golden = row["golden_answers"]
        records.append(
            {
                "id": row.get("id"),
                "question": row["question"],
                "prediction": traj.answer,
                "golden": " | ".join(golden),
                "em": exact_match(traj.answer, golden),
                "f1": f1_score(traj.answer, golden),
                "num_turns": traj.num_turns,
                "num_tool_calls": traj.num_tool_calls,
                "finish_reason": traj.finish_reason,
            }
        )
    return pd.DataFrame.from_records(records)


EVAL_MEMORY_SHARE = 0.5
"""Share of the device's free memory one evaluation batch may fill (``eval.batch_size: 0``);
the rest is for the forward pass's activations and the allocator's slack."""


def eval_batch_rows(
    batch_size: int, questions: int, free_bytes: float, row_bytes: float, max_rows: int
) -> int:
    """Questions decoded together: ``eval.batch_size`` when positive; for 0 (as many as memory
    allows) ``floor(EVAL_MEMORY_SHARE · free_bytes / row_bytes)``, at least 1 and at most
    ``min(questions, rollout.max_batch_rows)``."""
    if batch_size > 0:
        return batch_size
    fit = int(EVAL_MEMORY_SHARE * free_bytes // max(row_bytes, 1.0))
    return max(1, min(fit, questions, max_rows))


def full_length_row_bytes(model, rollout_cfg) -> float:
    """``2·k·s + 12·V`` bytes for one row of a greedy batch: its KV cache at full length ``s =
    max_prompt_tokens + max_response_tokens`` twice (the working buffer and its copy-out;
    ``k = 2·n_L·n_kv·d_head·e`` bytes a token in the decode dtype's ``e`` bytes) and the
    ``V``-word fp32 logits with the sampler's two temporaries."""
    text = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    )
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    param = next(model.parameters())
    run = decode_dtype(
        rollout_cfg.decode_dtype, str(param.dtype).removeprefix("torch."), param.device.type
    )
    per_token = 2 * text.num_hidden_layers * kv_heads * head_dim * (2 if run in HALF_DTYPES else 4)
    seq = rollout_cfg.max_prompt_tokens + rollout_cfg.max_response_tokens
    return 2.0 * per_token * seq + 12.0 * text.vocab_size


def free_device_bytes(model) -> float:
    """Free memory of the model's device: the GPU's (``torch.cuda.mem_get_info``) or the
    host's available pages."""
    device = next(model.parameters()).device
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def batch_rows_for(model, rollout_cfg, batch_size: int, questions: int) -> int:
    """:func:`eval_batch_rows` for ``model`` (a vLLM engine schedules its own memory: all
    questions up to ``rollout.max_batch_rows``)."""
    if batch_size > 0:
        return batch_size
    if is_engine(model):
        return max(1, min(questions, rollout_cfg.max_batch_rows))
    return eval_batch_rows(
        0,
        questions,
        free_device_bytes(model),
        full_length_row_bytes(model, rollout_cfg),
        rollout_cfg.max_batch_rows,
    )


def greedy_answers(
    model,
    tokenizer,
    template,
    retriever,
    rows: Sequence[Mapping[str, Any]],
    rollout_cfg,
    batch_size: int = 32,
    backend: Any = None,
) -> list[Any]:
    """One greedy chain per question (:func:`~at2po_lib.rollout.trees.rollout_chains`), in
    batches of ``batch_size`` (0: as many as memory allows, :func:`batch_rows_for`).
    ``backend``: a turn backend to reuse (the trainer's vLLM engine); None builds one a batch."""
    questions = [row["question"] for row in rows]
    batch_size = batch_rows_for(model, rollout_cfg, batch_size, len(questions))
    env = SearchEnv(tokenizer, template, retriever, rollout_cfg)
    trajectories: list[Any] = []
    for start in range(0, len(questions), batch_size):
        sampler = Sampler(env, backend) if backend else Sampler.from_model(model, env, greedy=True)
        trajectories += rollout_chains(sampler, questions[start : start + batch_size])
    return trajectories


def evaluate_questions(
    profile_cfg: ProfileConfig,
    model,
    tokenizer,
    retriever,
    datasets: Sequence[str] | None = None,
    max_questions: int | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Per-question results (``dataset``, ``group`` columns added) over several test sets;
    with ``eval.sampled_k > 0`` also ``sampled_em`` (:func:`sampled_em`; NaN for datasets
    outside ``eval.sampled_datasets``), sampled with a generator seeded by ``seed``."""
    check_evaluation_policy(profile_cfg, model)
    datasets = list(datasets or profile_cfg.eval.datasets)
    limit = max_questions if max_questions is not None else profile_cfg.eval.max_questions
    rows = {dataset: load_eval_rows(profile_cfg, dataset, limit) for dataset in datasets}
    frames = score_datasets(profile_cfg, model, tokenizer, retriever, rows)
    if not frames:
        raise ValueError(f"no test questions in {datasets} (max_questions={limit})")
    details = pd.concat(frames, ignore_index=True)
    k = profile_cfg.eval.sampled_k
    if k > 0:
        sampled_sets = set(profile_cfg.eval.sampled_datasets or datasets)
        details["sampled_em"] = float("nan")
        for dataset, dataset_rows in rows.items():
            if dataset in sampled_sets and dataset_rows:
                values = sampled_em(
                    model, tokenizer, retriever, dataset_rows, profile_cfg, k, seed=seed
                )
                details.loc[details["dataset"] == dataset, "sampled_em"] = values
    return details


def sampled_em(
    model,
    tokenizer,
    retriever,
    rows: Sequence[Mapping[str, Any]],
    profile_cfg: ProfileConfig,
    k: int,
    seed: int = 0,
) -> list[float]:
    """The *sampled metric*: per question, the mean EM of ``k`` chains sampled at the rollout
    temperature (the training distribution, where greedy EM only sees the mode).

    Each question is repeated ``k`` times in one batch; the sampler is seeded by ``seed``, so
    the values are reproducible. Returns one value in [0, 1] per row, in order.
    """
    template = get_template(profile_cfg.policy.template)
    questions = [row["question"] for row in rows for _ in range(k)]
    batch = batch_rows_for(model, profile_cfg.rollout, profile_cfg.eval.batch_size, len(questions))
    env = SearchEnv(tokenizer, template, retriever, profile_cfg.rollout)
    trajectories: list[Any] = []
    for start in range(0, len(questions), batch):
        sampler = Sampler.from_model(model, env, seed=seed + start)
        trajectories += rollout_chains(sampler, questions[start : start + batch])
    hits = np.array(
        [
            exact_match(traj.answer, row["golden_answers"])
            for traj, row in zip(trajectories, (r for r in rows for _ in range(k)))
        ],
        dtype=float,
    )
    return hits.reshape(len(rows), k).mean(axis=1).tolist()


def score_datasets(
    profile_cfg: ProfileConfig,
    model,
    tokenizer,
    retriever,
    rows_by_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
    backend: Any = None,
) -> list[pd.DataFrame]:
    """The greedy evaluation loop, shared by :func:`evaluate` and the trainer's periodic
    validation: per dataset, one greedy chain per row (``eval.batch_size`` at a time) and its
    scores, with ``dataset`` and ``group`` columns; datasets without rows are left out."""
    template = get_template(profile_cfg.policy.template)
    return [
        questions_frame(model, tokenizer, template, retriever, rows, profile_cfg, dataset, backend)
        for dataset, rows in rows_by_dataset.items()
        if rows
    ]


def questions_frame(
    model, tokenizer, template, retriever, rows, profile_cfg, dataset: str, backend: Any = None
):
    """Greedy chains and their scores for the rows of one dataset."""
    trajectories = greedy_answers(
        model,
        tokenizer,
        template,
        retriever,
        rows,
        profile_cfg.rollout,
        profile_cfg.eval.batch_size,
        backend,
    )
    frame = score_rows(rows, trajectories)
    frame.insert(0, "group", dataset_group(dataset))
    frame.insert(0, "dataset", dataset)
    return frame


def summarise(
    details: pd.DataFrame, profile: str, label: str, seed: int | None, revision: str | None = None
) -> pd.DataFrame:
    """Per-dataset tidy rows from per-question results, plus the weighted group averages."""
    extra = {"sampled_em": ("sampled_em", "mean")} if "sampled_em" in details else {}
    per_dataset = (
        details.groupby(["dataset", "group"], sort=False)
        .agg(
            n=("em", "size"),
            em=("em", "mean"),
            f1=("f1", "mean"),
            mean_turns=("num_turns", "mean"),
            mean_tool_calls=("num_tool_calls", "mean"),
            **extra,
        )
        .reset_index()
    )
    per_dataset.insert(0, "seed", seed)
    per_dataset.insert(0, "label", label)
    per_dataset.insert(0, "profile", profile)
    per_dataset["git_revision"] = revision if revision is not None else git_revision()
    out = pd.concat([per_dataset, weighted_group_average(per_dataset)], ignore_index=True)
    return out[SUMMARY_COLUMNS + list(extra)]


def weighted_group_average(df: pd.DataFrame) -> pd.DataFrame:
    """Sample-weighted ("micro") averages per group, docs/method.md §4.

    For each (profile, label, seed, group): ``n = Σ n_d`` and, for each metric m,
    ``m = Σ_d n_d · m_d / Σ_d n_d``. Rows whose ``dataset`` already ends in ``avg`` are ignored,
    so the function is idempotent on its own output. Returns rows with
    ``dataset = "<group> avg"``.

    Example (the paper's multi-hop split sizes): EM 0.5, 0.6, 0.2, 0.4 on n = 7405, 12576,
    2417, 125 gives (3702.5 + 7545.6 + 483.4 + 50) / 22523 = 0.5231, where the plain mean of
    the four columns would be 0.425.
    """
    base = df[~df["dataset"].astype(str).str.endswith("avg")]
    if (base["n"] <= 0).any():
        raise ValueError("weighted_group_average: every dataset needs n > 0")
    keys = [k for k in ("profile", "label", "seed", "group") if k in base.columns]
    metrics = [
        m for m in ("em", "f1", "mean_turns", "mean_tool_calls", "sampled_em") if m in base.columns
    ]
    weighted = base[metrics].mul(base["n"], axis=0)
    # A metric measured on only some datasets (the sampled metric) averages over those only;
    # measured on none of a group's datasets, it stays NaN (not 0).
    counted = base[metrics].notna().mul(base["n"], axis=0).add_prefix("n_")
    weighted[list(counted.columns)] = counted
    weighted[keys + ["n"]] = base[keys + ["n"]]
    sums = weighted.groupby(keys, sort=False, dropna=False).sum(numeric_only=False).reset_index()
    out = sums[keys + ["n"]].copy()
    for metric in metrics:
        out[metric] = sums[metric] / sums["n_" + metric].where(sums["n_" + metric] > 0)
    out["dataset"] = out["group"] + " avg"
    if "git_revision" in base.columns:
        out["git_revision"] = base["git_revision"].iloc[0] if len(base) else None
    return out[[c for c in df.columns if c in out.columns]]


def turn_distribution(details: pd.DataFrame) -> pd.DataFrame:
    """Share of questions per number of turns, per group (the paper's Figure 4)."""
    counts = details.groupby(["group", "num_turns"]).size().rename("count").reset_index()
    counts["share"] = counts["count"] / counts.groupby("group")["count"].transform("sum")
    return counts


def evaluate(
    profile_cfg: ProfileConfig,
    model,
    tokenizer,
    retriever,
    datasets: Sequence[str] | None = None,
    max_questions: int | None = None,
    label: str = "policy",
    seed: int | None = None,
    return_details: bool = False,
):
    """Greedy EM/F1 of ``model`` on ``datasets`` (default: the profile's ``eval.datasets``).

    Returns the tidy summary (per dataset + weighted group averages); with ``return_details``
    also the per-question frame (predictions, turns, finish reasons) as a second value.
    """
    details = evaluate_questions(
        profile_cfg, model, tokenizer, retriever, datasets, max_questions, seed=seed or 0
    )
    summary = summarise(details, profile_cfg.name, label, seed)
    return (summary, details) if return_details else summary


def write_eval(
    df: pd.DataFrame,
    path: str | Path,
    profile: str | None = None,
    seed: int | None = None,
    config: Any = None,
    **extra: Any,
) -> Path:
    """Write ``df`` as CSV and ``<path>.meta.json`` (profile, seed, git revision, config)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False, float_format="%.4f")
    if profile is None and "profile" in df.columns and len(df):
        profile = str(df["profile"].iloc[0])
    write_meta(path, run_metadata(profile or "unknown", seed=seed, config=config, **extra))
    return path
