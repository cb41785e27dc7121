"""The one HTTP layer for URLs that come from config or from fetched documents.

:func:`fetch` is the only entry point pollers and channels use. It adds, on top
of a pooled ``requests.Session`` (``trust_env=False``, no cookies):

* the connect-time SSRF guard of :mod:`nexopoll.net.transport` on every hop;
* redirects followed by hand (at most ``max_redirects``), each target checked
  again, only http(s), credentials dropped when the origin changes (as urllib3,
  the parser that connects, reads it); a target spelled so that parsers could
  disagree on its host is refused (:mod:`nexopoll.net.urls`);
* a byte cap on both the wire bytes and the decoded bytes (gzip bombs stop
  after about ``max_bytes`` of output), and a total deadline over connect,
  headers and body, checked before every socket read, as is the cancel token.

Error classes (all :class:`~nexopoll.core.errors.PollerError`):

=============================  ==========  ===================================
class                          family      raised for
=============================  ==========  ===================================
FetchError                     transient   connect/read failures, corrupt body,
                                           malformed response headers
                                           (conflicting Content-Length)
DeadlineExceededError          transient   the total deadline passed
ResponseTooLargeError          transient   Content-Length, wire or decoded
                                           bytes above ``max_bytes``
BlockedURLError                permanent   a hop resolved to a forbidden address
InvalidURLError                permanent   non-http(s) scheme, no host, a bad
                                           header, or a spelling two URL
                                           parsers read differently (see
                                           :mod:`nexopoll.net.urls`)
TooManyRedirectsError          permanent   more than ``max_redirects`` hops
RedirectRefusedError           permanent   a non-GET/HEAD request redirected
                                           to another origin (any 3xx)
TransientHTTPError             transient   408, 429, 5xx (``classify_status``)
PermanentHTTPError             permanent   401, 403, other 4xx, stray 3xx
=============================  ==========  ===================================

A too-large body is transient on purpose: one bloated response must not pause a
job, while a source that is always too large trips the breaker and alerts.
Messages carry a redacted URL (no userinfo, query or fragment) and never a
header value.
"""

from __future__ import annotations

import contextlib
import http
import http.client
import json as jsonlib
import urllib.parse
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any

import requests
import urllib3.exceptions
from requests.structures import CaseInsensitiveDict

from nexopoll.core.contract import CancelToken
from nexopoll.core.ssrf import BlockedAddress

from .decode import BoundedDecoder
from .results import (
    BlockedURLError,
    DeadlineExceededError,
    FetchError,
    RedirectRefusedError,
    Response,
    ResponseTooLargeError,
    TooManyRedirectsError,
    _Budget,
)
from .status import PermanentHTTPError, TransientHTTPError, classify_status, parse_retry_after
from .transport import Resolver, current_budget, host_gate, session_for
from .urls import InvalidURLError, checked_url, join_redirect, origin, redact

__all__ = [
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
    "classify_status",
    "fetch",
    "parse_retry_after",
]

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
DEFAULT_DEADLINE_SECS = 20.0
ALWAYS_SECRET = frozenset({"authorization", "proxy-authorization", "cookie"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 65536


def fetch(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    secret_headers: Collection[str] = frozenset(),
    body: bytes | None = None,
    json: Any = None,
    allow_private: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    deadline_secs: float = DEFAULT_DEADLINE_SECS,
    connect_timeout: float = 5.0,
    max_redirects: int = 3,
    cancel: CancelToken | None = None,
    resolver: Resolver | None = None,
    allow_addresses: Collection[tuple[str, int]] = (),
) -> Response:
    """Request ``url`` through the SSRF guard and return the whole, capped response.

    Args:
        method: HTTP method; 303 (and 301/302 after a POST) switch to GET. A
            method other than GET/HEAD, or any request with a body, follows a
            redirect only within its origin (307/308 re-send the body); to
            another origin it raises RedirectRefusedError, whatever the status.
        url: an http(s) URL.
        headers: request headers. ``Accept-Encoding`` is owned by this layer.
        secret_headers: names (any case) dropped when a redirect changes the
            origin (scheme, host or port); Authorization, Proxy-Authorization
            and Cookie are always dropped then. Once dropped, never re-added.
        body: raw request body. ``json``: a value sent as compact JSON instead
            (with ``Content-Type: application/json`` unless given); None = no body.
        allow_private: the job's ``allow_private_networks``; metadata addresses
            stay refused.
        max_bytes: cap on the wire bytes and, separately, the decoded bytes.
        deadline_secs: total time for all hops, headers and bodies.
        connect_timeout: cap on each TCP connect (also bounded by the deadline).
        max_redirects: redirects followed before TooManyRedirectsError; 0 means
            "never follow": a 3xx is returned as is (its target is not contacted).
        cancel: checked before every read; its own deadline also bounds the call.
        resolver: ``getaddrinfo``-compatible resolver (tests); default the system's.
        allow_addresses: exact ``(ip, port)`` pairs exempt from the guard (tests).

    Returns:
        The final response, any status: pass it to :func:`classify_status`.

    Raises:
        FetchError, DeadlineExceededError, ResponseTooLargeError: transient.
        BlockedURLError, InvalidURLError, TooManyRedirectsError,
        RedirectRefusedError: permanent.
        nexopoll.core.contract.Cancelled: ``cancel`` was set.
    """
    if body is not None and json is not None:
        raise ValueError("pass body or json, not both")
    method = method.upper()
    data = body
    send_headers: CaseInsensitiveDict[str] = CaseInsensitiveDict(headers or {})
    send_headers["Accept-Encoding"] = "gzip, deflate"
    if json is not None:
        data = jsonlib.dumps(json, separators=(",", ":"), ensure_ascii=False).encode()
        send_headers.setdefault("Content-Type", "application/json")
    secret = {name.lower() for name in secret_headers} | ALWAYS_SECRET
    target = checked_url(url, what="URL")
    budget = _Budget(deadline_secs, cancel, redact(target))
    session, is_private_session = session_for(
        allow_private=allow_private, resolver=resolver, allow_addresses=allow_addresses
    )
    token = current_budget.set(budget)
    try:
        for hop in range(max_redirects + 1):
            budget.label = redact(target)
            with (
                _host_turn(target, budget),
                _send(session, method, target, send_headers, data, budget, connect_timeout) as r,
            ):
                location = r.headers.get("Location") if r.status_code in _REDIRECTS else None
                if not location or max_redirects == 0:
                    return _read(r, target, max_bytes, budget)
                _drain(r, budget)
            if hop == max_redirects:
                raise TooManyRedirectsError(f"{budget.label}: more than {max_redirects} redirects")
            following = join_redirect(target, location, what=f"{budget.label}: redirect target")
            if origin(following) != origin(target) and (
                method not in ("GET", "HEAD") or data is not None
            ):
                what = f"{method} request" if data is None else f"{method} request with a body"
                raise RedirectRefusedError(
                    f"{budget.label}: {r.status_code} redirect of a {what} to another origin"
                    f" ({_origin_text(following)}) refused: only GET and HEAD requests without"
                    " a body follow a redirect to another origin"
                )
            if origin(following) != origin(target):
                for name in list(send_headers):
                    if name.lower() in secret:
                        del send_headers[name]
            if (r.status_code == 303 and method != "HEAD") or (
                r.status_code in (301, 302) and method == "POST"
            ):
                method, data = "GET", None
                for name in ("Content-Type", "Content-Length", "Transfer-Encoding"):
                    send_headers.pop(name, None)
            target = following
        raise AssertionError("unreachable")
    finally:
        current_budget.reset(token)
        if is_private_session:
            session.close()


def _host_turn(url: str, budget: _Budget) -> contextlib.AbstractContextManager[Any]:
    """The request's turn under the per-host caps the caller set (``host_gate``), if any."""
    gate = host_gate.get()
    if gate is None:
        return contextlib.nullcontext()
    return gate(urllib.parse.urlsplit(url).hostname or "", budget)


def _send(
    session: requests.Session,
    method: str,
    url: str,
    headers: CaseInsensitiveDict[str],
    data: bytes | None,
    budget: _Budget,
    connect_timeout: float,
) -> requests.Response:
    left = budget.check()
    try:
        prepared = session.prepare_request(
            requests.Request(method, url, headers=headers, data=data)
        )
    except requests.exceptions.InvalidHeader:
        # requests' message quotes the header value, which may be a secret.
        raise InvalidURLError(f"{budget.label}: invalid request header") from None
    except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema) as exc:
        raise InvalidURLError(f"{budget.label}: invalid URL") from exc
    try:
        # The adapter, not Session.send: that one parses a redirect's Location with
        # urllib.parse (and may crash on it) even when redirects are not followed.
        return session.get_adapter(prepared.url or url).send(
            prepared,
            stream=True,
            timeout=(min(connect_timeout, left), left),
            verify=session.verify,
            cert=session.cert,
            proxies={},
        )
    except BlockedAddress as exc:
        raise BlockedURLError(budget.label, exc) from exc
    except requests.exceptions.InvalidHeader as exc:
        # The request was prepared above, so this is the response's fault (urllib3:
        # conflicting Content-Length values): the server's, and it may heal.
        reason = str(exc.args[0]) if exc.args else "invalid header"
        raise FetchError(f"{budget.label}: malformed response headers ({reason[:200]})") from exc
    except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema) as exc:
        raise InvalidURLError(f"{budget.label}: invalid URL") from exc
    except requests.exceptions.RequestException as exc:
        raise _network_error(exc, budget) from exc


def _drain(resp: requests.Response, budget: _Budget, limit: int = _CHUNK) -> None:
    """Read a redirect's (small) body, so its keep-alive connection goes back to the pool.

    A body larger than ``limit`` is left unread: closing the response then drops
    the connection instead.
    """
    try:
        while limit > 0:
            budget.check()
            chunk = resp.raw.read1(min(_CHUNK, limit), decode_content=False)
            if not chunk:
                return
            limit -= len(chunk)
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError):
        return


def _read(resp: requests.Response, url: str, max_bytes: int, budget: _Budget) -> Response:
    declared = resp.headers.get("Content-Length", "").strip()
    if declared.isdigit() and int(declared) > max_bytes:
        raise ResponseTooLargeError(
            f"{budget.label}: body too large (Content-Length {declared} > {max_bytes} bytes)"
        )
    try:
        decoder = BoundedDecoder(resp.headers.get("Content-Encoding", ""), max_bytes)
        out = bytearray()
        wire = 0
        while True:
            budget.check()
            chunk = resp.raw.read1(_CHUNK, decode_content=False)
            if not chunk:
                break
            wire += len(chunk)
            if wire > max_bytes:
                raise ResponseTooLargeError(
                    f"{budget.label}: body too large (more than {max_bytes} bytes on the wire)"
                )
            for piece in decoder.feed(chunk):
                out += piece
        for piece in decoder.flush():
            out += piece
    except BoundedDecoder.TooLarge:
        raise ResponseTooLargeError(
            f"{budget.label}: body too large (more than {max_bytes} bytes once decoded)"
        ) from None
    except BoundedDecoder.Invalid as exc:
        raise FetchError(f"{budget.label}: {exc}") from exc
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        raise _network_error(exc, budget) from exc
    headers = MappingProxyType(CaseInsensitiveDict(resp.headers))
    return Response(status=resp.status_code, headers=headers, body=bytes(out), url=url)


def _origin_text(url: str) -> str:
    scheme, host, port = origin(url)
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _network_error(exc: BaseException, budget: _Budget) -> FetchError:
    if budget.remaining() <= 0:
        return DeadlineExceededError(
            f"{budget.label}: deadline of {budget.deadline_secs:g} s exceeded"
        )
    timeouts = (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)
    what = "timed out" if isinstance(exc, timeouts) else "request failed"
    return FetchError(f"{budget.label}: {what} ({_root_reason(exc)})")


def _root_reason(exc: BaseException) -> str:
    """The innermost OS-level reason (no URL in it), else the exception's type."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        cur = todo.pop(0)
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.strerror:
            return cur.strerror
        todo += [cur.__cause__, cur.__context__, getattr(cur, "reason", None)]
    return type(exc).__name__
