"""A tick's commit side (``run.py`` runs the tick up to its decision): ``stage`` builds
the fenced write (state fields, counters, outbox rows), ``commit_staged`` commits it on
its own (a batch commits its ticks in waves: ``batchcommit.py``), ``committed`` does what
follows a commit (deliveries handed to the queue, the poller's post-commit effects, the
job's RedBeat slot moved), ``fenced`` is the report of a tick whose epoch moved on.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

import nexopoll.runtime.tick.failures as failures
import nexopoll.runtime.tick.write as tickwrite
from nexopoll.core.contract import TickAck
from nexopoll.core.decide import Decision
from nexopoll.core.redact import redact

from .. import redbeat_sync, store
from ..host import run_after_commit
from ..redis import get_redis
from ..secretenv import secret_env
from ..store import Fenced
from .report import TickReport, TickRun, enqueue_deliveries

log = logging.getLogger("nexopoll.tick")


def finish(
    t: TickRun, report: TickReport, decision: Decision, ack: TickAck | None, latency_ms: int
) -> TickReport:
    """Commit the tick (fenced on its epoch), then hand off deliveries and schedule hints."""
    write = stage(t, report, decision, ack, latency_ms)
    if isinstance(write, TickReport):
        return write
    return commit_staged(t, write, report, decision)


def commit_staged(
    t: TickRun,
    write: store.TickWrite,
    report: TickReport,
    decision: Decision,
    hooks: list | None = None,
) -> TickReport:
    """Commit one staged tick on its own (fenced on its epoch); the report it ends with
    (``hooks``: see ``committed``)."""
    try:
        tickwrite.commit(write)
    except Fenced:
        return fenced(t)
    except Exception as exc:  # rolled back whole (no cursor, no outbox row), or a lost reply
        if not failures.landed(exc, [write]):
            return failures.commit_failed(t, exc, report.latency_ms or 0)
    committed(t, report, decision, hooks=hooks)
    return report


def stage(
    t: TickRun,
    report: TickReport,
    decision: Decision,
    ack: TickAck | None,
    latency_ms: int,
    *,
    check_lease: bool = True,
) -> store.TickWrite | TickReport:
    """The tick's fenced write (state fields, counters, outbox rows), or the report of a
    tick that must not commit (its lease was lost). ``check_lease=False``: the caller
    checks the lease right before its commit (a batch: ``failures.leases_kept``)."""
    fields = tickwrite.state_fields(
        decision, now=t.now, latency_ms=latency_ms, nxt=t.next_slot_at, ack=ack
    )
    secrets = t.job.secret_values(secret_env())
    for name in ("last_error", "paused_reason", "notice"):  # operators see it: no secret
        if fields.get(name):
            fields[name] = redact(fields[name], secrets)
    fields["crash_count"] = 0 if report.status == "ok" or t.capped else t.crash_count
    fields["last_started_at"] = t.now
    if check_lease and t.held is not None and not failures.leases_kept([t.held]):
        return failures.lease_lost(t)
    return tickwrite.build_write(t, fields, report)


def fenced(t: TickRun) -> TickReport:
    log.warning("tick.fenced job=%s epoch=%s: a newer tick owns the job", t.job.job_id, t.epoch)
    return TickReport(t.job.job_id, "fenced", reason="epoch moved on", epoch=t.epoch)


def committed(
    t: TickRun,
    report: TickReport,
    decision: Decision,
    *,
    enqueue: bool = True,
    hooks: list | None = None,
) -> None:
    """After the commit: deliveries handed to the queue (``enqueue``; a batch hands its
    ticks' rows over together), the poller's post-commit effects (added to ``hooks`` as
    ``(job_id, callbacks)`` when given: a batch runs them beside its other ticks),
    schedule hints."""
    job_id = t.job.job_id
    report.committed = True
    if enqueue and report.delivery_ids:
        ids = report.delivery_ids
        transaction.on_commit(lambda: enqueue_deliveries(ids))
    if hooks is None:
        run_after_commit(job_id, report.after_commit)
    elif report.after_commit:
        hooks.append((job_id, report.after_commit))
    if decision.pause_reason:  # beat sends a paused job nothing (redbeat_sync)
        transaction.on_commit(lambda: redbeat_sync.pause_changed([job_id], now=t.now))
    elif decision.not_before is not None:
        _move_entry(job_id, decision.not_before, later_only=True)
    if t.job.one_shot and report.status == "transient" and report.retry_at is None:
        # a one-shot job has no next slot: re-arm its entry for when the breaker allows a trial
        _move_entry(job_id, decision.health.open_until or t.now + t.policy.breaker.cap)
    if log.isEnabledFor(logging.INFO):
        log.info(
            "tick.done job=%s kind=%s status=%s epoch=%s seen=%s dispatched=%s ms=%s%s",
            job_id,
            t.job.kind,
            report.status,
            t.epoch,
            report.items_seen,
            report.items_dispatched,
            report.latency_ms,
            f" error={report.error}" if report.error else "",
        )


def _move_entry(job_id: str, at: datetime, *, later_only: bool = False) -> None:
    """Move the job's RedBeat slot to ``at`` (``later_only``: only if that is later)."""
    try:
        redbeat_sync.move_entry(get_redis(), job_id, at, later_only=later_only)
    except Exception:
        log.warning("tick.entry_not_moved job=%s", job_id, exc_info=True)
