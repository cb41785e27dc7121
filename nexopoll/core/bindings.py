"""Channel binding schemas: what ``agents.<id>.<channel>`` may hold, per channel (pure).

Each built-in channel has a strict pydantic model (``extra="forbid"``, no coercion: a
boolean field takes only a YAML boolean, so ``allow_private_networks: "false"`` is an
error, not ``True``). A third-party channel declares its own as a ``binding_schema``
class attribute. A binding for a channel without a schema is a flat mapping of
strings. In every binding, secret-named keys and the fields a schema marks secret
(``Field(json_schema_extra={"secret": True})``, see :func:`secret_fields`) must be
one ``${VAR}`` or ``${file:/path}`` reference (checked by the agents loader before
the schema runs); :func:`public_view` is a binding without them.

Schemas validate the binding with ``${VAR}`` expanded; messages never repeat a value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .envrefs import is_secret_key
from .limits import BINDING_KEY_RE, is_name, must_match
from .templates import TemplateError, check_template

SECRET: dict[str, Any] = {"secret": True}
ACCOUNT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$", re.ASCII)
EMAIL_RE = re.compile(r"^[^@\s<>\x00-\x1f]{1,64}@[A-Za-z0-9.-]{1,253}$", re.ASCII)

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


def _account(value: str) -> str:
    if not is_name(ACCOUNT_RE, value):
        raise ValueError(must_match("account", ACCOUNT_RE))
    return value


class TelegramBinding(BaseModel):
    """``agents.<id>.telegram``: a Bot API bot. ``account`` names it (rate limits, stream
    topics); ``token`` is the bot token, by reference."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    account: str
    token: str = Field(min_length=1, json_schema_extra=SECRET)
    parse_mode: Literal["MarkdownV2", "Markdown", "HTML"] | None = None
    disable_web_page_preview: bool = False
    max_per_second: float = Field(30.0, gt=0, le=1000)  # per bot, Telegram's limit
    max_per_chat_per_second: float = Field(1.0, gt=0, le=1000)

    _check_account = field_validator("account")(classmethod(lambda cls, v: _account(v)))


class WhatsappBinding(BaseModel):
    """``agents.<id>.whatsapp``: a WhatsApp Cloud API sender (``phone_number_id``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    phone_number_id: str = Field(pattern=r"^[0-9]{1,32}$")
    token: str = Field(min_length=1, json_schema_extra=SECRET)
    max_per_second: float = Field(20.0, gt=0, le=1000)  # per phone number


class SlackBinding(BaseModel):
    """``agents.<id>.slack``: an incoming webhook (``webhook_url``) or a bot ``token``
    for ``chat.postMessage`` (the delivery's ``to`` is then the channel id), not both."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    account: str | None = None
    webhook_url: str | None = Field(None, max_length=MAX_URL_CHARS, json_schema_extra=SECRET)
    token: str | None = Field(None, min_length=1, json_schema_extra=SECRET)
    allow_private_networks: bool = False  # for webhook_url only
    max_per_channel_per_second: float = Field(1.0, gt=0, le=1000)

    _check_account = field_validator("account")(classmethod(lambda cls, v: _account(v)))

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return check_http_url(value)

    @model_validator(mode="after")
    def _one_way(self) -> SlackBinding:
        if (self.webhook_url is None) == (self.token is None):
            raise ValueError("give exactly one of webhook_url and token")
        return self


class EmailBinding(BaseModel):
    """``agents.<id>.email``: the sender address; the SMTP server is the deployment's
    (``EMAIL_*`` settings). ``subject``: a template over the payload's fields."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    sender: str = Field(max_length=320)
    subject: str | None = Field(None, min_length=1, max_length=500)

    @field_validator("sender")
    @classmethod
    def _address(cls, value: str) -> str:
        addr = value.rsplit("<", 1)[-1].rstrip(">").strip() if "<" in value else value
        if not EMAIL_RE.fullmatch(addr) or any(c in value for c in "\r\n"):
            raise ValueError("must be an e-mail address (name@example.com or 'Name <a@b.c>')")
        return value

    @field_validator("subject")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                check_template(value)
            except TemplateError as exc:
                raise ValueError(str(exc)) from None
        return value


class StreamBinding(BaseModel):
    """``agents.<id>.stream``: deliveries go to the Redis Stream
    ``plugin.outbound.<channel>.<account>`` (``channel`` defaults to ``stream``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    account: str
    channel: str = Field("stream", pattern=r"^[a-z][a-z0-9_]{0,63}$")

    _check_account = field_validator("account")(classmethod(lambda cls, v: _account(v)))


BUILTIN_BINDING_SCHEMAS: dict[str, type[BaseModel] | None] = {
    "email": EmailBinding,
    "log": LogBinding,
    "slack": SlackBinding,
    "stream": StreamBinding,
    "telegram": TelegramBinding,
    "webhook": WebhookBinding,
    "whatsapp": WhatsappBinding,
}


def secret_fields(schema: type[BaseModel] | None) -> frozenset[str]:
    """The fields ``schema`` marks secret (they must be references, never shown)."""
    if schema is None:
        return frozenset()
    return frozenset(
        name
        for name, f in schema.model_fields.items()
        if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("secret")
    )


def is_secret_field(schema: type[BaseModel] | None, key: str) -> bool:
    """True for a secret-named key (``token``, ``*_secret``…) or a field marked secret."""
    return is_secret_key(key) or key in secret_fields(schema)


def public_view(binding: Mapping[str, Any], schema: type[BaseModel] | None) -> dict[str, Any]:
    """``binding`` without its secrets (what a poller or an operator may see)."""
    return {k: v for k, v in binding.items() if not is_secret_field(schema, k)}


def requires_binding(schema: type[BaseModel] | None) -> bool:
    """True when an empty binding would not validate (the channel cannot send without one)."""
    if schema is None:
        return False
    try:
        schema.model_validate({})
    except ValidationError:
        return True
    return False


def generic_binding_problems(binding: Mapping[str, Any]) -> Iterator[tuple[tuple[str], str]]:
    """Problems of a binding for a channel without a schema: a flat mapping of strings."""
    for key, value in binding.items():
        if not is_name(BINDING_KEY_RE, key):
            yield (key,), must_match("binding key", BINDING_KEY_RE)
        elif not isinstance(value, str):
            yield (key,), "must be a string (a binding is a mapping of strings)"
