"""The endpoints (django-ninja operations): each one a call into the service layer.

Each operation's ``auth`` is a :class:`.gate.Gate` holding the permission it needs; the
principal it returns is ``request.auth``. Services' refusals (``ServiceError``) are
mapped to the envelope in one place, :mod:`.app`.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Body, Path, Query, Router, Status

from nexopoll import services
from nexopoll.services import permissions, runs
from nexopoll.services.masking import masked_for_ids

from .errors import ApiError
from .gate import Gate
from .schemas import (
    JOB_ID_PATTERN,
    UUID_PATTERN,
    DeliveryPage,
    DeliveryQuery,
    Done,
    Enqueued,
    Job,
    JobDetail,
    JobPage,
    JobQuery,
    Redelivered,
    RedeliverRequest,
    ReloadPlan,
    ReloadRequest,
    ResetRequest,
    RunRequest,
    RunState,
    TickResult,
)

VIEW, OPERATE, RELOAD = permissions.VIEW_JOB, permissions.OPERATE, permissions.RELOAD
VIEW_OUTBOX, REDELIVER = permissions.VIEW_OUTBOX, permissions.REDELIVER

JobId = Path(..., pattern=JOB_ID_PATTERN)
TaskId = DeliveryId = Path(..., pattern=UUID_PATTERN)
OPTIONAL_BODY = Body(None)  # a blank body stands for {} (every field has its default)
pollers = Router(tags=["pollers"])
deliveries = Router(tags=["deliveries"])


# --- jobs --------------------------------------------------------------------------
@pollers.get(
    "/pollers",
    response=JobPage,
    summary="List jobs (paginated, filtered)",
    auth=Gate(VIEW, query=JobQuery),
)
def list_pollers(request: HttpRequest, query: Query[JobQuery]) -> JobPage:
    """One page in two indexed queries (jobs by id, then their states), 10,000 jobs or not."""
    page = services.query_jobs(now=timezone.now(), **query.model_dump())
    items = [Job(**v) for v in page.items]
    return JobPage(items=items, total=page.total, next_after=page.next_after)


@pollers.post(
    "/pollers/reload",
    response=ReloadPlan,
    summary="Re-read pollers.yaml: the plan, applied unless dry_run",
    auth=Gate(VIEW, body=True),
)
def reload_pollers(request: HttpRequest, body: ReloadRequest = OPTIONAL_BODY) -> ReloadPlan:
    body = body or ReloadRequest()
    if not body.dry_run:
        request.auth.require(RELOAD)
    res = services.reload_config(now=timezone.now(), dry_run=body.dry_run, strict=body.strict)
    return ReloadPlan(**res.as_dict())


@pollers.get(
    "/pollers/{job_id}",
    response=JobDetail,
    summary="One job with its config, state and cursor",
    auth=Gate(VIEW),
)
def show_poller(request: HttpRequest, job_id: str = JobId) -> JobDetail:
    return JobDetail(**services.show_job(job_id, now=timezone.now()))


@pollers.get("/pollers/reload", response=JobDetail, include_in_schema=False, auth=Gate(VIEW))
def show_reload_job(request: HttpRequest) -> JobDetail:
    """A job named ``reload``: its GET shares the path of POST /api/pollers/reload."""
    return show_poller(request, "reload")


def _tick(job_id: str, outcome: dict[str, Any]) -> TickResult:
    """A finished run's result, or the API error it amounts to."""
    kind = outcome.get("outcome")
    if kind is None and "status" in outcome:  # a run stored before runs kept their tick
        keys = ("status", "error", "items_seen", "items_dispatched", "committed")
        return TickResult(job_id=job_id, **{k: outcome[k] for k in keys if k in outcome})
    if kind == "paused":
        raise ApiError(409, str(outcome.get("error", "")))
    if kind == "unknown_job":
        raise ApiError(404, str(outcome.get("error", "")))
    if kind != "done" or not isinstance(outcome.get("tick"), dict):
        raise ApiError(
            502, str(outcome.get("error") or "the run failed on the worker"), code="run_failed"
        )
    return TickResult(**masked_for_ids(outcome["tick"], [job_id]))


def _run(
    job_id: str, response: HttpResponse, *, dry_run: bool, force: bool, wait: bool
) -> Status[Any]:
    """On a worker (a poller may outlast the web request): the result when it comes within
    ``NEXOPOLL_RUN_WAIT_SECS``, otherwise 202 and the run's status URL (``Location``)."""
    if not dry_run and not force:  # refused at once, not after a trip through the queue
        job = services.show_job(job_id, now=timezone.now())
        if job.get("paused"):
            raise services.JobPaused(job_id, job.get("paused_reason") or "")
    task_id = runs.start(job_id, dry_run=dry_run, force=force)
    outcome = runs.wait(task_id) if wait else None
    if outcome is None:
        url = f"/api/pollers/{job_id}/runs/{task_id}"
        response["Location"] = url
        return Status(202, Enqueued(job_id=job_id, task_id=task_id, status_url=url))
    return Status(200, _tick(job_id, outcome))


RUN_ANSWERS = {200: TickResult, 202: Enqueued}


@pollers.post(
    "/pollers/{job_id}/run",
    response=RUN_ANSWERS,
    auth=Gate(OPERATE, body=True),
    summary="Tick now on a worker (bypasses schedule, lease and breaker); 202 while it runs",
)
def run_poller(
    request: HttpRequest,
    response: HttpResponse,
    job_id: str = JobId,
    body: RunRequest = OPTIONAL_BODY,
) -> Status[Any]:
    body = body or RunRequest()
    return _run(job_id, response, dry_run=False, force=body.force, wait=body.wait)


@pollers.post(
    "/pollers/{job_id}/dry-run",
    response=RUN_ANSWERS,
    auth=Gate(OPERATE),
    summary="Run the poller on a worker, commit nothing; 202 while it runs",
)
def dry_run_poller(
    request: HttpRequest, response: HttpResponse, job_id: str = JobId
) -> Status[Any]:
    return _run(job_id, response, dry_run=True, force=False, wait=True)


@pollers.get(
    "/pollers/{job_id}/runs/{task_id}",
    response=RunState,
    auth=Gate(OPERATE),
    summary="A run's state, and its result once done (the status_url of a 202)",
)
def run_status(request: HttpRequest, job_id: str = JobId, task_id: str = TaskId) -> RunState:
    found = runs.status(job_id, task_id)
    if found is None:
        raise ApiError(404, f"no run {task_id} of job {job_id!r}")
    out = RunState(job_id=job_id, task_id=task_id, state=found.state)
    if found.outcome is not None:
        try:
            out.result = _tick(job_id, found.outcome)
        except ApiError as exc:
            out.state, out.error = "failed", exc.message
    return out


def _done(job_id: str, action: str) -> Done:
    view = services.show_job(job_id, now=timezone.now())
    return Done(job_id=job_id, action=action, job=Job(**view))


@pollers.post(
    "/pollers/{job_id}/pause",
    response=Done,
    auth=Gate(OPERATE),
    summary="Stop ticking the job (state kept)",
)
def pause_poller(request: HttpRequest, job_id: str = JobId) -> Done:
    services.pause_job(job_id, reason=f"paused via the API by {request.auth.name}")
    return _done(job_id, "paused")


@pollers.post(
    "/pollers/{job_id}/resume",
    response=Done,
    auth=Gate(OPERATE),
    summary="Tick again (errors and breaker cleared)",
)
def resume_poller(request: HttpRequest, job_id: str = JobId) -> Done:
    services.resume_job(job_id)
    return _done(job_id, "resumed")


@pollers.post(
    "/pollers/{job_id}/reset",
    response=Done,
    auth=Gate(OPERATE, body=True),
    summary='Clear cursor, errors and breaker (needs {"confirm": true})',
)
def reset_poller(
    request: HttpRequest, job_id: str = JobId, body: ResetRequest = OPTIONAL_BODY
) -> Done:
    if body is None:  # no body: {} (ninja would call the whole body missing)
        ResetRequest.model_validate({})
    services.reset_job(job_id)
    return _done(job_id, "reset")


# --- the outbox --------------------------------------------------------------------
@deliveries.get(
    "/deliveries",
    response=DeliveryPage,
    summary="Outbox rows, newest first",
    auth=Gate(VIEW_OUTBOX, query=DeliveryQuery),
)
def list_deliveries(request: HttpRequest, query: Query[DeliveryQuery]) -> DeliveryPage:
    page = services.query_deliveries(**query.model_dump())
    return DeliveryPage(items=page.items, next_after=page.next_after)


@deliveries.post(
    "/deliveries/{delivery_id}/redeliver",
    response=Redelivered,
    auth=Gate(REDELIVER, body=True),
    summary="Send a row again under the same delivery id (a sent one only with force)",
)
def redeliver(
    request: HttpRequest, delivery_id: str = DeliveryId, body: RedeliverRequest = OPTIONAL_BODY
) -> Redelivered:
    """``services.redeliver``: a dead, held or pending row back to pending, attempts reset,
    queued under its own id; a sent row only with ``force``; a row being sent: 409."""
    body = body or RedeliverRequest()
    ids = services.redeliver([delivery_id], force=body.force, now=timezone.now())
    return Redelivered(redelivered=[str(i) for i in ids])
