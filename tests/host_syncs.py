"""Count the device-to-host reads a piece of code makes (each one a sync on a GPU): every
Python-level way a tensor's value reaches the host (``item``, ``tolist``, ``cpu``, ``numpy``,
``bool()``, ``int()``, ``float()``, use as an index, ``nonzero``) is wrapped with a counter."""

from __future__ import annotations

import collections
import contextlib
from typing import Iterator

import torch

READS = (
    "item",
    "tolist",
    "cpu",
    "numpy",
    "nonzero",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
)


@contextlib.contextmanager
def counted_syncs() -> Iterator[collections.Counter]:
    """Inside the block, ``counts[name]`` is how often each read in :data:`READS` ran."""
    counts: collections.Counter = collections.Counter()
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def wrapped(name, function):
        def read(self, *args, **kwargs):
            counts[name] += 1
            return function(self, *args, **kwargs)

        return read

    for name, function in originals.items():
        setattr(torch.Tensor, name, wrapped(name, function))
    try:
        yield counts
    finally:
        for name, function in originals.items():
            setattr(torch.Tensor, name, function)
