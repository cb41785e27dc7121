"""A scheduled tick writes the state row once (optimistic concurrency), and the crash
marker the poison-tick cap counts lives beside the lease in Redis."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection
from django.test.utils import CaptureQueriesContext

from nexopoll.models import Delivery, PollState
from nexopoll.runtime import lease
from nexopoll.runtime.tick import tick_job

from .conftest import scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def st(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def state_writes(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("UPDATE POLL_STATE")]


def test_a_scheduled_tick_writes_the_state_row_once(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    with CaptureQueriesContext(connection) as q:
        report = tick_job("a", now=NOW)
    assert report.committed and report.status == "ok"
    writes = state_writes(q.captured_queries)
    assert len(writes) == 1, writes  # no epoch taken before the poll: the commit alone
    assert "cursor" in writes[0]
    assert bytes(st("a").cursor) == b"2" and Delivery.objects.count() == 2


def test_an_unchanged_poll_writes_only_what_moved_and_no_outbox_row(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    tick_job("a", now=NOW)
    before = st("a")
    with CaptureQueriesContext(connection) as q:  # nothing new at the source
        report = tick_job("a", now=NOW.replace(minute=1))
    assert report.committed and report.items_dispatched == 0
    (write,) = state_writes(q.captured_queries)
    set_clause = write.split(" WHERE ")[0]
    for unchanged in ("cursor", "consecutive_errors", "breaker_open_until", "crash_count"):
        assert unchanged not in set_clause, set_clause
    assert not [x for x in q.captured_queries if "poll_outbox" in x["sql"]]
    after = st("a")
    assert after.cursor == before.cursor and after.ticks_total == before.ticks_total + 1
    assert after.epoch > before.epoch and Delivery.objects.count() == 1


def test_ticks_whose_worker_died_are_counted_by_the_marker_beside_the_lease(
    cfg, redis_client, settings
):
    """RELIABILITY row 2 without any DB write before the poll: three ticks took the lease
    and never released it (their worker died, their lease expired); the fourth is capped."""
    settings.NEXOPOLL_MAX_CRASHES = 3
    cfg.write([scripted("a", failure_to={"channel": "log", "to": "oncall"})], breaker_threshold=1)
    cfg.reload()
    for _ in range(3):
        died = lease.try_acquire(redis_client, "a", 60_000)
        assert died is not None
        redis_client.delete(lease.lease_key("a"))  # the lease expired; the marker stays
    assert st("a").running_since is None  # nothing in the DB says a tick ran
    report = tick_job("a", now=NOW)
    assert report.status == "transient" and "worker died during 3" in report.error
    assert redis_client.get("test:ticks:a") is None  # the poller was not run again
    assert st("a").crash_count == 0 and st("a").breaker_open_until is not None
    assert not redis_client.exists(lease.running_key("a"))  # released with the lease


def test_one_dead_tick_is_counted_and_the_next_good_tick_clears_the_count(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    died = lease.try_acquire(redis_client, "a", 60_000)
    assert died is not None and died.unfinished == 0
    redis_client.delete(lease.lease_key("a"))
    redis_client.rpush("test:src:a", 1)
    report = tick_job("a", now=NOW)
    assert report.status == "ok" and st("a").crash_count == 0
    nxt = lease.try_acquire(redis_client, "a", 60_000)
    assert nxt is not None and nxt.unfinished == 0  # the good tick ended: marker cleared
    lease.release(redis_client, nxt)


def test_a_zombie_release_leaves_the_new_holders_marker(cfg, redis_client):
    zombie = lease.try_acquire(redis_client, "a", 60_000)
    redis_client.delete(lease.lease_key("a"))
    holder = lease.try_acquire(redis_client, "a", 60_000)
    assert holder is not None and holder.unfinished == 1
    assert not lease.release(redis_client, zombie)
    assert redis_client.get(lease.running_key("a")) == "2"  # still counts the holder
    assert lease.release(redis_client, holder)
    assert not redis_client.exists(lease.running_key("a"))
