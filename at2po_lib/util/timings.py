"""Measured notebook run times, read from ``docs/timings.yaml``: the one place they live.

Each notebook prints its own row under its introduction (:func:`show_timings`), and the
"Time per notebook" table of ``docs/setup.md`` is :func:`markdown_table` (``python -m
at2po_lib.util.timings --markdown`` prints it; ``tests/test_notebooks.py`` checks that the page
shows exactly that).

``python -m at2po_lib.util.timings --update PROFILE`` writes what a run measured into both:
``at2po run-notebooks`` (``./run_all.sh``) records each stage's seconds, start time and load
average in ``results/executed/<profile>/timings.json``; the update copies the stages found
there into ``docs/timings.yaml`` (seconds rounded up, never down; a ``how`` that says when and
under what load) and rewrites the set-up page's table. No time is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from .paths import repo_root, results_dir

# Imported inside the functions that use them: IPython; a notebook-only package, there only inside
# Jupyter.

PROFILES = ("smoke", "tiny")
"""Profiles with measured times, in table order (paper profiles need GPUs: not measured)."""


HEADER = """\
# Measured wall time of each notebook per profile: the ONE source of the times that the
# notebooks print under their introduction and that docs/setup.md's "Time per notebook" table
# shows (tests/test_notebooks.py checks both against this file).
#
# Generated: `./run_all.sh` (or `at2po run-notebooks`) records each stage's seconds, start and
# load average in results/executed/<profile>/timings.json (not in git);
# `python -m at2po_lib.util.timings --update <profile> [--note "what else ran"]` copies them
# here (rounded up, never down) and rewrites docs/setup.md's table. Do not edit by hand.
"""
SETUP_BEGIN, SETUP_END = "<!-- timings:begin -->", "<!-- timings:end -->"


def timings_path() -> Path:
    return repo_root() / "docs" / "timings.yaml"


def setup_page_path() -> Path:
    return repo_root() / "docs" / "setup.md"


def load_timings(path: Path | None = None) -> dict[str, Any]:
    """The parsed file; a clear error naming the file and entry when a field is missing."""
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
    lines = [
        "| notebook | " + " | ".join(f"`{p}`" for p in PROFILES) + " |",
        "| --- |" + " --- |" * len(PROFILES),
    ]
    for stem, profiles in data["notebooks"].items():
        cells = [
            describe(profiles[p]) if p in (profiles or {}) else "not measured" for p in PROFILES
        ]
        lines.append(f"| `{stem}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_lines(
    stem: str, profile: str | None = None, data: dict[str, Any] | None = None
) -> list[str]:
    """Markdown lines for one notebook: every measured profile (the running one first), how."""
    data = data or load_timings()
    entries = data["notebooks"].get(stem) or {}
    if not entries:
        return [f"No measured time for `{stem}` yet (`docs/timings.yaml`)."]
    order = sorted(
        entries, key=lambda p: (p != profile, PROFILES.index(p) if p in PROFILES else 99)
    )
    lines = [
        f"**Measured time of this notebook** (`docs/timings.yaml`, {data.get('machine', '')}):"
    ]
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


def read_measured(path: Path) -> dict[str, dict[str, Any]]:
    """A run's ``timings.json``, every stage as ``{"seconds", "started", "load_average",
    "cpus"}`` (an older file's bare ``{stage: seconds}`` read as seconds only)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no measured times; run `./run_all.sh` (or `at2po "
            "run-notebooks --profile PROFILE --force`) first"
        )
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected {{stage: measurement}}")
    measured = {}
    for stage, value in raw.items():
        entry = value if isinstance(value, dict) else {"seconds": value}
        if not isinstance(entry.get("seconds"), (int, float)):
            raise ValueError(f"{path}: {stage} has no number of seconds: {value!r}")
        measured[stage] = entry
    return measured


def how_measured(entry: dict[str, Any], profile: str, note: str = "") -> str:
    """The ``how`` of one entry: the command, when, and the load it started under (a wall time
    on 2 shared cores can be 3-5x its quiet value)."""
    when = entry.get("started") or "date not recorded"
    load = entry.get("load_average")
    cpus = entry.get("cpus")
    under = (
        f"load average {load:.1f} at its start on {cpus or '?'} cores"
        if load is not None
        else "load not recorded"
    )
    text = f"one stage of `at2po run-notebooks --profile {profile}` ({when}; {under})"
    return f"{text}; {note}" if note else text


def rounded_up(seconds: float) -> float:
    """Seconds to one decimal, rounded up (a measured time is never shown shorter)."""
    return math.ceil(round(seconds * 10, 6)) / 10


def updated(
    data: dict[str, Any], measured: dict[str, dict[str, Any]], profile: str, note: str = ""
) -> dict[str, Any]:
    """``data`` with ``profile``'s entry of every measured stage replaced (other profiles and
    stages kept). A stage that is not a notebook of the file is an error naming it."""
    notebooks = data["notebooks"]
    unknown = sorted(set(measured) - set(notebooks))
    if unknown:
        raise ValueError(f"timings.json names stages docs/timings.yaml does not list: {unknown}")
    for stage, entry in measured.items():
        notebooks[stage] = {
            **(notebooks[stage] or {}),
            profile: {
                "seconds": rounded_up(float(entry["seconds"])),
                "how": how_measured(entry, profile, note),
            },
        }
    return data


def write_timings(data: dict[str, Any], path: Path | None = None) -> None:
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    (path or timings_path()).write_text(HEADER + body)


def with_table(page: str, table: str) -> str:
    """``page`` with the text between the timings markers replaced by ``table``."""
    if SETUP_BEGIN not in page or SETUP_END not in page:
        raise ValueError(f"docs/setup.md lacks the markers {SETUP_BEGIN} / {SETUP_END}")
    head, rest = page.split(SETUP_BEGIN, 1)
    _, tail = rest.split(SETUP_END, 1)
    return f"{head}{SETUP_BEGIN}\n{table}\n{SETUP_END}{tail}"


def update(
    profile: str, note: str = "", source: Path | None = None, stages: list[str] | None = None
) -> list[str]:
    """Copy a run's measured stages (``stages`` only, when given) into docs/timings.yaml and
    docs/setup.md; returns them."""
    if profile not in PROFILES:
        raise ValueError(f"profile {profile!r}: measured times are kept for {PROFILES} only")
    measured = read_measured(source or results_dir("executed", profile) / "timings.json")
    if stages:
        absent = sorted(set(stages) - set(measured))
        if absent:
            raise ValueError(
                f"--stages {absent}: not in the run's timings.json ({sorted(measured)})"
            )
        measured = {stage: measured[stage] for stage in stages}
    data = updated(load_timings(), measured, profile, note)
    write_timings(data)
    page = setup_page_path()
    page.write_text(with_table(page.read_text(), markdown_table(load_timings())))
    return [f"{stage}: {rounded_up(float(e['seconds']))} s" for stage, e in measured.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m at2po_lib.util.timings",
        description="Print, or update from a run, the measured notebook times.",
    )
    parser.add_argument("--markdown", action="store_true", help="docs/setup.md's table")
    parser.add_argument(
        "--notebook", default=None, help="one notebook's lines, e.g. 02_tree_rollout"
    )
    parser.add_argument(
        "--update",
        metavar="PROFILE",
        default=None,
        help="copy results/executed/PROFILE/timings.json into docs/timings.yaml and docs/setup.md",
    )
    parser.add_argument("--note", default="", help="with --update: what else ran (the load)")
    parser.add_argument(
        "--source", type=Path, default=None, help="with --update: another timings.json"
    )
    parser.add_argument(
        "--stages",
        default=None,
        help="with --update: only these stages, e.g. 05_paper_tables_figures",
    )
    args = parser.parse_args(argv)
    if args.update:
        stages = args.stages.split(",") if args.stages else None
        print("\n".join(update(args.update, args.note, args.source, stages)))
    elif args.notebook:
        print("\n".join(timing_lines(args.notebook)))
    else:
        print(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
