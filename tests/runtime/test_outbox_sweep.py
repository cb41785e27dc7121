"""The outbox sweeper queues a pending row once, not at every sweep.

Messages are counted in the Celery queue itself (the broker's Redis list), so a
backlog that nobody consumes shows what the sweeper adds to it.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models.functions import Now
from django.utils import timezone

from nexopoll import tasks
from nexopoll.models import Delivery
from nexopoll.runtime import outbox
from nexopoll.runtime.delivery import deliver_rows, requeue_after
from nexopoll.runtime.tick import tick_job
from tests.support.celeryqueue import DELIVERIES, messages, queued_deliveries
from tests.support.sink import Sink

from .conftest import scripted
from .test_delivery import NOW


def commit_rows(cfg, redis_client, url: str, n: int) -> list[str]:
    agents = {"ana": {"webhook": {"url": url, "allow_private_networks": True}}}
    cfg.write(
        [scripted("a", config={"deliver": {"channel": "webhook", "to": "ops"}})], agents=agents
    )
    cfg.reload()
    redis_client.rpush("test:src:a", *range(1, n + 1))
    return tick_job("a", now=NOW).delivery_ids


def test_rows_queued_after_the_commit_are_not_queued_again_by_the_sweeper(cfg, redis_client):
    with Sink() as sink:
        ids = commit_rows(cfg, redis_client, sink.url, 5)
        # the tick queued its rows after the commit, and marked them; no worker consumes
        # the queue here, so it looks like a backlog to the sweeper
        assert queued_deliveries(redis_client) == {i: 1 for i in ids}
        assert all(r.enqueued_at is not None for r in Delivery.objects.all())
        for _ in range(3):
            assert tasks.sweep_outbox()["queued"] == 0
        assert queued_deliveries(redis_client) == {i: 1 for i in ids}


def test_two_sweeps_in_a_row_enqueue_a_pending_row_once(cfg, redis_client):
    """Rows committed but never queued (the process died between commit and publish)."""
    with Sink() as sink:
        ids = commit_rows(cfg, redis_client, sink.url, 5)
        redis_client.delete(DELIVERIES)
        Delivery.objects.update(enqueued_at=None)
        assert tasks.sweep_outbox()["queued"] == 5
        assert queued_deliveries(redis_client) == {i: 1 for i in ids}
        assert all(r.enqueued_at is not None for r in Delivery.objects.all())
        length = redis_client.llen(DELIVERIES)
        for _ in range(3):  # later sweeps leave the queued rows alone
            assert tasks.sweep_outbox()["queued"] == 0
        assert redis_client.llen(DELIVERIES) == length == 1  # one message of 5 rows
        assert queued_deliveries(redis_client) == {i: 1 for i in ids}
        assert [t for t, _ in messages(redis_client, DELIVERIES)] == ["nexopoll.deliver"]


def test_a_row_whose_message_was_lost_is_queued_again_after_the_window(cfg, redis_client):
    """A message older than the broker's visibility timeout (plus a margin) is presumed
    lost (a Redis restart without persistence): the sweeper replaces it."""
    with Sink() as sink:
        (row_id,) = commit_rows(cfg, redis_client, sink.url, 1)
        tasks.sweep_outbox()
        redis_client.delete(DELIVERIES)  # the queue is lost
        assert tasks.sweep_outbox()["queued"] == 0  # inside the window: trusted
        Delivery.objects.filter(id=row_id).update(enqueued_at=Now() - requeue_after())
        assert tasks.sweep_outbox()["queued"] == 1
        assert queued_deliveries(redis_client) == {row_id: 1}
        # the worker takes the message: the mark is cleared with the claim, and sent
        assert tasks.deliver([row_id]) == {row_id: "sent"}
        row = Delivery.objects.get(id=row_id)
        assert row.status == "sent" and row.enqueued_at is None
        assert [h["delivery_id"] for h in sink.hits] == [row_id]


def test_a_short_retry_is_queued_once_by_the_deliver_task_not_again_by_the_sweeper(
    cfg, redis_client
):
    with Sink() as sink:
        sink.server.route("POST", "/hook", lambda req: (503, {}, b""))
        (row_id,) = commit_rows(cfg, redis_client, sink.url, 1)
        redis_client.delete(DELIVERIES)
        assert tasks.deliver([row_id]) == {row_id: "retry"}
        assert queued_deliveries(redis_client) == {row_id: 1}  # with its countdown
        assert Delivery.objects.get(id=row_id).enqueued_at is not None
        # the countdown has run out while the queue is backlogged: the row is due
        Delivery.objects.filter(id=row_id).update(next_attempt_at=timezone.now())
        assert tasks.sweep_outbox()["queued"] == 0
        assert queued_deliveries(redis_client) == {row_id: 1}


def take_at_once_and_fail(redis_client, sink):
    """A fast worker: takes every deliver message the moment it is published (Celery's
    ``after_task_publish``) and tries its rows while the receiver fails."""
    from celery.signals import after_task_publish

    sink.server.route("POST", "/hook", lambda req: (503, {}, b""))
    outcomes: dict[str, str] = {}

    def handler(sender=None, **kw):
        if sender != "nexopoll.deliver":
            return
        ids = [i for t, args in messages(redis_client, DELIVERIES) if t == sender for i in args[0]]
        redis_client.delete(DELIVERIES)
        outcomes.update(deliver_rows(ids, clock=timezone.now))

    after_task_publish.connect(handler, weak=False)
    return outcomes, lambda: after_task_publish.disconnect(handler)


def test_a_row_taken_before_enqueue_returns_is_left_unmarked(cfg, redis_client):
    """A worker claims the row between the publish and the return of ``enqueue``: its
    claim cleared the mark, and nothing marks it again, so the sweeper queues the retry."""
    with Sink() as sink:
        (row_id,) = commit_rows(cfg, redis_client, sink.url, 1)
        redis_client.delete(DELIVERIES)
        Delivery.objects.update(enqueued_at=None, next_attempt_at=timezone.now())
        outcomes, stop = take_at_once_and_fail(redis_client, sink)
        try:
            assert outbox.enqueue([row_id]) == 1
        finally:
            stop()
        assert outcomes == {row_id: "retry"}
        row = Delivery.objects.get(id=row_id)
        assert row.status == "pending" and row.enqueued_at is None, "a stale mark"
        later = row.next_attempt_at + timedelta(seconds=1)
        assert outbox.sweep(now=later)["queued"] == 1


def test_a_failed_publish_leaves_the_rows_unmarked(cfg, redis_client):
    """The broker refuses the message (Redis out of memory): the rows are not marked as
    queued, so the next sweep queues them at once."""
    with Sink() as sink:
        ids = commit_rows(cfg, redis_client, sink.url, 3)
        redis_client.delete(DELIVERIES)
        Delivery.objects.update(enqueued_at=None)
        redis_client.config_set("maxmemory-policy", "noeviction")
        redis_client.config_set("maxmemory", 1)
        try:
            assert outbox.enqueue(ids) == 0
        finally:
            redis_client.config_set("maxmemory", 0)
        assert not Delivery.objects.filter(enqueued_at__isnull=False).exists()
        assert redis_client.llen(DELIVERIES) == 0
        assert outbox.sweep(now=NOW + timedelta(minutes=1))["queued"] == 3
        assert queued_deliveries(redis_client) == {i: 1 for i in ids}
