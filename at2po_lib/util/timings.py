"""Measured notebook run times, read from ``docs/timings.yaml``: the one place they live.

Each notebook prints its own row under its introduction (:func:`show_timings`), and the
"Time per notebook" table of ``docs/setup.md`` is :func:`markdown_table` (``python -m
at2po_lib.util.timings --markdown`` prints it; ``tests/test_notebooks.py`` checks that the page
shows exactly that).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .paths import repo_root

PROFILES = ("smoke", "tiny")
"""Profiles with measured times, in table order (paper profiles need GPUs: not measured)."""


def timings_path() -> Path:
    return repo_root() / "docs" / "timings.yaml"


def load_timings(path: Path | None = None) -> dict[str, Any]:
    """The parsed file; a clear error naming the file and entry when a field is missing."""
    import yaml

    path = path or timings_path()
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("notebooks"), dict):
        raise ValueError(f"{path}: expected a 'notebooks:' mapping")
    for stem, profiles in data["notebooks"].items():
        for profile, entry in (profiles or {}).items():
            if not isinstance(entry, dict) or "seconds" not in entry or "how" not in entry:
                raise ValueError(f"{path}: notebooks.{stem}.{profile} needs 'seconds' and 'how'")
    return data


def format_duration(seconds: float) -> str:
    """``5.1 -> "5 s"``, ``95 -> "1.6 min"``, ``2460 -> "41 min"``, ``7200 -> "2.0 h"``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 10:
        return f"{minutes:.1f} min"
    if minutes < 120:
        return f"{minutes:.0f} min"
    return f"{minutes / 60:.1f} h"


def describe(entry: dict[str, Any]) -> str:
    """One cell of the table: the duration, marked when it holds only for a first run."""
    text = format_duration(float(entry["seconds"]))
    return text + (" (first run; cached after)" if entry.get("first_run_only") else "")


def markdown_table(data: dict[str, Any] | None = None) -> str:
    """The set-up page's table: one row per notebook, one column per profile."""
    data = data or load_timings()
    lines = ["| notebook | " + " | ".join(f"`{p}`" for p in PROFILES) + " |",
             "| --- |" + " --- |" * len(PROFILES)]
    for stem, profiles in data["notebooks"].items():
        cells = [describe(profiles[p]) if p in (profiles or {}) else "not measured"
                 for p in PROFILES]
        lines.append(f"| `{stem}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_lines(stem: str, profile: str | None = None, data: dict[str, Any] | None = None) -> list[str]:
    """Markdown lines for one notebook: every measured profile (the running one first), how."""
    data = data or load_timings()
    entries = (data["notebooks"].get(stem) or {})
    if not entries:
        return [f"No measured time for `{stem}` yet (`docs/timings.yaml`)."]
    order = sorted(entries, key=lambda p: (p != profile, PROFILES.index(p) if p in PROFILES else 99))
    lines = [f"**Measured time of this notebook** (`docs/timings.yaml`, {data.get('machine', '')}):"]
    for p in order:
        lines.append(f"- `{p}`: {describe(entries[p])} — {entries[p]['how']}")
    if profile is not None and profile not in entries:
        lines.append(f"- `{profile}`: not measured")
    return lines


def show_timings(stem: str, profile: str | None = None) -> None:
    """Display the notebook's measured times (Markdown in Jupyter, text elsewhere)."""
    text = "\n".join(timing_lines(stem, profile))
    try:
        from IPython.display import Markdown, display
    except ImportError:
        print(text)
        return
    display(Markdown(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m at2po_lib.util.timings",
                                     description="Print the measured notebook times.")
    parser.add_argument("--markdown", action="store_true", help="docs/setup.md's table")
    parser.add_argument("--notebook", default=None, help="one notebook's lines, e.g. 02_tree_rollout")
    args = parser.parse_args(argv)
    if args.notebook:
        print("\n".join(timing_lines(args.notebook)))
    else:
        print(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
