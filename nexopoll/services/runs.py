"""Operator runs (run now, dry run) on a worker, with a bounded wait in the web process.

A poller can take longer than a web request may (gunicorn kills a worker after 30 s),
so the API and the admin never tick in the web process: they queue
``nexopoll.run_now`` and wait for its result at most ``NEXOPOLL_RUN_WAIT_SECS``
(default 20 s). Past that they answer "still running" with the task id; the result
is kept by django-celery-results (``CELERY_RESULT_EXPIRES``) and read back with
:func:`status`. The task's id is also kept in Redis while it waits in the queue, so
a run nobody has picked up yet reads as queued, not unknown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from nexopoll.runtime.keys import ns
from nexopoll.runtime.redis import get_redis

from .errors import JobPaused, ServiceError, UnknownJob
from .jobs import require_job, run_job
from .views import redact, tick_view

log = logging.getLogger("nexopoll.services")

RUN_NOW_TASK = "nexopoll.run_now"
MARK_PREFIX = ns("run:")  # "nexopoll:run:" (NEXOPOLL_REDIS_PREFIX)


class QueueUnavailable(ServiceError):
    """The run could not be queued (Redis, the broker, is unreachable)."""

    code, http_status = "unavailable", 503


@dataclass(frozen=True)
class RunStatus:
    job_id: str
    task_id: str
    state: str  # queued | running | done | failed
    outcome: dict[str, Any] | None = None  # the task's return value once done


def outcome_of(job_id: str, *, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
    """Tick ``job_id`` here and now (a worker's task body): the result as JSON-ready data,
    its secrets' values masked (it is stored in the result table and shown to people)."""
    try:
        report = run_job(job_id, now=timezone.now(), dry_run=dry_run, force=force)
    except JobPaused as exc:
        return {
            "outcome": "paused",
            "status": "paused",
            "error": str(exc),
            "dry_run": dry_run,
            "items_seen": 0,
            "items_dispatched": 0,
            "deliveries": 0,
            "committed": False,
        }
    except UnknownJob as exc:
        return {
            "outcome": "unknown_job",
            "status": "unknown",
            "error": str(exc),
            "dry_run": dry_run,
            "committed": False,
        }
    out = {
        "outcome": "done",
        "status": report.status,
        "items_seen": report.items_seen,
        "items_dispatched": report.items_dispatched,
        "error": report.error,
        "deliveries": len(report.delivery_ids),
        "committed": report.committed,
        "dry_run": dry_run,
        "tick": tick_view(report, dry_run=dry_run),
    }
    return redact(out, [job_id])


def start(job_id: str, *, dry_run: bool = False, force: bool = False) -> str:
    """Queue a run of ``job_id`` on a worker; its task id.

    Raises:
        UnknownJob: no such job (nothing queued).
        QueueUnavailable: the broker did not take the message.
    """
    from nexopoll.celery import app

    require_job(job_id)
    try:
        result = app.send_task(
            RUN_NOW_TASK,
            args=[job_id],
            kwargs={"dry_run": dry_run, "force": force},
            headers={"periodic_task_name": job_id},
        )
    except Exception as exc:
        log.warning("job.run_not_queued job=%s: %s", job_id, type(exc).__name__)
        raise QueueUnavailable("the run could not be queued: the broker is unreachable") from exc
    try:
        get_redis().set(MARK_PREFIX + result.id, job_id, ex=settings.CELERY_RESULT_EXPIRES)
    except Exception as exc:  # the run is queued all the same; only "queued" reads are lost
        log.warning("job.run_mark_failed job=%s: %s", job_id, type(exc).__name__)
    log.info("job.run_now_enqueued job=%s task=%s dry_run=%s", job_id, result.id, dry_run)
    return result.id


def wait(task_id: str, timeout: float | None = None) -> dict[str, Any] | None:
    """The run's outcome once the task is done, or None when ``timeout`` seconds
    (default ``NEXOPOLL_RUN_WAIT_SECS``) pass first. A task that failed (the worker
    raised, or was killed) is ``{"outcome": "failed", …}``."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from nexopoll.celery import app

    secs = settings.NEXOPOLL_RUN_WAIT_SECS if timeout is None else timeout
    result = app.AsyncResult(task_id)
    try:
        value = result.get(timeout=max(secs, 0.001), interval=0.1, propagate=False)
    except CeleryTimeout:
        return None
    return _outcome(result.state, value)


def _outcome(state: str, value: Any) -> dict[str, Any]:
    if state == "SUCCESS" and isinstance(value, dict):
        return value
    kind = type(value).__name__ if isinstance(value, BaseException) else state
    return {
        "outcome": "failed",
        "status": "failed",
        "committed": False,
        "error": f"the run failed on the worker ({kind}); see the worker's log",
    }


def status(job_id: str, task_id: str) -> RunStatus | None:
    """Where run ``task_id`` of ``job_id`` is; None: no such run of this job."""
    from django_celery_results.models import TaskResult

    row = TaskResult.objects.filter(task_id=task_id, task_name=RUN_NOW_TASK).first()
    if row is None:
        if get_redis().get(MARK_PREFIX + task_id) not in (job_id, job_id.encode()):
            return None
        return RunStatus(job_id, task_id, "queued")
    if row.periodic_task_name != job_id:
        return None
    if row.status in ("PENDING", "RECEIVED"):
        return RunStatus(job_id, task_id, "queued")
    if row.status in ("STARTED", "RETRY"):
        return RunStatus(job_id, task_id, "running")
    from celery import states

    backend_value = _stored_value(task_id) if row.status in states.READY_STATES else None
    outcome = _outcome(row.status, backend_value)
    done = outcome.get("outcome", "done") == "done"  # no outcome: stored by an older version
    return RunStatus(job_id, task_id, "done" if done else "failed", outcome)


def _stored_value(task_id: str) -> Any:
    from nexopoll.celery import app

    return app.AsyncResult(task_id).result


def run_now_async(job_id: str) -> str:
    """Enqueue a manual tick (``nexopoll.run_now``); its outcome is stored by
    django-celery-results under the job id. Returns the task id."""
    return start(job_id)


def run_now_results(job_id: str, limit: int = 10) -> list[Any]:
    from django_celery_results.models import TaskResult

    return list(
        TaskResult.objects.filter(task_name=RUN_NOW_TASK, periodic_task_name=job_id).order_by(
            "-date_done"
        )[:limit]
    )
