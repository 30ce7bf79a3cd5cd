"""The README is a front door and its result tables are generated: every block of a document
(`at2po_lib.reporting.readme.DOCUMENTS`: the README and docs/toy_study.md) must equal the Markdown
file it names (`at2po report --profile P --readme`), so a table is never typed by hand; the
README stays short and its code runs."""

from __future__ import annotations

import re

from at2po_lib.util.paths import repo_root
from at2po_lib.reporting import readme


def test_generated_blocks_equal_their_generated_tables(monkeypatch):
    monkeypatch.delenv("AT2PO_RESULTS", raising=False)  # the committed tables, not a test's
    stale = readme.stale_blocks()
    assert stale == [], (
        f"generated blocks differ from their tables: {stale}; run "
        "`at2po report --profile tiny --readme`"
    )


TOY_STUDY_TABLES = (
    "table1_summary",
    "table1_differences",
    "table1_differences_sampled",
    "table2",
    "table3",
    "fig3_entropy_change",
    "credit_accuracy_summary",
    "table1_seeds",
)
"""The tables of ``at2po report --profile tiny`` that docs/toy_study.md shows."""


def test_every_written_toy_table_has_its_block_on_the_toy_study_page(monkeypatch):
    """A table the report wrote is shown (its block), never left out or typed by hand. The
    study's tables exist only once its runs do (the earlier regime's were removed with it)."""
    monkeypatch.delenv("AT2PO_RESULTS", raising=False)
    text = (repo_root() / "docs" / "toy_study.md").read_text()
    keys = set(re.findall(r"<!-- at2po-report: ([\w.-]+/[\w.-]+) -->", text))
    written = {
        f"tiny/{name}" for name in TOY_STUDY_TABLES if readme.table_file(f"tiny/{name}").is_file()
    }
    assert written <= keys, (
        f"add a block <!-- at2po-report: KEY --> ... <!-- /at2po-report --> "
        f"to docs/toy_study.md for {sorted(written - keys)}, then run "
        "`at2po report --profile tiny --readme`"
    )


def test_the_block_rule_sees_a_written_table_without_its_block(tmp_path, monkeypatch):
    monkeypatch.setenv("AT2PO_RESULTS", str(tmp_path))
    readme.table_file("tiny/table2").write_text("| step |\n| --- |\n")  # under AT2PO_RESULTS
    page = tmp_path / "page.txt"
    page.write_text("<!-- at2po-report: tiny/table2 -->\nold\n<!-- /at2po-report -->\n")
    assert readme.stale_blocks(page) == ["tiny/table2"]
    assert readme.update_readme(page) == ["tiny/table2"] and readme.stale_blocks(page) == []


def test_readme_is_a_short_front_door_linking_its_pages():
    """Issue #63: the README was 40% generated findings, lines up to 2,488 characters, and
    "Where to go next" at line 186. Now: at most 120 lines of at most 300 characters, every
    package of at2po_lib on the map, where to go next before the method's code, and the toy's
    findings in at most 12 generated lines that link the study's page."""
    text = (repo_root() / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 120 and max(len(line) for line in lines) <= 300
    packages = [p.name for p in (repo_root() / "at2po_lib").iterdir() if p.is_dir()]
    mapped = text.split("## The library", 1)[1].split("\n## ", 1)[0]
    for package in packages:
        if package != "__pycache__":
            assert f"{package}/`" in mapped, package
    assert text.index("## Where to go next") < text.index("## The method in code")
    shows = text.split("<!-- at2po-report: tiny/toy_shows -->\n", 1)[1].split("<!-- /at2po", 1)[0]
    assert 0 < len(shows.splitlines()) <= 12 and "](docs/toy_study.md)" in shows
    assert "<!-- at2po-report: tiny/why -->" not in text  # the findings live on the study's page
    for page in (
        "docs/setup.md",
        "docs/method.md",
        "docs/toy_study.md",
        "docs/stages.md",
        "docs/reliability.md",
        "docs/warmstart.md",
    ):
        assert f"]({page})" in text, page
    for path in re.findall(r"\]\((at2po_lib/[\w/]+\.py)\)", text):
        assert (repo_root() / path).is_file(), path


def test_readme_python_example_runs():
    """The README's "method in code" block is executed as written."""
    text = (repo_root() / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the project's own README
    # scores H - 0.1 b: node 1: 0.9 - 0.3, node 3: 0.4 - 0.1, node 2: 0.5 - 0.3, root: 0 - 0.3
    assert scope["picks"].tolist() == [1, 3]
    assert scope["values"].shape == scope["advantages"].shape == (9,)


def test_readme_figure_is_committed_and_its_script_draws_it():
    """The README's one figure exists, names the script that draws it, and the script runs."""
    import json
    import runpy

    import matplotlib

    matplotlib.use("Agg")
    root = repo_root()
    (image,) = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", (root / "README.md").read_text())
    meta = json.loads((root / (image + ".meta.json")).read_text())
    assert (root / image).is_file() and meta["command"] == "python scripts/readme_figure.py"
    script = runpy.run_path(str(root / "scripts" / "readme_figure.py"))  # not as __main__
    fig = script["draw"]()
    assert len(fig.axes) >= 2
