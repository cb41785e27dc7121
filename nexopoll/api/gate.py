"""What every operation checks before django-ninja validates it (the ``auth`` step of
each operation, so it runs in this order and before any parameter is parsed):

1. the body's size (413 past ``MAX_BODY``, read before the CSRF check could consume it);
2. who calls (401/403, :mod:`.auth`), then the rate limit (429), then the permission;
3. text ninja would pass on to the database: a NUL or a lone surrogate (400), in the
   query string or the JSON body; a query parameter given twice or unknown (400);
   a body that is not JSON (400).

ninja then validates path, query and body against the models in :mod:`.schemas`;
:mod:`.app` turns its validation errors into the envelope (path and query 400, body 422).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from pydantic import BaseModel

from . import auth
from .errors import MAX_BODY, ApiError

REFUSED_TEXT = re.compile("[\x00\ud800-\udfff]")
#: Django decodes a query string's invalid UTF-8 as U+FFFD: refused like the rest
REFUSED_QUERY = re.compile("[\x00\ud800-\udfff\ufffd]")


def _too_large() -> ApiError:
    return ApiError(413, f"request body too large: the API takes at most {MAX_BODY} bytes")


def read_body(request: HttpRequest) -> bytes:
    """The body, refused (413) past ``MAX_BODY`` before it is read where the length is known."""
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > MAX_BODY:
            raise _too_large()
    except ValueError:
        raise ApiError(400, "invalid Content-Length") from None
    try:
        raw = request.body
    except RequestDataTooBig:  # over Django's DATA_UPLOAD_MAX_MEMORY_SIZE
        raise _too_large() from None
    if len(raw) > MAX_BODY:
        raise _too_large()
    return raw


def check_query(request: HttpRequest, model: type[BaseModel] | None) -> None:
    names = set(model.model_fields) if model is not None else set()
    for key in request.GET:
        values = request.GET.getlist(key)
        if len(values) > 1:
            raise ApiError(400, f"query parameter {key[:100]!r} given more than once")
        if REFUSED_QUERY.search(key) or REFUSED_QUERY.search(values[0]):
            raise ApiError(400, f"query parameter {key[:100]!r}: NUL or invalid unicode")
    unknown = sorted(set(request.GET) - names)
    if unknown and model is None:
        raise ApiError(400, f"unexpected query parameter(s): {', '.join(unknown)}")
    if unknown:
        details = [{"loc": k, "message": "Extra inputs are not permitted"} for k in unknown]
        raise ApiError(400, "invalid query parameters", details=details)


def _check_text(data: Any) -> None:
    """Every key and string of decoded JSON, without recursion (the depth is the sender's)."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and REFUSED_TEXT.search(value):
            raise ApiError(400, "malformed JSON: a string holds a NUL or a lone surrogate")


def check_body(request: HttpRequest, raw: bytes, has_body: bool) -> None:
    """A JSON body, when the operation takes one; an empty body stands for ``{}``."""
    if not has_body or not raw.strip():
        return
    if (request.content_type or "") != "application/json":
        raise ApiError(400, "the request body must be JSON (Content-Type: application/json)")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ApiError(400, "malformed JSON: nested too deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"malformed JSON: {str(exc)[:200]}") from None
    _check_text(data)


class Gate:
    """An operation's ``auth``: returns the :class:`.auth.Principal` (``request.auth``)."""

    def __init__(
        self, perm: str, *, query: type[BaseModel] | None = None, body: bool = False
    ) -> None:
        self.perm, self.query, self.body = perm, query, body

    def __call__(self, request: HttpRequest) -> auth.Principal:
        raw = read_body(request)
        try:
            principal = auth.authenticate(request, unsafe=request.method != "GET")
        except ApiError as exc:
            if exc.status == 401:  # failed logins count against the address
                auth.rate_limit(auth.client_address(request))
            raise
        auth.rate_limit(principal.client)
        principal.require(self.perm)
        check_query(request, self.query)
        check_body(request, raw, self.body)
        return principal
