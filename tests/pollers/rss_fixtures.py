"""Feed fixtures and a conditional-GET feed route for :class:`TestHTTPServer`.

``FeedSite`` serves a changeable document with an ETag and Last-Modified, and
answers 304 when the request's ``If-None-Match`` (or, without one,
``If-Modified-Since``) matches, as real feed servers do.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

from tests.support.httpserver import RecordedRequest, Reply

FEEDS = Path(__file__).resolve().parent / "data" / "feeds"
RSS_TYPE = "application/rss+xml; charset=utf-8"


def fixture(name: str) -> bytes:
    return (FEEDS / name).read_bytes()


def rss(*items: tuple[str, str], title: str = "Example", channel_extra: str = "") -> bytes:
    """An RSS 2.0 document; ``items`` are ``(guid, title)``, newest first."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    body = []
    for guid, item_title in items:
        n = int("".join(c for c in guid if c.isdigit()) or 0)
        when = format_datetime(start + timedelta(hours=n), usegmt=True)
        body.append(
            f"<item><title>{item_title}</title><link>https://blog.example.com/{guid}</link>"
            f"<guid>{guid}</guid><pubDate>{when}</pubDate></item>"
        )
    return (
        f'<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel>'
        f"<title>{title}</title><link>https://blog.example.com/</link>{channel_extra}"
        + "".join(body)
        + "</channel></rss>"
    ).encode()


class FeedSite:
    """A feed route whose document can change; 304 when the validators match."""

    def __init__(
        self,
        body: bytes,
        *,
        content_type: str = RSS_TYPE,
        etag: bool = True,
        last_modified: bool = True,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self.content_type = content_type
        self.use_etag = etag
        self.use_last_modified = last_modified
        self.extra_headers = dict(extra_headers or {})
        self.version = 0
        self.not_modified = 0
        self.set(body)

    def set(self, body: bytes) -> None:
        with self._lock:
            self.body = body
            self.version += 1
            self.etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            modified = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=self.version)
            self.last_modified = format_datetime(modified, usegmt=True)

    def __call__(self, req: RecordedRequest) -> Reply:
        with self._lock:
            headers = {"Content-Type": self.content_type, **self.extra_headers}
            if self.use_etag:
                headers["ETag"] = self.etag
            if self.use_last_modified:
                headers["Last-Modified"] = self.last_modified
            inm, ims = req.header("If-None-Match"), req.header("If-Modified-Since")
            if (self.use_etag and inm == self.etag) or (
                inm is None and self.use_last_modified and ims == self.last_modified
            ):
                self.not_modified += 1
                return 304, {k: v for k, v in headers.items() if k != "Content-Type"}, b""
            return 200, headers, self.body
