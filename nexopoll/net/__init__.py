"""Outbound network access for pollers and channels (requests-based, no Django).

Use :func:`nexopoll.net.http.fetch` for every URL that comes from config or from
a fetched document: it applies the SSRF guard, byte caps and a total deadline.
"""

from __future__ import annotations

from .http import (
    BlockedURLError,
    DeadlineExceededError,
    FetchError,
    InvalidURLError,
    PermanentHTTPError,
    RedirectRefusedError,
    Response,
    ResponseTooLargeError,
    TooManyRedirectsError,
    TransientHTTPError,
    classify_status,
    fetch,
    parse_retry_after,
)
from .options import ApiBase, api_base

__all__ = [
    "ApiBase",
    "BlockedURLError",
    "DeadlineExceededError",
    "FetchError",
    "InvalidURLError",
    "PermanentHTTPError",
    "RedirectRefusedError",
    "Response",
    "ResponseTooLargeError",
    "TooManyRedirectsError",
    "TransientHTTPError",
    "api_base",
    "classify_status",
    "fetch",
    "parse_retry_after",
]
