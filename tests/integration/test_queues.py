"""Ticks and deliveries on queues of their own (settings ``CELERY_TASK_ROUTES``).

A backlog of 10,000 deliveries (outbox rows, one ``nexopoll.deliver`` message each,
queued before the worker starts) must not delay ticks: with the Procfile's worker
(``-P threads``, consuming both queues) and beat against real Redis, every tick of a
job starts within a second of its slot while most of the backlog is still queued.
On one shared queue the ticks waited behind the whole backlog.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.utils import timezone

from nexopoll.celery import app
from nexopoll.models import Delivery
from tests.support.procs import wait_for

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BACKLOG = 10_000
EVERY = 3  # seconds; slots are epoch + k * EVERY (no stagger in these jobs)
THREADS = ("-P", "threads", "-c", "4")


def test_routes():
    route = lambda task: app.amqp.router.route({}, task)["queue"].name  # noqa: E731
    ticks, deliveries = settings.NEXOPOLL_TICK_QUEUE, settings.NEXOPOLL_DELIVERY_QUEUE
    assert ticks == settings.NEXOPOLL_REDIS_PREFIX and deliveries != ticks
    for task in ("nexopoll.tick", "nexopoll.tick_batch", "nexopoll.run_now"):
        assert route(task) == ticks, task
    for task in ("nexopoll.deliver", "nexopoll.sweep_outbox"):
        assert route(task) == deliveries, task
    # a worker without -Q consumes both
    assert {q.name for q in app.amqp.queues.values()} >= {ticks, deliveries}


def test_beat_publishes_only_tick_queue_tasks_itself():
    """Beat's fast path (runtime/publish.py) writes to the tick queue; the outbox sweep's
    entry goes through Celery's apply_async, which follows task_routes."""
    from types import SimpleNamespace

    from nexopoll.runtime.publish import TickPublisher

    publisher = TickPublisher(app)
    entry = lambda task: SimpleNamespace(task=task, options={"expires": 5})  # noqa: E731
    assert publisher.can_publish(entry("nexopoll.tick"))
    assert not publisher.can_publish(entry("nexopoll.sweep_outbox"))
    assert not publisher.can_publish(entry("nexopoll.deliver"))


def queue_backlog(redis_client, queue: str, ids: list[str]) -> None:
    """Push one ``nexopoll.deliver`` message per row onto ``queue``, as kombu's Redis
    transport stores them (a JSON envelope with a base64 body), in one pipeline."""
    envelopes = []
    for row_id in ids:
        task_id = str(uuid.uuid4())
        msg = app.amqp.create_task_message(task_id, "nexopoll.deliver", [[row_id]], {})
        body = json.dumps(msg.body).encode()
        envelopes.append(
            json.dumps(
                {
                    "body": base64.b64encode(body).decode(),
                    "content-encoding": "utf-8",
                    "content-type": "application/json",
                    "headers": msg.headers,
                    "properties": {
                        "correlation_id": task_id,
                        "reply_to": "",
                        "delivery_mode": 2,
                        "delivery_info": {"exchange": "", "routing_key": queue},
                        "priority": 0,
                        "body_encoding": "base64",
                        "delivery_tag": str(uuid.uuid4()),
                    },
                },
                default=str,
            )
        )
    pipe = redis_client.pipeline(transaction=False)
    for start in range(0, len(envelopes), 1000):
        pipe.lpush(queue, *envelopes[start : start + 1000])
    pipe.execute()


def test_a_delivery_backlog_does_not_delay_ticks(stack):
    st = stack
    st.write([job("q", every=EVERY)])
    st.reload()
    now = timezone.now()
    rows = [
        Delivery(
            job_id="bulk",
            agent="ana",
            epoch=1,
            channel="webhook",
            recipient="ops",
            payload={"text": f"backlog {i}"},
            next_attempt_at=now,
            enqueued_at=now,
            created_at=now,
        )
        for i in range(BACKLOG)
    ]
    Delivery.objects.bulk_create(rows, batch_size=2000)
    queue = settings.NEXOPOLL_DELIVERY_QUEUE
    queue_backlog(st.redis, queue, [str(r.id) for r in rows])
    assert st.redis.llen(queue) == BACKLOG

    st.worker(extra=THREADS)
    st.beat()
    wait_for(lambda: len(st.sink.hits) >= 50, 60, what="the backlog being delivered")
    # beat's first dispatch of a new job is at its start, not on a slot: count from after
    wait_for(lambda: st.redis.llen("test:now:q") >= 1, 2 * EVERY + 10, what="q's first tick")
    ticks_before = st.redis.llen("test:now:q")
    wait_for(
        lambda: st.redis.llen("test:now:q") >= ticks_before + 3,
        4 * EVERY + 10,
        interval=0.1,
        what="three ticks of q while the backlog drains",
    )
    left = st.redis.llen(queue)
    starts = [float(t) for t in st.redis.lrange("test:now:q", ticks_before, -1)]
    lags = [t % EVERY for t in starts]  # seconds after the slot (every slot: the count above)
    print(
        f"backlog left {left}/{BACKLOG}; tick start lags {[round(x, 3) for x in lags]}; "
        f"delivered {len(st.sink.hits)}"
    )
    assert left >= BACKLOG // 2, "the backlog drained too fast to show anything"
    assert all(lag < 1 for lag in lags), (lags, [datetime.fromtimestamp(t, UTC) for t in starts])
