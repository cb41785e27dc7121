"""What a tick leaves in Redis once it ends, in one round trip: its lease released, its
history entry appended, its metrics counted, its place in the slow set kept current."""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings

from .. import history, keys, lease, metricstore
from ..redis import get_redis
from .report import TickReport

log = logging.getLogger("nexopoll.tick")


def release_and_record(
    job_id: str, held, report: TickReport | None, *, now: datetime, manual: bool, dry_run: bool
) -> None:
    """Release the lease and append the tick to its history, in one Redis round trip."""
    try:
        if report is None or dry_run:
            lease.release(get_redis(), held)
            return
        history.record_many(get_redis(), [history_entry(report, now, held, manual=manual)])
    except Exception:  # the lease expires on its own; never mask the tick's result
        log.warning("lease.release_failed job=%s", job_id, exc_info=True)


def history_entry(report: TickReport, now: datetime, held, *, manual: bool = False):
    """The tick's history entry, which also releases ``held`` and records its metrics."""
    return history.Entry(
        report.job_id,
        at=now,
        status=report.status,
        ms=report.latency_ms,
        seen=report.items_seen,
        dispatched=report.items_dispatched,
        error=report.error,
        epoch=report.epoch,
        start_cursor=report.start_cursor,
        reason=report.reason,
        manual=manual,
        held=held,
        metrics=metricstore.tick_writer(report),
        slow=slow_mark(report),
    )


def slow_mark(report: TickReport):
    """Keep the job's place in the slow set (``keys.slow_key``) current, in the same round
    trip: beat batches slow jobs apart from quick ones (polled side by side)."""
    if report.latency_ms is None:
        return None
    limit = settings.NEXOPOLL_BATCH_SLOW_MS
    if report.latency_ms > limit:
        return lambda pipe: pipe.sadd(keys.slow_key(), report.job_id)
    if (report.prev_latency_ms or 0) > limit:
        return lambda pipe: pipe.srem(keys.slow_key(), report.job_id)
    return None
