"""The Celery app. Configuration comes from Django settings (``CELERY_*``)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")

app = Celery("nexopoll")
app.config_from_object("django.conf:settings", namespace="CELERY")
# RedBeat looks its options up by their bare names; set them so, not only under the
# CELERY_ namespace (otherwise it warns and falls back to the broker settings).
app.conf.update(
    {
        key.lower(): app.conf[f"CELERY_{key}"]
        for key in (
            "REDBEAT_REDIS_URL",
            "REDBEAT_REDIS_OPTIONS",
            "REDBEAT_KEY_PREFIX",
            "REDBEAT_LOCK_TIMEOUT",
        )
    }
)
app.autodiscover_tasks(["nexopoll"])
