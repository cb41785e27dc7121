"""RabbitMQ as the broker (CELERY_BROKER_URL=amqp://...), Redis still at REDIS_URL.

A private RabbitMQ node per module (tests/support/rabbit.py), never the machine's:
beat's single and batched ticks, run-now, the outbox sweeper and Flower's task events
all go through it; its queue is durable (quorum); and a SIGKILLed broker restarted a
few seconds later loses no item (RELIABILITY row 60).
"""

from __future__ import annotations

import subprocess
import sys
import time

import kombu
import pytest
import requests
from django.utils import timezone

from nexopoll.models import Delivery
from tests.support.procs import ROOT, CeleryProc, wait_for
from tests.support.rabbit import RabbitNode, rabbitmq_server
from tests.support.sink import assert_no_loss_dup_safe

from .conftest import job, start_flower

QUEUES = ("nexopoll", "nexopoll.deliveries")  # ticks; deliveries (settings: task_routes)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def rabbit_node():
    if rabbitmq_server() is None:
        pytest.skip("SKIPPED: rabbitmq-server is not installed (CI installs it: .ci/run)")
    node = RabbitNode()
    try:
        node.start()
    except Exception as exc:
        node.cleanup()
        pytest.skip(f"SKIPPED: a private RabbitMQ node could not start: {exc}")
    yield node
    node.cleanup()


@pytest.fixture
def rstack(stack, rabbit_node):
    """The stack with RabbitMQ as its broker; the queue is deleted after each test."""
    if rabbit_node.proc is None:  # a test killed it and failed before restarting it
        rabbit_node.start()
    stack.env_extra["CELERY_BROKER_URL"] = rabbit_node.url
    stack.rabbit = rabbit_node
    yield stack
    stack.stop()
    with kombu.Connection(rabbit_node.url, connect_timeout=5) as conn:
        for queue in QUEUES:
            try:
                conn.default_channel.queue_delete(queue)
            except Exception:
                pass


def queue_info(node: RabbitNode, queue: str = "nexopoll") -> dict:
    """``durable`` and ``type`` of a nexopoll queue, as the node reports them."""
    out = subprocess.run(
        [
            "/usr/lib/rabbitmq/bin/rabbitmqctl",
            "-n",
            node.name,
            "list_queues",
            "-q",
            "--no-table-headers",
            "name",
            "durable",
            "type",
        ],
        env=node.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for line in out.splitlines():
        name, durable, kind = line.split()
        if name == queue:
            return {"durable": durable == "true", "type": kind}
    raise AssertionError(f"no {queue} queue on the node:\n{out}")


def test_ticks_single_and_batched_and_run_now_go_through_rabbitmq(rstack):
    jobs = [job(f"j{i}") for i in range(6)]
    rstack.write(jobs)
    rstack.reload()
    for i in range(6):
        rstack.publish(f"j{i}", 1, 2)
    rstack.worker(extra=("-E",))
    # batched publishing as soon as 3 ticks fall due together (six jobs every second)
    rstack.beat(NEXOPOLL_BATCH_MIN="3")
    wait_for(
        lambda: all(len(rstack.sink.item_ids(f"j{i}")) >= 2 for i in range(6)),
        60,
        what="every job's items delivered over RabbitMQ",
    )
    for i in range(6):
        assert_no_loss_dup_safe(rstack.sink, f"j{i}", [1, 2])
    assert f"transport:   amqp://guest:**@127.0.0.1:{rstack.rabbit.port}" in rstack.procs[0].text()
    assert not rstack.redis.exists(*QUEUES)  # nothing went to a Redis list
    for queue in QUEUES:  # the tick queue and the delivery queue
        assert queue_info(rstack.rabbit, queue) == {"durable": True, "type": "quorum"}

    # run-now, from another process configured the same way (the web's path)
    out = (
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import django; django.setup(); from nexopoll.services import runs; "
                "print(runs.start('j0'))",
            ],
            cwd=ROOT,
            env=rstack.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    from django_celery_results.models import TaskResult

    wait_for(
        lambda: TaskResult.objects.filter(task_id=out, status="SUCCESS").exists(),
        30,
        what="the run-now task succeeded on the worker",
    )


def test_the_outbox_sweeper_queues_pending_rows_over_rabbitmq(rstack):
    from nexopoll.runtime.tick import tick_job

    rstack.write([job("a", every=3600)])
    rstack.reload()
    rstack.publish("a", 1, 2, 3)
    # committed here, their messages sent to this process's broker (Redis) that no
    # worker reads: as if the publish after the commit had been lost
    ids = tick_job("a", now=timezone.now()).delivery_ids
    assert len(ids) == 3
    Delivery.objects.update(enqueued_at=None)
    rstack.worker()
    rstack.beat()  # its sweep entry runs the sweeper on the worker, over RabbitMQ
    wait_for(lambda: len(rstack.sink.item_ids("a")) >= 3, 60, what="the swept rows delivered")
    assert_no_loss_dup_safe(rstack.sink, "a", [1, 2, 3])
    assert {h["delivery_id"] for h in rstack.sink.items("a")} == {str(i) for i in ids}


def test_flower_sees_task_events_over_rabbitmq(rstack):
    rstack.write([job("a")])
    rstack.reload()
    worker = CeleryProc("worker", rstack.env(), "fw", extra=("-E",)).start()
    rstack.procs.append(worker)
    flower, port = start_flower(rstack.env(), "pw-1")
    try:
        rstack.beat()  # a tick a second: Flower sees them once its receiver is up

        def tick_succeeded() -> bool:
            try:
                r = requests.get(
                    f"http://127.0.0.1:{port}/api/tasks", auth=("ops", "pw-1"), timeout=5
                )
            except requests.RequestException:
                return False
            return r.ok and any(
                t.get("name") == "nexopoll.tick" and t.get("state") == "SUCCESS"
                for t in r.json().values()
            )

        wait_for(tick_succeeded, 60, interval=0.5, what="flower saw a tick succeed")
    finally:
        flower.terminate()
        flower.wait(10)


def test_broker_sigkill_and_restart_loses_no_item(rstack):
    """RELIABILITY row 60: worker and beat reconnect by themselves, deliveries resume
    within 30 s, every item arrives at least once under one delivery id."""
    n_jobs = 5
    rstack.write([job(f"k{i}") for i in range(n_jobs)])
    rstack.reload()
    rstack.worker()
    rstack.beat()
    published: dict[str, list[int]] = {f"k{i}": [] for i in range(n_jobs)}

    def feed(start: int, stop: int) -> None:
        for j, items in published.items():
            rstack.publish(j, *range(start, stop))
            items.extend(range(start, stop))

    feed(1, 6)
    wait_for(lambda: len(rstack.sink.items()) >= 10, 60, what="deliveries flowing")
    feed(6, 11)  # in flight when the broker dies
    rstack.rabbit.kill()
    feed(11, 16)  # published while it is down
    time.sleep(3)  # the fault: the broker stays down a few seconds (not a synchronisation)
    restarted = time.monotonic()
    rstack.rabbit.start()
    before = len(rstack.sink.items())
    feed(16, 21)
    wait_for(
        lambda: len(rstack.sink.items()) > before,
        30,
        what="deliveries resumed within 30 s of the restart",
    )
    resumed = time.monotonic() - restarted
    wait_for(
        lambda: all(set(items) <= set(rstack.sink.item_ids(j)) for j, items in published.items()),
        90,
        what="every item delivered",
    )
    for j, items in published.items():
        assert_no_loss_dup_safe(rstack.sink, j, items)
    assert resumed < 30
    assert all(p.proc.poll() is None for p in rstack.procs), "worker and beat kept running"


def test_short_countdowns_are_delayed_not_dropped_on_quorum_queues(rstack):
    """A delivery that must wait (the sink answered 503) goes back on the queue with a
    countdown under a second; on quorum queues that travels through Celery's native
    delayed delivery, whose whole-second routing refused it (the row then waited for
    the sweeper)."""
    from tests.support.httpserver import reply, sequence

    rstack.sink.server.route("POST", "/hook", sequence(503, reply(200)))
    rstack.write([job("a")])
    rstack.reload()
    rstack.publish("a", 1)
    worker = rstack.worker()
    rstack.beat(NEXOPOLL_SWEEP_SECS="3600")  # no sweeper to mask a dropped countdown
    wait_for(lambda: 1 in rstack.sink.item_ids("a"), 60, what="the retried delivery")
    assert "enqueue_failed" not in worker.text(), worker.text()[-6000:]


def test_healthz_checks_rabbitmq_when_it_is_the_broker(rabbit_node, db, settings):
    from nexopoll import health

    settings.CELERY_BROKER_URL, settings.BROKER_IS_AMQP = rabbit_node.url, True
    if rabbit_node.proc is None:
        rabbit_node.start()
    healthy, results = health.run_checks()
    assert results["broker"]["ok"] is True, results
    rabbit_node.kill()
    try:
        healthy, results = health.run_checks()
        assert not healthy
        assert results["broker"] == {"ok": False, "error": "ConnectionRefusedError"}
        assert "guest" not in str(results) and str(rabbit_node.port) not in str(results)
    finally:
        rabbit_node.start()
    settings.BROKER_IS_AMQP = False
    assert "broker" not in health.run_checks()[1]  # a Redis broker: the redis check
