"""``webhook_poll``: poll a JSON endpoint and deliver every new item once.

Config (``pollers.yaml`` → ``jobs[].config``)::

    url: https://company.atlassian.net/rest/api/3/search   # http(s) only
    method: GET                        # GET | POST
    headers: {Authorization: "Bearer ${JIRA_TOKEN}", Accept: application/json}
    body: {jql: "assignee = currentUser()"}   # JSON, POST only
    items_path: issues                 # dotted path to the array; "" = the root
    id_field: id                       # dotted path inside an item, for dedup
    max_per_tick: 10                   # 1..1000
    message_template: "[{key}] {fields.summary}"
    deliver: {channel: telegram, to: "1194292426"}
    allow_private_networks: false      # opt in to loopback / private targets
    timeout_secs: 20                   # total deadline, <= 120
    max_bytes: 5242880                 # body cap (wire and decoded), <= 50 MiB
    seen_capacity: 1000                # ids remembered for dedup (at least; see below)

Behaviour chosen where the seeds are silent:

- **First tick delivers** what the endpoint returns (up to ``max_per_tick``),
  as the seed's module does; there is no silent baseline.
- **Cursor** is ``{"v": 1, "seen": [...]}``: a ring of delivered ids, oldest
  first. Items beyond ``max_per_tick`` are not marked seen and go out on the
  next tick. Ids are compared as strings (``1`` and ``"1"`` are the same item);
  ids longer than 200 characters are remembered by their SHA-256.
- **The ring covers the listing.** Its capacity is the largest of
  ``seen_capacity``, the number of ids in the current listing, and the ring's
  own size (it never shrinks below what it held, up to ``max(seen_capacity,
  MAX_LISTING)``); when it is full, the oldest ids *absent from the current
  listing* go first. An id still listed is never forgotten, so a listing larger
  than ``seen_capacity`` is delivered completely, each item once, over as many
  ticks as ``max_per_tick`` needs. An id that left the listing comes back as new
  only after enough newer ids pushed it out of the ring.
- **Hard cap.** A listing of more than ``MAX_LISTING`` (10,000) items raises
  ``PermanentError`` naming both numbers: the job pauses and alerts through
  ``failure_to`` rather than loop; narrow the query or page size.
- **Items without a usable id** (missing, null, empty, bool, object or array)
  are skipped and reported through ``host.log("warning", ...)``.
- **Secret headers**: the runtime expands ``${VAR}`` before ``tick``, so which
  headers held secrets is no longer visible. Every configured header except a
  short list of plainly non-secret ones (Accept, Accept-Language, Content-Type,
  User-Agent, Cache-Control) is dropped when a redirect changes the origin.
- **Conditional GET** (method GET only): the ETag / Last-Modified of the last
  fully delivered answer go out as ``If-None-Match`` / ``If-Modified-Since``
  (unless ``headers`` sets either itself); a 304 delivers nothing and keeps the
  cursor. While ``max_per_tick`` holds items back, no validators are stored, so
  the next tick fetches in full.
- **Status codes** follow :func:`nexopoll.net.http.classify_status`; a
  ``Retry-After`` on a successful answer becomes ``next_interval_hint``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
)

from nexopoll.core.contract import PollContext, TickAck
from nexopoll.core.errors import PermanentError, TransientError
from nexopoll.core.templates import TemplateError, check_path, lookup, message_payload
from nexopoll.net import http

from . import _http
from ._base import ConfiguredPoller, DeliverTarget, HttpURL, TemplateStr
from .webhook_seen import (
    MAX_LISTING,
    decode_cursor,
    decode_validators,
    encode_cursor,
    remember,
    ring_capacity,
    seen_key,
)

__all__ = [
    "MAX_LISTING",
    "DeliverTarget",
    "WebhookPollConfig",
    "WebhookPollPoller",
    "decode_cursor",
    "encode_cursor",
    "item_id",
    "listed_keys",
    "parse_items",
    "remember",
    "ring_capacity",
    "select_new",
]

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
MAX_MAX_BYTES = 50 * 1024 * 1024
NON_SECRET_HEADERS = frozenset(
    {"accept", "accept-language", "content-type", "user-agent", "cache-control"}
)
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
)
_HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", re.ASCII)
_MISSING = object()
_CONDITIONAL_HEADERS = frozenset({"if-none-match", "if-modified-since"})

FetchFn = Callable[..., http.Response]


class WebhookPollConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    url: HttpURL
    method: Literal["GET", "POST"] = "GET"
    headers: dict[str, str] = Field(default_factory=dict)
    body: JsonValue = None
    items_path: str = ""
    id_field: str = Field("id", min_length=1)
    max_per_tick: int = Field(10, ge=1, le=1000)
    message_template: TemplateStr = "{id}"
    deliver: DeliverTarget
    allow_private_networks: bool = False
    timeout_secs: float = Field(20.0, gt=0, le=120, allow_inf_nan=False)
    max_bytes: int = Field(DEFAULT_MAX_BYTES, ge=1, le=MAX_MAX_BYTES)
    seen_capacity: int = Field(1000, ge=1, le=100_000)

    @field_validator("method", mode="before")
    @classmethod
    def _upper_method(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("headers")
    @classmethod
    def _valid_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _HEADER_NAME_RE.fullmatch(name):
                raise ValueError(f"header name {name[:64]!r} is not a valid HTTP token")
            if name.lower() in _RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is set by the HTTP layer and cannot be set")
            if any(c in text for c in "\r\n\0"):
                raise ValueError(f"header {name!r}: value contains a line break or NUL")
        return value

    @field_validator("items_path", "id_field")
    @classmethod
    def _dotted_path(cls, value: str) -> str:
        try:
            check_path(value)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("body")
    @classmethod
    def _body_needs_post(cls, value: JsonValue, info: ValidationInfo) -> JsonValue:
        if value is not None and info.data.get("method") != "POST":
            raise ValueError("body is only sent with method: POST")
        return value

    @property
    def secret_headers(self) -> frozenset[str]:
        return frozenset(n for n in self.headers if n.lower() not in NON_SECRET_HEADERS)


class WebhookPollPoller(ConfiguredPoller):
    """Poll a JSON endpoint; deliver each item whose id was not seen before.

    Args:
        fetch: the HTTP call, :func:`nexopoll.net.http.fetch` by default. Tests
            pass ``functools.partial(fetch, resolver=..., allow_addresses=...)``
            to reach loopback fixtures through the real SSRF guard.
    """

    kind = "webhook_poll"
    description = "Poll a JSON API (GET/POST) and deliver new items, deduplicated by id."
    config_model = WebhookPollConfig

    def __init__(self, fetch: FetchFn | None = None) -> None:
        self._fetch: FetchFn = fetch or http.fetch

    def tick(self, ctx: PollContext) -> TickAck:
        cfg = self.parse_config(ctx.config)
        seen = decode_cursor(ctx.cursor)
        etag, modified = decode_validators(ctx.cursor)
        conditional = cfg.method == "GET" and not _CONDITIONAL_HEADERS & {
            name.lower() for name in cfg.headers
        }
        headers = cfg.headers
        if conditional:
            headers = {**cfg.headers, **_http.conditional_headers(etag, modified)}
        ctx.cancel.raise_if_cancelled()
        resp = self._fetch(
            cfg.method,
            cfg.url,
            headers=headers,
            secret_headers=cfg.secret_headers,
            json=cfg.body if cfg.method == "POST" else None,
            allow_private=cfg.allow_private_networks,
            max_bytes=cfg.max_bytes,
            deadline_secs=cfg.timeout_secs,
            cancel=ctx.cancel,
        )
        http.classify_status(resp.status, resp.headers, now=ctx.now)
        hint = http.parse_retry_after(resp.headers.get("Retry-After"), now=ctx.now)
        if resp.status == 304:
            return TickAck(next_interval_hint=hint)
        items = parse_items(resp.body, cfg.items_path)
        if len(items) > MAX_LISTING:
            raise PermanentError(
                f"the listing has {len(items)} items, more than webhook_poll's hard cap of"
                f" {MAX_LISTING}: narrow the query or its page size (nothing was delivered)"
            )

        fresh, without_id = select_new(items, cfg.id_field, seen, cfg.max_per_tick)
        for ident, item in fresh:
            payload = {
                **message_payload(cfg.message_template, item),
                "item_id": ident,
                "job_id": ctx.job_id,
            }
            ctx.host.deliver(cfg.deliver.channel, cfg.deliver.to, payload)
        if without_id:
            ctx.host.log(
                "warning", "webhook_poll.items_without_id", count=without_id, id_field=cfg.id_field
            )
        listed = listed_keys(items, cfg.id_field)
        capacity = ring_capacity(cfg.seen_capacity, len(listed), len(seen))
        next_seen = remember(seen, [ident for ident, _ in fresh], capacity, keep=listed)
        # Validators are kept only once every listed item went out: a 304 must not
        # hide the items max_per_tick held back.
        backlog = not listed <= set(next_seen)
        validators = (None, None)
        if conditional and not backlog:
            validators = _http.response_validators(resp.headers)
        changed = next_seen != seen or validators != (etag, modified)
        return TickAck(
            next_cursor=encode_cursor(next_seen, *validators) if changed else None,
            next_interval_hint=hint,
            items_seen=len(items),
            items_dispatched=len(fresh),
        )


def parse_items(body: bytes, items_path: str) -> list[Any]:
    """Decode a JSON document and return the array at ``items_path``.

    Raises:
        TransientError: empty body or invalid JSON (a half-deployed or failing
            upstream usually recovers).
        PermanentError: the document has no array at ``items_path``.
    """
    if not body.strip():
        raise TransientError("empty response body")
    try:
        doc = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise TransientError(f"response is not valid JSON ({type(exc).__name__})") from exc
    items = lookup(doc, items_path, _MISSING)
    if not isinstance(items, list):
        where = f"items_path {items_path!r}" if items_path else "the document root"
        found = "nothing" if items is _MISSING else f"a JSON {_json_kind(items)}"
        raise PermanentError(f"{where} is not a JSON array (found {found})")
    return items


def item_id(item: Any, id_field: str) -> str | None:
    """The item's id as a string, or None when it has no usable one."""
    value = lookup(item, id_field, None) if isinstance(item, dict) else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str) and value:
        return value
    return None


def select_new(
    items: list[Any], id_field: str, seen: list[str], limit: int
) -> tuple[list[tuple[str, Any]], int]:
    """Return up to ``limit`` unseen ``(id, item)`` in document order, and the id-less count."""
    known = set(seen)
    fresh: list[tuple[str, Any]] = []
    without_id = 0
    for item in items:
        ident = item_id(item, id_field)
        if ident is None:
            without_id += 1
            continue
        key = seen_key(ident)
        if key in known or len(fresh) >= limit:
            continue
        known.add(key)
        fresh.append((ident, item))
    return fresh, without_id


def listed_keys(items: list[Any], id_field: str) -> frozenset[str]:
    """The ring keys of every item in the listing that has a usable id."""
    return frozenset(
        seen_key(ident) for ident in (item_id(i, id_field) for i in items) if ident is not None
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__
