"""Thin Celery tasks: read the clock once, call one runtime function."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from .runtime import delivery, outbox, politeness
from .runtime.tick import batch, tick_job

log = logging.getLogger("nexopoll.tick")

DB_RETRIES = 6  # 0.5 + 1 + 2 + 4 + 8 + 16 s: then the next slot takes over


@shared_task(name="nexopoll.tick", bind=True, ignore_result=True, max_retries=None)
def tick(self, job_id: str, lease_ttl_ms: int | None = None) -> str:
    """One scheduled tick. A transient failure is retried through Celery with the
    countdown the job's stored health allows (never past the next slot, never into
    an open breaker). A transient DB error (nothing committed) is retried with a
    short doubling backoff, on a fresh connection, while that lands before the next slot."""
    with politeness.deferring(job_id):  # host turns end with the lease, one round trip
        report = tick_job(job_id, now=timezone.now(), lease_ttl_ms=lease_ttl_ms)
    if report.db_error:
        countdown = min(0.5 * 2**self.request.retries, 30.0)
        at = timezone.now() + timedelta(seconds=countdown)
        if self.request.retries < DB_RETRIES and (
            report.next_slot_at is None or at < report.next_slot_at
        ):
            raise self.retry(countdown=countdown)
        return report.status
    if report.retry_at is not None and report.committed:
        # the retry time was checked against the next slot from the tick's start,
        # so it is an absolute eta, not a countdown from now
        raise self.retry(eta=max(report.retry_at, timezone.now()))
    return report.status


@shared_task(name="nexopoll.tick_batch", ignore_result=True)
def tick_batch(jobs: list[list]) -> dict[str, int]:
    """Scheduled ticks of many jobs that fell due together (beat's batched dispatch):
    ``jobs`` is ``[[job_id, lease_ttl_ms], ...]``. Each job keeps its own lease, epoch,
    commit and retry (runtime/tick/batch.py); returns how many ended in each status."""
    reports = batch.run_batch(
        [(str(j), ttl and int(ttl)) for j, ttl in jobs], clock=timezone.now, requeue=requeue_tick
    )
    return dict(Counter(report.status for report in reports))


def requeue_tick(job_id: str, lease_ttl_ms: int, **options) -> None:
    """Queue one ``nexopoll.tick`` for ``job_id``: a job a batch hands back (a spilled
    job) or retries alone; ``options`` go to ``apply_async`` (countdown, eta, retries)."""
    try:
        tick.apply_async((job_id,), {"lease_ttl_ms": lease_ttl_ms}, **options)
    except Exception:  # the next slot ticks it
        log.warning("tick.requeue_failed job=%s", job_id, exc_info=True)


@shared_task(name="nexopoll.deliver", ignore_result=True)
def deliver(ids: list[str]) -> dict[str, str]:
    outcomes = delivery.deliver_rows(ids, clock=timezone.now)
    deferred = [i for i, outcome in outcomes.items() if outcome == "deferred"]
    if deferred:
        outbox.enqueue(deferred)
    # short backoffs, paced rows and rows waiting for a rate-limit turn go straight
    # back on the queue with a countdown; the sweeper covers the rest when due
    later = [i for i, outcome in outcomes.items() if outcome in ("retry", "wait")]
    soon = delivery.requeue_soon(later, now=timezone.now())
    if soon is not None:
        outbox.enqueue(soon[0], countdown=soon[1])
    return outcomes


@shared_task(name="nexopoll.sweep_outbox", ignore_result=True)
def sweep_outbox() -> dict[str, int]:
    return outbox.sweep(now=timezone.now())


@shared_task(name="nexopoll.run_now", ignore_result=False, track_started=True)
def run_now(job_id: str, dry_run: bool = False, force: bool = False) -> dict:
    """An operator's "run now" or dry run (admin, API): a manual tick on a worker, never
    in the web process. Its outcome (secrets masked) is kept by django-celery-results,
    where the API's status URL, the admin's job page and its dry-run page read it."""
    from .services.runs import outcome_of

    return outcome_of(job_id, dry_run=dry_run, force=force)
