"""nexopoll: a polling runtime on Django, Celery, Redis and RedBeat."""

from .celery import app as celery_app

__all__ = ["celery_app"]
