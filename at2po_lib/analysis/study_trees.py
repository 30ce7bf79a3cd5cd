r"""Trees for a toy study: the warm start at the profile's temperature and tree shape.

Every study of :mod:`at2po_lib.analysis` needs the same thing: a few hundred real rollout trees
of one policy, each carrying its question's plan. :func:`study_rows` draws the prompts from the
profile's training split(s), :func:`grow_trees` rolls them out with
:func:`at2po_lib.rollout.trees.rollout` (docs/method.md §5) and returns
:class:`~at2po_lib.method.tree.TreeArrays` whose ``info`` holds the TinyWorld plan (``dataset``,
``question_id``, ``hops``, ``type``, ``supporting_ids``, ``hop_answers``) and whose search
nodes' ``records`` hold ``retrieved``: the passage ids their observation showed.

Nothing is built here: the world, the index and the policy must exist under
``artifacts_dir(profile)`` (``at2po world``, ``at2po index``, ``at2po warmstart``), and are only
read. Why the passages are searched again: the rollout keeps the observation's token ids, not
the passage ids; BM25 top-k is deterministic (ties broken by row), so the same query gives the
same passages.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config.profile import load_profile
from ..method.tree import TreeArrays
from ..policy.checkpoint_files import CheckpointError, file_digests
from ..policy.model import load_policy
from ..warmstart.cache import (
    cached_warmstart,
    rebuild_hint,
    shipped_warmstart_dir,
    warmstart_dir,
)
from ..protocol.prompts import get_template
from ..retrieval.indexes import build_retriever
from ..rollout.export import tree_arrays
from ..rollout.agent import Sampler, SearchEnv
from ..rollout.trees import rollout
from ..record.tree_files import load_trees, load_trees_meta, save_trees
from ..util.errors import ProfileError, RecordError
from ..util.paths import artifacts_dir

GROW_CHUNK = 50
"""Prompts rolled out at once by :func:`grow_trees` (bounded memory)."""
PLAN_KEYS = ("hops", "type", "supporting_ids", "hop_answers", "hop_queries")
"""Row ``metadata`` fields copied into each tree's ``info``."""


def study_rows(
    profile: str, datasets: Sequence[str], num_prompts: int, seed: int, split: str = "train"
) -> list[dict[str, Any]]:
    """``num_prompts`` rows drawn without replacement from the pooled ``split`` of ``datasets``
    (TinyWorld jsonl under ``artifacts_dir(profile)/world``), in a seeded random order."""
    rows: list[dict[str, Any]] = []
    for name in datasets:
        path = artifacts_dir(profile) / "world" / "datasets" / name / f"{split}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: no {split} split of {name!r} (run `at2po world "
                f"--profile {profile}` first)"
            )
        for line_no, data in enumerate(path.read_bytes().splitlines(), 1):
            if not data.strip():
                continue
            try:
                row = json.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                raise RecordError(
                    f"{path}, line {line_no}: not a valid UTF-8 JSON row ({str(exc)[:120]})"
                ) from None
            if not isinstance(row, dict):
                raise RecordError(f"{path}, line {line_no}: expected a JSON object")
            missing = [k for k in ("id", "question", "golden_answers", "metadata") if k not in row]
            if missing or "supporting_ids" not in row.get("metadata", {}):
                lacks = missing or ["metadata.supporting_ids"]
                raise RecordError(
                    f"{path}, line {line_no}: row lacks {lacks} (a TinyWorld row carries its plan)"
                )
            rows.append({**row, "dataset": name})
    if not 1 <= num_prompts <= len(rows):
        raise ProfileError(
            f"--prompts {num_prompts}: expected 1 to {len(rows)} (the {split} "
            f"rows of {list(datasets)})"
        )
    order = np.random.default_rng(seed).permutation(len(rows))[:num_prompts]
    return [rows[i] for i in order]


def policy_folder(profile: str, policy: str | Path | None = None) -> Path:
    """The policy to roll out: ``policy`` or the profile's warm start (never trained here)."""
    if policy:
        folder = Path(policy)
    else:  # the local build if current, else the shipped copy (a fresh clone has only that)
        folder = cached_warmstart(load_profile(profile))  # verified whole, or an error
        if folder is None:
            raise _no_current_warmstart(profile)
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"{folder}: no model.safetensors (train the warm start with "
            f"`at2po warmstart --profile {profile}` or pass --policy)"
        )
    return folder


def _no_current_warmstart(profile: str) -> OSError:
    """The refusal when neither warm start was built from the profile's configuration: rolling
    out the stale local one (as before) studied another policy than the profile's, unsaid."""
    stale = next(
        (f for f in (warmstart_dir(profile), shipped_warmstart_dir(profile)) if f.exists()), None
    )
    if stale is None:
        return FileNotFoundError(
            f"no warm start of profile {profile!r} (train it with "
            f"`at2po warmstart --profile {profile}` or pass --policy)"
        )
    return CheckpointError(
        f"{stale}: a warm start built from another configuration of profile "
        f"{profile!r}; {rebuild_hint(profile, shipped=False)}, or pass --policy"
    )


def grow_trees(
    cfg,
    rows: Sequence[dict[str, Any]],
    expansion: str,
    seed: int,
    policy: Path,
    *,
    num_chains: int | None = None,
    chunk: int = GROW_CHUNK,
    rollout_overrides: dict[str, Any] | None = None,
    log: bool = True,
) -> list[TreeArrays]:
    """Trees of ``expansion`` (``chain``, ``random`` or ``entropy``) for ``rows``, rolled out in
    chunks of ``chunk`` prompts (bounded memory; chunk c uses seed ``seed + c``).

    Prompt ids are the rows' positions; ``random`` gives ``rollout.tree_grpo_trees`` trees per
    prompt (``info["tree_of_prompt"]`` numbers them). ``rollout_overrides`` replace fields of
    ``cfg.rollout`` (e.g. ``{"tree_alpha": 0.01}``).
    """
    rollout_cfg = replace(cfg.rollout, **(rollout_overrides or {}))
    torch.set_num_threads(max(rollout_cfg.num_threads, 1))
    model, tokenizer = load_policy(policy, cfg.policy.dtype)
    template = get_template(cfg.policy.template)
    retriever = build_retriever(cfg, build=False)
    env = SearchEnv(tokenizer, template, retriever, rollout_cfg)
    trees: list[TreeArrays] = []
    start = time.perf_counter()
    for c, first in enumerate(range(0, len(rows), chunk)):
        part = rows[first : first + chunk]
        grown = rollout(
            Sampler.from_model(model, env, seed=seed + c),
            [r["question"] for r in part],
            [list(r["golden_answers"]) for r in part],
            expansion=expansion,
            num_leaves=num_chains,
            prompt_ids=list(range(first, first + len(part))),
        )
        arrays = [
            tree_arrays(t, rollout_cfg.entropy_estimate, rollout_cfg.turn_entropy) for t in grown
        ]
        trees += with_plans(arrays, rows)
        if log:
            print(
                f"  {expansion}: {first + len(part)}/{len(rows)} prompts, "
                f"{time.perf_counter() - start:.0f} s",
                flush=True,
            )
    return with_retrievals(trees, retriever, cfg.retrieval.topk)


def with_plans(trees: Sequence[TreeArrays], rows: Sequence[dict[str, Any]]) -> list[TreeArrays]:
    """Copy each prompt's plan (:data:`PLAN_KEYS`, dataset, question id) into its trees' info;
    number the trees of one prompt (``tree_of_prompt``)."""
    seen: dict[int, int] = {}
    out = []
    for t in trees:
        row = rows[t.prompt_id]
        plan = {k: row["metadata"].get(k) for k in PLAN_KEYS}
        k = seen.get(t.prompt_id, 0)
        seen[t.prompt_id] = k + 1
        out.append(
            replace(
                t,
                info={
                    **t.info,
                    **plan,
                    "dataset": row["dataset"],
                    "question_id": row["id"],
                    "tree_of_prompt": k,
                },
            )
        )
    return out


def searched_nodes(tree: TreeArrays) -> np.ndarray:
    """(N,) bool: turns whose search ran and whose observation entered the context.

    A search over the tool limit gets the limit notice (``tool_calls`` unchanged), and a search
    whose observation did not fit ends the branch with no observation (``num_obs_tokens`` 0):
    neither showed a passage.
    """
    tool_calls = np.asarray(tree.node_arrays["tool_calls"])
    before = np.where(tree.parent >= 0, tool_calls[np.maximum(tree.parent, 0)], 0)
    return (tool_calls > before) & (np.asarray(tree.node_arrays["num_obs_tokens"]) > 0)


def with_retrievals(trees: Sequence[TreeArrays], retriever, topk: int) -> list[TreeArrays]:
    """Add ``retrieved`` (passage ids, best first) to the record of every node in
    :func:`searched_nodes` (one batched retriever call for all of them)."""
    # Nodes whose record has no query (an empty query ends the branch with EOS as its
    # observation, docs/method.md §1; a node can also go on after the tool-limit notice, so its
    # record holds a later action) have nothing to re-run: they get no ``retrieved``.
    where = [
        (i, int(n))
        for i, t in enumerate(trees)
        for n in np.flatnonzero(searched_nodes(t))
        if t.records[n].get("query")
    ]
    queries = [trees[i].records[n]["query"] for i, n in where]
    hits = retriever.search(queries, topk=topk) if queries else []
    records = [[dict(r) for r in t.records] for t in trees]
    for (i, n), row in zip(where, hits):
        records[i][n]["retrieved"] = [h["document"]["id"] for h in row]
    return [replace(t, records=r) for t, r in zip(trees, records)]


def policy_digest(policy: Path) -> str:
    """sha256 over the sha256 of every file of a policy folder (weights, tokenizer, config):
    what a cache of its rollouts is keyed by (the folder's path says nothing of its weights)."""
    files = file_digests(Path(policy))
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def questions_digest(rows: Sequence[dict[str, Any]]) -> str:
    """sha256 of the drawn questions (``id@dataset``, in order)."""
    names = [f"{r['id']}@{r['dataset']}" for r in rows]
    return hashlib.sha256(json.dumps(names).encode()).hexdigest()


def cached_trees(
    trees_file: str | Path | None,
    cfg,
    rows: Sequence[dict[str, Any]],
    expansion: str,
    seed: int,
    policy: Path,
    **kwargs: Any,
) -> list[TreeArrays]:
    """:func:`grow_trees`, or the trees of ``trees_file`` when that file exists and was grown
    with the same settings (else they are grown and saved there). A scratch cache: trees are
    rebuildable from the command and seed, never committed. Keyed by everything that
    determines them: the questions, the policy's weights (:func:`policy_digest`; a replaced
    ``model.safetensors`` under the same path grows again), its dtype and template, the
    rollout and retrieval settings, the seed and the chunking (chunk c samples with seed
    ``seed + c``)."""
    settings = {
        "profile": cfg.name,
        "expansion": expansion,
        "seed": seed,
        "policy_weights": policy_digest(policy),
        "policy_dtype": cfg.policy.dtype,
        "template": cfg.policy.template,
        "questions": questions_digest(rows),
        "rollout": {**asdict(cfg.rollout), **kwargs.get("rollout_overrides", {})},
        "retrieval": asdict(cfg.retrieval),
        "num_chains": kwargs.get("num_chains"),
        "chunk": kwargs.get("chunk", GROW_CHUNK),
    }
    if trees_file and Path(trees_file).is_file():
        stored = load_trees_meta(trees_file).get("settings")
        if stored == json.loads(json.dumps(settings)):
            return load_trees(trees_file)
        print(f"  {trees_file} was grown with other settings: growing again", flush=True)
    trees = grow_trees(cfg, rows, expansion, seed, policy, **kwargs)
    if trees_file:
        save_trees(trees, trees_file, meta={"settings": settings})
    return trees
