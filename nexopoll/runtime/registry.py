"""Poller kinds: built-ins, the ``nexopoll.pollers`` entry-point group, dotted names
and subprocess plugins (``nexopoll-plugin.toml`` manifests in ``NEXOPOLL_PLUGINS_DIR``).

A kind registered twice fails loudly, naming both sources; so does an invalid manifest.
"""

from __future__ import annotations

import logging
import pkgutil
import threading
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

from django.conf import settings

from nexopoll.core.contract import Poller, check_kind
from nexopoll.core.errors import ConfigError
from nexopoll.plugins import manifest as mf
from nexopoll.plugins.poller import Options, pollers_for
from nexopoll.plugins.process import Limits

from .redis import get_redis

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "nexopoll.pollers"
# Extra pollers by dotted name ("pkg.module:Class,…"), for out-of-tree kinds
# that are not packaged with an entry point (and for the test suite).
EXTRA_ENV = "NEXOPOLL_EXTRA_POLLERS"


class DuplicateKindError(RuntimeError):
    pass


class InvalidPluginError(RuntimeError):
    """A plugin manifest failed validation (a RuntimeError: ticks retry, jobs stay unpaused)."""


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

    def sources(self) -> dict[str, str]:
        return dict(self._sources)

    def kinds(self) -> list[str]:
        return sorted(self._pollers)


def _instantiate(obj: Any) -> Poller:
    return obj() if isinstance(obj, type) else obj


def build_registry(extra: Iterable[str] = (), plugins_dir: str | None = None) -> Registry:
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
    if plugins_dir:
        register_plugins(reg, plugins_dir)
    return reg


def register_plugins(reg: Registry, plugins_dir: str) -> None:
    """Register every kind of every manifest; any invalid manifest or duplicate kind raises."""
    manifests, bad = mf.load_manifests(plugins_dir)
    if bad:
        raise InvalidPluginError("invalid plugin manifest(s): " + "; ".join(map(str, bad)))
    try:
        mf.check_kinds(manifests, reg.sources())
    except mf.DuplicateKindError as exc:
        raise DuplicateKindError(str(exc)) from None
    options = plugin_options()
    for m in manifests:
        for poller in pollers_for(m, options, _redis):
            reg.register(poller, m.source)


def plugin_options() -> Options:
    allow = tuple(n.strip() for n in settings.NEXOPOLL_PLUGIN_ENV_ALLOW.split(",") if n.strip())
    return Options(
        limits=Limits(
            max_line_bytes=settings.NEXOPOLL_PLUGIN_MAX_LINE_BYTES,
            env_allow=allow,
            user=settings.NEXOPOLL_PLUGIN_USER,
        ),
        restart_base_secs=settings.NEXOPOLL_PLUGIN_RESTART_BASE_SECS,
        restart_cap_secs=settings.NEXOPOLL_PLUGIN_RESTART_CAP_SECS,
    )


def _redis():
    return get_redis()


def builtin_sources() -> dict[str, str]:
    """The kinds registered without plugins (built-ins, entry points,
    ``NEXOPOLL_EXTRA_POLLERS``) and where each comes from: what a plugin may not claim."""
    extra = [n.strip() for n in settings.NEXOPOLL_EXTRA_POLLERS.split(",") if n.strip()]
    return build_registry(extra).sources()


_registry: Registry | None = None
_registry_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, built once on first use (by one thread of a
    ``-P threads`` worker; the others wait for it)."""
    global _registry
    if _registry is not None:
        return _registry
    with _registry_lock:
        if _registry is None:
            extra = [n.strip() for n in settings.NEXOPOLL_EXTRA_POLLERS.split(",") if n.strip()]
            _registry = build_registry(extra, settings.NEXOPOLL_PLUGINS_DIR)
        return _registry


def reset_registry() -> None:
    """Forget the process-wide registry (it is rebuilt from settings on next use)."""
    global _registry
    _registry = None
