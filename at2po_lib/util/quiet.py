"""Keep library chatter a student can do nothing about out of notebook outputs, at the call.

transformers draws a "Loading weights" bar on every ``from_pretrained`` and a "Writing model
shards" bar on every ``save_pretrained``; datasets draws one bar per ``map`` that TRL runs while
preparing a training set ("Building labels", "Truncating", ...). For a 1M-parameter policy these
take milliseconds, and in a notebook each is a red stderr box. :func:`hf_progress_bars_off` hides
them around the one call that makes them and restores the previous setting afterwards, so a
user who wants the bars elsewhere keeps them; the project's own progress bars (tqdm) are not
affected.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Imported inside the functions that use them: transformers, datasets; it quiets libraries the
# caller already uses and loads nothing heavy itself.


@contextmanager
def hf_progress_bars_off() -> Iterator[None]:
    """Disable transformers' and datasets' progress bars inside the ``with`` block only.

    datasets' bars are touched only when datasets is already imported (TRL imports it): the
    retrieval server's process loads encoders through here and has no datasets installed
    (requirements-retriever-gpu.txt), so importing it here would fail there."""
    from transformers.utils import logging as transformers_logging

    datasets_logging = None
    if "datasets" in sys.modules:
        from datasets.utils import logging as datasets_logging

    transformers_on = transformers_logging.is_progress_bar_enabled()
    datasets_on = datasets_logging is not None and datasets_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    if datasets_logging is not None:
        datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        if transformers_on:
            transformers_logging.enable_progress_bar()
        if datasets_on:
            datasets_logging.enable_progress_bar()
