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


def from_service(exc: Exception) -> ApiError | None:
    """The API error for a service-layer exception, or None (a bug: let it raise)."""
    from nexopoll import services
    from nexopoll.core.config import ConfigFileError

    if isinstance(exc, services.ReloadRefused):
        issues = [str(i) for i in exc.issues]
        return ApiError(422, "reload refused (strict): the file has invalid jobs", details=issues)
    statuses: list[tuple[type[Exception], int]] = [
        (services.UnknownJob, 404),
        (services.UnknownDelivery, 404),
        (services.JobPaused, 409),
        (services.RedeliverRefused, 409),
        (services.BadRequest, 400),
        (ConfigFileError, 422),
    ]
    for cls, status in statuses:
        if isinstance(exc, cls):
            return ApiError(status, str(exc))
    return None
