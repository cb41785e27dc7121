"""Optional dependencies (pyproject.toml's extras): imported where they are first used,
and when one is missing the error names the extra that installs it."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """An optional dependency is not installed: ``pip install 'nexopoll[EXTRA]'``."""


def require(module: str, extra: str, needed_by: str, package: str = "") -> ModuleType:
    """``module``, imported; or :class:`MissingExtra` saying which extra installs it
    (``package``: the distribution's name when it is not the module's top-level name).

    An ImportError raised inside an installed module (a broken install) passes unchanged.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or ""
        if not missing or not (module == missing or module.startswith(missing + ".")):
            raise
        raise MissingExtra(
            f"{needed_by}: {package or module.partition('.')[0]} is not installed; "
            f"pip install 'nexopoll[{extra}]'",
            name=missing,
        ) from exc
