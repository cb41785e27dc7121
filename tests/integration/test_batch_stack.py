"""Batched dispatch end to end: a real beat sends ``nexopoll.tick_batch`` messages when
many jobs fall due together, a real worker runs them, and nothing is lost, duplicated or
mistaken for a crash (a worker killed in the middle of a batch included)."""

from __future__ import annotations

import pytest

from nexopoll.models import PollState
from tests.support.procs import wait_for
from tests.support.sink import assert_no_loss_dup_safe

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BATCHING = {"NEXOPOLL_BATCH_MIN": "6", "NEXOPOLL_BATCH_SIZE": "5"}


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
