"""RELIABILITY.md rows 4-7: beat killed, two beats, a standby cut off from Redis, a
paused active beat. Each test injects the fault on real processes (a private
redis-server, Celery worker and beat subprocesses) and asserts the invariants: no
item lost, duplicates only under one delivery id, the cursor never backwards, the
canary secret nowhere; plus the row's own bound (who dispatches, how soon).

Beat counts the ticks it dispatches per process in Redis (``dispatched``), which
tells the two beats apart.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.support.faultproxy import FaultProxy
from tests.support.invariants import CursorWatch, assert_invariants
from tests.support.procs import wait_for

from .conftest import job
from .faults import (
    LOCK_TIMEOUT,
    LOOP,
    assert_at_most_one_tick_per_slot,
    dispatched,
    scaled,
    tick_stamps,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_row4_beat_killed_then_restarted_delivers_downtime_items_once(fault_stack):
    st = fault_stack
    st.write([job("b4")])
    st.reload()
    watch = CursorWatch("b4")
    st.publish("b4", 1, 2)
    st.worker()
    beat = st.beat()
    watch.until(lambda: len(st.sink.item_ids("b4")) >= 2, scaled(30), "first items")
    beat.kill()
    ticks_at_kill = st.ticks("b4")
    st.publish("b4", 3, 4, 5)
    # three slots go by with no beat: nothing ticks the job
    score = st.redis.zscore("nexopoll:redbeat::schedule", "nexopoll:redbeat:job:b4")
    wait_for(lambda: time.time() > score + 3, scaled(10), what="three missed slots")
    assert st.ticks("b4") <= ticks_at_kill + 1  # at most the tick already queued at kill
    assert sorted(st.sink.item_ids("b4")) == [1, 2]
    restarted = time.time()
    st.beat("beat2")
    watch.until(lambda: len(st.sink.item_ids("b4")) >= 5, scaled(30), "downtime items")
    assert sorted(st.sink.item_ids("b4")) == [1, 2, 3, 4, 5]  # each once
    # missed slots are not replayed in a burst: from the restart on, one tick per slot
    watch.until(lambda: len([s for s in tick_stamps(st, "b4") if s >= restarted]) >= 3, 30)
    assert_at_most_one_tick_per_slot(tick_stamps(st, "b4"), 1.0, since=restarted)
    assert_invariants(st, "b4", [1, 2, 3, 4, 5], watch)


def test_row5_two_beats_the_standby_takes_over_when_the_active_one_is_killed(fault_stack):
    st = fault_stack
    st.write([job("b5")])
    st.reload()
    watch = CursorWatch("b5")
    st.worker()
    a = st.beat("a")
    wait_for(lambda: dispatched(st, a) >= 2, scaled(20), what="A dispatching")
    b = st.beat("b")
    st.publish("b5", 1, 2)
    watch.until(lambda: len(st.sink.item_ids("b5")) >= 2, scaled(30), "items under A")
    a_before = dispatched(st, a)
    wait_for(lambda: dispatched(st, a) >= a_before + 3, scaled(20), what="A still active")
    assert dispatched(st, b) == 0, "the standby dispatched while the active beat held the lock"
    since = time.time()
    a.kill()
    killed = time.monotonic()
    wait_for(lambda: dispatched(st, b) > 0, scaled(LOCK_TIMEOUT + LOOP + 10), what="B takes over")
    takeover = time.monotonic() - killed
    assert takeover <= scaled(LOCK_TIMEOUT + LOOP + 1.5), f"takeover took {takeover:.1f}s"
    # RedBeat's start-up handler blocks in acquire() while A holds the lock
    assert "beat: Acquired lock" in b.text() or "beat.lock_acquired" in b.text()
    st.publish("b5", 3, 4)
    watch.until(lambda: len(st.sink.item_ids("b5")) >= 4, scaled(30), "items under B")
    watch.until(lambda: len([s for s in tick_stamps(st, "b5") if s >= since]) >= 6, 30)
    assert_at_most_one_tick_per_slot(tick_stamps(st, "b5"), 1.0, since=since - 2)
    assert_invariants(st, "b5", [1, 2, 3, 4], watch)
    print(f"row 5: takeover after {takeover:.2f}s (lock {LOCK_TIMEOUT}s, loop {LOOP}s)")


def test_row6_a_standby_that_loses_redis_while_taking_the_lock_never_dispatches(fault_stack):
    """redbeat#208: a failed lock acquisition must not leave a beat dispatching lockless."""
    st = fault_stack
    st.write([job("b6")])
    st.reload()
    watch = CursorWatch("b6")
    st.worker()
    a = st.beat("a")
    wait_for(lambda: dispatched(st, a) >= 1, scaled(20), what="A dispatching")
    proxy = FaultProxy(st.redis_server.port).start()
    try:
        b = st.beat("b", REDIS_URL=proxy.url)
        for round_ in range(2):  # twice: reset (connections die mid-acquisition), then pass
            proxy.set_mode("reset")
            failures = b.text().count("beat.redis_unavailable")
            wait_for(
                lambda f=failures: b.text().count("beat.redis_unavailable") >= f + 2,
                scaled(20),
                what=f"B failing on the reset proxy ({round_})",
            )
            proxy.set_mode("pass")
            seen = proxy.connections
            wait_for(lambda s=seen: proxy.connections > s, scaled(10), what="B reconnected")
            a_now = dispatched(st, a)
            wait_for(lambda n=a_now: dispatched(st, a) >= n + 2, scaled(20), what="A active")
            assert dispatched(st, b) == 0, "B dispatched without the lock"
            assert b.proc.poll() is None, b.text()[-2000:]
        st.publish("b6", 1, 2)
        watch.until(lambda: len(st.sink.item_ids("b6")) >= 2, scaled(30), "items under A")
        a.kill()  # B, through the proxy, still takes over once the lock is free
        wait_for(lambda: dispatched(st, b) > 0, scaled(LOCK_TIMEOUT + 10), what="B takes over")
        st.publish("b6", 3)
        watch.until(lambda: len(st.sink.item_ids("b6")) >= 3, scaled(30), "item under B")
        assert proxy.resets > 0
    finally:
        proxy.stop()
    assert_invariants(st, "b6", [1, 2, 3], watch)


def test_row7_active_beat_paused_past_its_lock_ttl_is_replaced_and_dispatches_nothing_after(
    fault_stack,
):
    st = fault_stack
    st.write([job("b7")])
    st.reload()
    watch = CursorWatch("b7")
    st.worker()
    a = st.beat("a")
    wait_for(lambda: dispatched(st, a) >= 2, scaled(20), what="A dispatching")
    b = st.beat("b")
    st.publish("b7", 1)
    watch.until(lambda: st.sink.item_ids("b7") == [1], scaled(30), "item under A")
    a.signal_group(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        a_at_stop = dispatched(st, a)
        wait_for(lambda: dispatched(st, b) > 0, scaled(LOCK_TIMEOUT + 10), what="B takes over")
        st.publish("b7", 2)
        # A stays stopped for twice its lock's TTL
        wait_for(lambda: time.monotonic() - stopped >= 2 * LOCK_TIMEOUT, 10, what="2x TTL")
    finally:
        a.signal_group(signal.SIGCONT)
    # A's next loop finds its lock gone and held by B: it exits (its supervisor restarts it)
    wait_for(lambda: a.proc.poll() is not None, scaled(15), what="A exits after CONT")
    assert "LockNotOwnedError" in a.text()
    assert dispatched(st, a) == a_at_stop, "A dispatched after it was continued"
    b_now = dispatched(st, b)
    wait_for(lambda: dispatched(st, b) >= b_now + 2, scaled(20), what="B still dispatching")
    watch.until(lambda: len(st.sink.item_ids("b7")) >= 2, scaled(30), "item under B")
    assert_invariants(st, "b7", [1, 2], watch)
