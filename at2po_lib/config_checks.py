"""The one place every profile value's range, and the values' consistency, are checked.

:func:`at2po_lib.config.load_profile` calls :func:`problems` on the resolved profile (file
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
import math
import re
import reprlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .method.expansion import EXPANSIONS
from .prompts import BUILTIN_TEMPLATES
from .rollout.decoding import DECODE_CAPTURES, DECODE_DTYPES, DECODE_GROUPINGS

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
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS - 3] + "..."


def name_problem(name: Any, what: str) -> str | None:
    """None if ``name`` is one plain path component (letters, digits, ``_.-``, not starting
    with a dot, at most 128 characters), else the problem in words, naming ``what``."""
    if isinstance(name, str) and NAME_PATTERN.fullmatch(name) and set(name) != {"."}:
        return None
    return (f"{what} {shown(name)}: expected a plain name (letters, digits, '_', '.', '-'; "
            "not starting with '.'; at most 128 characters)")


def check_name(name: Any, what: str) -> bool:
    problem = name_problem(name, what)
    if problem:
        raise _Problem(problem)
    return True


def _int_at_least(low: int, high: int | None = None) -> Rule:
    if high is None:
        return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low,
                f"an integer >= {low}")
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high,
            f"an integer in [{low}, {high:,}]")


def _optional(rule: Rule) -> Rule:
    check, words = rule
    return (lambda v: v is None or check(v), f"null or {words}")


def _finite(low: float | None = None, high: float | None = None, *, open_low: bool = False,
            open_high: bool = False) -> Rule:
    def check(v: Any) -> bool:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return False
        if low is not None and (v <= low if open_low else v < low):
            return False
        return not (high is not None and (v >= high if open_high else v > high))

    lo = "" if low is None else f"{'(' if open_low else '['}{low}"
    hi = "" if high is None else f"{high}{')' if open_high else ']'}"
    words = (f"a finite number in {lo}, {hi}" if low is not None and high is not None
             else f"a finite number {'>' if open_low else '>='} {low}" if low is not None
             else "a finite number")
    return check, words


def _one_of(*choices: str) -> Rule:
    return (lambda v: v in choices, f"one of {', '.join(choices)}")


def _any_text() -> Rule:
    return (lambda v: v is None or isinstance(v, str), "text")


def _names(*, allow_empty: bool) -> Rule:
    def check(v: Any) -> bool:
        if not isinstance(v, list) or (not v and not allow_empty):
            return False
        for item in v:
            check_name(item, "dataset name")  # raises naming the bad item
        return True

    return check, ("a list of plain names" if allow_empty else "a non-empty list of plain names")


def _template() -> Rule:
    return (lambda v: isinstance(v, str) and (v in BUILTIN_TEMPLATES or Path(v).is_file()),
            f"a built-in template ({', '.join(BUILTIN_TEMPLATES)}) or an existing YAML file")


def _server_url() -> Rule:
    return (lambda v: v is None or (isinstance(v, str) and v.startswith(("http://", "https://"))
                                    and len(v) > len("http://")),
            "null or an http:// or https:// address of a retrieval server")


def _seeds() -> Rule:
    return (lambda v: isinstance(v, list) and bool(v) and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in v),
        "a non-empty list of integers >= 0")


def _profile_name() -> Rule:
    return (lambda v: check_name(v, "profile name"), "a plain name")


POSITIVE = _int_at_least(1)
NON_NEGATIVE = _int_at_least(0)
SHARE = _finite(0.0, 1.0)
RATE = _finite(0.0, open_low=True)
# Upper bounds: far above any real setting (the paper's included), low enough that a typo such as
# 1e9 is refused naming its key instead of hanging, aborting natively or failing deep inside.
COUNT = _int_at_least(1, 1_000_000)
"""World sizes, steps, prompts and batch sizes."""
WIDTH = _int_at_least(1, 1 << 20)
"""Model widths, vocabulary, positions and token budgets (Qwen's vocabulary is 151,936)."""
FAN = _int_at_least(1, 1024)
"""Branching: chains, tree M, K, beam, Tree-GRPO trees, layers and heads."""
LEARNING_RATE = _finite(0.0, 1.0, open_low=True)

RULES: dict[str, Rule] = {
    "name": _profile_name(),
    "description": _any_text(),
    # data
    "data.local_dir": _any_text(),  # FlashRAG files on disk (None: the hub or its cache)
    # world
    "world.seed": NON_NEGATIVE,
    "world.n_countries": COUNT, "world.n_cities": COUNT, "world.n_people": COUNT,
    "world.n_companies": COUNT, "world.n_universities": COUNT, "world.n_films": COUNT,
    "world.dev_fraction": _finite(0.0, 1.0, open_high=True),
    "world.test_fraction": _finite(0.0, 1.0, open_high=True),
    "world.train_per_dataset": NON_NEGATIVE, "world.dev_per_dataset": NON_NEGATIVE,
    "world.test_per_dataset": COUNT,
    "world.distractor_rate": SHARE,
    "world.max_passage_words": (lambda v: isinstance(v, int) and 20 <= v <= 100,
                                "an integer in [20, 100]"),
    "world.name_seed": _optional(NON_NEGATIVE),
    "world.filler_words": NON_NEGATIVE,
    # retrieval
    "retrieval.method": _one_of("bm25", "dense"),
    "retrieval.encoder": _any_text(),
    "retrieval.pooling": _one_of("mean", "cls"),
    "retrieval.query_prefix": _any_text(), "retrieval.passage_prefix": _any_text(),
    "retrieval.max_length": WIDTH,
    "retrieval.index_type": _one_of("Flat", "HNSW"),
    "retrieval.topk": _int_at_least(1, 1000), "retrieval.batch_size": COUNT,
    "retrieval.fp16": (lambda v: isinstance(v, bool), "true or false"),
    "retrieval.corpus": _any_text(), "retrieval.index_dir": _any_text(),
    "retrieval.prebuilt": (lambda v: isinstance(v, bool), "true or false"),
    "retrieval.url": _server_url(),
    "retrieval.shard_size": POSITIVE,
    "retrieval.device": _any_text(),
    "retrieval.timeout_s": RATE,
    "retrieval.retries": NON_NEGATIVE,
    # policy
    "policy.model": _any_text(), "policy.template": _template(),
    "policy.dtype": _one_of("float32", "bfloat16", "float16", "auto"),
    "policy.hidden_size": WIDTH, "policy.num_hidden_layers": FAN,
    "policy.num_attention_heads": FAN, "policy.num_key_value_heads": FAN,
    "policy.intermediate_size": WIDTH, "policy.max_position_embeddings": WIDTH,
    "policy.vocab_size": WIDTH,
    "policy.lora_r": NON_NEGATIVE, "policy.lora_alpha": POSITIVE,
    # sft (warm start)
    "sft.seed": NON_NEGATIVE, "sft.max_steps": NON_NEGATIVE, "sft.batch_size": POSITIVE,
    "sft.learning_rate": LEARNING_RATE, "sft.warmup_steps": NON_NEGATIVE, "sft.eval_every": POSITIVE,
    "sft.eval_questions": POSITIVE,
    "sft.target_em_low": SHARE, "sft.target_em_high": SHARE,
    "sft.require_supported": (lambda v: isinstance(v, bool), "true or false"),
    "sft.aux_worlds": NON_NEGATIVE,
    "sft.main_world_demos": (lambda v: isinstance(v, bool), "true or false"),
    "sft.pretrain_steps": NON_NEGATIVE,
    "sft.pretrain_eval_corpus": (lambda v: isinstance(v, bool), "true or false"),
    "sft.lm_mix": _finite(0.0, 1.0, open_high=True),
    "sft.group_batches": POSITIVE, "sft.pretrain_batch_size": POSITIVE,
    "sft.pretrain_seq_len": POSITIVE,
    "sft.strategy_mix": (lambda v: isinstance(v, bool), "true or false"),
    "sft.follow_rate_hard": SHARE, "sft.follow_rate_easy": SHARE,
    "sft.init_from": _any_text(),
    "sft.select": _one_of("band", "last"),
    # rollout
    "rollout.backend": _one_of("hf", "vllm"),
    "rollout.temperature": RATE,
    "rollout.top_p": _finite(0.0, 1.0, open_low=True),
    "rollout.max_tool_calls": NON_NEGATIVE,
    "rollout.max_turn_tokens": NON_NEGATIVE,  # 0: no per-turn cap (the authors' code)
    "rollout.max_response_tokens": WIDTH,
    "rollout.turn_length_ends_branch": (lambda v: isinstance(v, bool), "true or false"),
    "rollout.max_prompt_tokens": WIDTH,
    "rollout.chains": FAN,
    "rollout.tree_m": FAN, "rollout.tree_l": _int_at_least(0, 16),
    "rollout.tree_k": _int_at_least(0, 1024),
    "rollout.tree_alpha": _finite(),
    "rollout.tree_grpo_trees": FAN,
    "rollout.expansion": _one_of(*EXPANSIONS),
    "rollout.entropy_estimate": _one_of("sampled_nll", "exact"),
    "rollout.turn_entropy": _one_of("mean", "max"),
    "rollout.invalid_action": _one_of("end", "retry", "template"),
    "rollout.keep_cache": (lambda v: isinstance(v, bool), "true or false"),
    "rollout.max_batch_rows": POSITIVE, "rollout.num_threads": NON_NEGATIVE,
    "rollout.decode_dtype": _one_of(*DECODE_DTYPES),
    "rollout.decode_grouping": _one_of(*DECODE_GROUPINGS),
    "rollout.decode_capture": _one_of(*DECODE_CAPTURES),
    "rollout.aepo_budget": FAN, "rollout.aepo_initial": FAN,
    "rollout.aepo_beam": FAN,
    "rollout.aepo_entropy_weight": _finite(), "rollout.aepo_branch_threshold": _finite(),
    "rollout.aepo_branch_penalty": SHARE, "rollout.aepo_entropy_tokens": POSITIVE,
    # train
    "train.val_before_train": (lambda v: isinstance(v, bool), "true or false"),
    "train.methods": (lambda v: isinstance(v, list) and bool(v) and all(
        isinstance(m, str) and m for m in v), "a non-empty list of method names"),
    "train.seeds": _seeds(),
    "train.train_datasets": _names(allow_empty=False),
    "train.max_steps": COUNT, "train.prompts_per_step": _int_at_least(1, 65_536),
    "train.mini_batch_prompts": _int_at_least(1, 65_536),
    "train.micro_batch_rows": NON_NEGATIVE, "train.loss_chunk_rows": NON_NEGATIVE,
    "train.update_num_threads": NON_NEGATIVE,
    "train.learning_rate": LEARNING_RATE,
    "train.lr_scheduler_type": (lambda v: isinstance(v, str) and bool(v), "a scheduler name"),
    "train.weight_decay": _finite(0.0), "train.max_grad_norm": RATE, "train.beta": _finite(0.0),
    "train.eval_every": NON_NEGATIVE, "train.val_questions": _optional(POSITIVE),
    "train.val_datasets": _names(allow_empty=True),
    "train.final_eval": (lambda v: isinstance(v, bool), "true or false"),
    "train.save_every": NON_NEGATIVE, "train.save_total_limit": POSITIVE,
    "train.bf16": (lambda v: isinstance(v, bool), "true or false"),
    "train.activation_checkpointing": (lambda v: isinstance(v, bool), "true or false"),
    "train.use_vllm": (lambda v: isinstance(v, bool), "true or false"),
    # "server" (a separate `trl vllm-serve`) is refused here, not after TRL's 240 s connection
    # wait: the agent generates turn by turn with per-request stops and seeds through the
    # engine in the training process, which TRL's server client does not offer (issue #36).
    "train.vllm_mode": (lambda v: v == "colocate",
                        "colocate (the vLLM engine in the training processes; a vLLM server, "
                        "'server', is not supported: the agent drives the engine turn by turn)"),
    "train.vllm_gpu_memory_utilization": _finite(0.0, 1.0, open_low=True),
    "train.report_to": (lambda v: isinstance(v, list), "a list of logger names"),
    "train.progress_bar": (lambda v: isinstance(v, bool), "true or false"),
    # eval
    "eval.datasets": _names(allow_empty=False),
    "eval.max_questions": _optional(POSITIVE), "eval.batch_size": _int_at_least(0, 1_000_000),
    "eval.sampled_k": _int_at_least(0, 1024), "eval.sampled_datasets": _names(allow_empty=True),
}


TRAINER_RULES: dict[str, Rule] = {
    "num_iterations": _int_at_least(1, 1024),
    "epsilon": _finite(0.0, 10.0, open_low=True),
    "epsilon_high": _optional(_finite(0.0, 10.0, open_low=True)),
    "beta": _finite(0.0, 10.0),
    "delta": _optional(_finite(0.0, open_low=True)),
    "dynamic_sampling_rounds": _int_at_least(1, 1024),
    "loss_entropy_aware_adv": _finite(-10.0, 10.0),
    "loss_chunk_rows": _int_at_least(0, 1 << 20),
    "update_num_threads": _int_at_least(0, 1024),
    "logging_steps": _finite(0.0, 1e6, open_low=True),
}
"""``--set trainer.<field>`` values after the method preset (``AT2POConfig`` fields): the range
of the fields whose nonsense values used to train to completion (``num_iterations=0`` trained
nothing, ``epsilon=nan`` or ``epsilon_high=-5`` clipped nothing). Any other numeric override
must at least be finite (:func:`trainer_problems`)."""


def trainer_problems(overrides: dict[str, Any]) -> list[str]:
    """Every ``trainer.<field>`` override out of :data:`TRAINER_RULES`' range, or a number that
    is not finite; ``None`` values are names only (checked elsewhere)."""
    found = []
    for key, value in overrides.items():
        if value is None:
            continue
        check, words = TRAINER_RULES.get(key, (_finite_if_number, "a finite number"))
        if not check(value):
            found.append(f"trainer.{key}={shown(value)}: expected {words}")
    return found


def _finite_if_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return math.isfinite(value) and abs(value) < 1e18


def _consistency(cfg: Any) -> list[str]:
    """Rules that relate two or more values; each message names the keys."""
    problems = []
    world, sft, rollout, train = cfg.world, cfg.sft, cfg.rollout, cfg.train
    if world.dev_fraction + world.test_fraction >= 1:
        problems.append(f"world.dev_fraction + world.test_fraction = "
                        f"{world.dev_fraction + world.test_fraction:g}: must be below 1 (the "
                        "rest is the train pool)")
    if sft.target_em_low > sft.target_em_high:
        problems.append(f"sft.target_em_low={sft.target_em_low:g} is above "
                        f"sft.target_em_high={sft.target_em_high:g}")
    if rollout.aepo_initial > rollout.aepo_budget:
        problems.append(f"rollout.aepo_initial={rollout.aepo_initial} is above "
                        f"rollout.aepo_budget={rollout.aepo_budget}")
    if train.mini_batch_prompts > train.prompts_per_step:
        problems.append(f"train.mini_batch_prompts={train.mini_batch_prompts} is above "
                        f"train.prompts_per_step={train.prompts_per_step}")
    policy = cfg.policy
    if policy.model is None and policy.num_attention_heads % policy.num_key_value_heads:
        problems.append(f"policy.num_attention_heads={policy.num_attention_heads} is not a "
                        f"multiple of policy.num_key_value_heads={policy.num_key_value_heads}")
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
            found.append(f"{key}: no range rule in at2po_lib/config_checks.py")
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
