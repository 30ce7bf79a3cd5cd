"""The shape of ``at2po_lib``: its import graph has no cycle, the method (``at2po_lib.method``)
imports none of the layers that use it, no module imports a floor above its own (the declared
:data:`LAYERS`), every name has one import path, and each knob of the method has one home.

Read with ``ast``, never by importing: every ``import``/``from ... import`` anywhere in a module
counts — at module level, inside functions (the lazy imports that keep ``at2po --help`` and
``import at2po_lib`` fast) and under ``if TYPE_CHECKING:`` — relative ones resolved against the
module's package. ``from package import name`` is an edge to the submodule ``package.name`` when
there is one, else to the package.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "at2po_lib"


@functools.lru_cache(maxsize=None)
def _parse_version(path: Path, version: tuple[int, int]) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def parsed(path: Path) -> ast.Module:
    """``ast.parse`` of ``path``, once per version of the file (its mtime and size): the checks
    below walk every module of the package again and again (the registry check nine times), and
    parsing was most of their time. The trees are only read, never changed."""
    stat = path.stat()
    return _parse_version(path, (stat.st_mtime_ns, stat.st_size))


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name ``from <level dots><target>`` refers to inside ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the package's modules it imports (anywhere in its body)."""
    paths = {_module_name(p, package): p for p in package.rglob("*.py")}
    trees = {name: parsed(path) for name, path in paths.items()}
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in paths)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, name in packages, node.level, node.module)
                if base not in paths:
                    continue
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    edges.add(submodule if submodule in paths else base)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path a → … → a) per strongly connected component with more than one
    module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def test_no_import_cycle_in_the_package():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_graph_sees_function_level_relative_and_type_checking_imports(tmp_path):
    """The checker itself: a cycle hidden in a function, through a relative import and under
    ``if TYPE_CHECKING:``, is found and named."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub.b import thing\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("import pkg.c\nthing = 1\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    (pkg / "c.py").write_text("")
    assert find_cycles(import_graph(pkg)) == []


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b", "a"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, [["b", "c", "b"]]),
    ],
)
def test_find_cycles_by_hand(graph, expected):
    assert find_cycles(graph) == expected


# ------------------------------------------------------------------------ the method's room
METHOD = "at2po_lib.method"
USERS = (
    "rollout",
    "trainer",
    "reporting",
    "analysis",
    "cli",
    "evaluation",
    "policy",
    "retrieval",
    "tinyworld",
    "util",
    "config",
    "protocol",
    "record",
    "plan",
    "warmstart",
    "study",
    "lab",
)


def test_method_imports_nothing_of_its_users():
    """The paper's math reads on its own: method/ imports only method/ (and no engine, trainer,
    report, command line or plumbing, even lazily inside a function)."""
    graph = import_graph()
    method = {m for m in graph if m == METHOD or m.startswith(METHOD + ".")}
    assert method >= {f"{METHOD}.{n}" for n in ("tree", "expansion", "credit", "loss", "presets")}
    upward = {m: sorted(e for e in graph[m] if e not in method) for m in method}
    assert not any(upward.values()), f"method/ imports its users: {upward}"


def test_the_method_room_check_catches_an_upward_import(tmp_path):
    pkg = tmp_path / "at2po_lib"
    (pkg / "method").mkdir(parents=True)
    (pkg / "rollout").mkdir()
    for init in (pkg, pkg / "method", pkg / "rollout"):
        (init / "__init__.py").write_text("")
    (pkg / "rollout" / "trees.py").write_text("from ..method import expansion\n")
    (pkg / "method" / "expansion.py").write_text("def f():\n    from ..rollout import trees\n")
    graph = import_graph(pkg)
    assert graph["at2po_lib.method.expansion"] == {"at2po_lib.rollout.trees"}


# ------------------------------------------------------------------- layers by declaration
LAYERS = (
    ("config",),
    ("protocol", "tinyworld", "retrieval"),
    ("method",),
    ("policy", "rollout"),
    ("record", "plan"),
    ("trainer",),
    ("evaluation",),
    ("warmstart",),
    ("study",),
    ("analysis",),
    ("reporting",),
    ("lab",),
    ("cli",),
)
"""The package's floors, lowest first: a module imports its own floor and the floors below it,
never one above. ``util`` is plumbing below every floor and imports only ``util``. The run
record (``record``) and the plan of a paper-scale run (``plan``) sit under the TRL glue
(``trainer``); the warm start, which validates with the greedy evaluation, above
``evaluation``; one run with its records and the study's runs (``study``) above the warm start;
what the notebooks run beside reading records (``lab``) above ``reporting``."""
PLUMBING = "util"

KNOWN_UPWARD: dict[tuple[str, str], str] = {}
"""Upward imports known today, each with why it is still there: the test fails on any other,
and on one of these once it is gone (so the list only shrinks)."""


def hidden_imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the package's modules it imports by name at run time
    (``importlib.import_module("at2po_lib.x")`` with a literal name): edges ``import`` does not
    show."""
    paths = {_module_name(p, package): p for p in package.rglob("*.py")}
    found: dict[str, set[str]] = {}
    for name, path in paths.items():
        for node in ast.walk(parsed(path)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in paths
            ):
                found.setdefault(name, set()).add(node.args[0].value)
    return found


def _floor(module: str) -> int | None:
    """The index of ``module``'s floor in :data:`LAYERS`; -1 for the plumbing; None outside
    the floors (the package's own ``__init__``)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    if parts[1] == PLUMBING:
        return -1
    return next(i for i, floor in enumerate(LAYERS) if parts[1] in floor)


def upward_imports(package: Path = PACKAGE) -> set[tuple[str, str]]:
    """Every (module, imported module) whose floor is above the importer's, hidden imports
    included; the plumbing importing any floor counts."""
    graph = import_graph(package)
    for module, targets in hidden_imports(package).items():
        graph[module] = graph.get(module, set()) | targets
    found = set()
    for module, targets in graph.items():
        below = _floor(module)
        for target in targets:
            above = _floor(target)
            if below is not None and above is not None and above > below:
                found.add((module, target))
    return found


def test_every_package_is_on_a_declared_floor():
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    declared = {name for floor in LAYERS for name in floor} | {PLUMBING}
    assert packages == declared


def test_no_module_imports_a_floor_above_its_own():
    found = upward_imports()
    new = sorted(found - set(KNOWN_UPWARD))
    assert not new, "upward imports: " + ", ".join(" -> ".join(edge) for edge in new)
    gone = sorted(set(KNOWN_UPWARD) - found)
    assert not gone, "no longer upward, drop from KNOWN_UPWARD: " + str(gone)


def test_no_module_imports_the_package_by_a_hidden_name():
    """``importlib.import_module`` with a module's name hides an edge from a reader (the
    command line's table of commands builds its names: no literal)."""
    assert hidden_imports() == {}


def test_the_floor_check_catches_an_upward_and_a_hidden_import(tmp_path):
    pkg = tmp_path / "at2po_lib"
    for name in ("config", "trainer", "util"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "trainer" / "run.py").write_text("from ..config import profile\n")
    (pkg / "config" / "profile.py").write_text("def f():\n    from ..trainer import run\n")
    (pkg / "util" / "paths.py").write_text(
        'import importlib\nx = importlib.import_module("at2po_lib.config.profile")\n'
    )
    assert upward_imports(pkg) == {
        ("at2po_lib.config.profile", "at2po_lib.trainer.run"),
        ("at2po_lib.util.paths", "at2po_lib.config.profile"),
    }
    assert hidden_imports(pkg) == {"at2po_lib.util.paths": {"at2po_lib.config.profile"}}


# ----------------------------------------------------------------- one import path per name
def _defined_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level other than by importing them."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def re_exports(package: Path = PACKAGE) -> list[str]:
    """Every ``from <module of the package> import name`` (anywhere in the package) whose module
    does not define ``name`` itself: the name is reached through a second path."""
    paths = {_module_name(p, package): p for p in package.rglob("*.py")}
    trees = {name: parsed(path) for name, path in paths.items()}
    defined = {name: _defined_names(tree) for name, tree in trees.items()}
    found = []
    for name, tree in trees.items():
        is_package = paths[name].name == "__init__.py"
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _resolve(name, is_package, node.level, node.module)
            if base not in paths:
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" not in paths and alias.name not in defined[base]:
                    found.append(f"{name}: from {base} import {alias.name}")
    return found


def test_every_name_has_one_import_path():
    """No re-exports: a name is imported from the module that defines it, and no package
    ``__init__`` but the command line's lazily exports names (``_EXPORTS``/``__getattr__``)."""
    assert re_exports() == []
    lazy = [
        p
        for p in PACKAGE.rglob("__init__.py")
        if p.parent.name != "cli"
        and any(
            isinstance(n, ast.FunctionDef)
            and n.name == "__getattr__"
            or isinstance(n, ast.Assign)
            and any(getattr(t, "id", "") in ("_EXPORTS", "__all__") for t in n.targets)
            for n in parsed(p).body
        )
    ]
    assert lazy == [], f"lazy export tables outside cli/: {lazy}"


def test_re_export_check_finds_a_second_path(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def thing():\n    pass\n")
    (pkg / "b.py").write_text("from .a import thing\n")
    (pkg / "c.py").write_text("from .b import thing\nfrom .a import thing as same\n")
    assert re_exports(pkg) == ["pkg.c: from pkg.b import thing"]


def test_module_file_names_are_unique_by_role():
    """Two modules never share a file name, except a ``cli/`` module named after its command."""
    from collections import Counter

    names = Counter(
        p.name for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" and p.parent.name != "cli"
    )
    assert [n for n, c in names.items() if c > 1] == []


# ----------------------------------------------------------------------- each knob one home
def test_the_trainer_config_has_no_rollout_knob():
    """M, L, K, alpha, chains and AEPO's budget live in ``RolloutConfig`` only: ``AT2POConfig``
    adds no ``tree_*`` field and none named after a rollout field (TRL's own ``temperature``,
    ``top_p``, ``num_generations`` are set once from it by ``resolve_run``)."""
    import dataclasses

    pytest.importorskip("trl")
    from trl import GRPOConfig

    from at2po_lib.config.profile import RolloutConfig, TrainConfig
    from at2po_lib.trainer.at2po_config import AT2POConfig
    from at2po_lib.trainer.resolve import PROFILE_FIELDS

    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    own = {f.name for f in dataclasses.fields(AT2POConfig)} - trl_fields
    assert not {n for n in own if n.startswith("tree_")}
    assert not own & {f.name for f in dataclasses.fields(RolloutConfig)}
    # A profile value the trainer needs reaches it by one path, which refuses a second one.
    assert own & {f.name for f in dataclasses.fields(TrainConfig)} <= set(PROFILE_FIELDS)


def _calls_with_keyword(keyword: str) -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Call) and any(k.arg == keyword for k in node.keywords):
                found.add(_module_name(path, PACKAGE))
    return found


def _products_of_l_and_k(path: Path) -> list[int]:
    """Lines of ``path`` that multiply ``<x>.tree_l`` by ``<y>.tree_k`` (the L·K of M + L·K)."""
    return [
        n.lineno
        for n in ast.walk(parsed(path))
        if isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Mult)
        and {getattr(side, "attr", None) for side in (n.left, n.right)} >= {"tree_l", "tree_k"}
    ]


def test_each_derived_number_is_derived_in_one_place():
    """M + L·K is computed by ``RolloutConfig.leaves_per_prompt`` alone (through
    ``config.tree_leaves``, which nothing else calls; no module or benchmark multiplies L by K),
    and TRL's ``num_generations`` is set by ``resolve_run`` alone."""
    root = PACKAGE.parent
    files = [*PACKAGE.rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
    products = {
        str(p.relative_to(root)): lines for p in files if (lines := _products_of_l_and_k(p))
    }
    assert products == {}
    callers = {
        _module_name(p, PACKAGE)
        for p in PACKAGE.rglob("*.py")
        if any(isinstance(n, ast.Name) and n.id == "tree_leaves" for n in ast.walk(parsed(p)))
    }
    assert callers == {"at2po_lib.config.profile"}
    assert _calls_with_keyword("num_generations") == {"at2po_lib.trainer.resolve"}


def test_the_product_check_sees_l_times_k(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("leaves = cfg.tree_m + cfg.tree_l * cfg.tree_k\nrounds = cfg.tree_l\n")
    assert _products_of_l_and_k(path) == [1]


def _name_lists(path: Path, names: set[str], at_least: int) -> list[int]:
    """Lines of tuple/list/set literals in ``path`` holding ``at_least`` of ``names``."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            strings = {
                e.value
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
            if len(strings & names) >= at_least:
                found.append(node.lineno)
    return found


def test_each_registry_of_names_is_written_once():
    """Value modes, advantage modes, expansions, ratio levels, aggregations and the tables'
    method lists are tuples of :mod:`at2po_lib.method`; every other module imports them."""
    from at2po_lib.method.credit import ADVANTAGE_MODES, VALUE_MODES
    from at2po_lib.method.outcome import OUTCOME_ADVANTAGES
    from at2po_lib.config.choices import EXPANSIONS, TREE_EXPANSIONS
    from at2po_lib.method.loss import AGGREGATIONS, LEVELS
    from at2po_lib.method.presets import TABLE1_METHODS, TABLE2_METHODS

    registries = {
        "at2po_lib/method/credit.py": [set(VALUE_MODES), set(ADVANTAGE_MODES)],
        "at2po_lib/method/outcome.py": [set(OUTCOME_ADVANTAGES)],
        "at2po_lib/config/choices.py": [set(EXPANSIONS), set(TREE_EXPANSIONS)],
        "at2po_lib/method/loss.py": [set(LEVELS), set(AGGREGATIONS)],
        "at2po_lib/method/presets.py": [set(TABLE1_METHODS) - {"react"}, set(TABLE2_METHODS)],
    }
    # The profile's default choice of methods to train is a choice, not a registry.
    choices = {"at2po_lib/config/profile.py"}
    root = PACKAGE.parent
    repeated = {}
    for home, name_sets in registries.items():
        for names in name_sets:
            for path in PACKAGE.rglob("*.py"):
                where = path.relative_to(root).as_posix()
                if where in choices or where == home:
                    continue
                if lines := _name_lists(path, names, min(3, len(names))):
                    repeated[f"{where} {sorted(names)}"] = lines
    assert repeated == {}


def _modules_with_both(path: Path, numbers: set[float]) -> bool:
    """Does ``path`` write every one of ``numbers`` as a literal (docstrings do not count)?"""
    found = {
        n.value
        for n in ast.walk(parsed(path))
        if isinstance(n, ast.Constant) and type(n.value) is float
    }
    return numbers <= found


def test_the_turn_clip_defaults_are_written_once():
    """ATPO's clip range 3e-3 / 4e-3 is ``method.loss.EPS_LOW, EPS_HIGH``; the presets, the
    trainer's config, the inspector and the benchmarks import it."""
    from at2po_lib.method.loss import EPS_HIGH, EPS_LOW

    root = PACKAGE.parent
    files = [*PACKAGE.rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
    homes = [
        p.relative_to(root).as_posix() for p in files if _modules_with_both(p, {EPS_LOW, EPS_HIGH})
    ]
    assert homes == ["at2po_lib/method/loss.py"]


# ------------------------------------------------------------------------ imports in the open
LAZY_NOTE = "# Imported inside the functions that use them: "


def unexplained_lazy_imports(package: Path = PACKAGE) -> list[str]:
    """Function-level imports without a reason: neither a comment at the import (or above its
    group of imports) nor their top-level package named in the module's note
    (``# Imported inside the functions that use them: a, b; why``). This package's own modules
    count too: apart from the command line's (each with its comment) they belong at the top."""
    found = []
    for path in sorted(package.rglob("*.py")):
        lines = path.read_text().splitlines()
        noted = set()
        for i, line in enumerate(lines):
            if line.startswith(LAZY_NOTE):
                note = " ".join(
                    [line[len(LAZY_NOTE) :]]
                    + [
                        next_line[2:]
                        for next_line in lines[i + 1 : i + 4]
                        if next_line.startswith("# ")
                    ]
                )
                noted |= {name.strip() for name in note.split(";", 1)[0].split(",")}
        for fn in ast.walk(parsed(path)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                module = (
                    node.names[0].name
                    if isinstance(node, ast.Import)
                    else "." * node.level + (node.module or "")
                )
                if module.split(".")[0] in noted or _commented(lines, node.lineno):
                    continue
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {module}")
    return found


def _commented(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line or above its group of imports."""
    if "#" in lines[lineno - 1]:
        return True
    i = lineno - 2
    while i >= 0:
        text = lines[i].strip()
        if text.startswith("#"):
            return True
        if not (text.startswith(("import ", "from ")) or text.endswith((",", "(")) or text == ")"):
            return False
        i -= 1
    return False


def test_every_function_level_import_says_why():
    found = unexplained_lazy_imports()
    assert not found, "function-level imports without a reason:\n" + "\n".join(found)


def test_the_lazy_import_check_sees_a_bare_import_and_accepts_a_reason(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    import json\n    from . import b\n")
    (pkg / "b.py").write_text(
        "# Imported inside the functions that use them: torch, faiss; heavy.\n"
        "def g():\n    import torch\n\n"
        "def h():\n    # optional: only on a GPU\n    import vllm\n"
    )
    assert unexplained_lazy_imports(pkg) == ["pkg/a.py:2: json", "pkg/a.py:3: ."]
