"""The README's result tables are generated (`at2po report --profile P --readme`): every block
must equal the Markdown file it names, so a table in the README is never typed by hand."""

from __future__ import annotations

import re

from at2po_lib.util.paths import repo_root
from at2po_lib.reporting import readme


def test_readme_blocks_equal_their_generated_tables(monkeypatch):
    monkeypatch.delenv("AT2PO_RESULTS", raising=False)  # the committed tables, not a test's
    stale = readme.stale_blocks(repo_root() / "README.md")
    assert stale == [], (f"README blocks differ from their tables: {stale}; run "
                         "`at2po report --profile tiny --readme`")


def test_readme_has_generated_blocks_for_the_toy_tables():
    text = (repo_root() / "README.md").read_text()
    keys = set(re.findall(r"<!-- at2po-report: ([\w.-]+/[\w.-]+) -->", text))
    assert {"tiny/table1_summary", "tiny/table1_differences"} <= keys
