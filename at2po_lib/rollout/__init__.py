"""Rollouts of the multi-turn search agent: chains, trees, AEPO branching (docs/method.md §1, §5, §8).

    from at2po_lib.rollout.trees import rollout_trees
    from at2po_lib.rollout.export import training_rows

    trees = rollout_trees(model, tokenizer, "tiny", retriever, questions, golden, cfg.rollout)
    rows = training_rows(trees)          # one row per leaf, ids never re-tokenised

Modules: :mod:`.structures` (Turn, Trajectory, Node, RolloutTree), :mod:`.sampling`
(temperature / top-p sampling, log-probs, entropies), :mod:`.kvcache` (per-sequence KV
prefixes, the batched turn cache), :mod:`.backends` (Hugging Face turn generator),
:mod:`.vllm_backend` (vLLM), :mod:`.agent` (environment and turn loop, greedy chains),
:mod:`.trees` (growing chains and trees; the pick of the nodes to expand is
:mod:`at2po_lib.method.expansion`), :mod:`.aepo` (AEPO's online
branching), :mod:`.export` (trees as :class:`at2po_lib.method.tree.TreeArrays`, tidy tables,
training rows; files: ``at2po_lib.protocol.tree_files.save_trees``), :mod:`.toy` (stand-ins for tests
and benchmarks). Tree figures: :mod:`at2po_lib.reporting.tree_drawings`.

Each name is imported from the module that defines it; ``import at2po_lib.rollout`` loads no torch.
"""
