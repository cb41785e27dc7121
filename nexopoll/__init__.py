"""nexopoll: a polling runtime on Django, Celery, Redis and RedBeat.

The Celery app lives in ``nexopoll.celery`` and is loaded lazily: importing a pure
module (``nexopoll.core.*``) loads neither Celery nor Django. ``celery -A nexopoll``
finds the app through ``nexopoll.celery`` (Celery's app discovery imports it), and a
Django process binds ``shared_task`` to it because the app config imports it in
``ready()``. ``nexopoll.celery_app`` still works: it loads the app on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    if name == "celery_app":
        from .celery import app

        return app
    raise AttributeError(f"module 'nexopoll' has no attribute {name!r}")
