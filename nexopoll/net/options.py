"""The network layer's settings, given by the host process (``nexopoll.settings``).

``nexopoll.net`` imports no Django (pollers import it and stay framework-free),
so it never reads the environment or ``django.conf.settings`` itself: the Django
app registers a source at start (:meth:`nexopoll.apps.NexopollConfig.ready`) and
every use calls :func:`current`, so a changed setting (a test's override) counts at
once. Without a registered source (a plugin, a bare script) the defaults apply:
no operator API bases, the default pool sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from nexopoll.core.errors import PermanentError


@dataclass(frozen=True)
class NetOptions:
    """``api_bases``: provider name → the operator's base URL (``NEXOPOLL_API_BASES``,
    from ``NEXOPOLL_<NAME>_API_BASE``); ``pool_hosts`` / ``pool_per_host``: idle
    connection pools of the shared sessions (``NEXOPOLL_HTTP_POOL_*``)."""

    api_bases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    pool_hosts: int = 200
    pool_per_host: int = 64


_DEFAULTS = NetOptions()
_source: Callable[[], NetOptions] = lambda: _DEFAULTS  # noqa: E731


def use_options(source: Callable[[], NetOptions] | None) -> None:
    """Read the options from ``source`` at every use (``None``: the defaults again)."""
    global _source
    _source = source or (lambda: _DEFAULTS)


def current() -> NetOptions:
    return _source()


class ApiBase(NamedTuple):
    """A provider API's base URL (no trailing slash) and whether the operator set it.

    An operator-set base is trusted: it may point at a private or loopback address
    (a proxy, a test server); metadata addresses stay refused by the SSRF guard.
    """

    url: str
    trusted: bool


def env_name(provider: str) -> str:
    """The environment variable an operator sets the base in: ``NEXOPOLL_<NAME>_API_BASE``."""
    return f"NEXOPOLL_{provider.upper()}_API_BASE"


def api_base(provider: str, default: str) -> ApiBase:
    """The base URL for ``provider`` (``telegram``, ``gmail``, ``gcal``…), read at use time.

    Raises:
        PermanentError: the operator's value is not an http(s) URL with a host
            (the message names the variable, never the value).
    """
    configured = (current().api_bases.get(provider) or "").strip()
    value = (configured or default).rstrip("/")
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest or rest[0] in "/?#":
        raise PermanentError(f"{env_name(provider)} must be an http(s) URL")
    return ApiBase(value, bool(configured))
