"""Toy-scale studies of the method's parts on real rollout trees and on the runs' own records.

- :mod:`.study_trees`: trees for a study (the warm start at the profile's temperature and tree
  shape, prompts from its training split(s)), each tree carrying its question's plan.
- :mod:`.expansion_stats`: where entropy-guided expansion branches (docs/method.md §5), for
  several sibling penalties alpha and both entropy estimators. Command: ``at2po expansion-stats``.
- :mod:`.expansion_oracle`: which turns re-sampling changes, and which score finds them.
- :mod:`.credit_accuracy`: label every turn useful or not from TinyWorld's plan and score each
  credit mode (docs/method.md §6, §8) by the AUC of its turn advantages. Command:
  ``at2po credit-accuracy``.
- :mod:`.decisions`: where a policy's trajectories go wrong: at a decision turn, or in reading a
  passage.
- :mod:`.dissection`: what each part of AT2PO does on the toy, read from the runs' records.
  Command: ``at2po dissect``.
- :mod:`.grpo_contrast`: GRPO's per-node credit beside AT2PO's on the same tree.
- :mod:`.policy_change`: a simulated policy change: which ratio level clips how many tokens.
- :mod:`.running_example`: the notebooks' running example, one turn where AT2PO's mechanisms act.

Trees are rebuildable (command + seed in each result's ``.meta.json``); they are never committed.
"""
