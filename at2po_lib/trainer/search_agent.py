r"""The trainer's view of the search agent: prompt groups in, a :class:`RolloutBatch` out.

:class:`SearchAgent` binds the search environment (tokenizer, prompt template, retriever, the
profile's rollout limits, reward) once; :meth:`SearchAgent.sample` runs one rollout round with the run's rollout
configuration through :func:`at2po_lib.rollout.trees.rollout` and converts the trees into
training rows (:func:`at2po_lib.rollout.export.training_rows`) and credit arrays
(:func:`at2po_lib.rollout.export.tree_arrays`: :class:`at2po_lib.method.tree.TreeArrays`).

The rollout configuration is the run's :attr:`at2po_lib.trainer.resolve.RunSpec.rollout`:
the profile's ``rollout`` section shaped by the method (expansion, chains or tree, AEPO's
budget), resolved once; it is the one home of those knobs. The trainer's ``AT2POConfig`` holds
only what TRL needs from it (``num_generations`` = leaves per prompt, ``temperature``: TRL
recomputes log-probs with it), set once by ``resolve_run`` and checked here.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..rollout.agent import Sampler, SearchEnv, turn_stops
from ..rollout.backends import make_backend
from ..rollout.export import training_rows, tree_arrays, with_decisions
from ..rollout.trees import rollout
from .at2po_config import AT2POConfig
from .batch import RolloutBatch


class SearchAgent:
    """Rollouts for training: ``sample(policy, rows, args, seed) -> RolloutBatch``.

    ``rollout_cfg``: the run's resolved rollout configuration (``RunSpec.rollout``), whose
    ``expansion`` and shape are the method's; ``reward_fn(response_text, golden_answers) ->
    float``, None: the rollout's default (the authors' format-checked EM for boxed templates,
    plain EM otherwise)."""

    def __init__(self, tokenizer, template, retriever, rollout_cfg, reward_fn=None) -> None:
        self.env = SearchEnv(tokenizer, template, retriever, rollout_cfg, reward_fn)

    def sample(
        self, policy, rows: Sequence[dict[str, Any]], args: AT2POConfig, seed: int
    ) -> RolloutBatch:
        """One tree (chains / random / entropy / AEPO) per row; one training row per leaf.

        ``policy``: the model, or the colocated vLLM engine. ``rows`` need ``question`` and
        ``golden_answers``; the returned rows are grouped by prompt in the order of ``rows``
        (``group`` = position in ``rows``). ``args`` (the trainer's ``AT2POConfig``) must
        describe the same rollout: it is checked, not read.
        """
        cfg = self.env.cfg
        _check_same_rollout(cfg, args)
        questions = [_field(row, "question", i) for i, row in enumerate(rows)]
        golden = [list(_field(row, "golden_answers", i)) for i, row in enumerate(rows)]
        trees = rollout(
            Sampler.from_model(policy, self.env, seed),
            questions,
            golden,
            prompt_ids=list(range(len(rows))),
        )
        batch = to_rollout_batch(trees, cfg.entropy_estimate, cfg.turn_entropy)
        # each node's decision label from its question's plan (the trees' records keep it)
        batch.trees = [with_decisions(t, rows[t.prompt_id]) for t in batch.trees]
        return batch


def turn_backend(policy, tokenizer, rollout_cfg, seed: int, greedy: bool = False, template="atpo"):
    """A vLLM turn backend around the trainer's colocated engine (``policy`` is a
    ``vllm.LLM``), stopping at ``template``'s stops, or None: the rollout then builds its
    Hugging Face backend from ``policy``."""
    if rollout_cfg.backend != "vllm":
        return None

    return make_backend(
        None, tokenizer, rollout_cfg, turn_stops(template), seed=seed, greedy=greedy, llm=policy
    )


def _check_same_rollout(cfg, args: AT2POConfig) -> None:
    """The trainer groups ``num_generations`` rows per prompt and recomputes log-probs at
    ``temperature``: both must be the sampler's (a mismatch is a wiring error, not data)."""
    pairs = {
        "num_generations": (args.num_generations, cfg.leaves_per_prompt()),
        "temperature": (args.temperature, cfg.temperature),
    }
    wrong = {k: v for k, v in pairs.items() if v[0] != v[1]}
    if wrong:
        raise ValueError(
            "trainer arguments and rollout configuration disagree: "
            + ", ".join(f"{k}={a!r} vs rollout {r!r}" for k, (a, r) in wrong.items())
            + " (build both with at2po_lib.trainer.resolve.resolve_run)"
        )


def _field(row: dict[str, Any], name: str, index: int) -> Any:
    if name not in row:
        raise KeyError(
            f"training row {index} (id {row.get('id')!r}) has no {name!r} field; "
            f"fields: {sorted(row)}"
        )
    return row[name]


def to_rollout_batch(
    trees, entropy_estimate: str = "sampled_nll", turn_entropy: str = "mean"
) -> RolloutBatch:
    """Training rows and credit arrays of rollout trees (one row per leaf, trees in order)."""
    rows = training_rows(trees)
    arrays = [tree_arrays(t, entropy_estimate, turn_entropy) for t in trees]
    leaf_calls, finish_reasons = [], []
    for row in rows:
        node = trees[row["tree_id"]].nodes[row["leaf_node"]]
        if node.duplicate_of >= 0:  # a copy made to reach the leaf budget: its source's count
            node = trees[row["tree_id"]].nodes[node.duplicate_of]
        leaf_calls.append(node.tool_calls)
        finish_reasons.append(node.finish_reason)
    return RolloutBatch(
        prompt_ids=[r["prompt_ids"] for r in rows],
        completion_ids=[r["completion_ids"] for r in rows],
        sampled_mask=[r["sampled_mask"] for r in rows],
        turn_node=[r["turn_node"] for r in rows],
        old_logps=[r["old_logps"] for r in rows],
        reward=[float(r["reward"]) for r in rows],
        row_tree=[int(r["tree_id"]) for r in rows],
        row_leaf=[int(r["leaf_node"]) for r in rows],
        group=[int(r["prompt_id"]) for r in rows],
        trees=arrays,
        num_turns=[len({n for n in r["turn_node"] if n >= 0}) for r in rows],
        num_tool_calls=leaf_calls,
        finish_reason=finish_reasons,
    )
