"""The job verbs: read (``query_jobs``, ``show_job``), pause, resume, reset, run now,
preview. Every state write goes through :func:`write_state` (the epoch moves on)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import nexopoll.services.views as views
from nexopoll.core.config.values import mask_plain_secrets
from nexopoll.core.preview import FireTime, preview
from nexopoll.models import Delivery, PollJob, PollState
from nexopoll.reloadwrite import RESUMED  # what a resume clears (as a reload's does)
from nexopoll.runtime import definitions, store
from nexopoll.runtime.tick import TickReport, tick_job

from .errors import JobPaused, UnknownJob

log = logging.getLogger("nexopoll.services")

#: what a reset clears (the pause flag is left as is)
RESET = {
    "cursor": None,
    "consecutive_errors": 0,
    "breaker_open_until": None,
    "breaker_trips": 0,
    "breaker_trial_at": None,
    "running_since": None,
    "crash_count": 0,
    "last_error": "",
    "alert_active": False,
    "last_failure_alert_at": None,
    "notice": "",
    "notice_at": None,
}


# --- the one way a verb writes job state ----------------------------------------------
def write_state(changes: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
    """Write ``(job_id, fields)`` pairs to the state rows, each moving its row's epoch on
    (``runtime.store.write_state``), in the caller's transaction: a tick that read the
    row before this write is fenced out and cannot commit its stale view over it."""
    store.write_state(changes)


def require_job(job_id: str) -> PollJob:
    """The job's definition row; UnknownJob when pollers.yaml has no such job."""
    job = PollJob.objects.filter(job_id=job_id).first()
    if job is None:
        raise UnknownJob(job_id)
    return job


# --- reading jobs ---------------------------------------------------------------------
@dataclass
class Page:
    """One page of views: ``next_after`` is the cursor of the next page (None: the last);
    ``total`` counts every match (before ``after``; None: not counted, the outbox);
    ``rows`` are the models shown."""

    items: list[dict[str, Any]]
    total: int | None
    next_after: str | None
    rows: list[Any] = field(default_factory=list, repr=False)


def query_jobs(
    *,
    now: datetime,
    kind: str | None = None,
    agent: str | None = None,
    paused: bool | None = None,
    status: str | None = None,
    after: str | None = None,
    limit: int | None = None,
    scope: Any = None,
) -> Page:
    """Jobs by id, filtered, one page (``limit``; None: all) after job id ``after``, in two
    indexed queries (jobs, then their states), masked. ``status`` ``never``: never ran.
    ``scope`` is a ``PollJob`` queryset to start from (the LLM tools' agent scope)."""
    jobs = (PollJob.objects.all() if scope is None else scope).order_by("job_id")
    if kind is not None:
        jobs = jobs.filter(kind=kind)
    if agent is not None:
        jobs = jobs.filter(agent=agent)
    if paused is not None or status is not None:
        states = PollState.objects.all()
        if paused is not None:
            states = states.filter(paused=paused)
        if status is not None:
            states = states.filter(last_status="" if status == "never" else status)
        jobs = jobs.filter(job_id__in=states.values("job_id"))
    total = jobs.count()
    if after is not None:
        jobs = jobs.filter(job_id__gt=after)
    page = list(jobs if limit is None else jobs[: limit + 1])
    more = limit is not None and len(page) > limit
    page = page[:limit] if limit is not None else page
    found = {s.job_id: s for s in PollState.objects.filter(job_id__in=[j.job_id for j in page])}
    items = [views.job_view(j, found.get(j.job_id), now=now) for j in page]
    return Page(views.redact(items, page), total, page[-1].job_id if more else None, page)


def list_jobs(*, now: datetime) -> list[dict[str, Any]]:
    """Every job's view (masked), by id."""
    return query_jobs(now=now).items


def show_job(job_id: str, *, now: datetime) -> dict[str, Any]:
    """One job with its config (as written: ``${VAR}`` references, never their values),
    cursor and pending deliveries, masked."""
    job = require_job(job_id)
    state = PollState.objects.filter(job_id=job_id).first()
    view = views.job_view(job, state, now=now)
    # never a plain-text credential kept from before such values were refused at load
    view["config"] = mask_plain_secrets(job.config)
    view["cursor"] = views.cursor_text(state.cursor) if state else None
    view["pending_deliveries"] = job_pending(job_id)
    return views.redact(view, [job])


def job_pending(job_id: str) -> int:
    return Delivery.objects.filter(job_id=job_id, status="pending").count()


def preview_job(job_id: str, *, now: datetime, count: int = 10) -> list[FireTime]:
    job = require_job(job_id)
    jd = definitions.from_row(job, {})
    return preview(jd.schedule, after=now, offset=jd.offset, count=count)


# --- writing ----------------------------------------------------------------------------
def pause_job(job_id: str, *, reason: str = "paused by operator") -> None:
    require_job(job_id)
    write_state([(job_id, {"paused": True, "paused_reason": reason, "paused_by": "operator"})])


def resume_job(job_id: str) -> None:
    """Unpause and close the breaker: the job starts over with a clean error count.

    Leaving ``consecutive_errors`` at the threshold would re-open the breaker on
    the first transient error after a resume. The epoch moves on (as with every state
    write), so a failing tick in flight cannot write its errors over the resume.
    """
    require_job(job_id)
    write_state([(job_id, RESUMED)])


def reset_job(job_id: str) -> None:
    """Clear the cursor, errors, breaker and alert state (the pause flag is left as is).

    The epoch moves on, so a tick running right now cannot commit its old cursor.
    """
    require_job(job_id)
    write_state([(job_id, RESET)])


# --- running now ------------------------------------------------------------------------
def run_job(
    job_id: str, *, now: datetime, dry_run: bool = False, force: bool = False
) -> TickReport:
    """Tick now, bypassing schedule, lease and breaker. A paused job needs ``force``
    (a dry run commits nothing and is always allowed). The report is not masked: show
    it through :func:`run_view`.

    Raises:
        JobPaused: the job is paused and ``force`` was not given; nothing ran.
    """
    require_job(job_id)
    report = tick_job(job_id, now=now, manual=True, dry_run=dry_run, force=force)
    if report.status == "skipped" and report.reason == "paused":
        reason = PollState.objects.filter(job_id=job_id).values_list("paused_reason", flat=True)
        raise JobPaused(job_id, reason.first() or "")
    return report


def run_view(report: TickReport, *, dry_run: bool) -> dict[str, Any]:
    """``views.tick_view`` of a run, masked for its job."""
    return views.redact(views.tick_view(report, dry_run=dry_run), [report.job_id])
