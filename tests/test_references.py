"""Every document the project mentions is in the project.

A clone holds only what is committed, so a reference to a file kept elsewhere (a folder next to
the checkout, a note never added) is a dead end for a reader. These tests grep the sources,
notebooks, configs, benchmarks, scripts, tests, docs and README for path-like mentions of
documents and fail naming the file and line of each one that does not resolve:

- any ``*.md`` name (bare names are looked up by file name anywhere in the repository, as the
  project's pre-stop hook does);
- ``*.csv``, ``*.yaml``/``*.yml``, ``*.ipynb``, ``*.toml`` paths that start in a top-level folder
  of the repository (``configs/…``, ``at2po_lib/…``) or that leave it (``../…``), unless git
  ignores the path (then it is a declared output, e.g. under ``artifacts/``); in ``tests/`` such
  paths are usually test data (a made-up ``configs/x.yaml`` in an error message), so there only
  ``*.md`` mentions are checked;
- ``docs/method.md §N`` section numbers, which must be headings of ``docs/method.md``.

Bare data-file names (``eval.csv`` written by a test into a temporary folder), placeholders
(``<profile>``, ``{name}``, ``*``) and paths inside other repositories (the authors' ``ATPO/…``)
are not references to this repository's files and are left alone.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

SCANNED_DIRS = ("at2po_lib", "notebooks", "configs", "benchmarks", "scripts", "tests", "docs")
SCANNED_TOP_FILES = (
    "README.md",
    "run_tests.sh",
    "run_all.sh",
    "pyproject.toml",
    "environment.yml",
    ".ci/run",
)
SCANNED_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".ipynb", ".sh", ".toml", ".cfg", ".txt", ""}
SKIPPED_DIRS = ("tests/fixtures/",)  # third-party data samples, not the project's prose

DOC_SUFFIXES = ("md", "csv", "yaml", "yml", "ipynb", "toml")
# A path-like token: no spaces, quotes, brackets or punctuation that ends a sentence.
TOKEN = re.compile(r"[^\s`'\"()\[\]<>{},;:|]+\.(?:" + "|".join(DOC_SUFFIXES) + r")(?![\w/.-])")
PLACEHOLDER = re.compile(r"[<>{}*$…]|\.\.\.")
METHOD_CITE = re.compile(r"\bmethod\.md\b")
SECTION = re.compile(r"§\s?(\d+)")
# The pre-stop hook's own pattern (`git grep -ohE '[A-Za-z0-9_]+\.md' -- <paths>`).
HOOK_PATTERN = re.compile(r"[A-Za-z0-9_]+\.md")
HOOK_PATHS = ("at2po_lib", "notebooks", "README.md", "configs", "benchmarks")


@dataclass(frozen=True)
class Mention:
    where: str  # "path:line" or "notebook: cell N, line M"
    text: str
    file: str  # repository-relative path of the file holding the mention


def _git(*args: str) -> list[str]:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def repo_files() -> set[str]:
    """Files of the repository: tracked ones plus new ones not ignored (still to be committed)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the file list comes from git ls-files")
    listed = _git("ls-files", "--cached", "--others", "--exclude-standard")
    return {path for path in listed if (ROOT / path).is_file()}


def _scanned(files: set[str]) -> list[str]:
    def wanted(path: str) -> bool:
        if path == THIS or path.startswith(SKIPPED_DIRS):
            return False
        if path in SCANNED_TOP_FILES:
            return True
        return (
            path.startswith(tuple(d + "/" for d in SCANNED_DIRS))
            and Path(path).suffix in SCANNED_SUFFIXES
        )

    return sorted(p for p in files if wanted(p))


def _lines(path: str) -> list[tuple[str, str]]:
    """(location, text) per line; a notebook is read cell by cell so locations stay readable."""
    full = ROOT / path
    if full.suffix == ".ipynb":
        try:
            cells = json.loads(full.read_text(encoding="utf-8"))["cells"]
        except (ValueError, KeyError) as err:
            raise AssertionError(f"{path} is not valid notebook JSON: {err}") from err
        out = []
        for c, cell in enumerate(cells):
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else source
            out += [
                (f"{path}: cell {c}, line {i}", line) for i, line in enumerate(text.splitlines(), 1)
            ]
        return out
    text = full.read_text(encoding="utf-8", errors="replace")
    return [(f"{path}:{i}", line) for i, line in enumerate(text.splitlines(), 1)]


@pytest.fixture(scope="module")
def mentions(repo_files) -> list[Mention]:
    found = []
    for path in _scanned(repo_files):
        notes_only = path.startswith("tests/")
        for where, line in _lines(path):
            found += [
                Mention(where, m.group(0), path)
                for m in TOKEN.finditer(line)
                if not notes_only or m.group(0).endswith(".md")
            ]
    return found


def _ignored(paths: list[str]) -> set[str]:
    if not paths:
        return set()
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(paths),
        capture_output=True,
        text=True,
    )
    return set(out.stdout.split())


def _unresolved(mentions: list[Mention], files: set[str]) -> list[str]:
    names = {Path(f).name for f in files}
    top = {f.split("/", 1)[0] for f in files if "/" in f}
    candidates: list[tuple[Mention, str]] = []
    for m in mentions:
        text = m.text.rstrip(".")
        if PLACEHOLDER.search(text):
            continue
        if "/" not in text:
            if text.endswith(".md") and text not in names:
                candidates.append((m, text))
            continue
        first = text.lstrip("./").split("/", 1)[0]
        if not (
            text.startswith("../") or first in top or first in {"shared", "seeds", "reference"}
        ):
            continue  # a path in another repository (e.g. the authors' ATPO/…)
        here = (ROOT / m.file).parent
        for base in (ROOT, here):
            target = (base / text).resolve()
            inside = target.is_relative_to(ROOT)
            if inside and target.relative_to(ROOT).as_posix() in files:
                break
        else:
            candidates.append((m, text))
    ignored = _ignored([t for _, t in candidates if "/" in t and not t.startswith("../")])
    return [f"{m.where}: {m.text}" for m, t in candidates if t not in ignored]


def test_every_document_mentioned_is_in_the_repository(mentions, repo_files):
    missing = _unresolved(mentions, repo_files)
    assert not missing, (
        "documents mentioned but not in the repository (a clone cannot follow "
        "them; point inside the repo, e.g. docs/method.md):\n" + "\n".join(missing)
    )


def test_method_sections_cited_exist(repo_files):
    headings = (ROOT / "docs/method.md").read_text(encoding="utf-8")
    sections = {int(n) for n in re.findall(r"^## (\d+)\.", headings, flags=re.M)}
    assert sections == set(range(1, 12)), f"docs/method.md headings: {sorted(sections)}"
    bad = []
    for path in _scanned(repo_files):
        for where, line in _lines(path):
            if not METHOD_CITE.search(line):
                continue
            tail = line[METHOD_CITE.search(line).end() :]
            bad += [f"{where}: §{n}" for n in SECTION.findall(tail) if int(n) not in sections]
    assert not bad, "sections of docs/method.md that do not exist:\n" + "\n".join(bad)


def test_method_notes_are_cited_with_their_repository_path(repo_files):
    """``method.md`` / ``toy_scale.md`` alone reads as a file next to the citing module."""
    bare = re.compile(r"(?<![/\w])(?:method|toy_scale)\.md\b")
    bad = [
        f"{where}: {line.strip()}"
        for path in _scanned(repo_files)
        if not path.startswith("docs/")
        for where, line in _lines(path)
        if bare.search(line)
    ]
    assert not bad, "cite docs/method.md or docs/toy_scale.md:\n" + "\n".join(bad)


def test_pre_stop_hook_pattern_finds_only_existing_documents():
    """The project's pre-stop hook greps ``[A-Za-z0-9_]+\\.md`` in these paths and looks each
    name up in ``git ls-files``; every name it finds must be a committed file."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = _git("ls-files")
    found = set(_git("grep", "-ohE", HOOK_PATTERN.pattern, "--", *HOOK_PATHS))
    missing = sorted(d for d in found if not any(f == d or f.endswith("/" + d) for f in tracked))
    assert not missing, f"the pre-stop hook would report: {missing}"


def test_the_checker_catches_what_it_should(repo_files, tmp_path):
    """The resolver itself: a dead path, a path leaving the repository and a bare missing note
    are caught; an existing file, an ignored output and another repository's path are not."""
    probes = [
        Mention("x.py:1", "docs/method.md", "at2po_lib/x.py"),
        Mention("x.py:2", "docs/not_a_note.md", "at2po_lib/x.py"),
        Mention("x.py:3", "../shared/notes.md", "at2po_lib/x.py"),
        Mention("x.py:4", "never_written.md", "at2po_lib/x.py"),
        Mention("x.py:5", "configs/tiny.yaml", "at2po_lib/x.py"),
        Mention("x.py:6", "configs/no_such_profile.yaml", "at2po_lib/x.py"),
        Mention("x.py:7", "artifacts/tiny/world/stamp.csv", "at2po_lib/x.py"),
        Mention("x.py:8", "ATPO/scripts/config/ppo_trainer_dr.yaml", "at2po_lib/x.py"),
        Mention("x.py:9", "reference/paper_table1.csv", "at2po_lib/x.py"),
    ]
    flagged = {line.split(":")[1].split()[0] for line in _unresolved(probes, repo_files)}
    assert flagged == {"2", "3", "4", "6"}
