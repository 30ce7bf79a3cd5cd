r"""The trainer's view of the search agent: prompt groups in, a :class:`RolloutBatch` out.

:class:`SearchAgent` binds the tokenizer, prompt template, retriever and the profile's rollout
limits once; :meth:`SearchAgent.sample` runs one rollout round with the method's rollout shape
(``AT2POConfig.tree_*``) through :func:`at2po_lib.rollout.rollout` and converts the trees into
training rows (:func:`at2po_lib.rollout.training_rows`) and credit arrays
(:func:`at2po_lib.rollout.tree_arrays`: :class:`at2po_lib.forest.TreeArrays`).

Which rollout settings come from where:

- the trainer config (they define the method): expansion, M/L/K, alpha, AEPO's initial chains
  and beam, the number of leaves per prompt (``num_generations``), ``temperature`` and
  ``top_p`` (TRL recomputes log-probs with ``args.temperature``, so the sampler must use the
  same value), the backend (``use_vllm``);
- the profile's ``rollout`` section: turn/response/prompt lengths, tool limit, invalid-action
  policy, entropy estimate.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .config import AT2POConfig
from .batch import RolloutBatch


class SearchAgent:
    """Rollouts for training: ``sample(policy, rows, args, seed) -> RolloutBatch``."""

    def __init__(self, tokenizer, template, retriever, rollout_cfg, reward_fn=None) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.retriever = retriever
        self.rollout_cfg = rollout_cfg
        self.reward_fn = reward_fn
        """``reward_fn(response_text, golden_answers) -> float``; None: the rollout's default
        (the authors' format-checked EM for boxed templates, plain EM otherwise)."""

    def rollout_config(self, args: AT2POConfig):
        """The profile's rollout section with the method's shape and sampling settings."""
        aepo_budget = args.num_generations
        return dataclasses.replace(
            self.rollout_cfg, expansion=args.tree_expansion, temperature=args.temperature, top_p=args.top_p,
            tree_m=args.tree_m, tree_l=args.tree_l, tree_k=args.tree_k,
            tree_alpha=args.tree_alpha, aepo_budget=aepo_budget,
            aepo_initial=args.tree_aepo_initial, aepo_beam=args.tree_aepo_beam,
            backend="vllm" if args.use_vllm else "hf")

    def sample(self, policy, rows: Sequence[dict[str, Any]], args: AT2POConfig,
               seed: int) -> RolloutBatch:
        """One tree (chains / random / entropy / AEPO) per row; one training row per leaf.

        ``rows`` need ``question`` and ``golden_answers``; the returned rows are grouped by
        prompt in the order of ``rows`` (``group`` = position in ``rows``).
        """
        from ..rollout import rollout

        cfg = self.rollout_config(args)
        questions = [_field(row, "question", i) for i, row in enumerate(rows)]
        golden = [list(_field(row, "golden_answers", i)) for i, row in enumerate(rows)]
        num_leaves = args.num_generations if args.tree_expansion in ("chain", "aepo") else None
        trees = rollout(policy, self.tokenizer, self.template, self.retriever, questions, golden,
                        cfg, expansion=args.tree_expansion, num_leaves=num_leaves, seed=seed,
                        prompt_ids=list(range(len(rows))), reward_fn=self.reward_fn,
                        backend=turn_backend(policy, self.tokenizer, cfg, seed))
        return to_rollout_batch(trees, cfg.entropy_estimate)


def turn_backend(policy, tokenizer, rollout_cfg, seed: int, greedy: bool = False):
    """A vLLM turn backend around the trainer's colocated engine (``policy`` is a
    ``vllm.LLM``), or None: the rollout then builds its Hugging Face backend from ``policy``."""
    if rollout_cfg.backend != "vllm":
        return None
    from ..rollout import STOP_SEQUENCES, make_backend

    return make_backend(None, tokenizer, rollout_cfg, STOP_SEQUENCES, seed=seed, greedy=greedy,
                        llm=policy)


def _field(row: dict[str, Any], name: str, index: int) -> Any:
    if name not in row:
        raise KeyError(f"training row {index} (id {row.get('id')!r}) has no {name!r} field; "
                       f"fields: {sorted(row)}")
    return row[name]


def to_rollout_batch(trees, entropy_estimate: str = "sampled_nll") -> RolloutBatch:
    """Training rows and credit arrays of rollout trees (one row per leaf, trees in order)."""
    from ..rollout import training_rows, tree_arrays

    rows = training_rows(trees)
    arrays = [tree_arrays(t, entropy_estimate) for t in trees]
    leaf_calls = []
    for row in rows:
        node = trees[row["tree_id"]].nodes[row["leaf_node"]]
        if node.duplicate_of >= 0:  # a copy made to reach the leaf budget: its source's count
            node = trees[row["tree_id"]].nodes[node.duplicate_of]
        leaf_calls.append(node.tool_calls)
    return RolloutBatch(
        prompt_ids=[r["prompt_ids"] for r in rows],
        completion_ids=[r["completion_ids"] for r in rows],
        completion_mask=[r["completion_mask"] for r in rows],
        turn_node=[r["turn_node"] for r in rows],
        old_logps=[r["old_logps"] for r in rows],
        reward=[float(r["reward"]) for r in rows],
        row_tree=[int(r["tree_id"]) for r in rows],
        row_leaf=[int(r["leaf_node"]) for r in rows],
        group=[int(r["prompt_id"]) for r in rows],
        trees=arrays,
        num_turns=[len({n for n in r["turn_node"] if n >= 0}) for r in rows],
        num_tool_calls=leaf_calls,
    )
