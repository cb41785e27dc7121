"""A tick that cannot commit: DB errors, a lease that could not be extended.

Transient DB errors (a lost connection, a lock or statement timeout) leave nothing
written and are retried by the task; a value the DB refuses pauses the job with
the reason (a second, small write after the rollback) and alerts ``failure_to``.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import DatabaseError, transaction

import nexopoll.runtime.tick.write as write
from nexopoll.core.decide import plan_failure
from nexopoll.core.errors import ErrorClass, classify
from nexopoll.core.redact import redact

from .. import lease, store
from ..redis import get_redis
from ..secretenv import secret_env
from ..store import Fenced
from .report import TickReport, TickRun, describe, enqueue_deliveries

log = logging.getLogger("nexopoll.tick")


def extended(held: lease.Lease) -> bool:
    """Extend the lease before a late commit; an unreachable Redis counts as lost."""
    try:
        return lease.extend(get_redis(), held)
    except Exception as exc:
        log.warning("lease.extend_failed job=%s: %s", held.job_id, type(exc).__name__)
        return False


def holds(held: lease.Lease) -> bool:
    """Whether the lease is still ours; an unreachable Redis counts as lost."""
    try:
        return lease.holds(get_redis(), held)
    except Exception as exc:
        log.warning("lease.check_failed job=%s: %s", held.job_id, type(exc).__name__)
        return False


def db_unavailable(job_id: str, exc: DatabaseError, *, now: datetime, where: str) -> TickReport:
    """A transient DB error before or at commit: nothing committed; the task retries soon."""
    store.drop_if_unusable()
    message = f"database unavailable {where}: {store.describe_db_error(exc)}"
    log.warning("tick.db_error job=%s class=%s %s", job_id, type(exc).__name__, message)
    return TickReport(
        job_id, "transient", reason="database unavailable", error=message, db_error=True
    )


def leases_kept(leases: list[lease.Lease]) -> set[str]:
    """The jobs of ``leases`` whose ticks may commit now. A lease older than its TTL ran
    out (another tick may own the job): never. Past half its TTL: once extended (all of
    them in one round trip; an unreachable Redis counts as lost)."""
    kept = {held.job_id for held in leases if held.age_ms() <= held.ttl_ms / 2}
    late = [held for held in leases if held.ttl_ms / 2 < held.age_ms() < held.ttl_ms]
    if late:
        try:
            done = lease.extend_many(get_redis(), late)
        except Exception as exc:
            log.warning("lease.extend_failed jobs=%s: %s", len(late), type(exc).__name__)
            done = [False] * len(late)
        kept |= {held.job_id for held, ok in zip(late, done, strict=True) if ok}
    return kept


def lease_lost(t: TickRun) -> TickReport:
    log.warning("lease.lost job=%s epoch=%s: not committing", t.job.job_id, t.epoch)
    return TickReport(t.job.job_id, "fenced", reason="lease lost before commit", epoch=t.epoch)


def landed(exc: BaseException, writes: list[store.TickWrite]) -> set[str]:
    """After a commit raised ``exc``: the jobs of ``writes`` whose commit is in the DB all
    the same (the connection was lost after COMMIT was sent: the reply never came)."""
    if not isinstance(exc, DatabaseError):  # raised before the COMMIT left: rolled back
        return set()
    store.drop_if_unusable()
    try:
        found = store.landed(writes)
    except DatabaseError as again:  # still down: unknown; the retry's read will tell
        store.drop_if_unusable()
        log.warning("tick.commit_outcome_unknown jobs=%s: %s", len(writes), type(again).__name__)
        return set()
    for job_id in found:
        log.warning("tick.commit_reply_lost job=%s: the commit landed", job_id)
    return found


def commit_failed(t: TickRun, exc: BaseException, latency_ms: int) -> TickReport:
    """The commit raised: the transaction rolled back whole (state, cursor, outbox rows).

    A transient DB error (connection lost, lock or statement timeout) is recorded on the
    state row if the DB answers and retried. A permanent one (the DB refuses a value)
    would fail on every tick: it pauses the job with the reason, alerting ``failure_to``.
    Any other exception (a value the driver cannot encode, a bug) is classified as a
    poller's failure would be, and recorded as one: status, error count, breaker, alert.
    """
    job_id, secrets = t.job.job_id, t.job.secret_values(secret_env())
    if not isinstance(exc, DatabaseError):
        return _commit_raised(t, exc, latency_ms, secrets)
    if store.db_error_class(exc) is ErrorClass.TRANSIENT:
        report = db_unavailable(job_id, exc, now=t.now, where="at commit")
        report.epoch, report.next_slot_at = t.epoch, t.next_slot_at
        report.error = redact(report.error, secrets)
        failed = {"last_status": "transient", "last_error": report.error, "updated_at": t.now}
        if t.held is None or holds(t.held):  # a zombie records nothing: see clear_running
            best_effort(lambda: store.record_failure(job_id, t.epoch, failed, t.expect))
        return report
    store.drop_if_unusable()
    message = f"the database refused the tick's commit: {store.describe_db_error(exc)}"
    log.error("tick.commit_refused job=%s epoch=%s %s", job_id, t.epoch, message)
    decision = plan_failure(
        t.start,
        ErrorClass.PERMANENT,
        message,
        now=t.now,
        policy=t.policy,
        next_slot_at=t.next_slot_at,
    )
    return _record_failure(t, decision, "commit refused", message, latency_ms)


def _commit_raised(t: TickRun, exc: BaseException, latency_ms: int, secrets) -> TickReport:
    """A commit that raised something other than a DB error: nothing was written."""
    store.drop_if_unusable()
    text = f"the tick's commit failed: {type(exc).__name__}: {describe(exc)}"
    # what made the commit fail may be in the text (a character the driver cannot encode)
    message = redact(text, secrets).encode("utf-8", "backslashreplace").decode("utf-8")
    log.error("tick.commit_failed job=%s epoch=%s %s", t.job.job_id, t.epoch, message)
    decision = plan_failure(
        t.start, classify(exc), message, now=t.now, policy=t.policy, next_slot_at=t.next_slot_at
    )
    report = _record_failure(t, decision, "commit failed", message, latency_ms)
    if decision.retry_in is not None:
        report.retry_at = t.now + decision.retry_in
    return report


def _record_failure(t: TickRun, decision, reason: str, message: str, latency_ms: int) -> TickReport:
    """Commit ``decision`` (a failed tick's state, its alert) in place of the tick's own
    write, without the cursor or the items' outbox rows."""
    job_id = t.job.job_id
    fields = write.state_fields(
        decision, now=t.now, latency_ms=latency_ms, nxt=t.next_slot_at, ack=None
    )
    fields["crash_count"] = 0
    report = TickReport(
        job_id,
        decision.status,
        reason=reason,
        epoch=t.epoch,
        error=message,
        latency_ms=latency_ms,
    )
    report.deliveries = write.notices(t.job, decision, t.now)
    try:
        write.commit_fields(t, fields, report)
    except Fenced:
        return report
    except Exception:  # the alert row itself may be what the DB refuses: state alone
        store.drop_if_unusable()
        report.deliveries = []
        if not best_effort(lambda: write.commit_fields(t, fields, report)):
            return report
    report.committed = True
    if report.delivery_ids:
        ids = report.delivery_ids
        transaction.on_commit(lambda: enqueue_deliveries(ids))
    return report


def best_effort(write) -> bool:
    """Run a small DB write that may fail too (the DB is still down): True if it landed."""
    try:
        write()
    except Exception as exc:  # a DB error, Fenced, a value the driver cannot encode
        store.drop_if_unusable()
        log.warning("tick.record_failed: %s", type(exc).__name__)
        return False
    return True


def clear_running(t: TickRun) -> None:
    """A tick that ends without committing (fenced, lease lost, an error) is no crash.

    Only a tick that took the epoch before polling (``tick.take_epoch``: its epoch is
    the version it compares on) marked the row running; any other wrote nothing, and
    writes nothing now: a clean-up write moves the epoch, which would fence the tick
    that took its lease over. A tick that took the epoch clears its mark only while it
    still holds its lease, for the same reason.
    """
    job_id = t.job.job_id
    if t.epoch != t.expect or (t.held is not None and not holds(t.held)):
        return
    try:
        store.clear_running(job_id, t.epoch)
    except DatabaseError as exc:  # the DB is down or locked: the tick already said so
        store.drop_if_unusable()
        log.warning("tick.clear_running_failed job=%s: %s", job_id, type(exc).__name__)
    except Exception:
        log.warning("tick.clear_running_failed job=%s", job_id, exc_info=True)
