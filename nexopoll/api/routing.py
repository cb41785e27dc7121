"""The route table's machinery: one Django view per path, validation by the route's models.

Query strings are validated by the route's ``query`` model (a bad one is 400), JSON
bodies by its ``body`` model (malformed or too deep JSON 400, a body over ``MAX_BODY``
413, a body that does not fit 422). Text with a NUL or a lone surrogate (which
PostgreSQL refuses) is a 400 wherever it comes from: path, query or body.
Handlers get the principal and validated models, and return ``(status, model)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from . import auth
from .errors import MAX_BODY, ApiError, from_service
from .schemas import JOB_ID_PATTERN, UUID_PATTERN

PATH_PARAMS = {"job_id": JOB_ID_PATTERN, "delivery_id": UUID_PATTERN, "task_id": UUID_PATTERN}
REFUSED_TEXT = re.compile("[\x00\ud800-\udfff]")
#: Django decodes a query string's invalid UTF-8 as U+FFFD: refused like the rest
REFUSED_QUERY = re.compile("[\x00\ud800-\udfff\ufffd]")


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # OpenAPI style: /api/pollers/{job_id}
    handler: Callable[..., tuple[int, BaseModel]]
    summary: str
    perm: str
    responses: dict[int, type[BaseModel]]
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    tags: tuple[str, ...] = field(default=())

    @property
    def params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)

    @property
    def django_path(self) -> str:
        return re.sub(r"{(\w+)}", r"<str:\1>", self.path.lstrip("/"))


def _issues(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
        for e in exc.errors(include_url=False, include_input=False)
    ]


def parse_query(request: HttpRequest, model: type[BaseModel] | None) -> BaseModel | None:
    data: dict[str, str] = {}
    for key in request.GET:
        values = request.GET.getlist(key)
        if len(values) > 1:
            raise ApiError(400, f"query parameter {key[:100]!r} given more than once")
        if REFUSED_QUERY.search(key) or REFUSED_QUERY.search(values[0]):
            raise ApiError(400, f"query parameter {key[:100]!r}: NUL or invalid unicode")
        data[key] = values[0]
    if model is None:
        if data:
            raise ApiError(400, f"unexpected query parameter(s): {', '.join(sorted(data))}")
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, "invalid query parameters", details=_issues(exc)) from None


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


def parse_body(
    request: HttpRequest, model: type[BaseModel] | None, raw: bytes
) -> BaseModel | None:
    if model is None:
        return None
    data: Any = {}
    if raw.strip():
        ctype = request.content_type or ""
        if ctype != "application/json":
            raise ApiError(400, "the request body must be JSON (Content-Type: application/json)")
        try:
            data = json.loads(raw)
        except RecursionError:
            raise ApiError(400, "malformed JSON: nested too deep") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"malformed JSON: {str(exc)[:200]}") from None
        _check_text(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(422, _summary(exc), details=_issues(exc)) from None


def _summary(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return f"invalid request body: {where}: {first['msg']}"


def check_params(kwargs: dict[str, str]) -> None:
    for name, value in kwargs.items():
        if not re.fullmatch(PATH_PARAMS[name].strip("^$"), value):
            shown = REFUSED_TEXT.sub("\ufffd", value[:120])
            raise ApiError(400, f"invalid {name.replace('_', ' ')}: {shown!r}")


def endpoint(routes: list[Route]) -> Callable[..., JsonResponse]:
    """The Django view serving every method of one path."""
    by_method = {r.method: r for r in routes}

    @csrf_exempt  # CSRF is enforced for sessions in auth.authenticate (bearer needs none)
    @never_cache
    def view(request: HttpRequest, **kwargs: str) -> JsonResponse:
        route = by_method.get(request.method or "")
        try:
            if route is None:
                raise ApiError(
                    405, f"{request.method} is not allowed here",
                    headers={"Allow": ", ".join(sorted(by_method))},
                )  # fmt: skip
            # read (and size-check) the body first: the CSRF check may parse a form body,
            # which would consume the stream before the body could be read as JSON
            raw = read_body(request)
            try:
                principal = auth.authenticate(request, unsafe=route.method != "GET")
            except ApiError as exc:
                if exc.status == 401:  # failed logins count against the address
                    auth.rate_limit(auth.client_address(request))
                raise
            auth.rate_limit(principal.client)
            principal.require(route.perm)
            check_params(kwargs)
            query = parse_query(request, route.query)
            body = parse_body(request, route.body, raw)
            args: dict[str, Any] = dict(kwargs)
            if query is not None:
                args["query"] = query
            if body is not None:
                args["body"] = body
            try:
                status, result = route.handler(principal, **args)
            except ApiError:
                raise
            except Exception as exc:
                mapped = from_service(exc)
                if mapped is None:
                    raise
                raise mapped from None
        except ApiError as exc:
            return exc.response()
        response = JsonResponse(result.model_dump(mode="json"), status=status)
        if status == 202 and getattr(result, "status_url", None):
            response["Location"] = result.status_url  # type: ignore[attr-defined]
        return response

    return view
