"""The import graph of ``at2po_lib`` has no cycle.

Read with ``ast``, never by importing: every ``import``/``from ... import`` anywhere in a module
counts — at module level, inside functions (the lazy imports that keep ``at2po --help`` and
``import at2po_lib`` fast) and under ``if TYPE_CHECKING:`` — relative ones resolved against the
module's package. ``from package import name`` is an edge to the submodule ``package.name`` when
there is one, else to the package; a package ``__init__`` that re-exports names lazily through
an ``_EXPORTS = {name: ".module"}`` table (rollout, retrieval, trainer) routes the edge to the
module that defines the name, which is what runs when the name is used.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "at2po_lib"


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lazy_exports(tree: ast.Module, package: str) -> dict[str, str]:
    """``_EXPORTS = {"name": ".module"}`` of a package ``__init__`` → ``{name: full module}``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            table = ast.literal_eval(node.value)
            return {name: package + target if target.startswith(".") else target
                    for name, target in table.items()}
    return {}


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
    trees = {name: ast.parse(path.read_text(), filename=str(path)) for name, path in paths.items()}
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}
    exports = {name: _lazy_exports(trees[name], name) for name in packages}
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
                    if submodule in paths:
                        edges.add(submodule)
                    else:
                        edges.add(exports.get(base, {}).get(alias.name, base))
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


def test_graph_sees_function_level_relative_and_lazy_imports(tmp_path):
    """The checker itself: a cycle hidden in a function, through a relative import and
    through a lazily re-exported name, is found and named."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub import thing\n")
    (pkg / "sub" / "__init__.py").write_text('_EXPORTS = {"thing": ".b"}\n')
    (pkg / "sub" / "b.py").write_text("import pkg.c\nthing = 1\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from . import a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    (pkg / "c.py").write_text("")
    assert find_cycles(import_graph(pkg)) == []


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b", "a"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, [["b", "c", "b"]]),
])
def test_find_cycles_by_hand(graph, expected):
    assert find_cycles(graph) == expected
