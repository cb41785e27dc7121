"""Outbox rows are due by the DB's clock, whichever worker wrote them (RELIABILITY
row 16): a worker whose clock runs 300 s fast (or slow) neither delays the rows it
writes nor holds back the rows it sends or sweeps. The worker's clock is moved with
time-machine (Python's clocks only: the DB server and Redis keep the true time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from nexopoll import tasks
from nexopoll.models import Delivery
from nexopoll.runtime import dbclock
from nexopoll.runtime.tick import tick_job
from tests.support.celeryqueue import deliver_etas
from tests.support.sink import Sink

from .conftest import scripted

SKEW = timedelta(seconds=300)


def true_now(redis_client):
    """The machine's true time (Redis' clock, outside time-machine's reach)."""
    sec, usec = redis_client.time()
    return datetime.fromtimestamp(sec + usec / 1e6, tz=UTC)


@pytest.fixture
def rows(cfg, redis_client):
    def commit(url: str, n: int, *, skew=timedelta(0)) -> list[str]:
        agents = {"ana": {"webhook": {"url": url, "allow_private_networks": True}}}
        cfg.write(
            [scripted("a", config={"deliver": {"channel": "webhook", "to": "ops"}})], agents=agents
        )
        cfg.reload()
        redis_client.rpush("test:src:a", *range(1, n + 1))
        with time_machine.travel(timezone.now() + skew, tick=True):
            return tick_job("a", now=timezone.now()).delivery_ids

    dbclock.forget()
    yield commit
    dbclock.forget()


@pytest.mark.parametrize("skew", [SKEW, -SKEW])
def test_a_skewed_worker_stamps_its_rows_by_the_db_clock(rows, redis_client, skew):
    with Sink() as sink:
        ids = rows(sink.url, 3, skew=skew)
        truth = true_now(redis_client)
        for row in Delivery.objects.filter(id__in=ids):
            assert abs(row.next_attempt_at - truth) < timedelta(seconds=3), row.next_attempt_at
            assert abs(row.created_at - truth) < timedelta(seconds=3)
        # a worker with the right clock sends them at once
        assert tasks.deliver.run(ids) == dict.fromkeys(ids, "sent")
        assert sorted(h["delivery_id"] for h in sink.hits) == sorted(ids)


def test_a_slow_worker_sends_rows_due_now(rows, redis_client):
    with Sink() as sink:
        ids = rows(sink.url, 2)
        with time_machine.travel(timezone.now() - SKEW, tick=True):
            assert tasks.deliver.run(ids) == dict.fromkeys(ids, "sent")
        assert len(sink.hits) == 2


def test_a_slow_sweeper_queues_rows_due_now(rows, redis_client):
    with Sink() as sink:
        ids = rows(sink.url, 2)
        redis_client.delete("nexopoll", "nexopoll.deliveries")
        # written a while ago (past the sweeper's grace), their message lost
        Delivery.objects.update(
            created_at=true_now(redis_client) - timedelta(seconds=30), enqueued_at=None
        )
        with time_machine.travel(timezone.now() - SKEW, tick=True):
            assert tasks.sweep_outbox()["queued"] == len(ids)
        # and a fast one does not send a retry early: its backoff is in DB time too
        sink.server.route("POST", "/hook", lambda req: (503, {}, b""))
        with time_machine.travel(timezone.now() + SKEW, tick=True):
            assert tasks.deliver.run(ids[:1]) == {ids[0]: "retry"}
            due = Delivery.objects.get(id=ids[0]).next_attempt_at
            assert due - true_now(redis_client) < timedelta(seconds=30)
            assert tasks.deliver.run(ids[:1]) == {ids[0]: "wait"}


def test_a_fast_worker_requeues_a_waiting_row_with_an_eta_in_db_time(rows, redis_client):
    """A row not due for 2 s more goes back on the queue with a countdown; Celery would
    make that an eta by the fast worker's clock (300 s late for everyone else)."""
    with Sink() as sink:
        (row_id,) = rows(sink.url, 1)
        due = true_now(redis_client) + timedelta(seconds=2)
        Delivery.objects.filter(id=row_id).update(next_attempt_at=due)
        redis_client.delete("nexopoll", "nexopoll.deliveries")
        with time_machine.travel(timezone.now() + SKEW, tick=True):
            assert tasks.deliver.run([row_id]) == {row_id: "wait"}
        eta = datetime.fromisoformat(deliver_etas(redis_client)[row_id])
        assert abs(eta - due) < timedelta(seconds=1), eta - due
