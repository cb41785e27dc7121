"""What a tick writes: its state fields, its alert or recovery notice, its outbox rows,
and the one fenced write that stores them (``store.TickWrite``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nexopoll.core.decide import Decision
from nexopoll.core.redact import redact
from nexopoll.core.storable import storable, storable_text

from ...models import Delivery
from .. import dbclock, pacing, store
from ..definitions import JobDef
from ..host import PendingDelivery
from ..secretenv import secret_env
from .report import TickReport, TickRun


def notices(job: JobDef, decision: Decision, now: datetime) -> list[PendingDelivery]:
    if not job.failure_to or not (decision.send_alert or decision.send_recovery):
        return []
    if decision.send_alert:
        text = f"⚠ poller `{job.job_id}` (kind={job.kind}) failing: {decision.error}"
        if decision.pause_reason:
            text += " — the job is paused"
        purpose = "alert"
    else:
        text = f"✅ poller `{job.job_id}` (kind={job.kind}) recovered"
        purpose = "recovery"
    text = redact(text, job.secret_values(secret_env()))
    payload = {"text": text, "job_id": job.job_id, "kind": job.kind, "at": now.isoformat()}
    return [PendingDelivery(job.failure_to["channel"], job.failure_to["to"], payload, purpose)]


def state_fields(decision: Decision, *, now, latency_ms, nxt, ack) -> dict[str, Any]:
    h = decision.health
    fields: dict[str, Any] = {
        "consecutive_errors": h.consecutive_errors,
        "breaker_open_until": h.open_until,
        "breaker_trips": h.trips,
        "breaker_trial_at": h.trial_started_at,
        "running_since": None,
        "last_run_at": now,
        "last_status": decision.status,
        "last_error": decision.error,
        "last_latency_ms": latency_ms,
        "next_run_at": max(nxt, decision.not_before) if nxt and decision.not_before else nxt,
        "alert_active": decision.alert_active,
        "last_failure_alert_at": decision.last_failure_alert_at,
        "updated_at": now,
    }
    if decision.pause_reason:
        fields["paused"] = True
        fields["paused_reason"] = decision.pause_reason
        # a failed tick paused it (a reload that changes its definition resumes it), or a
        # one-shot fired
        fields["paused_by"] = "error" if decision.status != "ok" else "schedule"
    if ack is not None and ack.notice:
        fields["notice"], fields["notice_at"] = ack.notice[:2000], now
    if ack is not None and ack.next_cursor is not None:
        fields["cursor"] = ack.next_cursor
    return fields


def build_write(t: TickRun, fields: dict[str, Any], report: TickReport) -> store.TickWrite:
    stamp = dbclock.to_db(t.now)  # due times in the clock every worker reads them by
    due = pacing.due_times(t.job, report.deliveries, now=stamp)
    rows = [
        Delivery(
            job_id=t.job.job_id,
            agent=t.job.agent,
            epoch=t.epoch,
            purpose=d.purpose,
            channel=storable_text(d.channel),
            recipient=storable_text(d.recipient),
            payload=storable(d.payload),  # an item's NUL must not fail the whole commit
            next_attempt_at=at,
            created_at=stamp,
        )
        for d, at in zip(report.deliveries, due, strict=True)
    ]
    increments = {
        "ticks_total": 1,
        "items_seen_total": report.items_seen,
        "items_dispatched_total": report.items_dispatched,
    }
    report.delivery_ids = [str(r.id) for r in rows]
    fields = {k: storable_text(v) if isinstance(v, str) else v for k, v in fields.items()}
    report.error = storable_text(report.error)  # the history's copy of last_error
    changed = store.changed(t.row, fields)
    return store.TickWrite(t.job.job_id, t.epoch, changed, increments, rows, t.expect)


def commit_fields(t: TickRun, fields: dict[str, Any], report: TickReport) -> None:
    commit(build_write(t, fields, report))


def commit(w: store.TickWrite) -> None:
    store.commit_tick(w)
