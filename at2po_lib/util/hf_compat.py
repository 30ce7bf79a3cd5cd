"""Differences between the transformers releases the project installs.

The CPU environment resolves transformers 5.24.0; the GPU list (requirements-gpu.txt) pins
5.17.0, the newest inside vLLM 0.31.0's range. 5.24 names the training argument
``activation_checkpointing`` (``gradient_checkpointing`` is its deprecated alias); 5.17 knows
only ``gradient_checkpointing``. Code that builds training arguments asks here for the name.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

# Imported inside the functions that use them: transformers; a light helper: transformers loads
# only when its arguments are built.


@lru_cache(maxsize=1)
def checkpointing_field() -> str:
    """``activation_checkpointing`` where transformers' TrainingArguments has it, else
    ``gradient_checkpointing`` (transformers < 5.18)."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return (
        "activation_checkpointing"
        if "activation_checkpointing" in names
        else "gradient_checkpointing"
    )


def checkpointing_kwargs(enabled: bool | None) -> dict[str, bool | None]:
    """``{name: enabled}`` with the name this transformers release reads."""
    return {checkpointing_field(): enabled}
