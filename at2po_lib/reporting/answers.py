"""A notebook's computed answer, folded in its output: what the answer cell prints is shown in a
closed ``<details>`` block that the reader clicks open.

The answer cells (source opening with ``# the answer``) are also stored with JupyterLab's
``source_hidden`` and ``outputs_hidden`` (scripts/strip_notebook_outputs.py), but JupyterLab 4
unfolds a cell's outputs whenever the cell runs (``CodeCell.execute`` sets ``outputHidden`` to
false): after *Run All* the printed answer showed under the closed input fold
(notebook 02's ``[2 8 7 6]``, seen in scripts/check_inspector_browser.py). Folded in the output
itself, the answer stays closed in every frontend and after every run::

    with answer_fold():
        print(select_entropy(...))
"""

from __future__ import annotations

import html
import io
import sys
from contextlib import contextmanager, redirect_stdout
from typing import Iterator

# Imported inside the functions that use them: IPython; present where a notebook runs, optional
# for the library.

ANSWER_SUMMARY = "The computed answer (click to open)"
"""The closed fold's line (the exercises' written answers say "Answers (click to open)")."""


def answer_html(text: str, summary: str = ANSWER_SUMMARY) -> str:
    """``text`` (printed output) in a closed ``<details>`` block, escaped, layout kept."""
    return (
        f"<details><summary>{html.escape(summary)}</summary>"
        f"<pre style='margin:0'>{html.escape(text)}</pre></details>"
    )


@contextmanager
def answer_fold(summary: str = ANSWER_SUMMARY) -> Iterator[None]:
    """What the block prints, shown folded (:func:`answer_html`) when it ends; the plain-text
    form (nbconvert to text, a console) is the printed text itself. Outside IPython it is
    printed as it is. If the block raises, what it printed so far is printed unfolded and the
    error goes on."""
    buffer = io.StringIO()
    try:
        with redirect_stdout(buffer):
            yield
    except BaseException:
        sys.stdout.write(buffer.getvalue())
        raise
    text = buffer.getvalue()
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython ships with the notebooks' environment
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        sys.stdout.write(text)
        return
    display({"text/html": answer_html(text, summary), "text/plain": text}, raw=True)
