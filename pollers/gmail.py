"""``gmail``: search a Gmail mailbox, extract fields with regexes, deliver each new mail once.

Config (``pollers.yaml`` → ``jobs[].config``)::

    query: "is:unread subject:(lead OR interesado)"  # Gmail search syntax
    newer_than: 1d                 # appended as newer_than:1d (h, d, m or y)
    max_per_tick: 20               # mails delivered per tick, 1..500
    dispatch_delay_ms: 1000        # spacing between the tick's deliveries
    sender_allowlist: ["@mycompany.com", "boss@example.com"]
    extract: {name: "Nombre:\\s*(.+)", phone: "Tel:\\s*(\\+?\\d+)"}
    require_fields: [name, phone]  # skip mails where any is empty
    message_template: "New lead 🚨 {name} — {phone}\\n{snippet}"
    mark_read_on_dispatch: true
    deliver: {channel: telegram, to: "1194292426"}

The agent needs a ``google`` binding (``client_id_path``, ``token_path``): see
:mod:`pollers._google`.

Behaviour chosen where the seeds are silent or weak:

- **Template fields**: ``id``, ``thread_id``, ``subject``, ``from``,
  ``from_address``, ``from_name``, ``to``, ``date``, ``snippet``, ``body``,
  ``labels`` and every ``extract`` name. A placeholder or ``require_fields``
  entry naming none of them is a config error, as is an ``extract`` regex
  without a capture group. Each regex takes its first group (stripped) from the
  body, else from the snippet (the first 64 KiB of the body are searched).
- **Sender allowlist**: the parsed ``From`` address, exactly, or its domain,
  exactly (``@mycompany.com`` / ``mycompany.com``); no substring matching. The
  address is parsed from the raw header before any RFC 2047 encoded word is
  decoded (only the display name is), so an encoded word cannot spoof it.
- **Order and dedup**: up to ``max_per_tick`` unseen ids are taken from the
  search (paging up to 10 pages of 100), delivered oldest first. The cursor
  ``{"v": 1, "seen": [...]}`` remembers the ids it handled (delivered or
  filtered out), the newest 5,000; a mail held back by ``max_per_tick`` is not
  marked seen and goes out on a later tick.
- **mark_read_on_dispatch** removes the ``UNREAD`` label of the delivered
  mails only after the tick committed (``host.after_commit``); a tick that fails
  or is fenced leaves them unread. Mails filtered out are remembered as seen
  but left unread for a person to read. A failed mark-read is logged; the
  seen set keeps the mail from being delivered twice.
- **dispatch_delay_ms** (0..60000, default 1000) spaces the tick's deliveries:
  the outbox gives each row a send time that far after the previous one
  (``nexopoll/runtime/pacing.py``); the tick itself never sleeps.
- A mail deleted between the search and its fetch (404) is skipped.
"""

from __future__ import annotations

import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic import model_validator as _model_validator

from nexopoll.core.contract import CancelToken, PollContext, TickAck, ToolSpec
from nexopoll.core.errors import CredentialsMissingError
from nexopoll.core.templates import TemplateError, check_template, message_payload

from . import _google
from ._base import ConfiguredPoller, CursorCodec, DeliverTarget, SeenRing
from ._mail import BUILTIN_FIELDS, MailMessage, parse_message, sender_allowed

CODEC = CursorCodec("gmail")
CURSOR_VERSION = CODEC.version
SEEN_CAPACITY = 5000
LIST_PAGE_SIZE = 100
MAX_LIST_PAGES = 10
EXTRACT_SCAN_CHARS = 64 * 1024
MARK_READ_DEADLINE_SECS = 60.0
_NEWER_THAN_RE = re.compile(r"^[1-9][0-9]{0,4}[hdmy]$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class GmailConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    query: str = Field("is:unread", min_length=1, max_length=2000)
    newer_than: str | None = None
    max_per_tick: int = Field(20, ge=1, le=500)
    dispatch_delay_ms: int = Field(1000, ge=0, le=60_000)
    sender_allowlist: list[str] = Field(default_factory=list, max_length=1000)
    extract: dict[str, str] = Field(default_factory=dict, max_length=100)
    require_fields: list[str] = Field(default_factory=list)
    message_template: str = "{from}: {subject}\n{snippet}"
    mark_read_on_dispatch: bool = True
    deliver: DeliverTarget

    @field_validator("newer_than")
    @classmethod
    def _newer_than(cls, value: str | None) -> str | None:
        if value is not None and not _NEWER_THAN_RE.match(value.strip()):
            raise ValueError("must look like 12h, 1d, 3m or 1y")
        return value.strip() if value else None

    @field_validator("sender_allowlist")
    @classmethod
    def _allowlist(cls, value: list[str]) -> list[str]:
        for entry in value:
            e = entry.strip()
            if not e or any(c.isspace() for c in e) or e.count("@") > 1 or e.endswith("@"):
                raise ValueError(
                    f"entry {entry[:80]!r}: use an address (a@example.com) or a domain "
                    "(@example.com)"
                )
        return value

    @field_validator("extract")
    @classmethod
    def _extract(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            if not _NAME_RE.match(name):
                raise ValueError(f"extract name {name[:64]!r} must be an identifier")
            if name in BUILTIN_FIELDS:
                raise ValueError(f"extract name {name!r} shadows a message field")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"extract.{name}: invalid regex ({exc})") from None
            if compiled.groups < 1:
                raise ValueError(f"extract.{name}: the regex needs a capture group (...)")
        return value

    @_model_validator(mode="after")
    def _known_fields(self) -> GmailConfig:
        known = BUILTIN_FIELDS | set(self.extract)
        try:
            paths = check_template(self.message_template)
        except TemplateError as exc:
            raise ValueError(f"message_template: {exc}") from None
        unknown = sorted({p.split(".")[0] for p in paths} - known)
        if unknown:
            raise ValueError(f"message_template uses unknown field(s): {', '.join(unknown)}")
        missing = sorted(set(self.require_fields) - known)
        if missing:
            raise ValueError(f"require_fields names unknown field(s): {', '.join(missing)}")
        return self

    @property
    def search(self) -> str:
        return f"{self.query} newer_than:{self.newer_than}" if self.newer_than else self.query


class GmailPoller(ConfiguredPoller):
    kind = "gmail"
    description = "Search Gmail, extract fields with regexes, deliver each new mail once."
    config_model = GmailConfig
    dispatch_delay_ms_default = 1000  # the seeds' default; the config may set another

    def tick(self, ctx: PollContext) -> TickAck:
        cfg = self.parse_config(ctx.config)
        seen = decode_cursor(ctx.cursor)
        api = _api(ctx.host.credentials_get("google"), ctx.cancel)
        ids = fetch_new_ids(api, cfg.search, seen, cfg.max_per_tick)
        messages = [m for m in (fetch_message(api, i) for i in ids) if m is not None]
        messages.sort(key=lambda m: m.internal_date)
        delivered: list[str] = []
        skipped: dict[str, int] = {}
        for msg in messages:
            fields, reason = evaluate(msg, cfg)
            if fields is None:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            payload = {
                **message_payload(cfg.message_template, fields),
                "item_id": msg.id,
                "job_id": ctx.job_id,
            }
            ctx.host.deliver(cfg.deliver.channel, cfg.deliver.to, payload)
            delivered.append(msg.id)
        if skipped:
            ctx.host.log("info", "gmail.skipped", **skipped)
        if cfg.mark_read_on_dispatch and delivered:
            ctx.host.after_commit(_mark_read_later(api.client, api.base, delivered, ctx))
        next_seen = remember(seen, ids)
        return TickAck(
            next_cursor=encode_cursor(next_seen) if next_seen != seen else None,
            items_seen=len(ids),
            items_dispatched=len(delivered),
        )

    def custom_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name="gmail_count_unread",
                description=(
                    "Count the unread mails matching a gmail job's query, without running a "
                    "tick or changing any state."
                ),
                parameters={
                    "type": "object",
                    "properties": {"job_id": {"type": "string", "description": "a gmail job"}},
                    "required": ["job_id"],
                    "additionalProperties": False,
                },
                handler=self.count_unread,
            )
        ]

    def count_unread(self, args: dict[str, Any]) -> dict[str, Any]:
        """The ``gmail_count_unread`` tool.

        The runtime adds the job's context (:func:`nexopoll.runtime.host.call_job_tool`)
        under ``args["job"]``: ``{"config": <expanded job config>, "credentials":
        {"google": <binding>}}``. Counts up to ``MAX_LIST_PAGES * 500`` ids;
        ``capped`` says the count stopped there. Nothing is marked, delivered or stored.
        """
        job = args.get("job") or {}
        cfg = self.parse_config(job.get("config") or {})
        cancel = CancelToken(deadline=time.monotonic() + 30)
        credentials = job.get("credentials") or {}
        if "google" not in credentials:
            raise CredentialsMissingError("gmail_count_unread: the job has no google binding")
        api = _api(credentials["google"], cancel)
        query = f"is:unread ({cfg.search})"
        count, page_token, pages = 0, None, 0
        while True:
            doc = api.call(
                "GET",
                "/gmail/v1/users/me/messages",
                params={"q": query, "maxResults": 500, "pageToken": page_token},
                what="gmail messages.list",
            )
            count += len(doc.get("messages") or [])
            page_token = doc.get("nextPageToken")
            pages += 1
            if not page_token or pages >= MAX_LIST_PAGES:
                break
        return {"job_id": args.get("job_id"), "unread": count, "capped": bool(page_token)}


def _api(binding: dict[str, Any], cancel: CancelToken) -> _google.GoogleAPI:
    client = _google.auth_client(_google.GoogleBinding.from_credentials(binding))
    base = _google.api_base(_google.GMAIL_API, _google.GMAIL_BASE_DEFAULT)
    return _google.GoogleAPI(client, base, cancel)


def fetch_new_ids(api: _google.GoogleAPI, query: str, seen: list[str], limit: int) -> list[str]:
    """Up to ``limit`` unseen message ids in search order (newest first)."""
    known = set(seen)
    fresh: list[str] = []
    page_token = None
    for _ in range(MAX_LIST_PAGES):
        doc = api.call(
            "GET",
            "/gmail/v1/users/me/messages",
            params={"q": query, "maxResults": LIST_PAGE_SIZE, "pageToken": page_token},
            what="gmail messages.list",
        )
        for ref in doc.get("messages") or []:
            ident = ref.get("id") if isinstance(ref, dict) else None
            if isinstance(ident, str) and ident and ident not in known:
                known.add(ident)
                fresh.append(ident)
                if len(fresh) >= limit:
                    return fresh
        page_token = doc.get("nextPageToken")
        if not isinstance(page_token, str) or not page_token:
            break
    return fresh


def fetch_message(api: _google.GoogleAPI, ident: str) -> MailMessage | None:
    """``messages.get?format=full``; None when the mail vanished (404)."""
    from urllib.parse import quote

    try:
        doc = api.call(
            "GET",
            f"/gmail/v1/users/me/messages/{quote(ident, safe='')}",
            params={"format": "full"},
            what="gmail messages.get",
        )
    except _google.NotFoundError:
        return None
    if not doc.get("id"):
        doc = {**doc, "id": ident}
    return parse_message(doc)


def evaluate(msg: MailMessage, cfg: GmailConfig) -> tuple[dict[str, Any] | None, str]:
    """The template fields for ``msg``, or ``(None, reason)`` when it must not be delivered."""
    if not sender_allowed(msg.from_address, cfg.sender_allowlist):
        return None, "sender_not_allowed"
    fields = msg.fields()
    body = msg.body[:EXTRACT_SCAN_CHARS]
    for name, pattern in cfg.extract.items():
        fields[name] = extract_field(pattern, body, msg.snippet)
    for name in cfg.require_fields:
        value = fields.get(name)
        if value is None or value == "" or value == []:
            return None, "required_field_missing"
    return fields, ""


def extract_field(pattern: str, body: str, snippet: str) -> str:
    regex = re.compile(pattern)
    for text in (body, snippet):
        match = regex.search(text)
        if match and match.group(1) is not None:
            return match.group(1).strip()
    return ""


def _mark_read_later(client: _google.AuthClient, base: str, ids: list[str], ctx: PollContext):
    from urllib.parse import quote

    def mark_read() -> None:
        api = _google.GoogleAPI(
            client, base, CancelToken(deadline=time.monotonic() + MARK_READ_DEADLINE_SECS)
        )
        failed = 0
        for ident in ids:
            try:
                api.call(
                    "POST",
                    f"/gmail/v1/users/me/messages/{quote(ident, safe='')}/modify",
                    json_body={"removeLabelIds": ["UNREAD"]},
                    what="gmail messages.modify",
                )
            except Exception as exc:
                failed += 1
                ctx.host.log("warning", "gmail.mark_read_failed", message_id=ident, error=str(exc))
        if failed:
            ctx.host.log("warning", "gmail.mark_read_incomplete", failed=failed, total=len(ids))

    return mark_read


def remember(seen: list[str], ids: list[str]) -> list[str]:
    """The ring with ``ids`` appended, the newest ``SEEN_CAPACITY`` kept."""
    return list(SeenRing(SEEN_CAPACITY, tuple(seen)).remember(ids).keys)


def decode_cursor(raw: bytes | None) -> list[str]:
    """The seen-id ring; ``[]`` for a first run. A corrupt cursor is permanent (reset the job)."""
    return list(CODEC.seen(CODEC.decode(raw), SEEN_CAPACITY).keys)


def encode_cursor(seen: list[str]) -> bytes:
    return CODEC.encode({"seen": seen})
