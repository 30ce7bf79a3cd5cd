"""Names a profile's values are chosen from, kept at the lowest floor so that the profile's
checks read them without importing the layers that use them (the declared layers:
tests/test_architecture.py)."""

from __future__ import annotations

BUILTIN_TEMPLATES = ("atpo", "searchr1", "tiny")
"""``protocol.template``'s built-in prompt templates: the files of ``at2po_lib/templates/``
(:func:`at2po_lib.protocol.prompts.get_template` loads them)."""
