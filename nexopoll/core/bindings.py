"""Channel binding schemas: what ``agents.<id>.<channel>`` may hold, per channel (pure).

Each built-in channel has a strict pydantic model (``extra="forbid"``, no coercion: a
boolean field takes only a YAML boolean, so ``allow_private_networks: "false"`` is an
error, not ``True``). A third-party channel declares its own as a ``binding_schema``
class attribute. A binding for a channel without a schema is a flat mapping of
strings. In every binding, secret-named keys must be ``${VAR}`` references (checked
by the agents loader before the schema runs).

Schemas validate the binding with ``${VAR}`` expanded; messages never repeat a value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .limits import BINDING_KEY_RE, is_name, must_match

MAX_URL_CHARS = 8192

BindingSchemas = Mapping[str, type[BaseModel] | None]


def check_http_url(value: str) -> str:
    """Accept an absolute http(s) URL with a host and no whitespace or control characters.

    The error never repeats the URL: its path or query may hold an expanded secret.
    """
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL")
    if not rest or rest[0] in "/?#" or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError("must be an http(s) URL with a host and no whitespace")
    return value


class WebhookBinding(BaseModel):
    """``agents.<id>.webhook``: where the ``webhook`` channel POSTs, and how."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    url: str = Field(max_length=MAX_URL_CHARS)
    secret: str | None = Field(None, min_length=1)
    allow_private_networks: bool = False

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return check_http_url(value)


class LogBinding(BaseModel):
    """``agents.<id>.log``: the ``log`` channel takes no settings (``log: {}``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


BUILTIN_BINDING_SCHEMAS: dict[str, type[BaseModel] | None] = {
    "log": LogBinding,
    "webhook": WebhookBinding,
}


def requires_binding(schema: type[BaseModel] | None) -> bool:
    """True when an empty binding would not validate (the channel cannot send without one)."""
    return schema is not None and any(f.is_required() for f in schema.model_fields.values())


def generic_binding_problems(binding: Mapping[str, Any]) -> Iterator[tuple[tuple[str], str]]:
    """Problems of a binding for a channel without a schema: a flat mapping of strings."""
    for key, value in binding.items():
        if not is_name(BINDING_KEY_RE, key):
            yield (key,), must_match("binding key", BINDING_KEY_RE)
        elif not isinstance(value, str):
            yield (key,), "must be a string (a binding is a mapping of strings)"
