"""The one place every profile value's range, and the values' consistency, are checked.

:func:`at2po_lib.config.profile.load_profile` calls :func:`problems` on the resolved profile (file
and ``--set`` overrides applied), so a bad value is refused before any work starts: ``at2po
train``, ``at2po run-notebooks`` and ``./run_all.sh --set rollout.tree_m=0`` stop with one line
naming the key, its value and the allowed range, before notebook 00 or any model is loaded.
Before this table, ``eval.max_questions=-1`` evaluated 9 of 10 questions and recorded a finished
run, ``train.max_steps=-1`` trained 90 steps and ``rollout.tree_m=-2`` ended in
``ZeroDivisionError``.

The table :data:`RULES` names each key (``section.key``) with a rule; a test checks that every
field of the profile dataclasses has one, so a new knob cannot go unchecked. This module imports
nothing of the package (``config`` imports it), so it reads the profile by attribute only.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
import reprlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .choices import (
    BUILTIN_TEMPLATES,
    DECODE_CAPTURES,
    DECODE_DTYPES,
    DECODE_GROUPINGS,
    EXPANSIONS,
)
from .choices import DATASETS as TINY_DATASETS

Rule = tuple[Callable[[Any], bool], str]
"""(predicate on the value, the allowed values in words); a predicate may raise
:class:`_Problem` to say exactly what is wrong (a bad item of a list)."""

MAX_SHOWN_CHARS = 80
"""Error messages show at most this much of a value (a huge one must not become the message)."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""Profile and dataset names: one path component, never ``..`` (they become folder names)."""


class _Problem(ValueError):
    """What a rule found wrong, in words."""


def shown(value: Any) -> str:
    """``repr(value)`` cut to :data:`MAX_SHOWN_CHARS` (the cut marked), computed without
    rendering more than that of a large nested value."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = short.maxlong = MAX_SHOWN_CHARS
    short.maxlevel = 3
    text = short.repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def name_problem(name: Any, what: str) -> str | None:
    """None if ``name`` is one plain path component (letters, digits, ``_.-``, not starting
    with a dot, at most 128 characters), else the problem in words, naming ``what``."""
    if isinstance(name, str) and NAME_PATTERN.fullmatch(name) and set(name) != {"."}:
        return None
    return (
        f"{what} {shown(name)}: expected a plain name (letters, digits, '_', '.', '-'; "
        "not starting with '.'; at most 128 characters)"
    )


def check_name(name: Any, what: str) -> bool:
    problem = name_problem(name, what)
    if problem:
        raise _Problem(problem)
    return True


def _int_at_least(low: int, high: int | None = None) -> Rule:
    if high is None:
        return (
            lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low,
            f"an integer >= {low}",
        )
    return (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high,
        f"an integer in [{low}, {high:,}]",
    )


def _optional(rule: Rule) -> Rule:
    check, words = rule
    return (lambda v: v is None or check(v), f"null or {words}")


def _finite(
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> Rule:
    def check(v: Any) -> bool:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return False
        if low is not None and (v <= low if open_low else v < low):
            return False
        return not (high is not None and (v >= high if open_high else v > high))

    lo = "" if low is None else f"{'(' if open_low else '['}{low}"
    hi = "" if high is None else f"{high}{')' if open_high else ']'}"
    words = (
        f"a finite number in {lo}, {hi}"
        if low is not None and high is not None
        else f"a finite number {'>' if open_low else '>='} {low}"
        if low is not None
        else "a finite number"
    )
    return check, words


def _one_of(*choices: str) -> Rule:
    return (lambda v: v in choices, f"one of {', '.join(choices)}")


def _any_text() -> Rule:
    return (lambda v: v is None or isinstance(v, str), "text")


TEST_ONLY = ("tiny_bamboogle",)
"""TinyWorld datasets without a train split (Bamboogle has only its 125 test questions)."""
LOGGERS = {
    "tensorboard": ("tensorboard", "tensorboardX"),
    "wandb": ("wandb",),
    "mlflow": ("mlflow",),
    "comet_ml": ("comet_ml",),
    "neptune": ("neptune",),
    "clearml": ("clearml",),
    "dvclive": ("dvclive",),
    "codecarbon": ("codecarbon",),
    "azure_ml": ("azureml",),
    "dagshub": ("dagshub",),
    "swanlab": ("swanlab",),
    "trackio": ("trackio",),
    "flyte": ("flytekit",),
    "kubeflow": ("kubeflow",),
}
"""``train.report_to`` names (transformers' integrations) → the packages each needs (any one)."""


def _names(*, allow_empty: bool, train: bool = False) -> Rule:
    """Dataset names: plain names; a ``tiny_`` one must be a TinyWorld dataset (for training,
    one with a train split). Other names are FlashRAG datasets, resolved when a command starts
    (:mod:`at2po_lib.protocol.preflight`)."""

    def check(v: Any) -> bool:
        if not isinstance(v, list) or (not v and not allow_empty):
            return False
        for item in v:
            check_name(item, "dataset name")  # raises naming the bad item
            if item.startswith("tiny_") and item not in TINY_DATASETS:
                raise _Problem(
                    f"{shown(item)} is no TinyWorld dataset (known: {', '.join(TINY_DATASETS)})"
                )
            if train and item in TEST_ONLY:
                raise _Problem(f"{item} has no train split (a test set only)")
        return True

    return check, ("a list of plain names" if allow_empty else "a non-empty list of plain names")


def _loggers() -> Rule:
    def check(v: Any) -> bool:
        if not isinstance(v, list) or len(v) > len(LOGGERS):
            return False
        for item in v:
            if item not in LOGGERS:
                raise _Problem(
                    f"{shown(item)} is no logger transformers knows (known: "
                    f"{', '.join(LOGGERS)}; [] for metrics.jsonl alone)"
                )
        return True

    return check, "a list of logger names"


def logger_problems(names: list[str]) -> list[str]:
    """The ``train.report_to`` loggers whose package is not installed (checked when training
    starts, not when any profile loads: reading records needs no logger)."""
    return [
        f"train.report_to: {name} is not installed (pip install {LOGGERS[name][0]}, or "
        f"--set 'train.report_to=[]')"
        for name in names
        if name in LOGGERS and not any(importlib.util.find_spec(m) for m in LOGGERS[name])
    ]


def _template() -> Rule:
    return (
        lambda v: isinstance(v, str) and (v in BUILTIN_TEMPLATES or Path(v).is_file()),
        f"a built-in template ({', '.join(BUILTIN_TEMPLATES)}) or an existing YAML file",
    )


def _server_url() -> Rule:
    return (
        lambda v: (
            v is None
            or (
                isinstance(v, str)
                and v.startswith(("http://", "https://"))
                and len(v) > len("http://")
            )
        ),
        "null or an http:// or https:// address of a retrieval server",
    )


def _seeds() -> Rule:
    return (
        lambda v: (
            isinstance(v, list)
            and bool(v)
            and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**32 for s in v)
        ),
        "a non-empty list of integers in [0, 2^32)",
    )


def _profile_name() -> Rule:
    return (lambda v: check_name(v, "profile name"), "a plain name")


SHARE = _finite(0.0, 1.0)
# Upper bounds on every number (a test walks the table for a key without one): far above any
# real setting (the paper's included), low enough that a typo such as 1e9 is refused naming its
# key instead of hanging (`at2po world` with 1e9 questions), allocating gigabytes (a 10^6-wide
# policy) or failing deep inside.
COUNT = _int_at_least(1, 1_000_000)
"""World sizes, steps, prompts and questions."""
STEPS = _int_at_least(0, 1_000_000)
"""Step counts and intervals where 0 means none or off."""
BATCH = _int_at_least(1, 65_536)
"""Batch sizes in prompts or sequences."""
ROWS = _int_at_least(0, 1 << 20)
"""Row and token budgets where 0 means no cap (a batch's rows, a loss chunk, a turn)."""
WIDTH = _int_at_least(1, 1 << 20)
"""Model widths, vocabulary, positions and token budgets (Qwen's vocabulary is 151,936)."""
MODEL_WIDTH = _int_at_least(1, 1 << 14)
"""A toy policy's width (used only without ``policy.model``; a 70B model's is 8,192)."""
FAN = _int_at_least(1, 1024)
"""Branching: chains, tree M, K, beam, Tree-GRPO trees, layers and heads."""
SMALL = _int_at_least(0, 1024)
"""Threads (0: the library's choice), tool calls, retries and other small counts."""
SEED = _int_at_least(0, 2**32 - 1)
"""Seeds: numpy's legacy generator and CUDA's take them below 2^32."""
LEARNING_RATE = _finite(0.0, 1.0, open_low=True)
SCALE = _finite(-1000.0, 1000.0)
"""Signed weights of a score (a sibling penalty, AEPO's entropy weight and threshold)."""
COEFFICIENT = _finite(0.0, 10.0)
"""Non-negative loss coefficients (weight decay, KL)."""
TEMPERATURE = _finite(0.0, 100.0, open_low=True)
TIMEOUT_S = _finite(0.0, 86_400.0, open_low=True)
"""Seconds, at most a day."""

RULES: dict[str, Rule] = {
    "name": _profile_name(),
    "description": _any_text(),
    # data
    "data.local_dir": _any_text(),  # FlashRAG files on disk (None: the hub or its cache)
    # world
    "world.seed": SEED,
    "world.n_countries": COUNT,
    "world.n_cities": COUNT,
    "world.n_people": COUNT,
    "world.n_companies": COUNT,
    "world.n_universities": COUNT,
    "world.n_films": COUNT,
    "world.dev_fraction": _finite(0.0, 1.0, open_high=True),
    "world.test_fraction": _finite(0.0, 1.0, open_high=True),
    "world.train_per_dataset": _int_at_least(0, 1_000_000),
    "world.dev_per_dataset": _int_at_least(0, 1_000_000),
    "world.test_per_dataset": COUNT,
    "world.distractor_rate": SHARE,
    "world.max_passage_words": (
        lambda v: isinstance(v, int) and 20 <= v <= 100,
        "an integer in [20, 100]",
    ),
    "world.name_seed": _optional(SEED),
    "world.filler_words": _int_at_least(0, 100),  # at most a passage's word budget
    # retrieval
    "retrieval.method": _one_of("bm25", "dense"),
    "retrieval.encoder": _any_text(),
    "retrieval.pooling": _one_of("mean", "cls"),
    "retrieval.query_prefix": _any_text(),
    "retrieval.passage_prefix": _any_text(),
    "retrieval.max_length": WIDTH,
    "retrieval.index_type": _one_of("Flat", "HNSW"),
    "retrieval.topk": _int_at_least(1, 1000),
    "retrieval.batch_size": BATCH,
    "retrieval.fp16": (lambda v: isinstance(v, bool), "true or false"),
    "retrieval.corpus": _any_text(),
    "retrieval.index_dir": _any_text(),
    "retrieval.prebuilt": (lambda v: isinstance(v, bool), "true or false"),
    "retrieval.url": _server_url(),
    "retrieval.shard_size": _int_at_least(1, 1 << 24),  # x dim x 4 bytes in memory at once
    "retrieval.device": _any_text(),
    "retrieval.timeout_s": TIMEOUT_S,
    "retrieval.retries": _int_at_least(0, 100),
    # policy
    "policy.model": _any_text(),
    "policy.template": _template(),
    "policy.dtype": _one_of("float32", "bfloat16", "float16", "auto"),
    "policy.hidden_size": MODEL_WIDTH,
    "policy.num_hidden_layers": FAN,
    "policy.num_attention_heads": FAN,
    "policy.num_key_value_heads": FAN,
    "policy.head_dim": _int_at_least(0, 1024),
    "policy.intermediate_size": _int_at_least(1, 1 << 16),
    "policy.max_position_embeddings": WIDTH,
    "policy.vocab_size": WIDTH,
    "policy.lora_r": _int_at_least(0, 1 << 16),
    "policy.lora_alpha": _int_at_least(1, 1 << 16),
    # sft (warm start)
    "sft.seed": SEED,
    "sft.max_steps": STEPS,
    "sft.batch_size": BATCH,
    "sft.learning_rate": LEARNING_RATE,
    "sft.warmup_steps": STEPS,
    "sft.eval_every": COUNT,
    "sft.eval_questions": COUNT,
    "sft.target_em_low": SHARE,
    "sft.target_em_high": SHARE,
    "sft.require_supported": (lambda v: isinstance(v, bool), "true or false"),
    "sft.aux_worlds": SMALL,
    "sft.main_world_demos": (lambda v: isinstance(v, bool), "true or false"),
    "sft.pretrain_steps": STEPS,
    "sft.pretrain_eval_corpus": (lambda v: isinstance(v, bool), "true or false"),
    "sft.lm_mix": _finite(0.0, 1.0, open_high=True),
    "sft.group_batches": FAN,
    "sft.pretrain_batch_size": BATCH,
    "sft.pretrain_seq_len": WIDTH,
    "sft.strategy_mix": (lambda v: isinstance(v, bool), "true or false"),
    "sft.follow_rate_hard": SHARE,
    "sft.follow_rate_easy": SHARE,
    "sft.init_from": _any_text(),
    "sft.select": _one_of("band", "last"),
    # rollout
    "rollout.backend": _one_of("hf", "vllm"),
    "rollout.temperature": TEMPERATURE,
    "rollout.top_p": _finite(0.0, 1.0, open_low=True),
    "rollout.max_tool_calls": SMALL,
    "rollout.max_turn_tokens": ROWS,  # 0: no per-turn cap (the authors' code)
    "rollout.max_response_tokens": WIDTH,
    "rollout.max_prompt_tokens": WIDTH,
    "rollout.chains": FAN,
    "rollout.tree_m": FAN,
    "rollout.tree_l": _int_at_least(0, 16),
    "rollout.tree_k": _int_at_least(0, 1024),
    "rollout.tree_alpha": SCALE,
    "rollout.tree_grpo_trees": FAN,
    "rollout.expansion": _one_of(*EXPANSIONS),
    "rollout.entropy_estimate": _one_of("sampled_nll", "exact"),
    "rollout.turn_entropy": _one_of("mean", "max"),
    "rollout.invalid_action": _one_of("end", "retry", "template"),
    "rollout.keep_cache": (lambda v: isinstance(v, bool), "true or false"),
    "rollout.max_batch_rows": WIDTH,
    "rollout.num_threads": SMALL,
    "rollout.decode_dtype": _one_of(*DECODE_DTYPES),
    "rollout.decode_grouping": _one_of(*DECODE_GROUPINGS),
    "rollout.decode_capture": _one_of(*DECODE_CAPTURES),
    "rollout.aepo_budget": FAN,
    "rollout.aepo_initial": FAN,
    "rollout.aepo_beam": FAN,
    "rollout.aepo_entropy_weight": SCALE,
    "rollout.aepo_branch_threshold": SCALE,
    "rollout.aepo_branch_penalty": SHARE,
    "rollout.aepo_entropy_tokens": WIDTH,
    # train
    "train.val_before_train": (lambda v: isinstance(v, bool), "true or false"),
    "train.methods": (
        lambda v: isinstance(v, list) and bool(v) and all(isinstance(m, str) and m for m in v),
        "a non-empty list of method names",
    ),
    "train.seeds": _seeds(),  # each a SEED
    "train.train_datasets": _names(allow_empty=False, train=True),
    "train.max_steps": COUNT,
    "train.prompts_per_step": _int_at_least(1, 65_536),
    "train.mini_batch_prompts": _int_at_least(1, 65_536),
    "train.micro_batch_rows": ROWS,
    "train.loss_chunk_rows": ROWS,
    "train.update_num_threads": SMALL,
    "train.learning_rate": LEARNING_RATE,
    "train.lr_scheduler_type": (lambda v: isinstance(v, str) and bool(v), "a scheduler name"),
    "train.weight_decay": COEFFICIENT,
    "train.max_grad_norm": _finite(0.0, 1e6, open_low=True),
    "train.beta": COEFFICIENT,
    "train.eval_every": STEPS,
    "train.val_questions": _optional(COUNT),
    "train.val_datasets": _names(allow_empty=True),
    "train.final_eval": (lambda v: isinstance(v, bool), "true or false"),
    "train.save_every": STEPS,
    "train.save_total_limit": COUNT,
    "train.bf16": (lambda v: isinstance(v, bool), "true or false"),
    "train.activation_checkpointing": (lambda v: isinstance(v, bool), "true or false"),
    "train.use_vllm": (lambda v: isinstance(v, bool), "true or false"),
    # "server" (a separate `trl vllm-serve`) is refused here, not after TRL's 240 s connection
    # wait: the agent generates turn by turn with per-request stops and seeds through the
    # engine in the training process, which TRL's server client does not offer.
    "train.vllm_mode": (
        lambda v: v == "colocate",
        "colocate (the vLLM engine in the training processes; a vLLM server, "
        "'server', is not supported: the agent drives the engine turn by turn)",
    ),
    "train.vllm_gpu_memory_utilization": _finite(0.0, 1.0, open_low=True),
    "train.report_to": _loggers(),
    "train.progress_bar": (lambda v: isinstance(v, bool), "true or false"),
    # eval
    "eval.datasets": _names(allow_empty=False),
    "eval.max_questions": _optional(COUNT),
    "eval.batch_size": BATCH,
    "eval.sampled_k": _int_at_least(0, 1024),
    "eval.sampled_datasets": _names(allow_empty=True),
}


TRAINER_RULES: dict[str, Rule] = {
    "num_iterations": _int_at_least(1, 1024),
    "epsilon": _finite(0.0, 10.0, open_low=True),
    "epsilon_high": _optional(_finite(0.0, 10.0, open_low=True)),
    "beta": _finite(0.0, 10.0),
    "delta": _optional(_finite(0.0, 1000.0, open_low=True)),
    "dynamic_sampling_rounds": _int_at_least(1, 1024),
    "loss_entropy_aware_adv": _finite(-10.0, 10.0),
    "loss_chunk_rows": _int_at_least(0, 1 << 20),
    "update_num_threads": _int_at_least(0, 1024),
    "logging_steps": _finite(0.0, 1e6, open_low=True),
    "warmup_steps": _finite(0.0, 1e6),  # TRL: steps, or a share of them below 1
    "top_k": _int_at_least(0, 1 << 20),  # 0: no top-k filtering
    "top_p": _finite(0.0, 1.0, open_low=True),
    "min_p": _optional(SHARE),
    "temperature": TEMPERATURE,
    "repetition_penalty": _finite(0.0, 100.0, open_low=True),
    "seed": SEED,
}
"""``--set trainer.<field>`` values after the method preset (``AT2POConfig`` fields): the range
of the fields whose nonsense values used to train to completion (``num_iterations=0`` trained
nothing, ``epsilon=nan`` or ``epsilon_high=-5`` clipped nothing). Any other numeric override
must at least be finite (:func:`trainer_problems`)."""


TRAINER_FALLBACK_LIMIT = 1e9
"""A number for a trainer field without a rule must be finite and at most this large."""


def trainer_problems(overrides: dict[str, Any]) -> list[str]:
    """Every ``trainer.<field>`` override out of :data:`TRAINER_RULES`' range, or a number that
    is not finite; ``None`` values are names only (checked elsewhere)."""
    found = []
    for key, value in overrides.items():
        if value is None:
            continue
        check, words = TRAINER_RULES.get(
            key,
            (_finite_if_number, f"a finite number of at most {TRAINER_FALLBACK_LIMIT:g} in size"),
        )
        if not check(value):
            found.append(f"trainer.{key}={shown(value)}: expected {words}")
    return found


def _finite_if_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return math.isfinite(value) and abs(value) <= TRAINER_FALLBACK_LIMIT


def _consistency(cfg: Any) -> list[str]:
    """Rules that relate two or more values; each message names the keys."""
    problems = []
    world, sft, rollout, train = cfg.world, cfg.sft, cfg.rollout, cfg.train
    if world.dev_fraction + world.test_fraction >= 1:
        problems.append(
            f"world.dev_fraction + world.test_fraction = "
            f"{world.dev_fraction + world.test_fraction:g}: must be below 1 (the "
            "rest is the train pool)"
        )
    if sft.target_em_low > sft.target_em_high:
        problems.append(
            f"sft.target_em_low={sft.target_em_low:g} is above "
            f"sft.target_em_high={sft.target_em_high:g}"
        )
    if rollout.aepo_initial > rollout.aepo_budget:
        problems.append(
            f"rollout.aepo_initial={rollout.aepo_initial} is above "
            f"rollout.aepo_budget={rollout.aepo_budget}"
        )
    if train.mini_batch_prompts > train.prompts_per_step:
        problems.append(
            f"train.mini_batch_prompts={train.mini_batch_prompts} is above "
            f"train.prompts_per_step={train.prompts_per_step}"
        )
    policy = cfg.policy
    if policy.model is None and policy.num_attention_heads % policy.num_key_value_heads:
        problems.append(
            f"policy.num_attention_heads={policy.num_attention_heads} is not a "
            f"multiple of policy.num_key_value_heads={policy.num_key_value_heads}"
        )
    return problems


def _values(cfg: Any) -> dict[str, Any]:
    """``section.key`` → value for every field of the profile (one level of sections)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            for sub in dataclasses.fields(value):
                out[f"{f.name}.{sub.name}"] = getattr(value, sub.name)
        else:
            out[f.name] = value
    return out


def problems(cfg: Any) -> list[str]:
    """Every bad key of a resolved profile with its value and the allowed values, then (when
    each value is in range) the consistency problems; [] for a good profile."""
    found = []
    for key, value in _values(cfg).items():
        rule = RULES.get(key)
        if rule is None:  # a new field without a rule is a bug caught by the tests
            found.append(f"{key}: no range rule in at2po_lib/config/checks.py")
            continue
        check, words = rule
        try:
            ok = check(value)
        except _Problem as exc:
            found.append(f"{key}: {exc}")
            continue
        if not ok:
            found.append(f"{key}={shown(value)}: expected {words}")
    return found or _consistency(cfg)
