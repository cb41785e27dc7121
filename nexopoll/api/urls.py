"""``/api/…`` routes, built from ``views.ROUTES``; any other ``/api/`` path is a JSON 404."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from .errors import ApiError
from .openapi import openapi_view
from .routing import endpoint
from .views import ROUTES


@csrf_exempt  # nothing to protect: a 404 whatever the credentials
def _not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return ApiError(404, f"no such endpoint: {request.path[:200]}").response()


def _patterns() -> list:
    by_path: dict[str, list] = {}
    for route in ROUTES:
        by_path.setdefault(route.django_path, []).append(route)
    return [path(p, endpoint(routes)) for p, routes in by_path.items()]


urlpatterns = [
    path("api/openapi.json", csrf_exempt(openapi_view)),
    *_patterns(),
    re_path(r"^api(?:/(?P<rest>[\s\S]*))?$", _not_found),  # [\s\S]: a newline in it too
]
