"""API errors: every failure is ``{"error": {"code": …, "message": …}}`` with its status."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    422: "invalid",
    429: "rate_limited",
}


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, *, code: str | None = None, details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
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


# service-layer exceptions by class name (some live in modules other engineers own)
_BY_NAME = {
    "UnknownJob": 404,
    "UnknownDelivery": 404,
    "JobPaused": 409,
    "RedeliverRefused": 409,
    "BadRequest": 400,
    "ConfigFileError": 422,
}


def from_service(exc: Exception) -> ApiError | None:
    """The API error for a service-layer exception, or None (a bug: let it raise)."""
    name = type(exc).__name__
    if name == "ReloadRefused":
        issues = [str(i) for i in getattr(exc, "issues", [])]
        return ApiError(422, "reload refused (strict): the file has invalid jobs", details=issues)
    status = _BY_NAME.get(name)
    if status is None:
        return None
    return ApiError(status, str(exc))
