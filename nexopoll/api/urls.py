"""``/api/…``: the django-ninja operations (:mod:`.app`), the OpenAPI document, and a
JSON 404 for any other ``/api/`` path."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from .app import api, openapi_view
from .errors import ApiError


@csrf_exempt  # nothing to protect: a 404 whatever the credentials
def _not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return ApiError(404, f"no such endpoint: {request.path[:200]}").response()


urlpatterns = [
    path("api/openapi.json", csrf_exempt(openapi_view)),
    path("api/", api.urls),
    re_path(r"^api(?:/(?P<rest>[\s\S]*))?$", _not_found),  # [\s\S]: a newline in it too
]
