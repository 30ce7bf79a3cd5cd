r"""The documents' result tables are generated, never typed: blocks between markers

    <!-- at2po-report: tiny/table1_summary -->
    ...
    <!-- /at2po-report -->

hold exactly the generated file the key names, ``results/<profile>/tables/<name>.md``. The
documents that carry such blocks are :data:`DOCUMENTS` (the README and the toy study's page,
``docs/toy_study.md``). :func:`update_readme` rewrites the blocks from the files (``at2po report
--profile P --readme``); :func:`stale_blocks` lists the blocks that disagree with their files (a
test fails on any).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..util.paths import repo_root, results_dir
from ..util.writing import write_if_changed

DOCUMENTS = ("README.md", "docs/toy_study.md")
"""Repository-relative documents whose generated blocks :func:`update_readme` keeps current."""
BLOCK = re.compile(
    r"(<!-- at2po-report: (?P<key>[\w.-]+/[\w.-]+) -->\n)(?P<body>.*?)"
    r"(<!-- /at2po-report -->)",
    re.S,
)


def table_file(key: str) -> Path:
    """``<profile>/<table>`` → ``results/<profile>/tables/<table>.md``."""
    profile, name = key.split("/", 1)
    return results_dir(profile, "tables") / f"{name}.md"


def _expected(key: str) -> str:
    path = table_file(key)
    if not path.is_file():
        raise FileNotFoundError(
            f"generated block {key!r} needs {path}; run `at2po report "
            f"--profile {key.split('/')[0]}` first"
        )
    return path.read_text()


def stale_blocks(readme: str | Path | None = None) -> list[str]:
    """Keys of blocks whose body differs from their table file (or whose file is missing), in
    ``readme`` (one document) or, by default, in every document of :data:`DOCUMENTS`."""
    paths = [Path(readme)] if readme else [repo_root() / d for d in DOCUMENTS]
    stale = []
    for path in paths:
        for match in BLOCK.finditer(path.read_text()):
            try:
                if match.group("body") != _expected(match.group("key")):
                    stale.append(match.group("key"))
            except FileNotFoundError:
                stale.append(match.group("key"))
    return stale


def update_readme(readme: str | Path | None = None, profiles: set[str] | None = None) -> list[str]:
    """Rewrite the blocks (of ``profiles``, default all) of ``readme`` or, by default, of every
    document of :data:`DOCUMENTS` from their files; returns the keys rewritten."""
    paths = [Path(readme)] if readme else [repo_root() / d for d in DOCUMENTS]
    changed: list[str] = []
    for path in paths:
        changed += _update_document(path, profiles)
    return changed


def _update_document(path: Path, profiles: set[str] | None) -> list[str]:
    text = path.read_text()
    changed = []

    def replace(match: re.Match) -> str:
        key = match.group("key")
        if profiles is not None and key.split("/")[0] not in profiles:
            return match.group(0)
        body = _expected(key)
        if body != match.group("body"):
            changed.append(key)
        return match.group(1) + body + match.group(4)

    new = BLOCK.sub(replace, text)
    if new != text:
        write_if_changed(path, new)  # undone with the tables inside writing.all_or_none
    return changed
