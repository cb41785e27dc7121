"""Who may call the API, and how often.

- ``Authorization: Bearer <NEXOPOLL_API_TOKEN>``, compared in constant time. With no
  token configured every bearer request is refused (the API is never open). A token
  anywhere else (``?token=``, a cookie) is never read.
- Or a logged-in staff session (the admin's login) with nexopoll's permissions
  (:mod:`nexopoll.services.permissions`; the admin's older ``admin_ext.*`` ones count
  too): ``view_polljob`` to read jobs, ``operate_job`` to act on them,
  ``reload_config`` to apply a reload, ``view_delivery`` and ``redeliver`` for the outbox.
  Unsafe methods need Django's CSRF token (``X-CSRFToken`` header with the
  ``csrftoken`` cookie), as the admin's forms do.
- Rate limit: ``NEXOPOLL_API_RATE_PER_MIN`` requests per client per minute (a fixed
  window counted in Redis, so every web process shares it); a client is its token,
  its user, or (unauthenticated) its address.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware

from nexopoll.services import permissions, ratelimit

from .errors import ApiError

QUERY_TOKEN_NAMES = ("token", "access_token", "api_key", "apikey", "key")
RATE_PREFIX = ratelimit.RATE_PREFIX


@dataclass(frozen=True)
class Principal:
    kind: str  # token | session
    name: str
    client: str  # the rate-limit key
    user: object | None = None

    def has(self, perm: str) -> bool:
        return self.kind == "token" or permissions.allowed(self.user, perm)

    def require(self, perm: str) -> None:
        if not self.has(perm):
            raise ApiError(403, f"this account lacks the {perm!r} permission")


class _Csrf(CsrfViewMiddleware):
    def _reject(self, request: HttpRequest, reason: str) -> str:
        return reason


def csrf_problem(request: HttpRequest) -> str | None:
    """Django's CSRF check (origin, referer, token) as the admin applies it; None: passed."""
    check = _Csrf(lambda r: None)
    check.process_request(request)
    return check.process_view(request, None, (), {})


def _bearer(header: str) -> Principal:
    scheme, _, given = header.strip().partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "use Authorization: Bearer <token>", headers=_challenge())
    expected = settings.NEXOPOLL_API_TOKEN
    if not expected:
        raise ApiError(
            401,
            "bearer tokens are refused: NEXOPOLL_API_TOKEN is not set on the server",
            headers=_challenge(),
        )
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ApiError(401, "invalid token", headers=_challenge())
    digest = hashlib.sha256(expected.encode()).hexdigest()[:16]
    return Principal("token", "token", f"token:{digest}")


def _challenge() -> dict[str, str]:
    return {"WWW-Authenticate": 'Bearer realm="nexopoll"'}


def authenticate(request: HttpRequest, *, unsafe: bool) -> Principal:
    """The caller, or ApiError 401 (no or bad credentials) / 403 (not allowed, CSRF)."""
    header = request.headers.get("Authorization")
    if header is not None:
        return _bearer(header)
    if any(name in request.GET for name in QUERY_TOKEN_NAMES):
        raise ApiError(
            401,
            "tokens are only accepted in the Authorization header, never in the URL",
            headers=_challenge(),
        )
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        raise ApiError(
            401,
            "authentication required: Authorization: Bearer <NEXOPOLL_API_TOKEN>, "
            "or a staff session",
            headers=_challenge(),
        )
    if not (user.is_active and user.is_staff):
        raise ApiError(403, "a staff account is required")
    if unsafe:
        problem = csrf_problem(request)
        if problem is not None:
            raise ApiError(403, f"CSRF check failed: {problem}", code="csrf_failed")
    return Principal("session", user.get_username(), f"user:{user.pk}", user)


def client_address(request: HttpRequest) -> str:
    return f"addr:{request.META.get('REMOTE_ADDR', '-')}"


def rate_limit(client: str) -> None:
    """Count one request of ``client``; ApiError 429 past the limit. Redis down: allowed."""
    limit = settings.NEXOPOLL_API_RATE_PER_MIN
    if limit <= 0:
        return
    count = ratelimit.hit(client)
    if count is not None and count > limit:
        retry = str(60 - int(time.time()) % 60)
        raise ApiError(
            429,
            f"rate limit: {limit} requests per minute; retry in {retry} s",
            headers={"Retry-After": retry},
        )
