"""Names a profile's values are chosen from, kept at the lowest floor so that the profile's
checks read them without importing the layers that use them (the declared layers:
tests/test_architecture.py)."""

from __future__ import annotations

BUILTIN_TEMPLATES = ("atpo", "searchr1", "tiny")
"""``protocol.template``'s built-in prompt templates: the files of ``at2po_lib/templates/``
(:func:`at2po_lib.protocol.prompts.get_template` loads them)."""

TREE_EXPANSIONS = ("random", "random_siblings", "entropy")
"""Expansions that grow trees of M + L·K leaves per prompt: Tree-GRPO's random expansion, the
authors' random-sibling ablation and AT2PO's entropy-guided expansion (``select_random``,
``select_random_siblings``, ``select_entropy`` of :mod:`at2po_lib.method.expansion`)."""
EXPANSIONS = ("chain", *TREE_EXPANSIONS, "aepo")
"""Every ``rollout.expansion`` by name: independent chains (GRPO-style), the tree expansions
above, and AEPO's online branching (``aepo_budget`` leaves; grown by
:mod:`at2po_lib.rollout.aepo`)."""

DECODE_DTYPES = ("auto", "model", "bfloat16", "float16", "float32")
"""``rollout.decode_dtype``: ``auto`` (:mod:`at2po_lib.rollout.decoding`), ``model`` (the
weights' own dtype), or a dtype by name."""
DECODE_GROUPINGS = ("auto", "turn", "round")
"""``rollout.decode_grouping``: ``auto`` (``turn`` on a CPU, ``round`` on a GPU), ``turn``,
``round`` (:mod:`at2po_lib.rollout.decoding`)."""
DECODE_CAPTURES = ("auto", "on", "off")
"""``rollout.decode_capture``: ``auto`` (a CUDA graph on a GPU, eager on a CPU), ``on``, ``off``
(:mod:`at2po_lib.rollout.decoding`)."""

DATASETS: dict[str, str] = {
    "tiny_hotpotqa": "multihop",
    "tiny_2wiki": "multihop",
    "tiny_musique": "multihop",
    "tiny_bamboogle": "multihop",
    "tiny_nq": "singlehop",
    "tiny_triviaqa": "singlehop",
    "tiny_popqa": "singlehop",
}
"""TinyWorld's seven datasets (:mod:`at2po_lib.tinyworld.datasets`): name → group, in the column
order of the paper's Table 1."""
