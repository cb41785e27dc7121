"""The environment is read only in settings (issue 17): no other module reads a
variable from ``os.environ`` / ``os.getenv`` for its configuration."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The settings package (nexopoll/settings/: base, tunables, broker) reads the environment
# through nexopoll/env.py's readers, which no other module may import.
SETTINGS = "nexopoll/settings/"
READERS = "nexopoll/env.py"
# What may touch os.environ besides the settings package and its readers:
ALLOWED = {
    # DJANGO_SETTINGS_MODULE set before the settings load
    "nexopoll/cli.py": "setdefault",
    "nexopoll/celery.py": "setdefault",
    "nexopoll/wsgi.py": "setdefault",
    "nexopoll/workers.py": "setdefault",
    # the Flower launcher hands its environment to Flower's process
    "nexopoll/flower.py": "setdefault, the child's environment",
    # the mapping ${VAR} references in pollers.yaml resolve against (by design)
    "nexopoll/runtime/secretenv.py": "the ${VAR} source",
    # a plugin's scrubbed child environment is built from it
    "nexopoll/plugins/poller.py": "a child process's environment",
}


def environ_uses(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(a.name in ("environ", "getenv") for a in node.names):
                lines.append(node.lineno)
    return lines


def test_only_settings_read_the_environment() -> None:
    found = {}
    for top in ("nexopoll", "pollers", "admin_ext"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(SETTINGS) or rel == READERS or rel in ALLOWED:
                continue
            if lines := environ_uses(path):
                found[rel] = lines
    assert not found, f"read the setting from django.conf.settings (or pass it in): {found}"


def test_the_allowances_are_still_needed() -> None:
    stale = [rel for rel in ALLOWED if not environ_uses(ROOT / rel)]
    assert not stale, f"remove from ALLOWED: {stale}"


def imports_the_readers(path: Path, module: str) -> bool:
    """Whether ``module`` (at ``path``) imports nexopoll.env or a name from it."""
    package = module.rpartition(".")[0] if path.name != "__init__.py" else module
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            if any(a.name == "nexopoll.env" for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([base] if base else [])])
            if base == "nexopoll.env" or (
                base == "nexopoll" and any(a.name == "env" for a in node.names)
            ):
                return True
    return False


def test_only_the_settings_package_uses_the_environment_readers() -> None:
    users = set()
    for top in ("nexopoll", "pollers", "admin_ext"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            module = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            if imports_the_readers(path, module):
                users.add(rel)
    assert users and all(rel.startswith(SETTINGS) for rel in users), sorted(users)
