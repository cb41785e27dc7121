"""``google_calendar``: Calendar v3 incremental sync; deliver each changed event.

Config (``pollers.yaml`` → ``jobs[].config``)::

    calendar_id: primary
    skip_cancelled: true
    message_template: "📅 {summary} — {start}\\n{html_link}"
    max_per_tick: 50               # changes delivered per tick, 1..1000
    max_pages: 20                  # events.list pages read per tick, 1..200
    deliver: {channel: telegram, to: "1194292426"}

The agent needs a ``google`` binding, as for ``gmail`` (:mod:`pollers._google`).

- **Baseline**: the first tick pages through ``events.list`` to its
  ``nextSyncToken`` and delivers nothing. A calendar too big for ``max_pages``
  pages resumes the baseline on the next tick (the page token is in the cursor).
- **Changes**: later ticks list with ``syncToken`` and follow ``nextPageToken``;
  every changed event is delivered (cancelled ones unless ``skip_cancelled``).
  When ``max_per_tick`` is reached mid-sync, the cursor keeps the old sync token
  and the page being read; the next tick re-reads that page and skips what it
  already delivered (``seen``: ``id@updated`` keys, the newest 1,000).
- **410 Gone** (sync or page token expired): the job re-baselines in the same
  tick, logs ``google_calendar.rebaselined``, records it in the cursor
  (``rebaselined_at`` and ``note``) and raises a notice on the job's status (with
  its time, beside ``last_error`` in ``list``, the admin and the API); it is not paused.
  Changes made between the last sync and the re-baseline are not delivered.
- **Fields**: ``id``, ``summary``, ``description``, ``location``, ``start``,
  ``end`` (``dateTime`` or all-day ``date``), ``html_link``, ``status``,
  ``change`` (``created`` / ``updated`` / ``cancelled``), ``created``,
  ``updated``, ``organizer``, ``creator``, ``calendar_id``.
- **Cursor**: ``{"v": 1, "sync_token": ..., "page_token": ..., "seen": [...]}``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexopoll.core.contract import PollContext, TickAck
from nexopoll.core.errors import PermanentError
from nexopoll.core.templates import message_payload

from . import _google
from ._base import ConfiguredPoller, CursorCodec, DeliverTarget, TemplateStr

CODEC = CursorCodec("google_calendar")
CURSOR_VERSION = CODEC.version
SEEN_CAPACITY = 1000
PAGE_SIZE = 250
DEFAULT_TEMPLATE = "📅 {summary} — {start}\n{html_link}"


class GoogleCalendarConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    calendar_id: str = Field("primary", min_length=1, max_length=1024)
    skip_cancelled: bool = True
    message_template: TemplateStr = DEFAULT_TEMPLATE
    max_per_tick: int = Field(50, ge=1, le=1000)
    max_pages: int = Field(20, ge=1, le=200)
    deliver: DeliverTarget


class SyncCursor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    v: int = CURSOR_VERSION
    sync_token: str | None = None
    page_token: str | None = None
    seen: list[str] = Field(default_factory=list)
    rebaselined_at: str | None = None
    note: str | None = None


class GoogleCalendarPoller(ConfiguredPoller):
    kind = "google_calendar"
    description = "Google Calendar incremental sync: deliver created, changed and cancelled events."
    config_model = GoogleCalendarConfig

    def tick(self, ctx: PollContext) -> TickAck:
        cfg = self.parse_config(ctx.config)
        cur = decode_cursor(ctx.cursor)
        binding = _google.GoogleBinding.from_credentials(ctx.host.credentials_get("google"))
        base = _google.api_base(_google.GCAL_API, _google.GCAL_BASE_DEFAULT)
        api = _google.GoogleAPI(_google.auth_client(binding), base, ctx.cancel)
        path = f"/calendars/{quote(cfg.calendar_id, safe='')}/events"
        try:
            if cur.sync_token is None:
                return _ack(baseline(api, path, cur, cfg, ctx.now), 0, 0)
            return sync(api, path, cur, cfg, ctx)
        except _google.GoneError:
            ctx.host.log(
                "warning",
                "google_calendar.rebaselined",
                reason="sync token expired (HTTP 410 Gone)",
                calendar_id=cfg.calendar_id,
            )
            note = (
                "sync token expired (410 Gone): re-baselined automatically; changes "
                "since the previous sync were not delivered"
            )
            fresh = SyncCursor(rebaselined_at=ctx.now.isoformat(), note=note)
            ack = _ack(baseline(api, path, fresh, cfg, ctx.now), 0, 0)
            # operators see it with the job's status (list, admin, API), not only in the log
            ack.notice = f"calendar {cfg.calendar_id}: {note}"
            return ack


def _list(api: _google.GoogleAPI, path: str, now: datetime, **params: Any) -> dict[str, Any]:
    return api.call(
        "GET",
        path,
        params={"maxResults": PAGE_SIZE, "showDeleted": "true", **params},
        what="calendar events.list",
        now=now,
    )


def baseline(
    api: _google.GoogleAPI, path: str, cur: SyncCursor, cfg: GoogleCalendarConfig, now: datetime
) -> SyncCursor:
    """Page to the end of the listing for its ``nextSyncToken``; deliver nothing."""
    page_token = cur.page_token
    for _ in range(cfg.max_pages):
        doc = _list(api, path, now, pageToken=page_token)
        page_token = _str(doc.get("nextPageToken"))
        if page_token is None:
            token = _str(doc.get("nextSyncToken"))
            if token is None:
                raise PermanentError("calendar events.list ended without a nextSyncToken")
            return cur.model_copy(update={"sync_token": token, "page_token": None, "seen": []})
    return cur.model_copy(update={"sync_token": None, "page_token": page_token})


def sync(
    api: _google.GoogleAPI, path: str, cur: SyncCursor, cfg: GoogleCalendarConfig, ctx: PollContext
) -> TickAck:
    """Read the changes since ``cur.sync_token``; deliver up to ``max_per_tick``."""
    seen = list(cur.seen)
    known = set(seen)
    page_token = cur.page_token
    delivered = items = 0
    for _ in range(cfg.max_pages):
        doc = _list(api, path, ctx.now, syncToken=cur.sync_token, pageToken=page_token)
        for event in doc.get("items") or []:
            if not isinstance(event, dict) or not isinstance(event.get("id"), str):
                continue
            items += 1
            key = f"{event['id']}@{event.get('updated', '')}:{event.get('status', '')}"
            if key in known:
                continue
            if event.get("status") == "cancelled" and cfg.skip_cancelled:
                continue
            if delivered >= cfg.max_per_tick:  # re-read this page on the next tick
                held = {"page_token": page_token, "seen": seen[-SEEN_CAPACITY:]}
                return _ack(cur.model_copy(update=held), items, delivered, cur)
            fields = event_fields(event, cfg.calendar_id)
            payload = {
                **message_payload(cfg.message_template, fields),
                "item_id": event["id"],
                "job_id": ctx.job_id,
                "change": fields["change"],
            }
            ctx.host.deliver(cfg.deliver.channel, cfg.deliver.to, payload)
            delivered += 1
            known.add(key)
            seen.append(key)
        page_token = _str(doc.get("nextPageToken"))
        if page_token is None:
            token = _str(doc.get("nextSyncToken"))
            if token is None:
                raise PermanentError("calendar events.list ended without a nextSyncToken")
            nxt = cur.model_copy(update={"sync_token": token, "page_token": None, "seen": []})
            return _ack(nxt, items, delivered, cur)
    nxt = cur.model_copy(update={"page_token": page_token, "seen": seen[-SEEN_CAPACITY:]})
    return _ack(nxt, items, delivered, cur)


def event_fields(event: dict[str, Any], calendar_id: str) -> dict[str, Any]:
    status = str(event.get("status") or "confirmed")
    created, updated = str(event.get("created") or ""), str(event.get("updated") or "")
    if status == "cancelled":
        change = "cancelled"
    elif created and updated and updated[:19] == created[:19]:
        change = "created"
    else:
        change = "updated"
    return {
        "id": event.get("id"),
        "summary": event.get("summary") or ("(cancelled)" if status == "cancelled" else ""),
        "description": event.get("description") or "",
        "location": event.get("location") or "",
        "start": _when(event.get("start")),
        "end": _when(event.get("end")),
        "html_link": event.get("htmlLink") or "",
        "status": status,
        "change": change,
        "created": created,
        "updated": updated,
        "organizer": _who(event.get("organizer")),
        "creator": _who(event.get("creator")),
        "calendar_id": calendar_id,
    }


def _when(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("dateTime") or value.get("date") or "")
    return ""


def _who(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("email") or value.get("displayName") or "")
    return ""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _ack(nxt: SyncCursor, items: int, delivered: int, old: SyncCursor | None = None) -> TickAck:
    changed = old is None or nxt != old
    return TickAck(
        next_cursor=encode_cursor(nxt) if changed else None,
        items_seen=items,
        items_dispatched=delivered,
    )


def decode_cursor(raw: bytes | None) -> SyncCursor:
    """The stored sync state; an empty one for a first run (a corrupt one is permanent)."""
    doc = CODEC.decode(raw)
    if doc is None:
        return SyncCursor()
    try:
        return SyncCursor.model_validate(doc)
    except ValidationError:
        raise CODEC.error("is malformed") from None


def encode_cursor(cur: SyncCursor) -> bytes:
    return CODEC.encode(cur.model_dump(exclude_none=True))
