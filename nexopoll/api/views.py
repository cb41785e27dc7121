"""The endpoints: each one a call into the service layer, listed in ``ROUTES``."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.utils import timezone
from pydantic import BaseModel

from nexopoll import runs, services
from nexopoll.masking import masked, masked_for_ids
from nexopoll.models import Delivery, PollJob, PollState

from .auth import Principal
from .errors import ApiError
from .routing import Route
from .schemas import (
    DeliveryPage,
    DeliveryQuery,
    DeliveryRow,
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

VIEW, OPERATE, RELOAD = "admin_ext.view_job", "admin_ext.operate_job", "admin_ext.reload_config"
VIEW_OUTBOX, REDELIVER = "admin_ext.view_outboxrow", "admin_ext.redeliver"


# --- jobs --------------------------------------------------------------------------
def list_pollers(p: Principal, query: JobQuery) -> tuple[int, BaseModel]:
    """One page in two indexed queries (jobs by id, then their states), 10,000 jobs or not."""
    jobs = PollJob.objects.order_by("job_id")
    if query.kind is not None:
        jobs = jobs.filter(kind=query.kind)
    if query.agent is not None:
        jobs = jobs.filter(agent=query.agent)
    states = PollState.objects.all()
    if query.paused is not None:
        states = states.filter(paused=query.paused)
    if query.status is not None:
        states = states.filter(last_status="" if query.status == "never" else query.status)
    if query.paused is not None or query.status is not None:
        jobs = jobs.filter(job_id__in=states.values("job_id"))
    total = jobs.count()
    if query.after is not None:
        jobs = jobs.filter(job_id__gt=query.after)
    page = list(jobs[: query.limit + 1])
    more = len(page) > query.limit
    page = page[: query.limit]
    found = {s.job_id: s for s in PollState.objects.filter(job_id__in=[j.job_id for j in page])}
    now = timezone.now()
    views = masked([services.job_view(j, found.get(j.job_id), now=now) for j in page], page)
    items = [Job(**v) for v in views]
    return 200, JobPage(items=items, total=total, next_after=page[-1].job_id if more else None)


def _masked(job_id: str, data: Any) -> Any:
    """``data`` about one job with its secrets' values masked (a poller may echo them)."""
    return masked_for_ids(data, [job_id])


def show_poller(p: Principal, job_id: str) -> tuple[int, BaseModel]:
    return 200, JobDetail(**_masked(job_id, services.show_job(job_id, now=timezone.now())))


def _enqueued(job_id: str, task_id: str) -> Enqueued:
    url = f"/api/pollers/{job_id}/runs/{task_id}"
    return Enqueued(job_id=job_id, task_id=task_id, status_url=url)


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
        raise ApiError(502, str(outcome.get("error") or "the run failed on the worker"),
                       code="run_failed")  # fmt: skip
    return TickResult(**_masked(job_id, outcome["tick"]))


def _run(job_id: str, *, dry_run: bool, force: bool, wait: bool) -> tuple[int, BaseModel]:
    """On a worker (a poller may outlast the web request): the result when it comes within
    ``NEXOPOLL_RUN_WAIT_SECS``, otherwise 202 and the run's status URL."""
    if not dry_run and not force:  # refused at once, not after a trip through the queue
        state = PollState.objects.filter(job_id=job_id, paused=True).first()
        if state is not None:
            raise services.JobPaused(job_id, state.paused_reason)
    try:
        task_id = runs.start(job_id, dry_run=dry_run, force=force)
    except runs.QueueUnavailable as exc:
        raise ApiError(503, str(exc), headers={"Retry-After": "5"}) from None
    outcome = runs.wait(task_id) if wait else None
    if outcome is None:
        return 202, _enqueued(job_id, task_id)
    return 200, _tick(job_id, outcome)


def run_poller(p: Principal, job_id: str, body: RunRequest) -> tuple[int, BaseModel]:
    return _run(job_id, dry_run=False, force=body.force, wait=body.wait)


def dry_run_poller(p: Principal, job_id: str) -> tuple[int, BaseModel]:
    return _run(job_id, dry_run=True, force=False, wait=True)


def run_status(p: Principal, job_id: str, task_id: str) -> tuple[int, BaseModel]:
    found = runs.status(job_id, task_id)
    if found is None:
        raise ApiError(404, f"no run {task_id} of job {job_id!r}")
    out = RunState(job_id=job_id, task_id=task_id, state=found.state)  # type: ignore[arg-type]
    if found.outcome is not None:
        try:
            out.result = _tick(job_id, found.outcome)
        except ApiError as exc:
            out.state, out.error = "failed", exc.message
    return 200, out


def _done(job_id: str, action: str) -> Done:
    job = PollJob.objects.get(job_id=job_id)
    state = PollState.objects.filter(job_id=job_id).first()
    view = services.job_view(job, state, now=timezone.now())
    return Done(job_id=job_id, action=action, job=Job(**view))  # type: ignore[arg-type]


def pause_poller(p: Principal, job_id: str) -> tuple[int, BaseModel]:
    services.pause_job(job_id, reason=f"paused via the API by {p.name}")
    return 200, _done(job_id, "paused")


def resume_poller(p: Principal, job_id: str) -> tuple[int, BaseModel]:
    services.resume_job(job_id)
    return 200, _done(job_id, "resumed")


def reset_poller(p: Principal, job_id: str, body: ResetRequest) -> tuple[int, BaseModel]:
    services.reset_job(job_id)
    return 200, _done(job_id, "reset")


def reload_pollers(p: Principal, body: ReloadRequest) -> tuple[int, BaseModel]:
    if not body.dry_run:
        p.require(RELOAD)
    res = services.reload_config(now=timezone.now(), dry_run=body.dry_run, strict=body.strict)
    return 200, ReloadPlan(**res.as_dict())


# --- the outbox --------------------------------------------------------------------
def _row(d: Delivery) -> DeliveryRow:
    def iso(v: Any) -> str | None:
        return v.isoformat() if v else None

    return DeliveryRow(
        id=str(d.id), job_id=d.job_id, agent=d.agent, purpose=d.purpose, channel=d.channel,
        recipient=d.recipient, status=d.status, attempts=d.attempts, last_error=d.last_error,
        next_attempt_at=iso(d.next_attempt_at), created_at=iso(d.created_at),
        sent_at=iso(d.sent_at),
    )  # fmt: skip


def list_deliveries(p: Principal, query: DeliveryQuery) -> tuple[int, BaseModel]:
    rows = Delivery.objects.order_by("-created_at", "-id").defer("payload")
    if query.status is not None:
        rows = rows.filter(status=query.status)
    if query.job_id is not None:
        rows = rows.filter(job_id=query.job_id)
    if query.after is not None:
        last = Delivery.objects.filter(id=query.after).values_list("created_at", "id").first()
        if last is None:
            raise ApiError(404, f"after: no delivery {query.after}")
        rows = rows.filter(Q(created_at__lt=last[0]) | Q(created_at=last[0], id__lt=last[1]))
    page = list(rows[: query.limit + 1])
    more = len(page) > query.limit
    page = page[: query.limit]
    return 200, DeliveryPage(
        items=[_row(d) for d in page], next_after=str(page[-1].id) if more else None
    )


def redeliver(p: Principal, delivery_id: str, body: RedeliverRequest) -> tuple[int, BaseModel]:
    """``services.redeliver``: a dead, held or pending row back to pending, attempts reset,
    queued under its own id; a sent row only with ``force``; a row being sent: 409."""
    ids = services.redeliver([delivery_id], force=body.force, now=timezone.now())
    return 200, Redelivered(redelivered=[str(i) for i in ids])


J = "/api/pollers/{job_id}"
ROUTES = [
    Route("GET", "/api/pollers", list_pollers, "List jobs (paginated, filtered)", VIEW,
          {200: JobPage}, query=JobQuery, tags=("pollers",)),
    Route("POST", "/api/pollers/reload", reload_pollers,
          "Re-read pollers.yaml: the plan, applied unless dry_run", VIEW, {200: ReloadPlan},
          body=ReloadRequest, tags=("pollers",)),
    Route("GET", J, show_poller, "One job with its config, state and cursor", VIEW,
          {200: JobDetail}, tags=("pollers",)),
    Route("POST", J + "/run", run_poller,
          "Tick now on a worker (bypasses schedule, lease and breaker); 202 while it runs",
          OPERATE, {200: TickResult, 202: Enqueued}, body=RunRequest, tags=("pollers",)),
    Route("POST", J + "/dry-run", dry_run_poller,
          "Run the poller on a worker, commit nothing; 202 while it runs", OPERATE,
          {200: TickResult, 202: Enqueued}, tags=("pollers",)),
    Route("GET", J + "/runs/{task_id}", run_status,
          "A run's state, and its result once done (the status_url of a 202)", OPERATE,
          {200: RunState}, tags=("pollers",)),
    Route("POST", J + "/pause", pause_poller, "Stop ticking the job (state kept)", OPERATE,
          {200: Done}, tags=("pollers",)),
    Route("POST", J + "/resume", resume_poller, "Tick again (errors and breaker cleared)",
          OPERATE, {200: Done}, tags=("pollers",)),
    Route("POST", J + "/reset", reset_poller,
          'Clear cursor, errors and breaker (needs {"confirm": true})', OPERATE, {200: Done},
          body=ResetRequest, tags=("pollers",)),
    Route("GET", "/api/deliveries", list_deliveries, "Outbox rows, newest first", VIEW_OUTBOX,
          {200: DeliveryPage}, query=DeliveryQuery, tags=("deliveries",)),
    Route("POST", "/api/deliveries/{delivery_id}/redeliver", redeliver,
          "Send a row again under the same delivery id (a sent one only with force)", REDELIVER,
          {200: Redelivered}, body=RedeliverRequest, tags=("deliveries",)),
]  # fmt: skip
