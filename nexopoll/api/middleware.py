"""Every answer under ``/api/`` is JSON, whatever went wrong and wherever.

Outermost middleware, for ``/api`` paths only:

- an exception raised by a view is mapped to the JSON envelope
  (:func:`.errors.from_exception`): a body over Django's
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is 413, JSON nested too deep 400, a NUL or a
  lone surrogate the database refuses 400, any other failure a JSON 500;
- a response some other layer rendered as HTML or text (Django's own 400, 403,
  404, 500 pages, a CSRF failure from another middleware) is replaced by the
  envelope with the same status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers

from .errors import CODES, ApiError, from_exception

log = logging.getLogger("nexopoll.api")


def is_api(request: HttpRequest) -> bool:
    path = request.path_info or ""
    return path == "/api" or path.startswith("/api/")


def _operation(request: HttpRequest) -> bool:
    """Served by one of the API's operations (not the OpenAPI document, not a 404)."""
    match = getattr(request, "resolver_match", None)
    return match is not None and "api" in match.namespaces


class ApiJsonMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_api(request):
            return self.get_response(request)
        try:
            response = self.get_response(request)
        except Exception as exc:  # raised past Django's own handler (a middleware's bug)
            return self.process_exception(request, exc)
        if _operation(request):  # answers about live state: never cached
            add_never_cache_headers(response)
        ctype = response.get("Content-Type", "")
        if ctype.startswith("application/json") or response.status_code < 400:
            return response
        status = response.status_code
        message = {
            400: "bad request",
            403: "forbidden",
            404: f"no such endpoint: {request.path[:200]}",
            405: f"{request.method} is not allowed here",
            413: "request body too large",
        }.get(status, "the server could not answer this request")
        headers = {k: response[k] for k in ("Allow", "Retry-After") if response.has_header(k)}
        code = CODES.get(status, "internal_error" if status >= 500 else "error")
        replaced = ApiError(status, message, code=code, headers=headers).response()
        if _operation(request):
            add_never_cache_headers(replaced)
        return replaced

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not is_api(request):
            return None
        mapped = from_exception(exc)
        if mapped.status >= 500:
            log.error("api.error path=%s", request.path[:200], exc_info=exc)
        return mapped.response()
