"""Parse a fetched RSS/Atom document into entries (pure: bytes in, values out).

:func:`parse_feed` is the only place feedparser is called, and it is only ever
given a byte stream (``io.BytesIO``): given a string, feedparser opens paths and
URLs itself. The bytes first go through :mod:`pollers._xmlguard`, which refuses
entity declarations and DTD internal subsets and hands over UTF-8.
"""

from __future__ import annotations

import calendar
import hashlib
import io
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any
from urllib.parse import urljoin

import feedparser

from nexopoll.core.errors import TransientError

from . import _xmlguard

TEMPLATE_FIELDS = ("id", "title", "link", "summary", "published", "author", "tags", "feed_title")
MAX_FEED_HINT = timedelta(days=7)
_SY_PERIODS = MappingProxyType(
    {
        "hourly": timedelta(hours=1),
        "daily": timedelta(days=1),
        "weekly": timedelta(weeks=1),
        "monthly": timedelta(days=30),
        "yearly": timedelta(days=365),
    }
)
_CHARSET = re.compile(r"charset\s*=\s*[\"']?([A-Za-z0-9._:-]{1,40})", re.IGNORECASE)


class MalformedFeedError(TransientError):
    """The document is empty, not well-formed, or not a feed at all.

    Transient: a half-deployed or failing site usually recovers; a feed that
    stays broken trips the breaker and alerts.
    """


@dataclass(frozen=True)
class Entry:
    """One feed entry: its dedup id, its template fields, and its date (UTC) if any."""

    id: str
    fields: dict[str, str]
    published: datetime | None = None
    # ids older versions gave the same entry: a relative link resolved against the
    # fetch URL (read as "already seen" so an upgrade re-delivers nothing)
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Feed:
    """A parsed feed.

    Attributes:
        title: the feed's title.
        version: feedparser's name for the format (``rss20``, ``atom10``, ``rss091n``…).
        entries: in document order.
        hint: the feed's own refresh hint: ``<ttl>`` minutes or
            ``sy:updatePeriod`` / ``sy:updateFrequency``, the longer of the two.
        warning: why feedparser found the document not well-formed, if it still
            yielded a feed.
    """

    title: str
    version: str
    entries: list[Entry] = field(default_factory=list)
    hint: timedelta | None = None
    warning: str = ""


def charset_of(content_type: str | None) -> str | None:
    """The ``charset`` parameter of a Content-Type header, if any."""
    match = _CHARSET.search(content_type or "")
    return match.group(1) if match else None


def parse_feed(body: bytes, *, charset: str | None = None, base_url: str = "") -> Feed:
    """Parse RSS 0.9x / 1.0 (RDF) / 2.0 or Atom ``body``.

    Args:
        body: the response body as fetched (any encoding).
        charset: the HTTP ``charset``, used when the document declares none.
        base_url: the feed's final URL, for relative links.

    Raises:
        pollers._xmlguard.HostileFeedError: entity declarations or a DTD
            internal subset (permanent; nothing was parsed).
        MalformedFeedError: empty, not well-formed beyond recovery, or not a feed.
    """
    if not isinstance(body, bytes):
        raise TypeError("parse_feed takes the fetched bytes, never a str or URL")
    if not body.strip():
        raise MalformedFeedError("feed response is empty")
    clean = _xmlguard.sanitize(body, charset)
    # No content-location: feedparser would resolve guids against it too, and a
    # feed moving to another URL would then re-deliver everything. Links are
    # resolved here instead.
    result = feedparser.parse(
        io.BytesIO(clean),
        response_headers={"content-type": "application/xml; charset=utf-8"},
        sanitize_html=True,
        resolve_relative_uris=False,
    )
    reason = _bozo_reason(result) if result.get("bozo") else ""
    version = result.get("version") or ""
    meta = result.get("feed") or {}
    if reason and not result.entries:  # truncated or broken: never read as "now empty"
        raise MalformedFeedError(f"feed is not well-formed XML ({reason})")
    if not version and not result.entries:
        raise MalformedFeedError("document is not an RSS or Atom feed")
    feed_title = _text(meta.get("title"))
    entries = [_entry(e, feed_title, base_url) for e in result.entries]
    return Feed(feed_title, version, entries, _feed_hint(meta), reason)


def _bozo_reason(result: Any) -> str:
    exc = result.get("bozo_exception")
    text = str(exc) if exc is not None else "unknown error"
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _entry(raw: Any, feed_title: str, base_url: str) -> Entry:
    published = _when(raw.get("published_parsed") or raw.get("updated_parsed"))
    fields = {
        "title": _text(raw.get("title")),
        "link": _absolute(_text(raw.get("link")), base_url),
        "summary": _text(raw.get("summary")),
        "published": published.isoformat() if published else "",
        "author": _text(raw.get("author")),
        "tags": ", ".join(t for t in (_text(x.get("term")) for x in raw.get("tags") or []) if t),
        "feed_title": feed_title,
    }
    ident = entry_id(raw, fields)
    fields["id"] = ident
    legacy = fields["link"]
    aliases = (legacy,) if ident == _text(raw.get("link")).strip() and legacy != ident else ()
    return Entry(ident, fields, published, aliases)


def entry_id(raw: Any, fields: dict[str, str]) -> str:
    """guid, else id (feedparser maps both to ``id``), else link, else a hash of title and date.

    The link is taken as the feed writes it: a relative link is *not* resolved
    against the URL the feed was fetched from (a redirect or an http→https move
    would otherwise give every such entry a new id). An entry with none of these
    (RSS 0.92 allows it) is hashed by its summary and enclosure URLs instead.

    Examples:
        >>> entry_id({"id": "tag:x,2026:1", "link": "https://x/1"}, {})
        'tag:x,2026:1'
        >>> entry_id({"link": "/posts/2"}, {"link": "https://x/posts/2", "title": "t"})
        '/posts/2'
    """
    for candidate in (raw.get("guid"), raw.get("id"), raw.get("link")):
        text = _text(candidate).strip()
        if text:
            return text
    basis = f"{fields.get('title', '')}\x00{fields.get('published', '')}"
    if basis == "\x00":  # RSS 0.92 items may have neither: the content tells them apart
        enclosures = [_text(x.get("href")) for x in raw.get("enclosures") or []]
        basis += "\x00".join([fields.get("summary", ""), *enclosures])
    return "hash:" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:32]


def _absolute(link: str, base_url: str) -> str:
    """``link`` resolved against the feed's URL when it is relative (http(s) results only)."""
    if not link or not base_url or "://" in link:
        return link
    joined = urljoin(base_url, link)
    return joined if joined.startswith(("http://", "https://")) else link


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _when(parsed: Any) -> datetime | None:
    """feedparser's UTC ``struct_time`` as an aware datetime."""
    if not parsed:
        return None
    try:
        return datetime.fromtimestamp(calendar.timegm(parsed), tz=UTC)
    except (OverflowError, ValueError, TypeError, OSError):
        return None


def _feed_hint(meta: Any) -> timedelta | None:
    hints = []
    ttl = _text(meta.get("ttl")).strip()
    if ttl.isdigit() and 0 < int(ttl[:9]):
        hints.append(timedelta(minutes=int(ttl[:9])))
    period = _SY_PERIODS.get(_text(meta.get("sy_updateperiod")).strip().lower())
    if period is not None:
        freq_text = _text(meta.get("sy_updatefrequency")).strip()
        freq = int(freq_text[:6]) if freq_text.isdigit() else 1
        hints.append(period / max(freq, 1))
    if not hints:
        return None
    return min(max(hints), MAX_FEED_HINT)
