"""Batched dispatch end to end: a real beat sends ``nexopoll.tick_batch`` messages when
many jobs fall due together, a real worker runs them, and nothing is lost, duplicated or
mistaken for a crash (a worker killed in the middle of a batch included)."""

from __future__ import annotations

import time

import pytest

from nexopoll.models import PollState
from tests.support.procs import wait_for
from tests.support.sink import assert_no_loss_dup_safe

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BATCHING = {"NEXOPOLL_BATCH_MIN": "6", "NEXOPOLL_BATCH_SIZE": "5"}
BATCHING_IO = {"NEXOPOLL_BATCH_MIN": "4", "NEXOPOLL_BATCH_SIZE": "6"}


def state(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def test_jobs_due_together_tick_in_batches_and_each_commits_its_own_items(stack):
    ids = [f"b{i:02d}" for i in range(24)]
    stack.env_extra.update(BATCHING)
    stack.write([job(j) for j in ids])  # every 1 s, no stagger: all due together
    stack.reload()
    for j in ids:
        stack.publish(j, 1, 2)
    worker = stack.worker()
    stack.beat()
    wait_for(lambda: all(len(stack.sink.item_ids(j)) >= 2 for j in ids), 60, what="deliveries")
    wait_for(lambda: all(stack.ticks(j) >= 3 for j in ids), 30, what="three ticks each")
    assert "nexopoll.tick_batch" in worker.text()  # they came in batches
    for j in ids:
        assert_no_loss_dup_safe(stack.sink, j, [1, 2])
        s = state(j)
        assert bytes(s.cursor) == b"2" and s.last_status == "ok" and s.crash_count == 0


def test_kill_9_in_the_middle_of_a_batch_loses_nothing_and_blames_no_batch_mate(stack):
    """The worker dies while one job of a batch hangs in its poller: every job's items
    arrive once after a restart, and no job is capped as a poison tick."""
    ids = [f"k{i:02d}" for i in range(12)]
    stack.env_extra.update(BATCHING)
    stack.write([job(j) for j in ids])
    stack.reload()
    for j in ids:
        stack.publish(j, 1, 2, 3)
    stack.redis.set("test:block:k03", "1")
    worker = stack.worker()
    stack.beat()
    wait_for(lambda: stack.redis.get("test:blocked:k03"), 30, what="k03 hangs in its batch")
    worker.kill()
    stack.redis.delete("test:block:k03")
    stack.worker("w2")
    wait_for(lambda: all(len(stack.sink.item_ids(j)) >= 3 for j in ids), 90, what="all items")
    wait_for(lambda: all(state(j).crash_count == 0 for j in ids), 30, what="markers cleared")
    for j in ids:
        assert_no_loss_dup_safe(stack.sink, j, [1, 2, 3])
        assert "worker died" not in (state(j).last_error or "")


def test_row_52_a_stalled_batch_mate_holds_back_no_mate_and_fences_no_successor(stack):
    """RELIABILITY.md row 52 end to end, at ``NEXOPOLL_STALL_SCALE`` (default 0.2: a 9 s
    stall, 6 s leases, mates delivered within 3 s; 1 is the row's 45 s / 30 s / 15 s).
    One job's first tick hangs in its poller, past its deadline; the jobs batched with it
    are delivered at once, with no crash or takeover counted; the hung tick's lease runs
    out, its next slot takes over and commits, and the hung tick, ending, commits nothing."""
    import os
    import time

    from nexopoll.runtime.metricstore import TAKEOVERS
    from tests.integration.faults import wait_clock

    scale = float(os.environ.get("NEXOPOLL_STALL_SCALE") or 0.2)
    ids = [f"s{i:02d}" for i in range(10)]
    stalled, mates = "s03", [j for j in ids if j != "s03"]
    stack.env_extra.update(BATCHING, NEXOPOLL_LEASE_MIN_SECS=str(30 * scale))
    stack.write([job(j) for j in ids])
    stack.reload()
    for j in ids:
        stack.publish(j, 1, 2)
    for key in ("block_once", "hold", "ignore_cancel"):
        stack.redis.set(f"test:{key}:{stalled}", "1")
    stack.worker("w1")
    stack.worker("w2")  # a worker stuck in a hung poller runs nothing else meanwhile
    stack.beat()
    wait_for(lambda: stack.redis.get(f"test:blocked:{stalled}"), 30, what="the stall begins")
    began = time.monotonic()
    wait_for(
        lambda: all(len(stack.sink.item_ids(j)) >= 2 for j in mates),
        15 * scale,
        what="the mates' items delivered within 15 s of the stall",
    )
    assert not stack.sink.item_ids(stalled)
    wait_clock(45 * scale - (time.monotonic() - began))  # the stall's length
    stack.redis.delete(f"test:hold:{stalled}", f"test:ignore_cancel:{stalled}")
    wait_for(lambda: len(stack.sink.item_ids(stalled)) >= 2, 30, what="the successor's items")
    wait_for(lambda: stack.redis.llen(f"test:done:{stalled}") >= 2, 30, what="the hung tick ends")
    for j in ids:
        assert_no_loss_dup_safe(stack.sink, j, [1, 2])
    takeovers = stack.redis.hgetall(TAKEOVERS)
    for j in mates:
        s = state(j)
        assert s.crash_count == 0 and "worker died" not in (s.last_error or "")
        assert not takeovers.get(j), f"{j} counted a takeover: {takeovers}"
    s = state(stalled)
    assert bytes(s.cursor) == b"2" and s.last_status == "ok"


def test_jobs_that_wait_on_the_network_tick_in_batches_polled_side_by_side(stack):
    """Twelve jobs whose sources answer in 300 ms, every 2 s, on one worker process that
    runs one task at a time (prefork -c 1). Once beat knows them as slow, it sends them
    in batches of their own and the worker polls each batch's jobs side by side: one by
    one, twelve waits would take 3.6 s of every 2 s. Each item arrives once."""
    ids = [f"io.{i:02d}-w_x" for i in range(12)]  # every character a job id may hold
    stack.env_extra.update(BATCHING_IO)
    stack.write([job(j, every=2) for j in ids])
    stack.reload()
    for j in ids:
        stack.redis.set(f"test:sleep_ms:{j}", 300)
        stack.publish(j, 1, 2)
    worker = stack.worker()
    stack.beat()
    wait_for(lambda: all(stack.ticks(j) >= 1 for j in ids), 60, what="a first tick each")
    # their first ticks put them in the slow set; beat reads it again within 5 s
    time.sleep(6)
    stack.redis.delete("test:inflight_max")
    before = {j: stack.ticks(j) for j in ids}
    wait_for(lambda: all(stack.ticks(j) >= before[j] + 2 for j in ids), 30, what="2 more each")
    assert int(stack.redis.get("test:inflight_max")) >= 4  # side by side, in one process
    assert "nexopoll.tick_batch" in worker.text()
    for j in ids:
        assert_no_loss_dup_safe(stack.sink, j, [1, 2])
        s = state(j)
        assert bytes(s.cursor) == b"2" and s.last_status == "ok" and s.crash_count == 0
        assert s.last_latency_ms >= 300
