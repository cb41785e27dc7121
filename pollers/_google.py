"""Google OAuth and API calls shared by the ``gmail`` and ``google_calendar`` kinds.

- **Binding.** The agent's ``google`` binding names two files:
  ``client_id_path`` (the OAuth client: Google's client-secrets JSON with an
  ``installed`` or ``web`` section, a flat JSON object, or a text file holding
  only the client id) and ``token_path`` (the authorized-user JSON that
  ``google-auth-oauthlib`` writes: ``refresh_token``, ``token``, ``expiry``,
  ``token_uri``, and usually ``client_id`` / ``client_secret``). An optional
  ``client_secret_path`` (a text file) completes a text ``client_id_path``, as
  the legacy gmail-poller had it. The token endpoint is the token file's
  ``token_uri`` (else the client file's, else Google's).
- **One auth client per account.** :func:`auth_client` keeps a process-wide
  cache keyed by the real path of the token file, so every job of one Google
  account (gmail and calendar alike) shares one access token and one refresh.
  A refresh runs under the client's lock; a token file changed on disk (the
  operator re-authorized) is re-read on the next call. A rejected refresh token
  is remembered, so sibling jobs fail at once instead of hammering the endpoint.
- **HTTP.** Every request (token endpoint included: google-auth is handed
  :class:`NetRequest`) goes through :func:`nexopoll.net.http.fetch`, with its
  deadline, byte caps and redirect rules. The API bases come from the
  settings (``NEXOPOLL_GMAIL_API_BASE``, ``NEXOPOLL_GCAL_API_BASE`` in the
  environment, through :func:`nexopoll.net.api_base`) and the
  token URI from the operator's token file: both are trusted like the rest of
  the environment, so private addresses are allowed for them (metadata
  addresses stay refused); nothing here takes a URL from fetched content.
- **Errors.** A rejected refresh (``invalid_grant``: expired or revoked),
  missing or malformed credential files, and a 401 that survives one forced
  refresh are permanent; 408, 429, 5xx, Google's rate-limit 403s and network
  failures are transient. 404 and other 4xx are permanent. Messages never carry
  a token or a file's content.

The OAuth half (binding, credential files, auth clients) is
:mod:`pollers._google_auth`; this module keeps the API calls and re-exports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from nexopoll.core.contract import CancelToken
from nexopoll.core.errors import PermanentError, TransientError
from nexopoll.net import api_base as net_api_base
from nexopoll.net import http

from ._google_auth import (
    GOOGLE_TOKEN_URI,
    AuthClient,
    GoogleBinding,
    NetRequest,
    auth_client,
    load_credentials,
)

GMAIL_API = "gmail"  # its base: NEXOPOLL_GMAIL_API_BASE (nexopoll.net.api_base)
GMAIL_BASE_DEFAULT = "https://gmail.googleapis.com"
GCAL_API = "gcal"  # its base: NEXOPOLL_GCAL_API_BASE
GCAL_BASE_DEFAULT = "https://www.googleapis.com/calendar/v3"
API_MAX_BYTES = 10 * 1024 * 1024
CALL_DEADLINE_SECS = 30.0
__all__ = [
    "GOOGLE_TOKEN_URI",
    "AuthClient",
    "GoneError",
    "GoogleAPI",
    "GoogleBinding",
    "NetRequest",
    "NotFoundError",
    "api_base",
    "auth_client",
    "load_credentials",
    "raise_for_status",
]
RATE_LIMIT_REASONS = frozenset(
    {"ratelimitexceeded", "userratelimitexceeded", "quotaexceeded", "dailylimitexceeded"}
)


class GoneError(PermanentError):
    """HTTP 410 from a Google API (an expired sync or page token)."""


class NotFoundError(PermanentError):
    """HTTP 404 from a Google API (a deleted message, an unknown calendar)."""


def api_base(provider: str, default: str) -> str:
    """The API base URL (no trailing slash): the operator's setting, else ``default``."""
    return net_api_base(provider, default).url


class GoogleAPI:
    """Authorized JSON calls to one API base for one account."""

    def __init__(self, client: AuthClient, base: str, cancel: CancelToken | None) -> None:
        self.client = client
        self.base = base
        self.cancel = cancel

    def call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Request ``base + path`` and return the JSON object it answered.

        A 401 forces one refresh and one retry; the second 401 is permanent.
        """
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.base + path + (("?" + urlencode(query, doseq=True)) if query else "")
        for attempt in (1, 2):
            token = self.client.access_token(self.cancel)
            resp = http.fetch(
                method,
                url,
                headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
                json=json_body,
                allow_private=True,  # the base URL is an operator setting
                max_bytes=API_MAX_BYTES,
                deadline_secs=CALL_DEADLINE_SECS,
                cancel=self.cancel,
            )
            if resp.status == 401 and attempt == 1:
                self.client.invalidate(token)
                continue
            break
        raise_for_status(resp, what, now=now)
        return parse_json(resp.body, what)


def parse_json(body: bytes, what: str) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        doc = json.loads(body)
    except ValueError:
        raise TransientError(f"{what}: Google answered with invalid JSON") from None
    if not isinstance(doc, dict):
        raise TransientError(f"{what}: Google answered with a JSON {type(doc).__name__}")
    return doc


def _error_reason(body: bytes) -> tuple[str, str]:
    """``(reason, message)`` from Google's error envelope, where there is one."""
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return "", ""
    if not isinstance(err, dict):
        return (str(err)[:64] if err else ""), ""
    reason = ""
    errors = err.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        reason = str(errors[0].get("reason") or "")
    if not reason and isinstance(err.get("details"), list):
        for d in err["details"]:
            if isinstance(d, dict) and d.get("reason"):
                reason = str(d["reason"])
                break
    return reason[:64] or str(err.get("status") or "")[:64], str(err.get("message") or "")[:200]


def raise_for_status(resp: http.Response, what: str, *, now: datetime | None = None) -> None:
    """Return for 2xx; otherwise raise the class the table in the module docstring says."""
    status = resp.status
    if 200 <= status < 300:
        return
    reason, message = _error_reason(resp.body)
    detail = f" ({reason}: {message})" if reason or message else ""
    if status == 401:
        raise PermanentError(
            f"{what}: HTTP 401 from Google{detail}: access revoked or a scope is missing; "
            "re-authorize the account"
        )
    if status == 403 and reason.lower() in RATE_LIMIT_REASONS:
        retry = http.parse_retry_after(resp.headers.get("Retry-After"), now=now)
        raise TransientError(f"{what}: rate limited by Google (403 {reason})", retry_after=retry)
    if status == 410:
        raise GoneError(f"{what}: HTTP 410 Gone{detail}")
    if status == 404:
        raise NotFoundError(f"{what}: HTTP 404 Not Found{detail}")
    try:
        http.classify_status(status, resp.headers, now=now)
    except http.TransientHTTPError as exc:
        raise TransientError(f"{what}: {exc}{detail}", retry_after=exc.retry_after) from None
    except http.PermanentHTTPError as exc:
        raise PermanentError(f"{what}: {exc}{detail}") from None
