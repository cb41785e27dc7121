"""The django-ninja application: the operations of :mod:`.views` under ``/api/``, every
error turned into the envelope here (one handler per kind), and the OpenAPI 3.1
document ninja generates from the same models, completed with the envelope's error
answers and the two security schemes."""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from pydantic import ValidationError

from nexopoll.services import ServiceError

from .errors import ApiError, from_exception, from_service
from .gate import REFUSED_TEXT
from .views import deliveries, pollers

log = logging.getLogger("nexopoll.api")

ERRORS = {
    400: "Bad request: malformed query, path id or JSON",
    401: "No, or a wrong, bearer token (tokens in the URL are refused)",
    403: "Not allowed: missing permission, not staff, or failed CSRF check (sessions)",
    404: "No such job or delivery",
    409: "Conflict with the current state (a paused job, a row being sent)",
    413: "Request body too large",
    422: "The body does not fit the schema, or pollers.yaml was refused",
    429: "Rate limit reached (see Retry-After)",
    500: "The server failed (never for bad input)",
    502: "The run failed on the worker (run_failed)",
    503: "The run could not be queued (the broker is unreachable)",
}
SECURITY = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "NEXOPOLL_API_TOKEN"},
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "sessionid",
        "description": "a staff session (the admin's login), with CSRF for POST",
    },
}
DESCRIPTION = (
    'Inspect and control poll jobs and the outbox. Every answer is JSON; errors are `{"error":'
    ' {"code", "message", "details"}}`. Runs and dry runs tick on a worker: the result when'
    " it comes within NEXOPOLL_RUN_WAIT_SECS, otherwise 202 with a status_url to poll."
)


class _JsonParser(Parser):
    """A blank body is ``{}`` (the gate has already refused anything but JSON)."""

    def parse_body(self, request: HttpRequest) -> Any:
        return json.loads(request.body) if request.body.strip() else {}


class Api(NinjaAPI):
    def get_openapi_operation_id(self, operation: Any) -> str:
        return str(operation.view_func.__name__)


api = Api(
    title="nexopoll API",
    version="1",
    description=DESCRIPTION,
    openapi_url=None,
    docs_url=None,
    parser=_JsonParser(),
    urls_namespace="api",
)
api.add_router("", pollers)
api.add_router("", deliveries)


def _envelope(request: HttpRequest, error: ApiError) -> HttpResponse:
    if error.status >= 500:
        log.error("api.error path=%s: %s", request.path[:200], error.message)
    return error.response()


def _issues(errors: list[dict[str, Any]], skip: int) -> list[dict[str, Any]]:
    return [{"loc": ".".join(str(p) for p in e["loc"][skip:]), "message": e["msg"]} for e in errors]


@api.exception_handler(NinjaValidationError)
def _invalid(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    """Path and query 400, body 422, with ``details`` as before ninja (``loc``, ``message``)."""
    errors = list(exc.errors)
    for where in ("path", "query"):
        found = [e for e in errors if e["loc"] and e["loc"][0] == where]
        if found and where == "path":
            name = str(found[0]["loc"][-1])
            value = request.resolver_match.kwargs.get(name, "") if request.resolver_match else ""
            shown = REFUSED_TEXT.sub("\ufffd", str(value)[:120])
            return _envelope(request, ApiError(400, f"invalid {name.replace('_', ' ')}: {shown!r}"))
        if found:
            details = _issues(found, 1)
            return _envelope(request, ApiError(400, "invalid query parameters", details=details))
    details = _issues(errors, 2)  # ("body", <the parameter>, <field>…)
    where = details[0]["loc"] if details else ""
    message = f"invalid request body: {where or 'body'}: {errors[0]['msg'] if errors else ''}"
    return _envelope(request, ApiError(422, message, details=details))


@api.exception_handler(ValidationError)
def _invalid_model(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """A body validated in an operation (an empty body where one is required)."""
    errors = exc.errors(include_url=False, include_input=False)
    details = _issues(errors, 0)
    where = details[0]["loc"] or "body"
    message = f"invalid request body: {where}: {errors[0]['msg']}"
    return _envelope(request, ApiError(422, message, details=details))


@api.exception_handler(ServiceError)
def _refused(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    """The one place a service's refusal becomes an answer: its status, code, message and
    details (``ServiceError.as_dict``), as every other front-end reads them."""
    return _envelope(request, from_service(exc))


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return _envelope(request, ApiError(exc.status_code, str(exc)))


@api.exception_handler(Exception)
def _any(request: HttpRequest, exc: Exception) -> HttpResponse:
    """ApiError, a service's refusal (``ServiceError``: its status and code), bad input a
    4xx, anything else a 500 that says nothing about the server's insides."""
    error = from_exception(exc)
    if error.status >= 500:
        log.error("api.error path=%s", request.path[:200], exc_info=exc)
    return error.response()


def _flatten(schema: dict[str, Any]) -> None:
    """An optional query parameter is left out, never sent as null: its schema is the
    non-null option alone (as the API documented it before ninja)."""
    schema.pop("title", None)
    if schema.get("default", 0) is None:
        schema.pop("default")
    options = [o for o in schema.get("anyOf", []) if o != {"type": "null"}]
    if len(options) == 1:
        del schema["anyOf"]
        schema.update(options[0])


def _complete(doc: dict[str, Any]) -> dict[str, Any]:
    """ninja's document with the envelope's error answers on every operation, and the
    security schemes (every operation needs one of them)."""
    from .schemas import ErrorBody

    schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(schema.pop("$defs", {}))
    schemas["ErrorBody"] = schema
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for item in doc["paths"].values():
        for op in item.values():
            op.pop("security", None)
            for param in op.get("parameters", []):
                if param["in"] == "query":
                    _flatten(param["schema"])
            body = op.get("requestBody")
            if body is not None:  # required when its model has required fields
                media = body["content"]["application/json"]
                media["schema"] = media["schema"].get("allOf", [media["schema"]])[0]
                ref = media["schema"]["$ref"].rsplit("/", 1)[1]
                body["required"] = bool(schemas.get(ref, {}).get("required"))
            for status, text in ERRORS.items():
                op["responses"].setdefault(str(status), {"description": text, "content": error})
    used = json.dumps(doc["paths"]) + json.dumps(schemas)
    for name in [n for n in schemas if f'/schemas/{n}"' not in used]:
        del schemas[name]  # the query models: ninja lists them, nothing refers to them
    doc["components"]["securitySchemes"] = SECURITY
    doc["security"] = [{"bearer": []}, {"session": []}]
    doc["openapi"] = "3.1.0"
    return doc


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    return _complete(json.loads(json.dumps(api.get_openapi_schema(path_prefix="/api"))))


def openapi_view(request: HttpRequest) -> JsonResponse:
    """The schema is public (it holds no data); every endpoint it lists needs credentials."""
    if request.method not in ("GET", "HEAD"):
        return ApiError(
            405, f"{request.method} is not allowed here", headers={"Allow": "GET, HEAD"}
        ).response()
    return JsonResponse(document(), json_dumps_params={"indent": 1})
