"""The OpenAPI 3.1 document, generated from ``views.ROUTES`` and the pydantic models
that validate the requests (never written by hand)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.http import HttpRequest, JsonResponse
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .errors import ApiError
from .routing import PATH_PARAMS, Route
from .schemas import ErrorBody

REF = "#/components/schemas/{model}"
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


def _path_param(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": PATH_PARAMS[name]},
    }


def _models(routes: list[Route]) -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = [ErrorBody]
    for r in routes:
        for m in (r.body, *r.responses.values()):
            if m is not None and m not in seen:
                seen.append(m)
    return seen


def _query_params(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF, mode="validation")
    required = set(schema.get("required", []))
    out = []
    for name, prop in schema["properties"].items():
        param: dict[str, Any] = {"name": name, "in": "query", "required": name in required}
        if "description" in prop:
            param["description"] = prop.pop("description")
        prop.pop("title", None)
        if prop.get("default", 0) is None:
            prop.pop("default")
        options = [o for o in prop.get("anyOf", []) if o != {"type": "null"}]
        if len(options) == 1:  # an optional parameter is left out, never sent as null
            del prop["anyOf"]
            prop.update(options[0])
        param["schema"] = prop
        out.append(param)
    return out


def _operation(route: Route, refs: dict[Any, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{route.handler.__name__}",
        "summary": route.summary,
        "tags": list(route.tags),
        "description": f"Needs a bearer token, or a staff session with `{route.perm}`"
        + (" and a CSRF token." if route.method != "GET" else "."),
        "parameters": [_path_param(p) for p in route.params],
        "responses": {},
    }
    if route.query is not None:
        op["parameters"] += _query_params(route.query)
    if route.body is not None:
        needed = any(f.is_required() for f in route.body.model_fields.values())
        op["requestBody"] = {
            "required": needed,
            "content": {"application/json": {"schema": refs[(route.body, "validation")]}},
        }
    for status, model in route.responses.items():
        op["responses"][str(status)] = {
            "description": model.__doc__.strip().splitlines()[0] if model.__doc__ else "OK",
            "content": {"application/json": {"schema": refs[(model, "serialization")]}},
        }
    error = {"application/json": {"schema": refs[(ErrorBody, "serialization")]}}
    for status, text in ERRORS.items():
        op["responses"][str(status)] = {"description": text, "content": error}
    return op


def build(routes: list[Route]) -> dict[str, Any]:
    models = _models(routes)
    pairs = [(m, mode) for m in models for mode in ("validation", "serialization")]
    refs, defs = models_json_schema(pairs, ref_template=REF)  # type: ignore[arg-type]
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, refs)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "nexopoll API",
            "version": "1",
            "description": "Inspect and control poll jobs and the outbox. Every answer is "
            'JSON; errors are `{"error": {"code", "message", "details"}}`. Runs and dry runs '
            "tick on a worker: the result when it comes within NEXOPOLL_RUN_WAIT_SECS, "
            "otherwise 202 with a status_url to poll.",
        },
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": SECURITY,
        },
        "security": [{"bearer": []}, {"session": []}],
    }


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    from .views import ROUTES

    return build(ROUTES)


def openapi_view(request: HttpRequest) -> JsonResponse:
    """The schema is public (it holds no data); every endpoint it lists needs credentials."""
    if request.method not in ("GET", "HEAD"):
        return ApiError(
            405, f"{request.method} is not allowed here", headers={"Allow": "GET, HEAD"}
        ).response()
    return JsonResponse(document(), json_dumps_params={"indent": 1})
