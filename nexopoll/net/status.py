"""HTTP status codes to error classes, and ``Retry-After``.

Both are pure functions over a status and headers, kept apart from the fetch
machinery in :mod:`nexopoll.net.http` (which re-exports them).
"""

from __future__ import annotations

import http
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from nexopoll.core.errors import PermanentError, TransientError

MAX_RETRY_AFTER = timedelta(hours=1)


class TransientHTTPError(TransientError):
    """A status that may heal by itself: 408, 429 and 5xx."""

    def __init__(self, status: int, retry_after: timedelta | None = None) -> None:
        self.status = status
        super().__init__(_status_text(status), retry_after=retry_after)


class PermanentHTTPError(PermanentError):
    """A status that needs an operator: 401, 403, other 4xx, an unfollowed 3xx."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(_status_text(status))


def classify_status(
    status: int, headers: Mapping[str, str], *, now: datetime | None = None
) -> None:
    """Return for 2xx and 304; otherwise raise the error class for ``status``.

    =========================  =====================================================
    status                     outcome
    =========================  =====================================================
    2xx, 304                   return
    401, 403                   PermanentHTTPError (credentials rejected)
    408, 429                   TransientHTTPError, ``retry_after`` from Retry-After
    other 4xx                  PermanentHTTPError
    503                        TransientHTTPError, ``retry_after`` from Retry-After
    other 5xx                  TransientHTTPError
    1xx, other 3xx             PermanentHTTPError (a redirect fetch did not follow)
    =========================  =====================================================

    Args:
        status: the response status.
        headers: response headers (any mapping; looked up case-insensitively).
        now: aware "now" for HTTP-date Retry-After values (default: the clock).
    """
    if 200 <= status < 300 or status == 304:
        return
    if status in (408, 429) or status >= 500:
        retry_after = None
        if status in (408, 429, 503):
            retry_after = parse_retry_after(header(headers, "Retry-After"), now=now)
        raise TransientHTTPError(status, retry_after)
    raise PermanentHTTPError(status)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> timedelta | None:
    """Parse ``Retry-After`` (delay-seconds or HTTP-date), capped at one hour.

    Examples:
        ``"120"`` → 2 min; ``"86400"`` → 1 h (cap); a date 30 s after ``now`` →
        30 s; a date in the past → 0; ``"soon"`` or None → None.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        delay = timedelta(seconds=int(value[:7]))
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        delay = max(timedelta(0), when - (now or datetime.now(UTC)))
    return min(delay, MAX_RETRY_AFTER)


def header(headers: Mapping[str, str], name: str) -> str | None:
    """``headers[name]`` looked up case-insensitively (any mapping)."""
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lowered), None)


def _status_text(status: int) -> str:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "unknown status"
    return f"HTTP {status} {phrase}"
