"""Toy-scale studies of the method's parts on real rollout trees of the warm-start policy.

- :mod:`.sample`: grow trees for a study (the profile's warm start, its retriever and tree shape,
  prompts from its training split(s)), each tree carrying its question's plan in ``info``.
- :mod:`.expansion`: where entropy-guided expansion branches (docs/method.md §5), for several
  sibling penalties alpha and both entropy estimators, and how far the credit's entropy weights
  are from uniform (docs/method.md §6). Command: ``at2po expansion-stats``.
- :mod:`.credit_accuracy`: label every turn useful or not from TinyWorld's plan and score each
  credit mode (docs/method.md §6, §8) by the AUC of its turn advantages. Command:
  ``at2po credit-accuracy``.

Trees are rebuildable (command + seed in each result's ``.meta.json``); they are never committed.
"""
