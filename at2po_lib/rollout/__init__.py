"""Rollouts of the multi-turn search agent: chains, trees, AEPO branching (docs/method.md §1, §5, §8).

    from at2po_lib.rollout.agent import Sampler, SearchEnv
    from at2po_lib.rollout.trees import rollout
    from at2po_lib.rollout.export import training_rows

    env = SearchEnv(tokenizer, "tiny", retriever, cfg.rollout)   # prompts, tools, reward
    trees = rollout(Sampler.from_model(model, env, seed=0), questions, golden)
    rows = training_rows(trees)          # one row per leaf, ids never re-tokenised

Modules: :mod:`.structures` (Turn, Trajectory, Node, RolloutTree), :mod:`.sampling`
(temperature / top-p sampling, log-probs, entropies), :mod:`.kvcache` (per-sequence KV
prefixes, the batched turn cache), :mod:`.backends` (Hugging Face turn generator),
:mod:`.vllm_backend` (vLLM), :mod:`.agent` (environment, sampler and turn loop), :mod:`.trees`
(:func:`~.trees.rollout`, the one entry of every rollout shape: chains and trees; the pick of
the nodes to expand is :mod:`at2po_lib.method.expansion`), :mod:`.aepo` (AEPO's online
branching), :mod:`.export` (trees as :class:`at2po_lib.method.tree.TreeArrays`, tidy tables,
training rows; files: ``at2po_lib.record.tree_files.save_trees``), :mod:`.toy` (stand-ins for tests
and benchmarks). Tree figures: :mod:`at2po_lib.reporting.tree_drawings`.

Each name is imported from the module that defines it; ``import at2po_lib.rollout`` loads no torch.
"""
