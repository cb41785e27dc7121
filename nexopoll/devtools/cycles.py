"""Fail, listing them, on import cycles among nexopoll's modules (``make lint``).

Every import counts: module level, inside a function, and under ``TYPE_CHECKING``.
A package's ``__init__`` importing its own submodules is not a cycle by itself
(``from . import x`` names the submodule, not the package).

Run: ``python -m nexopoll.devtools.cycles`` (exit status 1 when there is a cycle).
"""

from __future__ import annotations

import sys

import grimp


def _components(graph, modules: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}
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
    return _components(graph, set(graph.modules))


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
