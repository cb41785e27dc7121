"""Operator views and verbs beyond the basics in :mod:`nexopoll.services`:
tick history, rewind, schedule preview, run-now through Celery, the summary
counts, and a job's definition and cursor as an operator reads them.

The admin, the CLI and the JSON API call these, so they behave identically.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml
from django.conf import settings
from django.db.models import Q

from .core.config.values import mask_plain_secrets
from .core.preview import FireTime, preview
from .masking import masked
from .models import Delivery, PollJob, PollState
from .runtime import definitions, history, store
from .runtime.redis import get_redis
from .services import require_job

log = logging.getLogger("nexopoll.services")

RUN_NOW_TASK = "nexopoll.run_now"


# --- reading a job ---------------------------------------------------------------
def definition_yaml(job: PollJob) -> str:
    """The job's definition as written in pollers.yaml (``${VAR}`` references unexpanded)."""
    doc: dict[str, Any] = {"id": job.job_id, "kind": job.kind, "agent": job.agent}
    doc["schedule"] = job.schedule
    doc["config"] = mask_plain_secrets(job.config)
    if job.failure_to:
        doc["failure_to"] = job.failure_to
    if job.paused_on_boot:
        doc["paused_on_boot"] = True
    return yaml.safe_dump([doc], sort_keys=False, allow_unicode=True)


def definition_source(job: PollJob) -> str:
    """``file:line`` the definition came from."""
    line = f":{job.source_line}" if job.source_line else ""
    return f"{settings.NEXOPOLL_CONFIG}{line}"


def cursor_pretty(cursor: bytes | memoryview | None) -> tuple[str, str]:
    """``(format, text)``: pretty-printed JSON where the cursor is JSON, otherwise hex."""
    if cursor is None:
        return "none", "(no cursor yet)"
    raw = bytes(cursor)
    try:
        return "json", json.dumps(json.loads(raw.decode("utf-8")), indent=2, ensure_ascii=False)
    except (UnicodeDecodeError, ValueError):
        return "hex", raw.hex(" ", 2)


def tick_history(job_id: str, limit: int = history.HISTORY_LEN) -> list[history.TickEntry]:
    job = require_job(job_id)
    try:
        return masked(history.entries(get_redis(), job_id, limit), [job])
    except Exception as exc:  # Redis down: the page still renders, without history
        log.warning("history.unavailable job=%s: %s", job_id, exc)
        return []


def host_wait(job_id: str) -> dict | None:
    """The job's latest wait for a turn on a capped host (``runtime/hostwait.py``), or None."""
    from .runtime import hostwait

    try:
        return hostwait.last_wait(get_redis(), job_id)
    except Exception:  # Redis down: no note
        return None


def preview_job(job_id: str, *, now: datetime, count: int = 10) -> list[FireTime]:
    job = require_job(job_id)
    jd = definitions.from_row(job, {})
    return preview(jd.schedule, after=now, offset=jd.offset, count=count)


# --- rewind ------------------------------------------------------------------------
@dataclass(frozen=True)
class Rewound:
    job_id: str
    tick: int
    tick_at: datetime
    cursor: bytes | None


def rewind_job(job_id: str, *, tick: int, actor: str = "operator") -> Rewound:
    """Restore the cursor tick ``tick`` started from, so the window after it is replayed.

    Fenced like a reset: the epoch moves on, so a tick running right now cannot
    commit over the restored cursor. Errors and breaker state are left alone.

    Raises:
        UnknownJob: no such job.
        LookupError: the tick is not in the kept history, or did not run.
    """
    require_job(job_id)
    entry, cursor = history.start_cursor(get_redis(), job_id, tick)
    if entry.status == "skipped":
        raise LookupError(
            f"tick {tick} of {job_id!r} was skipped ({entry.reason}): nothing to rewind to"
        )
    store.write_state([(job_id, {"cursor": cursor})])
    log.warning(
        "job.rewind job=%s to_tick=%s tick_at=%s by=%s", job_id, tick, entry.at.isoformat(), actor
    )
    return Rewound(job_id, tick, entry.at, cursor)


# --- run now through Celery --------------------------------------------------------
def run_now_async(job_id: str) -> str:
    """Enqueue a manual tick (``nexopoll.run_now``, see :mod:`nexopoll.runs`); its outcome
    is stored by django-celery-results under the job id. Returns the task id."""
    from .runs import start

    return start(job_id)


def run_now_results(job_id: str, limit: int = 10) -> list[Any]:
    from django_celery_results.models import TaskResult

    return list(
        TaskResult.objects.filter(task_name=RUN_NOW_TASK, periodic_task_name=job_id).order_by(
            "-date_done"
        )[:limit]
    )


# --- the numbers on the admin index ------------------------------------------------
def summary(*, now: datetime) -> dict[str, int]:
    states = PollState.objects.filter(job_id__in=PollJob.objects.values("job_id"))
    failing = Q(last_status__in=["transient", "permanent"]) | Q(consecutive_errors__gt=0)
    counts = {
        "jobs": PollJob.objects.count(),
        "paused": states.filter(paused=True).count(),
        "failing": states.filter(failing).count(),
        "breaker_open": states.filter(breaker_open_until__gt=now).count(),
    }
    for status in ("pending", "held", "dead"):
        counts[f"deliveries_{status}"] = Delivery.objects.filter(status=status).count()
    return counts
