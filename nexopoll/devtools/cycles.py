"""Fail, listing them, on import cycles among nexopoll's modules (``make lint``).

Every import counts: module level, inside a function, and under ``TYPE_CHECKING``.
A package's ``__init__`` importing its own submodules is not a cycle by itself.

A submodule importing *from its own package* is an import of the package too: a
``from P import name`` statement (``from . import name``, ``from .. import name``, or
the absolute spelling) in a module inside package ``P`` (at any depth) is an edge to
``P`` itself, whatever ``name`` is. grimp records ``from . import failures`` as an
import of ``P.failures`` alone, but the statement reads ``name`` from ``P``'s namespace,
which exists only once ``P/__init__.py`` has run: when that ``__init__`` imports the
submodule back (directly or through other modules), the submodule depends on a
half-initialised package, a cycle. Importing a sibling by its full name
(``import P.failures as failures``, ``from P.failures import x``) is no such edge: it
names the submodule, not the package. So the rule only reports a package whose
``__init__`` reaches back to the submodule; a package whose ``__init__`` imports
nothing of its own is never part of such a cycle.

Run: ``python -m nexopoll.devtools.cycles`` (exit status 1 when there is a cycle).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import grimp


def _source(package: str, module: str, root: Path) -> Path | None:
    """The source file of ``module`` (under ``root``, the directory of ``package``)."""
    parts = module.split(".")[len(package.split(".")) :]
    base = root.joinpath(*parts)
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _from_imported(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module a ``from X import …`` statement in ``module`` imports from (resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]  # a module's relative imports start at its package
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def package_edges(module: str, source: str, *, is_package: bool) -> set[str]:
    """The packages that ``module`` imports from although it lies inside them: every
    ``from P import name`` statement where ``module`` is in package ``P``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported = _from_imported(module, is_package, node)
            if imported and module.startswith(imported + "."):
                found.add(imported)
    return found


def _package_edges(package: str, modules: set[str]) -> dict[str, set[str]]:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return {}
    root = Path(next(iter(spec.submodule_search_locations)))
    edges = {}
    for module in modules:
        path = _source(package, module, root)
        if path is not None:
            is_package = path.name == "__init__.py"
            edges[module] = package_edges(module, path.read_text(), is_package=is_package)
    return edges


def _components(
    graph, modules: set[str], extra: dict[str, set[str]] | None = None
) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative);
    ``extra``: edges grimp does not record (``package_edges``)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    extra = extra or {}
    edges = {
        m: sorted((graph.find_modules_directly_imported_by(m) | extra.get(m, set())) & modules)
        for m in modules
    }
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def cycles(package: str = "nexopoll") -> list[list[str]]:
    graph = grimp.build_graph(package, cache_dir=None)
    modules = set(graph.modules)
    return _components(graph, modules, _package_edges(package, modules))


def main() -> int:
    found = cycles()
    for component in found:
        sys.stdout.write("import cycle among: " + " ↔ ".join(component) + "\n")
    if found:
        sys.stderr.write(f"{len(found)} import cycle(s) in nexopoll" + "\n")
        return 1
    sys.stdout.write("no import cycles in nexopoll" + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
