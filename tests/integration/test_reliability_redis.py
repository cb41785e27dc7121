"""RELIABILITY.md rows 9-12: Redis killed with AOF, hung, down and back, slow mid-tick.

Each test runs a private redis-server (``fault_stack``) that it kills, stops or
slows, under real Celery worker and beat processes, and asserts the invariants:
no item lost, duplicates only under one delivery id, the cursor never backwards,
the canary secret nowhere.
"""

from __future__ import annotations

import threading

import psutil
import pytest
import redis

from nexopoll.models import Delivery, PollState
from nexopoll.runtime.beat import dispatched_key
from tests.support.invariants import CursorWatch, assert_invariants
from tests.support.procs import wait_for

from .conftest import job
from .faults import beat_id, dispatched, scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SOCKET_TIMEOUT = 10  # settings: socket_timeout of every Redis client


def pids(proc) -> set[int]:
    main = psutil.Process(proc.proc.pid)
    return {main.pid, *(c.pid for c in main.children(recursive=True))}


def make_durable(client: redis.Redis) -> None:
    """Rewrite the AOF and wait for it: what the test published survives a kill -9."""
    client.bgrewriteaof()
    wait_for(
        lambda: (lambda i: not i["aof_rewrite_in_progress"] and not i["aof_rewrite_scheduled"])(
            client.info("persistence")
        ),
        20,
        what="AOF rewrite",
    )


def test_row9_redis_with_aof_killed_9_and_restarted_loses_nothing(fault_stack):
    st = fault_stack
    st.redis_server.aof = True
    st.redis_server.restart()
    st.write([job("r9")])
    st.reload()
    watch = CursorWatch("r9")
    st.publish("r9", 1, 2, 3)
    worker = st.worker()
    beat = st.beat()
    watch.until(lambda: len(st.sink.item_ids("r9")) >= 3, scaled(30), "first items")
    st.publish("r9", 4, 5, 6)
    make_durable(st.redis)  # the test's source list survives; nexopoll's last second may not
    st.redis_server.kill()
    st.redis_server.start()
    st.publish("r9", 7, 8)
    watch.until(lambda: len(set(st.sink.item_ids("r9"))) >= 8, scaled(60), "every item")
    assert worker.proc.poll() is None and beat.proc.poll() is None
    assert_invariants(st, "r9", range(1, 9), watch)


def test_row10_redis_hung_then_continued_ticks_fail_fast_and_recover(fault_stack):
    """Redis hangs (SIGSTOP) while a deliver task runs, so the task's ack times out.

    Stock kombu then kept the message counted against the prefetch limit and the
    worker never fetched again; nexopoll's transport frees the slot.
    """
    st = fault_stack
    st.write([job("r10")])
    st.reload()
    watch = CursorWatch("r10")
    gate = threading.Event()
    st.sink.server.route("POST", "/hook", lambda req: (gate.wait(60), (200, {}, b""))[1])
    st.publish("r10", 1)
    worker = st.worker()
    beat = st.beat()
    wait_for(lambda: st.sink.item_ids("r10") == [1], scaled(30), what="delivery 1 in flight")
    before = pids(worker)
    failures = beat.text().count("beat.redis_unavailable")
    st.redis_server.pause()  # half-open: connections stay up, nothing answers
    try:
        gate.set()  # the send returns; the task's ack meets the hung Redis
        wait_for(
            lambda: "Couldn't ack" in worker.text(),
            # the task itself may first wait out a socket timeout (e.g. recording metrics)
            scaled(2 * SOCKET_TIMEOUT + 10),
            what="the ack failing on the hung Redis",
        )
        # beat gives up on the hung server after its socket timeout, logs, and carries on
        wait_for(
            lambda: beat.text().count("beat.redis_unavailable") > failures,
            scaled(SOCKET_TIMEOUT + 10),
            what="beat failing fast on the hung Redis",
        )
    finally:
        st.redis_server.resume()
    st.publish("r10", 2, 3)
    watch.until(lambda: {1, 2, 3} <= set(st.sink.item_ids("r10")), scaled(60), "items after CONT")
    assert pids(worker) == before, "worker processes were restarted"
    assert beat.proc.poll() is None and worker.proc.poll() is None
    assert_invariants(st, "r10", [1, 2, 3], watch)


def test_row11_redis_down_then_up_reconnects_with_one_beat_lock_holder(fault_stack):
    st = fault_stack
    st.write([job("r11")])
    st.reload()
    watch = CursorWatch("r11")
    st.publish("r11", 1)
    worker = st.worker()
    a = st.beat("a")
    wait_for(lambda: dispatched(st, a) >= 1, scaled(20), what="A dispatching")
    b = st.beat("b")  # started (it blocks in RedBeat's lock acquisition: a standby)
    watch.until(lambda: st.sink.item_ids("r11") == [1], scaled(30), "first item")
    failures = a.text().count("beat.redis_unavailable")
    st.redis_server.stop()  # no persistence: it comes back empty
    wait_for(
        lambda: a.text().count("beat.redis_unavailable") > failures + 1,
        scaled(15),
        what="A noticing Redis is down",
    )
    st.redis_server.start()
    st.publish("r11", 2, 3)
    watch.until(lambda: len(set(st.sink.item_ids("r11"))) >= 3, scaled(60), "items after restart")
    # both beats are back on Redis; the lock (lost with the data) has exactly one holder
    alive = [p for p in (a, b) if p.proc.poll() is None]
    assert alive, "no beat survived the restart"
    holder = st.redis.get("nexopoll:redbeat::lock")
    assert holder, "nobody holds the beat lock"
    wait_for(lambda: sum(map(int, st.redis.hvals(dispatched_key()))) >= 4, scaled(20))
    counts = st.redis.hgetall(dispatched_key())
    assert len(counts) == 1, f"more than one beat dispatched after the restart: {counts}"
    (dispatcher,) = counts
    assert dispatcher in {beat_id(p) for p in alive}
    for p in (a, b):  # a beat that lost the race exits (LockNotOwnedError), never dispatches
        if p.proc.poll() is not None:
            assert "LockNotOwnedError" in p.text()
    assert worker.proc.poll() is None
    assert_invariants(st, "r11", [1, 2, 3], watch)


@pytest.mark.parametrize("slow", ["DEBUG SLEEP", "CLIENT PAUSE WRITE"])
def test_row12_redis_slow_during_a_tick_the_lost_lease_stops_the_commit(fault_stack, slow):
    st = fault_stack
    st.write([job("r12")])  # every 1 s: lease TTL = NEXOPOLL_LEASE_MIN_SECS = 3 s
    st.reload()
    watch = CursorWatch("r12")
    st.publish("r12", 1, 2)
    st.redis.set("test:block_once:r12", 1)
    st.redis.set("test:hold:r12", 1)
    worker = st.worker()
    st.beat()
    wait_for(lambda: st.redis.get("test:blocked:r12"), scaled(30), what="tick at the barrier")
    epoch = PollState.objects.get(job_id="r12").epoch
    slow_client = st.redis_server.client(timeout=30)
    if slow == "DEBUG SLEEP":  # Redis answers nobody for 4 s: the lease (3 s) runs out
        sleeper = threading.Thread(target=slow_client.execute_command, args=("DEBUG", "SLEEP", 4))
        sleeper.start()
    else:  # writes (the lease extension among them) wait 4 s
        slow_client.execute_command("CLIENT", "PAUSE", 4000, "WRITE")
        sleeper = None
    slow_client.delete("test:hold:r12")  # lands after the stall: the tick goes on to commit
    if sleeper is not None:
        sleeper.join(30)
    wait_for(lambda: "lease.lost job=r12" in worker.text(), scaled(20), what="lease lost")
    assert worker.text().count("lease.lost job=r12") == 1
    # the stalled tick committed nothing; a later tick (the lease is free again) may
    # already have committed by now, under a newer epoch
    assert not Delivery.objects.filter(job_id="r12", epoch=epoch).exists()
    assert not Delivery.objects.filter(job_id="r12", epoch__lte=epoch).exists()
    watch.until(lambda: len(st.sink.item_ids("r12")) >= 2, scaled(30), "items from a later tick")
    assert sorted(st.sink.item_ids("r12")) == [1, 2]
    assert PollState.objects.get(job_id="r12").epoch > epoch
    assert_invariants(st, "r12", [1, 2], watch)
