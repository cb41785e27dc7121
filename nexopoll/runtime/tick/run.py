"""One tick, end to end (DESIGN.md "A tick, end to end").

lease (and its crash marker, one Redis round trip) → read state and its version (the
epoch) → decide whether to run → poller.tick under a deadline → decide (pure) → one
transaction: state + outbox rows WHERE epoch = the version read, which also moves the
epoch on → enqueue deliveries → release the lease (and the crash marker).

Optimistic concurrency: a scheduled tick writes the state row once, at its commit.
Every write to the state row moves the epoch forward, so a tick that read the row
before another tick (or an operator) wrote it cannot commit: a zombie whose lease was
taken over, or a stale reader, commits nothing. A half-open breaker trial and a manual
run still take the epoch before polling (the trial marker must be visible to every
worker while the trial runs).

The commit side (the fenced write staged, committed, and what follows a commit) is
``commit.py``.
"""

from __future__ import annotations

import logging
import time
import traceback
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError

import nexopoll.runtime.tick.commit as commit
import nexopoll.runtime.tick.failures as failures
import nexopoll.runtime.tick.record as record
import nexopoll.runtime.tick.write as tickwrite
from nexopoll.core.breaker import Health
from nexopoll.core.contract import CancelToken, PollContext, TickAck
from nexopoll.core.decide import (
    Decision,
    JobPolicy,
    RunState,
    Skip,
    StartState,
    plan_failure,
    plan_success,
    should_run,
)
from nexopoll.core.errors import ConfigError, ErrorClass, TransientError, classify
from nexopoll.core.redact import redact
from nexopoll.core.schedule import next_slot
from nexopoll.net.transport import host_gate

from .. import definitions, lease, logredact, metricstore, politeness, redbeat_sync, store
from ..definitions import JobDef
from ..host import TickHost
from ..redis import get_redis
from ..registry import get_registry
from ..secretenv import secret_env
from .report import TickReport, TickRun, describe, skipped

log = logging.getLogger("nexopoll.tick")


def tick_job(
    job_id: str,
    *,
    now: datetime,
    lease_ttl_ms: int | None = None,
    manual: bool = False,
    dry_run: bool = False,
    force: bool = False,
) -> TickReport:
    """Run one tick of ``job_id``. ``manual`` (CLI ``run``) bypasses the lease and breaker;
    a paused job is skipped (reason ``paused``) unless ``force`` is given too.

    ``dry_run`` runs the poller and reports what it would deliver and the next cursor,
    committing nothing (a paused job included).
    """
    held = None
    if not manual:
        ttl = lease_ttl_ms or default_lease_ttl_ms()
        held = lease.try_acquire(get_redis(), job_id, ttl)
        if held is None:
            metricstore.count_skipped(job_id)  # no history entry for this one: count it here
            return skipped(job_id, "lease busy")
    report: TickReport | None = None
    try:
        report = _run(job_id, now=now, manual=manual, dry_run=dry_run, force=force, held=held)
        if held is not None and report.reason == "paused":
            park(job_id)
        return report
    except DatabaseError as exc:  # reading the state or taking the epoch: nothing written
        report = failures.db_unavailable(job_id, exc, now=now, where="before the tick")
        return report
    finally:
        if held is not None or (report is not None and not dry_run):
            record.release_and_record(job_id, held, report, now=now, manual=manual, dry_run=dry_run)


def default_lease_ttl_ms() -> int:
    """The lease TTL of a tick whose message names none (DESIGN: at least 30 s)."""
    return int(max(settings.NEXOPOLL_LEASE_MIN_SECS, 30) * 1000)


def _run(
    job_id: str, *, now: datetime, manual: bool, dry_run: bool, force: bool, held
) -> TickReport:
    t = prepare(
        job_id,
        store.load_state(job_id),
        now=now,
        held=held,
        manual=manual,
        dry_run=dry_run,
        force=force,
    )
    if isinstance(t, TickReport):
        return t
    if dry_run:
        return execute(t)[0]
    if (manual or t.trial) and not take_epoch(t, manual=manual):
        return skipped(job_id, "another tick took the epoch")
    report = TickReport(job_id, "fenced", epoch=t.epoch)
    try:
        report = commit.finish(t, *execute(t))
    finally:
        ended(t, report, manual=manual)
    return report


def prepare(
    job_id: str,
    row: dict[str, Any] | None,
    *,
    now: datetime,
    held,
    manual: bool = False,
    dry_run: bool = False,
    force: bool = False,
) -> TickRun | TickReport:
    """What the tick starts from (``row``: its state row), or why it does not run
    (``core.decide.should_run`` decides; this reads what it decides from)."""
    job = definitions.get(job_id, row["definition_hash"]) if row else None
    known = row is not None and job is not None and bool(row["definition_hash"])
    if not known:
        return skipped(job_id, should_run(RunState(known=False), now=now, policy=None).reason)
    assert row is not None and job is not None
    logredact.register(job.secret_values(secret_env()))
    policy = JobPolicy(
        breaker=job.breaker_policy(now),
        alert_cooldown=timedelta(seconds=job.alert_cooldown_secs),
        has_failure_to=bool(job.failure_to),
        max_hint=timedelta(seconds=settings.NEXOPOLL_MAX_INTERVAL_HINT_SECS),
        max_crashes=settings.NEXOPOLL_MAX_CRASHES,
    )
    health = Health(
        consecutive_errors=row["consecutive_errors"],
        open_until=row["breaker_open_until"],
        trips=row["breaker_trips"],
        trial_started_at=row["breaker_trial_at"],
    )
    crash_count = lease.crashes(row, held)
    state = RunState(
        known=True,
        health=health,
        paused=row["paused"],
        crash_count=crash_count,
        manual=manual,
        force=force,
        dry_run=dry_run,
    )
    go = should_run(state, now=now, policy=policy)
    if isinstance(go, Skip):
        return skipped(job_id, go.reason)
    # the tick's epoch: past the version read, and past every tick that took the lease
    # since the last one ended (ticks racing from the same read label their rows apart)
    read = row["epoch"]
    start = StartState(health, row["alert_active"], row["last_failure_alert_at"])
    return TickRun(
        job=job,
        row=row,
        start=start,
        policy=policy,
        epoch=read + (held.started if held is not None else 1),
        crash_count=crash_count,
        now=now,
        held=held,
        next_slot_at=next_slot(job.schedule, after=now, offset=job.offset),
        expect=read,
        trial=go.trial,
        capped=go.capped,
    )


def take_epoch(t: TickRun, *, manual: bool) -> bool:
    """A manual run, or a half-open trial whose marker every worker must see while it
    runs: take the epoch before polling (the old two-write protocol, for these alone)."""
    started = {
        "last_started_at": t.now,
        "crash_count": t.crash_count,
        "running_since": None if manual else t.now,
        "breaker_trial_at": t.trial or t.row["breaker_trial_at"],
    }
    if not store.take_epoch(t.job.job_id, t.expect, started):
        return False
    t.epoch = t.expect = t.expect + 1
    t.row = {**t.row, **started}  # what the commit compares its fields with
    return True


def ended(t: TickRun, report: TickReport, *, manual: bool = False) -> None:
    """After the tick, committed or not: a scheduled tick that did not commit is no
    longer running; the report learns where the tick started."""
    if not report.committed and not manual:
        failures.clear_running(t)
    report.start_cursor = t.row["cursor"]
    report.prev_latency_ms = t.row.get("last_latency_ms")
    report.takeover = t.crash_count > 0  # took over from a tick that never ended


def execute(t: TickRun) -> tuple[TickReport, Decision, TickAck | None, int]:
    """Call the poller (unless the crash cap says not to) and decide what its result means."""
    job, now = t.job, t.now
    host = TickHost(job.job_id, job.agent, job.agent_bindings, secret_env())
    started = time.monotonic()
    ack: TickAck | None = None
    exc: BaseException | None = None
    if t.capped:  # core.decide.should_run: the crash cap is reached
        exc = TransientError(f"the worker died during {t.crash_count} consecutive ticks")
    else:
        try:
            ack = _call_poller(job, t.row["cursor"], now=now, host=host, held=t.held)
        except Exception as e:  # classified below; any exception is a failed tick
            exc = e
    latency_ms = int((time.monotonic() - started) * 1000)
    report = TickReport(job.job_id, "ok", epoch=t.epoch, latency_ms=latency_ms)
    report.poller_metrics = host.metric_counts
    if exc is None:
        assert ack is not None
        decision = plan_success(
            t.start, now=now, policy=t.policy, hint=ack.next_interval_hint, one_shot=job.one_shot
        )
        report.items_seen, report.items_dispatched = ack.items_seen, ack.items_dispatched
        report.next_cursor = ack.next_cursor
        report.deliveries = list(host.deliveries)
        report.after_commit = list(host.post_commit)
    else:
        secrets = job.secret_values(secret_env())
        message = redact(describe(exc, job.job_id), secrets)
        if (
            not isinstance(exc, TransientError | ConfigError)
            and classify(exc) is ErrorClass.TRANSIENT
        ):
            log.warning("tick.unexpected_error job=%s\n%s", job.job_id, redact(_tb(exc), secrets))
        retry_after = getattr(exc, "retry_after", None)
        decision = plan_failure(
            t.start,
            classify(exc),
            message,
            now=now,
            policy=t.policy,
            next_slot_at=t.next_slot_at,
            retry_after=retry_after,
        )
        report.status, report.error = decision.status, message
    report.deliveries += tickwrite.notices(job, decision, now)
    if decision.retry_in is not None:
        report.retry_at = now + decision.retry_in
    return report, decision, ack, latency_ms


def _call_poller(job: JobDef, cursor, *, now: datetime, host: TickHost, held) -> TickAck:
    poller = get_registry().get(job.kind)
    deadline = time.monotonic() + settings.NEXOPOLL_TICK_TIMEOUT_SECS
    if held is not None:  # counted from when the lease was taken, not from the poll's start
        deadline = min(deadline, held.deadline(0.8))
    ctx = PollContext(
        job_id=job.job_id,
        agent_id=job.agent,
        kind=job.kind,
        config=job.expanded_config(secret_env()),
        cursor=cursor,
        now=now,
        interval_hint=job.interval(now),
        cancel=CancelToken(deadline=deadline),
        host=host,
    )
    polite = host_gate.set(politeness.gate_for(job.host_limits))  # per-host caps, this thread
    try:
        ack = poller.tick(ctx)
    except Exception:
        host.raise_if_refused()  # the refused deliver, not what the poller made of it
        raise
    finally:
        host_gate.reset(polite)
    host.raise_if_refused()  # a refused deliver fails the tick even if the poller went on
    if not isinstance(ack, TickAck):
        raise TypeError(f"poller {job.kind!r} returned {type(ack).__name__}, not TickAck")
    return ack


def _tb(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))[-4000:]


def park(job_id: str) -> None:
    """Beat sent a tick of a paused job: take its entry out of the schedule (no more)."""
    try:
        redbeat_sync.park(get_redis(), job_id)
    except Exception:
        log.warning("tick.entry_not_parked job=%s", job_id, exc_info=True)
