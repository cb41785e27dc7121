"""``rss``: poll an RSS 0.9x / 1.0 / 2.0 or Atom feed and deliver every new entry once.

Config (``pollers.yaml`` → ``jobs[].config``)::

    feed_url: https://example.com/feed.xml   # http(s) only (no feed://, file://, paths)
    max_per_tick: 5                    # 1..1000; the rest waits for the next tick
    message_template: "{title}\\n{link}"
    deliver: {channel: telegram, to: "1194292426"}
    first_run: deliver                 # deliver | skip (mark what is there as seen)
    allow_private_networks: false      # opt in to loopback / private targets
    timeout_secs: 20                   # total deadline, <= 120
    max_bytes: 5242880                 # body cap (wire and decoded), <= 50 MiB
    seen_capacity: 1000                # ids remembered for dedup (at least the feed's size)

Template fields: ``id``, ``title``, ``link``, ``summary``, ``published``
(ISO 8601, UTC), ``author``, ``tags`` (comma-separated) and ``feed_title``.

Behaviour:

- **Order.** New entries go out oldest first (by date when every entry has one,
  else the reverse of document order, feeds listing newest first).
- **Cursor** ``{"v": 1, "seen": [...], "etag": ..., "last_modified": ...,
  "feed_hint_secs": ...}``. As with webhook_poll, the seen ring grows to cover
  the whole feed (never below ``seen_capacity``), never forgets an id the feed
  still lists and does not shrink when the feed does (up to 10,000 ids), so a
  feed larger than ``seen_capacity`` never re-delivers; ids no longer in the
  feed are dropped first. A feed of more than 10,000 entries stops the job.
- **Entry ids** are the guid (or Atom id), else the link *as written in the feed*,
  else a hash of title and date: never resolved against the URL the feed was
  fetched from, so a redirect or an http→https move re-delivers nothing.
  Cursors written before this rule hold such relative links resolved against
  the fetch URL of the time: an entry is also "seen" under that older id (the
  current fetch URL), and is remembered under its new id from then on.
- **Conditional GET.** The stored ETag / Last-Modified go out as
  ``If-None-Match`` / ``If-Modified-Since``; a 304 delivers nothing and keeps
  the cursor. Validators are stored only once no entry is held back by
  ``max_per_tick``: while a backlog remains, the next tick fetches in full.
- **Timing hints.** ``next_interval_hint`` is the longest of ``Retry-After``,
  ``Cache-Control: max-age`` and the feed's ``<ttl>`` / ``sy:updatePeriod``
  (the runtime caps it); while a backlog remains only ``Retry-After`` counts.
- **Errors.** 401/403/404/410 pause the job with a message saying what to fix
  ("feed gone (410): remove or fix the URL"); 408, 429, 5xx and timeouts are
  retried. A malformed feed is a transient error; a feed declaring entities or
  a DTD internal subset is refused unparsed (permanent).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nexopoll.core.contract import PollContext, TickAck
from nexopoll.core.errors import PermanentError
from nexopoll.core.templates import TemplateError, check_template, message_payload
from nexopoll.net import http

from . import _http
from ._base import (
    ConfiguredPoller,
    CursorCodec,
    DeliverTarget,
    HttpURL,
    SeenRing,
    covering_capacity,
    seen_key,
)
from .rss_feed import TEMPLATE_FIELDS, Entry, Feed, charset_of, parse_feed

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
MAX_MAX_BYTES = 50 * 1024 * 1024
MAX_FEED_ENTRIES = 10_000
"""A feed with more entries stops the job (``PermanentError``) instead of looping."""
CODEC = CursorCodec("rss")
CURSOR_VERSION = CODEC.version
ACCEPT = (
    "application/rss+xml, application/atom+xml, application/rdf+xml;q=0.9, "
    "application/xml;q=0.8, text/xml;q=0.8, */*;q=0.5"
)

FetchFn = Callable[..., http.Response]


class RssConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    feed_url: HttpURL
    max_per_tick: int = Field(5, ge=1, le=1000)
    message_template: str = "{title}\n{link}"
    deliver: DeliverTarget
    first_run: Literal["deliver", "skip"] = "deliver"
    allow_private_networks: bool = False
    timeout_secs: float = Field(20.0, gt=0, le=120, allow_inf_nan=False)
    max_bytes: int = Field(DEFAULT_MAX_BYTES, ge=1, le=MAX_MAX_BYTES)
    seen_capacity: int = Field(1000, ge=1, le=100_000)

    @field_validator("message_template")
    @classmethod
    def _valid_template(cls, value: str) -> str:
        try:
            paths = check_template(value)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        unknown = sorted({p.split(".")[0] for p in paths} - set(TEMPLATE_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown field(s) {', '.join(unknown)}; available: {', '.join(TEMPLATE_FIELDS)}"
            )
        return value


@dataclass(frozen=True)
class RssCursor:
    """What an rss job remembers between ticks (see the module docstring)."""

    seen: tuple[str, ...] = ()
    etag: str | None = None
    last_modified: str | None = None
    feed_hint_secs: int | None = None

    def encode(self) -> bytes:
        return CODEC.encode(
            {
                "seen": list(self.seen),
                "etag": self.etag,
                "last_modified": self.last_modified,
                "feed_hint_secs": self.feed_hint_secs,
            }
        )

    @classmethod
    def decode(cls, raw: bytes | None) -> RssCursor:
        """The cursor in ``raw``; the empty cursor for a first run.

        Raises:
            PermanentError: corrupt or of an unknown version (a reset re-baselines).
        """
        doc = CODEC.decode(raw)
        if doc is None:
            return cls()
        seen = doc.get("seen")
        hint = doc.get("feed_hint_secs")
        ok = (
            isinstance(seen, list)
            and all(isinstance(s, str) for s in seen)
            and all(isinstance(doc.get(k), str | None) for k in ("etag", "last_modified"))
            and (hint is None or (isinstance(hint, int) and not isinstance(hint, bool)))
        )
        if not ok:
            raise CODEC.error("has invalid fields")
        return cls(tuple(seen), doc.get("etag"), doc.get("last_modified"), hint)

    @property
    def feed_hint(self) -> timedelta | None:
        return timedelta(seconds=self.feed_hint_secs) if self.feed_hint_secs else None


class RssPoller(ConfiguredPoller):
    """Poll a feed; deliver each entry whose id was not seen before.

    Args:
        fetch: the HTTP call, :func:`nexopoll.net.http.fetch` by default. Tests
            pass ``functools.partial(fetch, resolver=..., allow_addresses=...)``
            to reach loopback fixtures through the real SSRF guard.

    The instance holds no per-job state, so ticks may run concurrently in threads.
    """

    kind = "rss"
    description = "Poll an RSS/Atom feed (conditional GET) and deliver new entries."
    config_model = RssConfig

    def __init__(self, fetch: FetchFn | None = None) -> None:
        self._fetch: FetchFn = fetch or http.fetch

    def tick(self, ctx: PollContext) -> TickAck:
        cfg = self.parse_config(ctx.config)
        cursor = RssCursor.decode(ctx.cursor)
        ctx.cancel.raise_if_cancelled()
        resp = fetch_feed(self._fetch, cfg, cursor, cancel=ctx.cancel)
        _http.check_status(resp.status, resp.headers, now=ctx.now, what="feed")
        server_hint = _http.response_hint(resp.headers, now=ctx.now)
        if resp.status == 304:  # the cheap tick: nothing parsed, nothing delivered
            return TickAck(next_interval_hint=_http.longest(server_hint, cursor.feed_hint))
        feed = parse_feed(
            resp.body,
            charset=charset_of(_http.header(resp.headers, "Content-Type")),
            base_url=resp.url,
        )
        ctx.cancel.raise_if_cancelled()
        if len(feed.entries) > MAX_FEED_ENTRIES:
            raise PermanentError(
                f"the feed has {len(feed.entries)} entries, more than rss's hard cap of "
                f"{MAX_FEED_ENTRIES}: use a feed URL that lists fewer entries"
            )
        if feed.warning:
            ctx.host.log("warning", "rss.feed_not_well_formed", reason=feed.warning)
        first_skip = ctx.cursor is None and cfg.first_run == "skip"
        fresh, backlog = select_new(feed.entries, cursor.seen, cfg.max_per_tick)
        if first_skip:  # a baseline: everything in the feed is marked seen, nothing sent
            fresh, backlog = [], 0
        for entry in fresh:
            message = message_payload(cfg.message_template, entry.fields)
            payload = {**message, "item_id": entry.id, "job_id": ctx.job_id}
            ctx.host.deliver(cfg.deliver.channel, cfg.deliver.to, payload)
        marked = [e.id for e in (feed.entries if first_skip else fresh)]
        marked += seen_under_alias(feed.entries, cursor.seen)
        etag, modified = _http.response_validators(resp.headers) if not backlog else (None, None)
        hint_secs = int(feed.hint.total_seconds()) if feed.hint else None
        capacity = ring_capacity(cfg.seen_capacity, len(feed.entries), len(cursor.seen))
        ring = remember(cursor.seen, [e.id for e in feed.entries], marked, capacity)
        nxt = RssCursor(tuple(ring), etag, modified, hint_secs)
        retry_after = http.parse_retry_after(_http.header(resp.headers, "Retry-After"), now=ctx.now)
        hint = retry_after if backlog else _http.longest(server_hint, nxt.feed_hint)
        return TickAck(
            next_cursor=nxt.encode() if nxt != cursor or ctx.cursor is None else None,
            next_interval_hint=hint,
            items_seen=len(feed.entries),
            items_dispatched=len(fresh),
        )


def fetch_feed(
    fetch: FetchFn, cfg: RssConfig, cursor: RssCursor, *, cancel: Any = None
) -> http.Response:
    """GET the feed through the shared HTTP layer, conditionally when validators are stored."""
    headers = {"Accept": ACCEPT, **_http.conditional_headers(cursor.etag, cursor.last_modified)}
    return fetch(
        "GET",
        cfg.feed_url,
        headers=headers,
        allow_private=cfg.allow_private_networks,
        max_bytes=cfg.max_bytes,
        deadline_secs=cfg.timeout_secs,
        cancel=cancel,
    )


def select_new(entries: list[Entry], seen: tuple[str, ...], limit: int) -> tuple[list[Entry], int]:
    """Up to ``limit`` unseen entries, oldest first, and how many more are held back."""
    known = set(seen)
    unseen: list[Entry] = []
    for entry in reversed(entries):
        key = seen_key(entry.id)
        if key not in known and not any(seen_key(a) in known for a in entry.aliases):
            known.add(key)
            unseen.append(entry)
    if unseen and all(e.published is not None for e in unseen):
        unseen.sort(key=lambda e: e.published)
    return unseen[:limit], max(0, len(unseen) - limit)


def seen_under_alias(entries: list[Entry], seen: tuple[str, ...]) -> list[str]:
    """Ids of entries the ring knows only by an older id (a relative link once
    resolved against the fetch URL): remembered under their id from now on."""
    known = set(seen)
    return [
        e.id
        for e in entries
        if seen_key(e.id) not in known and any(seen_key(a) in known for a in e.aliases)
    ]


def ring_capacity(seen_capacity: int, listed: int, held: int) -> int:
    """How many ids the ring may hold after this tick (as webhook_poll's ring).

    At least ``seen_capacity`` and the feed's ``listed`` entries, and not less than
    the ``held`` ids it already has, up to ``max(seen_capacity, MAX_FEED_ENTRIES)``:
    a feed that shrinks for a while (a truncated answer, a publisher trimming it)
    does not make the ring forget ids the feed may list again.

    Examples:
        ``ring_capacity(1000, 1500, 0)`` → 1500; ``ring_capacity(1000, 20, 1500)``
        → 1500; ``ring_capacity(1000, 20, 50_000)`` → 10,000.
    """
    return covering_capacity(seen_capacity, listed, held, MAX_FEED_ENTRIES)


def remember(
    seen: tuple[str, ...], feed_ids: list[str], marked: list[str], capacity: int
) -> list[str]:
    """The next seen ring: every known id still in the feed, then older ids up to ``capacity``.

    Known ids in the feed are always kept, even past ``capacity`` (which
    :func:`ring_capacity` sizes to cover them anyway): dropping one would deliver its
    entry again.
    """
    ring = SeenRing(capacity, seen).remember(marked, keep=map(seen_key, feed_ids))
    return list(ring.touch(feed_ids).keys)


__all__ = ["Feed", "RssConfig", "RssCursor", "RssPoller", "fetch_feed", "parse_feed"]
