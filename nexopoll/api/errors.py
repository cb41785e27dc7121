"""API errors: every failure is ``{"error": {"code": …, "message": …, "details": …}}``
with its status (``details`` only where there is more to say)."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

MAX_BODY = 64 * 1024  # every request body the API takes is a few hundred bytes

CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or CODES.get(status, "error")
        self.message = message
        self.details = details
        self.headers = headers or {}

    def response(self) -> JsonResponse:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        response = JsonResponse({"error": body}, status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        return response


def from_service(exc: Exception) -> ApiError | None:
    """The API error for a service-layer refusal (its status, code, message and details),
    or None: anything else is a bug (let it raise). The one place services' errors map."""
    from nexopoll.services import ServiceError

    if not isinstance(exc, ServiceError):
        return None
    body = exc.as_dict()
    headers = {"Retry-After": "5"} if exc.http_status == 503 else None
    return ApiError(
        exc.http_status,
        body["message"],
        code=body["code"],
        details=body.get("details"),
        headers=headers,
    )


def from_exception(exc: BaseException) -> ApiError:
    """The API error for any exception a request raised: bad input is a 4xx, the rest a 500
    that says nothing about the server's insides."""
    from django.core.exceptions import (
        BadRequest,
        PermissionDenied,
        RequestDataTooBig,
        SuspiciousOperation,
        TooManyFieldsSent,
    )
    from django.http import Http404
    from django.http.request import RawPostDataException

    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RequestDataTooBig):
        return ApiError(413, f"request body too large: the API takes at most {MAX_BODY} bytes")
    if isinstance(exc, RawPostDataException):
        return ApiError(400, "the request body could not be read as JSON")
    if isinstance(exc, TooManyFieldsSent):
        return ApiError(400, "too many query or form fields")
    if isinstance(exc, RecursionError):
        return ApiError(400, "malformed JSON: nested too deep")
    if isinstance(exc, UnicodeError) or _refused_text(exc):
        return ApiError(400, "invalid text: NUL characters and invalid unicode are refused")
    if isinstance(exc, SuspiciousOperation | BadRequest):
        return ApiError(400, "bad request")
    if isinstance(exc, PermissionDenied):
        return ApiError(403, "forbidden")
    if isinstance(exc, Http404):
        return ApiError(404, "not found")
    mapped = from_service(exc) if isinstance(exc, Exception) else None
    return mapped or ApiError(500, "internal error: the server failed to answer (see its log)")


def _refused_text(exc: BaseException) -> bool:
    """A NUL or a lone surrogate that reached the database driver (PostgreSQL refuses both)."""
    text = str(exc)
    return isinstance(exc, ValueError) and ("NUL (0x00)" in text or "surrogate" in text)
