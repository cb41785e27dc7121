"""HTTP helpers shared by the built-in pollers (pure: no I/O, no clock reads).

Every fetch still goes through :func:`nexopoll.net.http.fetch`; this module only
turns stored validators into request headers, response headers into validators
and timing hints, and a status code into the error an operator can act on.

=============================  ==================================================
helper                         what it does
=============================  ==================================================
:func:`conditional_headers`    ``If-None-Match`` / ``If-Modified-Since`` from the
                               stored ETag / Last-Modified
:func:`response_validators`    the ETag / Last-Modified worth storing (sane
                               length, no control characters), else None
:func:`cache_max_age`          ``Cache-Control: max-age`` minus ``Age``
:func:`response_hint`          the longest of Retry-After and max-age
:func:`check_status`           2xx/304 pass; otherwise the error class below
=============================  ==================================================

Status → error (``what`` names the resource, "feed" for rss):

=========================  ==========  ==========================================
status                     class       message
=========================  ==========  ==========================================
401                        permanent   "feed needs credentials (401): …"
403                        permanent   "feed access forbidden (403): …"
404                        permanent   "feed not found (404): fix the URL"
410                        permanent   "feed gone (410): remove or fix the URL"
other 4xx, stray 1xx/3xx   permanent   "feed answered HTTP 400 Bad Request"
408, 429, 5xx              transient   "feed … (503): will retry", Retry-After
                                       carried as ``retry_after``
=========================  ==========  ==========================================

Timeouts and connection failures are raised by ``fetch`` itself as
:class:`~nexopoll.net.http.FetchError` (transient).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType

from nexopoll.net import http
from nexopoll.net.status import header

MAX_VALIDATOR_CHARS = 1024
_MAX_AGE_RE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d{1,10})\"?", re.IGNORECASE)
_NO_CACHE_RE = re.compile(r"(?:^|[,\s])(?:no-store|no-cache)\b", re.IGNORECASE)

_PERMANENT = MappingProxyType(
    {
        401: "{what} needs credentials (401): check the URL's token or the server's access rules",
        403: "{what} access forbidden (403): check the URL's token or the server's access rules",
        404: "{what} not found (404): fix the URL",
        410: "{what} gone (410): remove or fix the URL",
    }
)
_TRANSIENT = MappingProxyType(
    {
        408: "{what} server timed out reading the request (408): will retry",
        429: "{what} server is rate limiting (429): will retry later",
    }
)


class StatusPermanentError(http.PermanentHTTPError):
    """A status that needs an operator; the message says what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status)
        self.args = (message,)


class StatusTransientError(http.TransientHTTPError):
    """A status that may heal by itself (408, 429, 5xx); retried with backoff."""

    def __init__(self, status: int, message: str, retry_after: timedelta | None) -> None:
        super().__init__(status, retry_after)
        self.args = (message,)


def conditional_headers(etag: str | None, last_modified: str | None) -> dict[str, str]:
    """Request headers that let the server answer 304 Not Modified.

    Examples:
        >>> conditional_headers('W/"abc"', "Wed, 21 Oct 2026 07:28:00 GMT")
        {'If-None-Match': 'W/"abc"', 'If-Modified-Since': 'Wed, 21 Oct 2026 07:28:00 GMT'}
        >>> conditional_headers(None, None)
        {}
    """
    out: dict[str, str] = {}
    if etag:
        out["If-None-Match"] = etag
    if last_modified:
        out["If-Modified-Since"] = last_modified
    return out


def response_validators(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """``(etag, last_modified)`` of a response, each None when absent or unusable.

    A value longer than :data:`MAX_VALIDATOR_CHARS` or holding a control character
    is dropped: it would be sent back verbatim as a request header.
    """
    return _sane(header(headers, "ETag")), _sane(header(headers, "Last-Modified"))


def _sane(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > MAX_VALIDATOR_CHARS:
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return None
    return value


def cache_max_age(headers: Mapping[str, str]) -> timedelta | None:
    """How long the response stays fresh: ``Cache-Control: max-age`` minus ``Age``.

    ``no-store`` / ``no-cache`` (or no max-age) give None.

    Examples:
        >>> cache_max_age({"Cache-Control": "public, max-age=600"})
        datetime.timedelta(seconds=600)
        >>> cache_max_age({"cache-control": "max-age=600", "Age": "100"})
        datetime.timedelta(seconds=500)
        >>> cache_max_age({"Cache-Control": "no-cache, max-age=600"}) is None
        True
    """
    value = header(headers, "Cache-Control")
    if not value or _NO_CACHE_RE.search(value):
        return None
    match = _MAX_AGE_RE.search(value)
    if match is None:
        return None
    age_text = (header(headers, "Age") or "").strip()
    age = int(age_text[:10]) if age_text.isdigit() else 0
    fresh = int(match.group(1)) - age
    return timedelta(seconds=fresh) if fresh > 0 else None


def longest(*hints: timedelta | None) -> timedelta | None:
    """The longest of the given hints (None ignored), or None."""
    present = [h for h in hints if h is not None and h > timedelta(0)]
    return max(present) if present else None


def response_hint(headers: Mapping[str, str], *, now: datetime) -> timedelta | None:
    """``next_interval_hint`` from a successful (or 304) response's headers.

    The longest of ``Retry-After`` and ``Cache-Control`` freshness; the runtime
    caps it (``NEXOPOLL_MAX_INTERVAL_HINT_SECS``).
    """
    retry_after = http.parse_retry_after(header(headers, "Retry-After"), now=now)
    return longest(retry_after, cache_max_age(headers))


def check_status(
    status: int, headers: Mapping[str, str], *, now: datetime, what: str = "feed"
) -> None:
    """Return for 2xx and 304; raise the error an operator understands otherwise.

    Raises:
        StatusPermanentError: 401, 403, 404, 410, other 4xx, 1xx and unfollowed 3xx.
        StatusTransientError: 408, 429 and 5xx, with Retry-After as ``retry_after``.
    """
    try:
        http.classify_status(status, headers, now=now)
    except http.TransientHTTPError as exc:
        template = _TRANSIENT.get(status, "{what} server error ({status}): will retry")
        message = template.format(what=what, status=status)
        raise StatusTransientError(status, message, exc.retry_after) from None
    except http.PermanentHTTPError as exc:
        template = _PERMANENT.get(status, "{what} answered {text}")
        message = template.format(what=what, text=str(exc))
        raise StatusPermanentError(status, message) from None
