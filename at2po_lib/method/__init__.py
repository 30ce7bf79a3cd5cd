r"""The method of "AT2PO: Agentic Turn-based Policy Optimization via Tree Search" (arXiv 2601.04767)
in five short modules, read top to bottom in this order (docs/method.md §5-§7):

- :mod:`.tree`: ``TreeArrays``, the one tree type (``parent``, ``entropy``, ``leaf_reward`` over
  nodes), ``Forest`` (many trees as flat tensors), depths and root→leaf paths.
- :mod:`.expansion`: entropy-guided expansion, ``score(n) = H(n) - alpha * b(n)`` and the top-K
  pick; Tree-GRPO's random pick.
- :mod:`.credit`: turn-wise credit, leaf rewards -> node values -> node advantages, by name
  (``VALUE_MODES``, ``ADVANTAGE_MODES``); the outcome baselines it is compared with (GRPO,
  Tree-GRPO, ``OUTCOME_ADVANTAGES``) are in :mod:`.outcome`.
- :mod:`.loss`: the ATPO loss on one screen, a clipped surrogate whose importance ratio is per
  token, per sequence or per turn (``LEVELS``), aggregated as verl names it (``AGGREGATIONS``),
  a method's choices one ``LossOptions``; the trainer calls it as it is, with
  ``loss_diagnostics`` (what it logs) beside it.
- :mod:`.presets`: every trained row of the paper's Tables 1-3 as a named preset.

Demo trees for notebooks and tests are in :mod:`.examples`; tree files in
:mod:`at2po_lib.record.tree_files`.

Nothing here imports the engine that runs it (``rollout``, ``trainer``, ``reporting``, ``cli``;
``tests/test_architecture.py``): the method reads as the paper does, without the plumbing.
"""
