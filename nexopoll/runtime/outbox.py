"""Moving outbox rows onto the queue: enqueue, the sweeper, releasing held rows.

A row is queued at most once at a time: before a deliver message is published the
row's ``enqueued_at`` is stamped (DB clock), taking the row clears it, and a publish
that fails clears it again, so the sweeper skips rows whose message is still on its
way (:func:`delivery.requeue_after`) instead of queueing every pending row again at
every sweep.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import DatabaseError
from django.db.models.functions import Now

from nexopoll.channels import get_channel
from nexopoll.core.errors import ConfigError

from ..models import Delivery, DeliveryStatus
from . import dbclock, delivery

log = logging.getLogger("nexopoll.delivery")

BATCH = 50  # rows per deliver message


def enqueue(ids: list[str], *, countdown: float | None = None) -> int:
    """Mark rows enqueued and publish deliver messages for them (in batches).

    The mark comes first: a worker may take the message the moment it is published,
    and taking the row clears the mark; a mark written after the publish would
    outlive that claim and hide the row from the sweeper for the whole window. A
    failed publish clears the mark again (logged), so the next sweep queues those
    rows. Returns how many rows were queued. Never raises: it runs after commits
    (``transaction.on_commit``), where an error would hide the commit.
    """
    from nexopoll.celery import app

    # Celery would turn a countdown into an eta by this process's clock, which a worker
    # whose clock is right then holds for as long as this one runs fast: the eta is
    # taken in the DB's clock instead
    eta = None if countdown is None else dbclock.now() + timedelta(seconds=countdown)
    queued = 0
    for start in range(0, len(ids), BATCH):
        batch = [str(i) for i in ids[start : start + BATCH]]
        _mark(batch, enqueued=True)
        try:
            app.send_task("nexopoll.deliver", args=[batch], eta=eta)
        except Exception:
            log.warning(
                "delivery.enqueue_failed rows=%s: the sweeper will send them",
                len(batch),
                exc_info=True,
            )
            _mark(batch, enqueued=False)
            continue
        queued += len(batch)
    return queued


def _mark(batch: list[str], *, enqueued: bool) -> None:
    """Stamp (DB clock) or clear the pending rows' ``enqueued_at``; a DB error is logged:
    an unmarked row is queued once more by the sweeper, a row left marked after a
    failed publish waits for :func:`delivery.requeue_after`."""
    try:
        Delivery.objects.filter(id__in=batch, status=DeliveryStatus.PENDING).update(
            enqueued_at=Now() if enqueued else None
        )
    except DatabaseError:
        log.warning(
            "delivery.mark_enqueued_failed rows=%s enqueued=%s",
            len(batch),
            enqueued,
            exc_info=True,
        )


def forget_sent(ids: list[str]) -> None:
    """Before a forced redeliver: let each row's channel forget that it sent the row
    (its ``forget_sent(ids)``, if it has one: the stream channel drops its per-row
    marker), so the send goes out again instead of being swallowed as a repeat.
    Raises when a channel cannot forget (Redis down): the redeliver is refused."""

    by_channel: dict[str, list[str]] = {}
    for row_id, name in Delivery.objects.filter(id__in=ids).values_list("id", "channel"):
        by_channel.setdefault(name, []).append(str(row_id))
    for name, rows in sorted(by_channel.items()):
        try:
            forget = getattr(get_channel(name), "forget_sent", None)
        except ConfigError:  # an unknown channel: the send holds the row
            continue
        if forget is not None:
            forget(rows)


def release_held(*, now: datetime, due_only: bool = False) -> list[str]:
    """Move held rows back to pending, due at ``now``; return their ids.

    ``due_only``: only rows whose periodic retry (``next_attempt_at``) has come.
    """
    held = Delivery.objects.filter(status=DeliveryStatus.HELD)
    if due_only:
        held = held.filter(next_attempt_at__lte=now)
    ids = [str(i) for i in held.values_list("id", flat=True)]
    released: list[str] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        Delivery.objects.filter(id__in=chunk, status=DeliveryStatus.HELD).update(
            status=DeliveryStatus.PENDING, next_attempt_at=now, claimed_until=None
        )
        released += chunk
    if released:
        log.info("delivery.released rows=%s due_only=%s", len(released), due_only)
    return released


def retry_held_after_reload(*, now: datetime) -> int:
    """A reload may have fixed what held rows wait for: try every one of them now
    (``now`` from the reloading process's clock, stamped in the DB's)."""
    return enqueue(release_held(now=dbclock.to_db(now)))


def sweep(*, now: datetime) -> dict[str, int]:
    """One sweeper pass: dead-letter rows out of attempts, release held rows whose
    periodic retry has come, and queue due rows nobody has queued recently. ``now`` is
    read from this process's clock (compared in the DB's)."""
    now = dbclock.to_db(now)
    dead = delivery.dead_letter_exhausted(now=now)
    released = release_held(now=now, due_only=True)
    ids = delivery.due_rows(now=now)  # released rows are among them: due now, not queued
    return {"dead": dead, "released": len(released), "queued": enqueue(ids)}
