r"""Writers for tables and figures, each with a ``.meta.json`` that says where it came from.

- Tables: the tidy frame as CSV (the numbers, one per row, with their CI bounds), and the
  display frame (one row per method, "48.8 [46.1, 51.2]" cells) as Markdown and LaTeX
  (pandas' ``Styler.to_latex``).
- Figures: PNG (for notebooks, the README and docs pages) and PDF (for papers), without the timestamps
  matplotlib would embed, so a rerun on unchanged records rewrites identical bytes.
- Meta: the profile, the run folders and seeds that fed the result, and the git revision
  (:func:`at2po_lib.util.provenance.write_meta`, which also keeps an existing meta when only its
  volatile fields would change).
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..util.writing import write_if_changed
from ..util.paths import figures_dir, recorded_path, results_dir
from ..util.provenance import run_metadata, write_meta

_PNG_METADATA = {"Software": None}
_PDF_METADATA = {"Creator": None, "Producer": None, "CreationDate": None}


def tables_dir(profile: str) -> Path:
    """``results/<profile>/tables/``."""
    return results_dir(profile, "tables")


def source_meta(profile: str, runs: pd.DataFrame | None = None, **extra: Any) -> dict:
    """Provenance of a table or figure: profile, git revision, the runs (method, seed, folder
    relative to the repository) it was computed from, and the function (``writer=``, a function
    or ``module:qualname``) and command that computed it (:func:`run_metadata`)."""
    sources = []
    if runs is not None and len(runs):
        for row in runs.itertuples():
            run = recorded_path(row.path)
            sources.append({"method": row.method, "seed": int(row.seed), "run": run})
    return run_metadata(profile, None, None, sources=sources, **extra)


def markdown_table(display: pd.DataFrame) -> str:
    """A GitHub Markdown table of a display frame (index as the first column)."""
    frame = display.reset_index()
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = [
        "| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body]) + "\n"


def _cell(value: Any) -> str:
    text = "" if value is None or value != value else str(value)  # NaN → empty
    return text.replace("|", "\\|")


def write_table(
    tidy: pd.DataFrame,
    display: pd.DataFrame,
    name: str,
    profile: str,
    meta: dict,
    caption: str = "",
) -> dict[str, Path]:
    """Write ``<name>.csv`` (tidy), ``<name>.md`` and ``<name>.tex`` (display) under
    ``results/<profile>/tables/``, each CSV with its meta. Returns the paths."""
    folder = tables_dir(profile)
    paths = {
        "csv": folder / f"{name}.csv",
        "md": folder / f"{name}.md",
        "tex": folder / f"{name}.tex",
    }
    # Written only when the bytes change: a rerun on unchanged records leaves git clean. Six
    # decimals, so that a reader who rounds a CSV value to the displayed 0.1 point gets the
    # displayed number (four decimals of a fraction rounded twice could differ by 0.1).
    write_if_changed(
        paths["csv"], tidy.to_csv(index=False, float_format="%.6f", lineterminator="\n")
    )
    write_if_changed(paths["md"], markdown_table(display))
    latex = display.style.to_latex(caption=caption or None, hrules=True, label=f"tab:{name}")
    write_if_changed(paths["tex"], _latex_escape_percent(latex))
    write_meta(
        paths["csv"],
        {**meta, "table": name, "caption": caption, "files": [p.name for p in paths.values()]},
    )
    return paths


def _latex_escape_percent(text: str) -> str:
    return text.replace("%", r"\%").replace(r"\\%", r"\%")


def write_figure(
    fig, name: str, profile: str, meta: dict, formats: Sequence[str] = ("png", "pdf")
) -> dict[str, Path]:
    """Save ``figures/<name>_<profile>.{png,pdf}`` (no embedded timestamps) with a meta."""
    folder = figures_dir()
    paths = {}
    for fmt in formats:
        path = folder / f"{name}_{profile}.{fmt}"
        metadata = _PNG_METADATA if fmt == "png" else _PDF_METADATA if fmt == "pdf" else None
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight", metadata=metadata)
        write_if_changed(path, buffer.getvalue())
        paths[fmt] = path
    write_meta(
        paths[formats[0]], {**meta, "figure": name, "files": [p.name for p in paths.values()]}
    )
    return paths


def read_markdown_table(text: str) -> pd.DataFrame:
    """A display frame back from :func:`markdown_table` (first column the index,
    every cell the text shown; ``\\|`` an escaped bar)."""

    def cells(line: str) -> list[str]:
        parts = line.strip().strip("|").replace("\\|", "\0").split("|")
        return [p.strip().replace("\0", "|") for p in parts]

    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        raise ValueError("not a Markdown table: needs a header and a rule line")
    header, rows = cells(lines[0]), [cells(line) for line in lines[2:]]
    frame = pd.DataFrame(rows, columns=header)
    return frame.set_index(header[0])


PROSE_WIDTH = 100
"""Characters a printed sentence wraps at in a notebook (its code column holds about 100)."""


def prose(text: str, width: int = PROSE_WIDTH) -> str:
    """``text`` wrapped at word boundaries as prose, so a long generated sentence prints as a
    paragraph, not one line to scroll; a number is never split (no break inside a word or at
    its minus sign). Each line wraps on its own: a line break, a blank line between
    paragraphs and a line's leading indent (kept on its continuation lines) stay."""
    out = []
    for line in text.split("\n"):
        words = line.lstrip()
        indent = line[: len(line) - len(words)]
        out.append(
            textwrap.fill(
                words,
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_long_words=False,
                break_on_hyphens=False,
            )
            if words
            else ""
        )
    return "\n".join(out)
