"""The notebooks as a student meets them: the project's kernel, measured times from one file,
and executed outputs without warning boxes or walls of log text."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from at2po_lib.lab.notebook_runner import KERNEL_NAME, list_notebooks, run_notebooks
from at2po_lib.util.timings import (
    PROFILES,
    format_duration,
    load_timings,
    markdown_table,
    timing_lines,
)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = list_notebooks(ROOT / "notebooks")
README_BEGIN, README_END = "<!-- timings:begin -->", "<!-- timings:end -->"

MAX_LOG_BYTES = 8_000
"""Stream text one cell may print: enough for a worked example, not for a training log."""

HF_BARS = ("Loading weights", "Writing model shards")


def output_problems(nb: nbformat.NotebookNode) -> list[str]:
    """What a student would see as noise in an executed notebook: a stderr box mentioning a
    warning, transformers' load/save bars, an error, or more than MAX_LOG_BYTES of text."""
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        text_bytes = 0
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                problems.append(f"cell {index}: {out.ename}: {out.evalue}")
            if out.output_type != "stream":
                shown = out.get("data", {}).get("text/plain", "")  # a widget bar's text form
                if any(bar in shown for bar in HF_BARS):
                    problems.append(f"cell {index}: transformers progress bar: {shown[:80]!r}")
                continue
            text_bytes += len(out.text.encode())
            if out.name == "stderr" and re.search(r"warn", out.text, re.IGNORECASE):
                problems.append(f"cell {index}: warning box: {out.text.strip()[:200]!r}")
            if any(bar in out.text for bar in HF_BARS):
                problems.append(
                    f"cell {index}: transformers progress bar: {out.text.strip()[:80]!r}"
                )
        if text_bytes > MAX_LOG_BYTES:
            problems.append(f"cell {index}: {text_bytes} bytes of printed text (> {MAX_LOG_BYTES})")
    return problems


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


# -- the checker itself --------------------------------------------------------------------


def _cell_with(*outputs) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = list(outputs)
    nb.cells = [cell]
    return nb


def test_output_checker_flags_warning_boxes_bars_and_log_walls():
    warning = nbformat.v4.new_output(
        "stream", name="stderr", text="tqdm/auto.py:21: TqdmWarning: IProgress not found.\n"
    )
    bar = nbformat.v4.new_output(
        "stream", name="stderr", text="\rLoading weights: 100%|##| 13/13\n"
    )
    wall = nbformat.v4.new_output("stream", name="stdout", text="{'loss': 1.0}\n" * 1000)
    fine = nbformat.v4.new_output("stream", name="stdout", text="built in 0.4 s\n")
    assert output_problems(_cell_with(fine)) == []
    assert "warning box" in output_problems(_cell_with(warning))[0]
    assert "progress bar" in output_problems(_cell_with(bar))[0]
    assert "bytes of printed text" in output_problems(_cell_with(wall))[0]


# -- committed notebooks ---------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_names_the_project_kernel_and_has_no_outputs(path):
    nb = _read(path)
    assert nb.metadata["kernelspec"]["name"] == KERNEL_NAME
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        f"{path.name}: commit notebooks without outputs"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_shows_its_measured_times_from_the_timings_file(path):
    nb = _read(path)
    params = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert params, f"{path.name}: no cell tagged 'parameters'"
    after = nb.cells[params[0] + 1]
    assert f'show_timings("{path.stem}", profile)' in after.source, (
        f"{path.name}: the cell after the parameters must call show_timings({path.stem!r}, profile)"
    )
    assert "docs/timings.yaml" in nb.cells[0].source, (
        f"{path.name}: the introduction points to the times"
    )


DURATION = re.compile(
    r"\b(a few|several|\d+(?:\.\d+)?)\s*(seconds?|minutes?|mins?|hours?)\b", re.IGNORECASE
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_prose_states_no_run_time_of_its_own(path):
    """Times come from docs/timings.yaml (printed by a cell), never typed into the prose."""
    claims = [
        m.group(0)
        for c in _read(path).cells
        if c.cell_type == "markdown"
        for m in DURATION.finditer(c.source)
    ]
    assert claims == [], f"{path.name}: run times typed into the text: {claims}"


def test_timings_file_covers_every_notebook_and_renders_its_numbers():
    data = load_timings()
    for path in NOTEBOOKS:
        entries = data["notebooks"].get(path.stem)
        assert entries, f"docs/timings.yaml has no entry for {path.stem}"
        lines = "\n".join(timing_lines(path.stem, "smoke", data))
        for profile, entry in entries.items():
            assert profile in PROFILES, f"{path.stem}.{profile}: unknown profile"
            assert format_duration(float(entry["seconds"])) in lines


def test_setup_page_timing_table_is_the_timings_file():
    page = (ROOT / "docs" / "setup.md").read_text()
    assert README_BEGIN in page and README_END in page, "docs/setup.md lacks the timings markers"
    block = page.split(README_BEGIN, 1)[1].split(README_END, 1)[0].strip()
    assert block == markdown_table(), (
        "docs/setup.md's 'Time per notebook' table differs from docs/timings.yaml: paste the "
        "output of `python -m at2po_lib.util.timings --markdown` between the markers"
    )


def test_format_duration_examples():
    assert [format_duration(s) for s in (5.1, 36.6, 95, 2460, 7200)] == [
        "5 s",
        "37 s",
        "1.6 min",
        "41 min",
        "2.0 h",
    ]


# -- executed notebooks ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
def test_smoke_notebooks_run_with_the_project_kernel_and_clean_outputs(isolated_outputs):
    """Every notebook under 'smoke' (~1-2 min on 2 cores), with the named kernel."""
    out = isolated_outputs / "executed"
    results = run_notebooks("smoke", force=True, out_dir=out)
    assert [r.status for r in results] == ["ran"] * len(NOTEBOOKS), results[-1].message
    problems = {}
    for path in NOTEBOOKS:
        executed = _read(out / path.name)
        assert executed.metadata["kernelspec"]["name"] == KERNEL_NAME
        found = output_problems(executed)
        if found:
            problems[path.name] = found
    assert problems == {}, problems


CLOSING_SECTIONS = {"05_paper_tables_figures": "## What the toy says, and why"}
"""A notebook that ends with a section of its own after the recap and exercises (issue #49:
notebook 05 ends with why the toy says what it says)."""


def _before_closing_section(path: Path, cells: list) -> list:
    """``cells`` up to the notebook's closing section (:data:`CLOSING_SECTIONS`), which must be
    its last section; all of them when it has none."""
    heading = CLOSING_SECTIONS.get(path.stem)
    if heading is None:
        return cells
    starts = [
        i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith(heading)
    ]
    assert len(starts) == 1, f"{path.name}: no single {heading!r} section"
    later = [
        c
        for c in cells[starts[0] + 1 :]
        if c.cell_type == "markdown" and c.source.lstrip().startswith("## ")
    ]
    assert not later, f"{path.name}: {heading!r} is not the last section ({later[0].source[:40]!r})"
    return cells[: starts[0]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_teaches_in_its_frame(path):
    """Opens with what to learn and notice, its first code cell is the parameters cell, and it
    ends with a recap, exercises, and their answer in a collapsed cell (JupyterLab's
    ``source_hidden``), or with those and then its closing section (:data:`CLOSING_SECTIONS`)."""
    nb = _read(path)
    assert (
        "**What you will learn**" in nb.cells[0].source
        and "**What to notice**" in nb.cells[0].source
    )
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "parameters" in first_code.metadata.get("tags", [])
    cells = _before_closing_section(path, nb.cells)
    tail = "\n".join(c.source for c in cells[-4:])
    assert "## Recap" in tail and "## Exercises" in tail, (
        f"{path.name}: no recap / exercises at the end"
    )
    hidden = [c for c in cells[-3:] if c.metadata.get("jupyter", {}).get("source_hidden")]
    assert hidden and any("Answer" in c.source or "answer" in c.source for c in hidden)
