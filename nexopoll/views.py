"""Small HTTP endpoints: health and the demo feed the example pollers.yaml reads."""

from __future__ import annotations

import time

from django.http import HttpRequest, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


def demo_items(request: HttpRequest) -> JsonResponse:
    """A JSON API that publishes a new item every 10 seconds (for `make run` without internet)."""
    n = int(time.time() // 10)
    items = [{"id": i, "title": f"demo item {i}", "published": i * 10} for i in range(n - 4, n + 1)]
    return JsonResponse({"items": items})
