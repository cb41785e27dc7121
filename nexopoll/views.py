"""Small HTTP endpoints: health and the demo feed the example pollers.yaml reads."""

from __future__ import annotations

import time

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache

from .health import run_checks


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the DB and Redis answer and beat loops; 503 otherwise (see ``health``)."""
    healthy, checks = run_checks()
    return JsonResponse({"ok": healthy, "checks": checks}, status=200 if healthy else 503)


def demo_items(request: HttpRequest) -> JsonResponse:
    """A JSON API that publishes a new item every 10 seconds (for `make run` without internet)."""
    n = int(time.time() // 10)
    items = [
        {
            "id": i,
            "title": f"demo item of {time.strftime('%H:%M:%S', time.gmtime(i * 10))} UTC",
            "published": i * 10,
        }
        for i in range(n - 4, n + 1)
    ]
    return JsonResponse({"items": items})
