"""The cycle check ``make lint`` runs (nexopoll.devtools.cycles) finds cycles (a
submodule importing from its own package included), and nexopoll has none."""

from __future__ import annotations

import grimp

from nexopoll.devtools.cycles import _components, cycles, package_edges


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


def make_package(root, name: str, files: dict[str, str]) -> None:
    """A throwaway package ``name`` under ``root``: ``files`` maps a path inside it
    (``__init__.py``, ``run.py``, ``sub/__init__.py``) to its source."""
    for rel, source in files.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


def test_a_submodule_importing_from_its_package_that_imports_it_back_is_a_cycle(
    tmp_path, monkeypatch
):
    # grimp alone records run -> cyc_rel.failures: only the package edge closes the loop
    make_package(
        tmp_path,
        "cyc_rel",
        {
            "__init__.py": "from .run import go\n",
            "run.py": "from . import failures\n\ndef go():\n    return failures\n",
            "failures.py": "",
        },
    )
    make_package(
        tmp_path,
        "cyc_abs",
        {
            "__init__.py": "from .tick.run import go\n",
            "tick/__init__.py": "",
            "tick/run.py": "def go():\n    from cyc_abs import helpers\n    return helpers\n",
            "helpers.py": "",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles("cyc_rel") == [["cyc_rel", "cyc_rel.run"]]
    assert cycles("cyc_abs") == [["cyc_abs", "cyc_abs.tick.run"]]


def test_siblings_imported_by_full_name_or_from_an_empty_init_are_not_a_cycle(
    tmp_path, monkeypatch
):
    make_package(
        tmp_path,
        "clean_full",
        {
            "__init__.py": "from .run import go\n",
            "run.py": "import clean_full.failures as failures\n"
            "from clean_full.failures import x\n\n"
            "def go():\n    return failures, x\n",
            "failures.py": "x = 1\n",
        },
    )
    make_package(
        tmp_path,
        "clean_empty",
        {  # the package's __init__ imports nothing of its own: nothing to close a loop
            "__init__.py": '"""Nothing here."""\n',
            "run.py": "from . import failures\n",
            "failures.py": "",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles("clean_full") == []
    assert cycles("clean_empty") == []


def test_package_edges_resolve_relative_and_absolute_from_imports():
    source = (
        "from . import a\n"
        "from .. import b\n"
        "from .sibling import c\n"
        "from p.q import d\n"
        "import p.q.sibling as e\n"
        "from p import f\n"
    )
    assert package_edges("p.q.m", source, is_package=False) == {"p.q", "p"}
    # a package's __init__: `from . import x` is its own submodule, `from .. import` its parent
    assert package_edges("p.q", "from . import a\nfrom .. import b\n", is_package=True) == {"p"}
