"""Outbound channels. Adding one is a single module: a class with ``name`` and ``send``.

Built-ins: ``log``, ``webhook``, ``telegram``, ``whatsapp``, ``slack``, ``email`` and
``stream``. Third-party channels register through the entry-point group
``nexopoll.channels``. A channel may declare ``binding_schema``, a strict pydantic
model of its ``agents.<id>.<channel>`` binding; the built-ins' live in
:mod:`nexopoll.core.bindings`. Without one, a binding is a mapping of strings.

A channel may also declare ``rate_limits(message, binding)``: a list of
``(scope, per_second)`` pairs (``("chat:ana_bot:42", 1.0)``). The delivery runtime
holds every scope to its rate across all workers (Redis) before it sends; a row
waiting for its turn is re-queued, its attempt not counted.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel

from nexopoll.core.bindings import BUILTIN_BINDING_SCHEMAS
from nexopoll.core.errors import ConfigError

from .message import Channel, OutboundMessage

ENTRY_POINT_GROUP = "nexopoll.channels"


__all__ = ["Channel", "OutboundMessage", "get_channel"]

_channels: dict[str, Channel] | None = None


def _load() -> dict[str, Channel]:
    from .email import EmailChannel
    from .log import LogChannel
    from .slack import SlackChannel
    from .stream import StreamChannel
    from .telegram import TelegramChannel
    from .webhook import WebhookChannel
    from .whatsapp import WhatsappChannel

    builtins = (
        EmailChannel,
        LogChannel,
        SlackChannel,
        StreamChannel,
        TelegramChannel,
        WebhookChannel,
        WhatsappChannel,
    )
    found: dict[str, Channel] = {}
    sources: dict[str, str] = {}
    candidates: list[tuple[Any, str]] = [(c, "built-in") for c in builtins]
    candidates += [
        (ep.load(), f"entry point {ep.value}") for ep in entry_points(group=ENTRY_POINT_GROUP)
    ]
    for obj, source in candidates:
        channel = obj() if isinstance(obj, type) else obj
        if channel.name in found:
            raise RuntimeError(
                f"channel {channel.name!r} is registered twice: "
                f"{sources[channel.name]} and {source}"
            )
        found[channel.name] = channel
        sources[channel.name] = source
    return found


def _installed() -> dict[str, Channel]:
    global _channels
    if _channels is None:
        _channels = _load()
    return _channels


def binding_schemas() -> dict[str, type[BaseModel] | None]:
    """Every installed channel's name and binding schema (None: a mapping of strings).

    This is what the config loader's ``channels=`` parameter takes.
    """
    return {
        name: getattr(channel, "binding_schema", None) or BUILTIN_BINDING_SCHEMAS.get(name)
        for name, channel in sorted(_installed().items())
    }


def get_channel(name: str) -> Channel:
    channels = _installed()
    try:
        return channels[name]
    except KeyError:
        raise ConfigError(
            f"unknown channel {name!r}; installed channels: {', '.join(sorted(channels))}"
        ) from None
