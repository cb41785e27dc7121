"""Poller kinds: built-ins, the ``nexopoll.pollers`` entry-point group and dotted names.

A kind registered twice fails loudly, naming both sources.
"""

from __future__ import annotations

import logging
import pkgutil
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

from nexopoll.core.contract import Poller, check_kind
from nexopoll.core.errors import ConfigError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "nexopoll.pollers"
# Extra pollers by dotted name ("pkg.module:Class,…"), for out-of-tree kinds
# that are not packaged with an entry point (and for the test suite).
EXTRA_ENV = "NEXOPOLL_EXTRA_POLLERS"


class DuplicateKindError(RuntimeError):
    pass


class Registry:
    def __init__(self) -> None:
        self._pollers: dict[str, Any] = {}
        self._sources: dict[str, str] = {}

    def register(self, poller: Any, source: str) -> None:
        kind = check_kind(getattr(poller, "kind", None))
        if kind in self._pollers:
            raise DuplicateKindError(
                f"poller kind {kind!r} is registered twice: "
                f"by {self._sources[kind]} and by {source}"
            )
        self._pollers[kind] = poller
        self._sources[kind] = source

    def get(self, kind: str) -> Any:
        try:
            return self._pollers[kind]
        except KeyError:
            raise ConfigError(
                f"unknown kind {kind!r}; known kinds: {', '.join(sorted(self._pollers))}"
            ) from None

    def validators(self) -> dict[str, Any]:
        return {kind: p.validate for kind, p in self._pollers.items()}


def _instantiate(obj: Any) -> Poller:
    return obj() if isinstance(obj, type) else obj


def build_registry(extra: Iterable[str] = ()) -> Registry:
    import pollers

    reg = Registry()
    for cls in pollers.BUILTINS:
        reg.register(_instantiate(cls), f"built-in {cls.__module__}")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        reg.register(_instantiate(ep.load()), f"entry point {ep.value}")
    for name in extra:
        try:
            obj = pkgutil.resolve_name(name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"no such poller: {name} ({exc})") from exc
        reg.register(_instantiate(obj), f"{EXTRA_ENV} {name}")
    return reg


_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, built once on first use."""
    global _registry
    if _registry is None:
        from django.conf import settings

        extra = [n.strip() for n in settings.NEXOPOLL_EXTRA_POLLERS.split(",") if n.strip()]
        _registry = build_registry(extra)
    return _registry
