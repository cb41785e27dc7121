"""The Procfile's worker pool (``-P threads``) end to end: ticks of different jobs wait
on I/O at the same time in one worker process, and the reliability rows the prefork
tests cover hold under threads too (RELIABILITY rows 1, 3, 13/14)."""

from __future__ import annotations

import signal

import pytest

from nexopoll.models import Delivery
from tests.support.procs import wait_for
from tests.support.sink import assert_no_loss_dup_safe

from .conftest import job
from .test_stack import assert_a_fenced_and_b_delivered, state

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

THREADS = ("-P", "threads", "-c", "8")


def test_ticks_of_many_jobs_wait_on_io_together_in_one_worker_process(stack):
    ids = [f"io{i}" for i in range(6)]
    stack.write([job(j) for j in ids])
    stack.reload()
    for j in ids:
        stack.publish(j, 1)
        stack.redis.set(f"test:block:{j}", "1")
    worker = stack.worker(extra=THREADS)
    stack.beat()
    # every tick is inside its poller at once: six fetches in flight, one process
    wait_for(lambda: all(stack.redis.get(f"test:blocked:{j}") for j in ids), 30, what="6 at once")
    pids = {stack.redis.get(f"test:blocked:{j}") for j in ids}
    assert pids == {str(worker.proc.pid)}
    for j in ids:
        stack.redis.delete(f"test:block:{j}")
    wait_for(lambda: all(stack.sink.item_ids(j) == [1] for j in ids), 30, what="deliveries")
    for j in ids:
        assert bytes(state(j).cursor) == b"1"


def test_sigterm_mid_tick_under_threads_finishes_the_tick(stack):
    """RELIABILITY row 3 with the Procfile's pool: warm shutdown lets the tick commit."""
    stack.write([job("t")])
    stack.reload()
    stack.publish("t", 1, 2)
    stack.redis.set("test:block:t", "1")
    worker = stack.worker(extra=THREADS)
    stack.beat()
    wait_for(lambda: stack.redis.get("test:blocked:t"), 30, what="tick at the barrier")
    worker.proc.send_signal(signal.SIGTERM)
    stack.redis.delete("test:block:t")
    assert worker.proc.wait(30) == 0
    assert bytes(state("t").cursor) == b"2"
    stack.worker("w2", extra=THREADS)
    wait_for(lambda: len(stack.sink.item_ids("t")) >= 2, 30, what="deliveries")
    assert_no_loss_dup_safe(stack.sink, "t", [1, 2])


def test_kill_9_mid_tick_under_threads_loses_and_duplicates_nothing(stack):
    """RELIABILITY row 1 with the Procfile's pool; the restarted worker counts the dead
    tick on the crash marker beside the lease and still runs the job."""
    stack.write([job("k")])
    stack.reload()
    stack.publish("k", 1, 2, 3)
    stack.redis.set("test:block:k", "1")
    worker = stack.worker(extra=THREADS)
    stack.beat()
    wait_for(lambda: stack.redis.get("test:blocked:k"), 30, what="tick blocked at the barrier")
    worker.kill()
    assert state("k").cursor is None and not Delivery.objects.filter(job_id="k").exists()
    stack.redis.delete("test:block:k")
    stack.worker("w2", extra=THREADS)
    wait_for(lambda: len(stack.sink.item_ids("k")) >= 3, 60, what="all items after restart")
    assert sorted(stack.sink.item_ids("k")) == [1, 2, 3]
    assert bytes(state("k").cursor) == b"3" and state("k").crash_count == 0


def test_zombie_thread_tick_is_fenced_after_its_lease_was_taken_over(stack):
    """RELIABILITY rows 13/14: a SIGSTOPped threads worker whose lease expired commits
    nothing once it wakes; the other worker's commit stands."""
    stack.write([job("z")])
    stack.reload()
    stack.publish("z", 1, 2)
    stack.redis.set("test:block:z", "1")
    a = stack.worker("a", extra=THREADS)
    stack.beat()
    wait_for(lambda: stack.redis.get("test:blocked:z"), 30, what="tick A at the barrier")
    a.signal_group(signal.SIGSTOP)
    try:
        from nexopoll.runtime.lease import lease_key

        wait_for(lambda: not stack.redis.exists(lease_key("z")), 15, what="A's lease to expire")
        stack.redis.delete("test:block:z")
        stack.publish("z", 3)
        stack.worker("b", extra=THREADS)
        wait_for(lambda: bytes(state("z").cursor or b"") == b"3", 40, what="B commits")
    finally:
        a.signal_group(signal.SIGCONT)
    assert_a_fenced_and_b_delivered(stack, a)
