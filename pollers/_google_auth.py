"""Google OAuth for the ``gmail`` and ``google_calendar`` kinds: the ``google``
binding, its credential files, and one auth client per account (see
:mod:`pollers._google` for the whole story; it re-exports these names).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nexopoll.core.contract import CancelToken
from nexopoll.core.errors import CredentialsMissingError, PermanentError, TransientError
from nexopoll.core.extras import MissingExtra, require
from nexopoll.net import http

if TYPE_CHECKING:
    from google.oauth2.credentials import Credentials

GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"
TOKEN_MAX_BYTES = 256 * 1024
MAX_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class GoogleBinding:
    token_path: str
    client_id_path: str | None = None
    client_secret_path: str | None = None

    @classmethod
    def from_credentials(cls, creds: Mapping[str, Any]) -> GoogleBinding:
        """Read the agent's ``google`` binding (already ``${VAR}``-expanded)."""
        token_path = creds.get("token_path")
        if not isinstance(token_path, str) or not token_path:
            raise CredentialsMissingError("the agent's google binding has no token_path")
        values = {}
        for key in ("client_id_path", "client_secret_path"):
            value = creds.get(key)
            if value is not None and not isinstance(value, str):
                raise CredentialsMissingError(f"google binding: {key} must be a path")
            values[key] = value or None
        return cls(token_path=token_path, **values)


def _google_auth(module: str) -> Any:
    """A module of google-auth (the ``google`` extra), imported when a job first needs a
    token: without it the kinds still load, and their ticks fail saying what to install."""
    try:
        return require(module, "google", "the gmail and google_calendar pollers", "google-auth")
    except MissingExtra as exc:
        raise PermanentError(str(exc)) from None


class _NetResponse:  # google.auth.transport.Response's interface
    def __init__(self, resp: http.Response) -> None:
        self._resp = resp

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._resp.headers

    @property
    def data(self) -> bytes:
        return self._resp.body


class NetRequest:  # google.auth.transport.Request's interface
    """google-auth's transport, through our HTTP layer.

    408, 429 and 5xx raise :class:`TransientHTTPError` at once instead of letting
    google-auth sleep and retry inside the tick: the runtime's backoff retries.
    """

    def __init__(self, cancel: CancelToken | None = None) -> None:
        self.cancel = cancel

    def __call__(self, url, method="GET", body=None, headers=None, timeout=None, **kwargs):
        resp = http.fetch(
            method,
            url,
            headers=headers,
            body=body,
            allow_private=True,  # the token URI comes from the operator's token file
            max_bytes=TOKEN_MAX_BYTES,
            deadline_secs=min(float(timeout or 20.0), 20.0),
            max_redirects=0,  # a token request (with the client secret) is never redirected
            cancel=self.cancel,
        )
        if resp.status in (408, 429) or resp.status >= 500:
            retry = http.parse_retry_after(resp.headers.get("Retry-After"))
            raise http.TransientHTTPError(resp.status, retry)
        return _NetResponse(resp)


def _read_small(path: str, what: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise CredentialsMissingError(f"google {what} {path!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CredentialsMissingError(f"google {what} {path!r} is too large")
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise CredentialsMissingError(f"google {what} {path!r} is not UTF-8 text") from None


def _client_info(binding: GoogleBinding) -> dict[str, str]:
    """client_id / client_secret / token_uri from the client file(s), where given."""
    info: dict[str, str] = {}
    if binding.client_id_path:
        text = _read_small(binding.client_id_path, "client_id_path")
        if text.startswith("{"):
            try:
                doc = json.loads(text)
            except ValueError:
                raise CredentialsMissingError(
                    f"google client_id_path {binding.client_id_path!r} is not valid JSON"
                ) from None
            section = doc.get("installed") or doc.get("web") or doc
            if isinstance(section, dict):
                info.update({k: v for k, v in section.items() if isinstance(v, str)})
        elif text:
            info["client_id"] = text
    if binding.client_secret_path:
        info["client_secret"] = _read_small(binding.client_secret_path, "client_secret_path")
    return info


def _parse_expiry(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.replace(tzinfo=None)  # google-auth compares naive UTC


def load_credentials(binding: GoogleBinding) -> Credentials:
    """Build google-auth credentials from the binding's files.

    Raises:
        CredentialsMissingError: a file is missing, unreadable or lacks a field.
    """
    text = _read_small(binding.token_path, "token_path")
    try:
        token = json.loads(text)
    except ValueError:
        raise CredentialsMissingError(
            f"google token file {binding.token_path!r} is not valid JSON"
        ) from None
    if not isinstance(token, dict):
        raise CredentialsMissingError(f"google token file {binding.token_path!r} is not an object")
    client = _client_info(binding)
    merged = {**client, **{k: v for k, v in token.items() if v not in (None, "")}}
    missing = [k for k in ("refresh_token", "client_id", "client_secret") if not merged.get(k)]
    if missing:
        raise CredentialsMissingError(
            f"google credentials lack {', '.join(missing)} (token file {binding.token_path!r}"
            + (f", client file {binding.client_id_path!r})" if binding.client_id_path else ")")
        )
    credentials = _google_auth("google.oauth2.credentials").Credentials
    return credentials(
        token=merged.get("token") or merged.get("access_token"),
        refresh_token=merged["refresh_token"],
        token_uri=merged.get("token_uri") or GOOGLE_TOKEN_URI,
        client_id=merged["client_id"],
        client_secret=merged["client_secret"],
        expiry=_parse_expiry(merged.get("expiry")),
    )


def _signature(*paths: str | None) -> tuple[Any, ...]:
    out: list[Any] = []
    for path in paths:
        if not path:
            continue
        try:
            st = os.stat(path)
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class AuthClient:
    """One Google account's credentials, shared by every job that uses its token file."""

    def __init__(self, binding: GoogleBinding) -> None:
        self.binding = binding
        self.refreshes = 0
        self._lock = threading.Lock()
        self._creds: Credentials | None = None
        self._loaded_sig: tuple[Any, ...] | None = None
        self._dead: str | None = None

    def _files(self) -> tuple[str | None, ...]:
        b = self.binding
        return (b.token_path, b.client_id_path, b.client_secret_path)

    def access_token(self, cancel: CancelToken | None = None) -> str:
        """A valid access token, refreshed (once, under the lock) when expired."""
        with self._lock:
            sig = _signature(*self._files())
            if self._creds is None or sig != self._loaded_sig:
                self._dead = None
                self._loaded_sig = sig
                self._creds = None
                self._creds = load_credentials(self.binding)
            if self._dead:
                raise PermanentError(self._dead)
            if not self._creds.valid:
                self._refresh(self._creds, cancel)
            return str(self._creds.token)

    def invalidate(self, token: str) -> None:
        """Forget ``token`` (the API answered 401 to it); the next call refreshes."""
        with self._lock:
            if self._creds is not None and self._creds.token == token:
                self._creds.token = None

    def _refresh(self, creds: Credentials, cancel: CancelToken | None) -> None:
        self.refreshes += 1
        errors = _google_auth("google.auth.exceptions")
        try:
            creds.refresh(NetRequest(cancel))
        except errors.RefreshError as exc:
            data = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], dict) else {}
            code = str(data.get("error") or "")[:64]
            desc = str(data.get("error_description") or "")[:200]
            if getattr(exc, "retryable", False):
                raise TransientError(f"google token refresh failed, will retry ({code})") from None
            detail = f"{code}: {desc}" if code else str(exc.args[0] if exc.args else exc)[:200]
            self._dead = (
                f"google token refresh rejected ({detail}); the refresh token in "
                f"{self.binding.token_path!r} is expired or revoked: re-authorize the account"
            )
            raise PermanentError(self._dead) from None
        except errors.GoogleAuthError as exc:
            raise TransientError(f"google token refresh failed ({type(exc).__name__})") from None


_clients: dict[str, AuthClient] = {}
_clients_lock = threading.Lock()


def auth_client(binding: GoogleBinding) -> AuthClient:
    """The process-wide client for ``binding``'s account (keyed by the token file)."""
    key = os.path.realpath(binding.token_path)
    with _clients_lock:
        client = _clients.get(key)
        if client is None or client.binding != binding:
            client = _clients[key] = AuthClient(binding)
        return client


def _after_fork() -> None:
    global _clients_lock
    _clients.clear()
    _clients_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
