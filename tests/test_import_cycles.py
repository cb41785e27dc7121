"""The cycle check ``make lint`` runs (nexopoll.devtools.cycles) finds cycles, and
nexopoll has none."""

from __future__ import annotations

import grimp

from nexopoll.devtools.cycles import _components, cycles


def graph(*edges: tuple[str, str]) -> grimp.ImportGraph:
    g = grimp.ImportGraph()
    for importer, imported in edges:
        g.add_import(importer=importer, imported=imported)
    return g


def test_a_cycle_of_three_and_a_pair_are_each_found_and_a_chain_is_not():
    g = graph(
        ("p.a", "p.b"),
        ("p.b", "p.c"),
        ("p.c", "p.a"),  # a -> b -> c -> a
        ("p.x", "p.y"),
        ("p.y", "p.x"),  # x <-> y
        ("p.c", "p.d"),
        ("p.d", "p.e"),
    )  # a chain hanging off the cycle
    found = _components(g, set(g.modules))
    assert sorted(found) == [["p.a", "p.b", "p.c"], ["p.x", "p.y"]]


def test_no_cycle_in_a_tree():
    g = graph(("p.a", "p.b"), ("p.a", "p.c"), ("p.b", "p.c"))
    assert _components(g, set(g.modules)) == []


def test_nexopoll_has_no_import_cycle():
    assert cycles() == []
