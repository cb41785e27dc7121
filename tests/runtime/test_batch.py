"""Batched ticks (runtime/batch.py): many jobs in one task, each with its own lease,
epoch, commit and retry. Real Redis, real DB, the scripted test poller."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.backends.signals import connection_created
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nexopoll.models import Delivery, PollState
from nexopoll.runtime import history, keys, lease
from nexopoll.runtime.tick import tick_job
from tests.support.celeryqueue import DELIVERIES, messages
from tests.support.procs import wait_for

from .conftest import run_batch, scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
TTL = 60_000


@pytest.fixture(autouse=True)
def _no_spill_on_a_slow_machine(settings):
    """A cold cache or a busy CI machine must not make the batch hand its jobs back."""
    settings.NEXOPOLL_BATCH_SLOW_MS = 10_000


def st(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def jobs(n: int) -> list[str]:
    return [f"j{i:02d}" for i in range(n)]


def setup(cfg, redis_client, ids: list[str], **globals_) -> None:
    cfg.write([scripted(i) for i in ids], **globals_)
    cfg.reload()
    redis_client.delete("nexopoll", "nexopoll.deliveries")  # the reload's own messages, if any
    for n, job_id in enumerate(ids):
        redis_client.rpush(f"test:src:{job_id}", *range(1, n % 3 + 2))


def clock():
    return timezone.now()


def batch_in_thread(redis_client, ids: list[str], hold: str) -> tuple[threading.Thread, dict]:
    """Run the batch in a thread of its own (its own DB connection), with ``hold``'s
    poller waiting at its barrier until the test deletes ``test:hold:<hold>``."""
    redis_client.set(f"test:block_once:{hold}", "1")
    redis_client.set(f"test:hold:{hold}", "1")
    result: dict = {}

    def batch() -> None:
        try:
            result["r"] = run_batch([(i, TTL) for i in ids], clock=clock)
        finally:
            connection.close()

    t = threading.Thread(target=batch)
    t.start()
    return t, result


def singles(redis_client) -> list[tuple[str, list]]:
    return [(task, args) for task, args in messages(redis_client) if task == "nexopoll.tick"]


def test_a_batch_ticks_each_job_as_a_single_tick_would_with_one_read_and_one_insert(
    cfg, redis_client
):
    ids = jobs(12)
    setup(cfg, redis_client, ids)
    with CaptureQueriesContext(connection) as q:
        reports = run_batch([(i, TTL) for i in ids], clock=clock)
    assert sorted(r.job_id for r in reports) == ids
    assert all(r.status == "ok" and r.committed for r in reports)
    sql = [x["sql"].lstrip().upper() for x in q.captured_queries]
    assert len([s for s in sql if s.startswith("SELECT") and "FROM POLL_STATE" in s]) == 1
    assert len([s for s in sql if s.startswith("UPDATE POLL_STATE")]) == len(ids)
    assert len([s for s in sql if s.startswith("INSERT INTO") and "POLL_OUTBOX" in s]) == 1
    for n, job_id in enumerate(ids):
        s = st(job_id)
        assert s.ticks_total == 1 and s.last_status == "ok" and s.epoch == 2
        assert bytes(s.cursor) == str(n % 3 + 1).encode()
        assert Delivery.objects.filter(job_id=job_id).count() == n % 3 + 1
        assert history.entries(redis_client, job_id)[0].status == "ok"
        assert not redis_client.exists(lease.lease_key(job_id), lease.running_key(job_id))
    queued = {
        i
        for task, args in messages(redis_client, DELIVERIES)
        if task == "nexopoll.deliver"
        for i in args[0]
    }
    assert queued == {str(d.id) for d in Delivery.objects.all()}  # handed to the queue


def test_a_busy_lease_skips_that_job_alone(cfg, redis_client):
    ids = jobs(4)
    setup(cfg, redis_client, ids)
    other = lease.try_acquire(redis_client, "j01", TTL)  # another worker ticks j01
    reports = {r.job_id: r for r in run_batch([(i, TTL) for i in ids], clock=clock)}
    assert reports["j01"].status == "skipped" and reports["j01"].reason == "lease busy"
    assert st("j01").ticks_total == 0
    assert redis_client.get(lease.lease_key("j01")) == other.token  # not released by us
    assert all(reports[i].committed for i in ("j00", "j02", "j03"))


def test_a_failing_job_fails_alone_and_retries_alone(cfg, redis_client):
    ids = jobs(5)
    setup(cfg, redis_client, ids)
    redis_client.set("test:mode:j02", "transient")
    redis_client.set("test:mode:j03", "raise-bug")  # a poller bug: RuntimeError
    # the next slot is 59 s away: the 30 s backoff lands before it
    reports = {r.job_id: r for r in run_batch([(i, TTL) for i in ids], clock=lambda: NOW)}
    assert reports["j02"].status == "transient" and reports["j02"].committed
    assert reports["j03"].status == "transient" and st("j03").consecutive_errors == 1
    for job_id in ("j00", "j01", "j04"):
        assert reports[job_id].status == "ok" and bytes(st(job_id).cursor)
    # each failed tick retries as a single tick of its own, at its own backoff
    retried = sorted(args[0] for _task, args in singles(redis_client))
    assert retried == ["j02", "j03"]
    assert reports["j02"].retry_at == NOW + timedelta(seconds=30)


@pytest.mark.django_db(transaction=True)
def test_a_fenced_tick_in_a_batch_writes_nothing_and_the_others_commit(cfg, redis_client):
    ids = jobs(3)
    setup(cfg, redis_client, ids)
    t, result = batch_in_thread(redis_client, ids, hold="j01")
    wait_for(lambda: redis_client.get("test:blocked:j01"), 10, what="j01 at the barrier")
    redis_client.delete(lease.lease_key("j01"))  # its lease expired; another tick runs it
    redis_client.rpush("test:src:j01", 9)
    alone = tick_job("j01", now=timezone.now())
    redis_client.delete("test:hold:j01")
    t.join(15)
    reports = {r.job_id: r for r in result["r"]}
    assert alone.status == "ok" and reports["j01"].status == "fenced"
    assert reports["j00"].committed and reports["j02"].committed
    assert bytes(st("j01").cursor) == b"9"
    assert sorted(d.payload["item_id"] for d in Delivery.objects.filter(job_id="j01")) == [1, 2, 9]


def test_a_db_error_in_the_shared_commit_falls_back_to_one_commit_per_tick(cfg, redis_client):
    """A value the DB refuses in one tick's write rolls back the shared commit; each tick
    then commits alone: the bad one is paused with the reason, the others commit."""
    ids = jobs(3)
    setup(cfg, redis_client, ids)
    redis_client.set("test:raw_recipient:j01", "x" * 600)  # past the outbox column's length
    reports = {r.job_id: r for r in run_batch([(i, TTL) for i in ids], clock=clock)}
    if connection.vendor == "sqlite":  # SQLite does not enforce VARCHAR lengths
        assert reports["j01"].committed
    else:
        assert reports["j01"].status == "permanent" and st("j01").paused
        assert "refused" in st("j01").paused_reason
    assert reports["j00"].committed and reports["j02"].committed
    assert Delivery.objects.filter(job_id="j00").count() == 1


def test_a_job_whose_last_tick_never_ended_runs_alone(cfg, redis_client):
    """A tick that kills its worker must not make its batch-mates look like crashes: a
    job with an unfinished tick goes back to the queue as a single tick, and its crash
    marker keeps its count."""
    ids = jobs(3)
    setup(cfg, redis_client, ids)
    died = lease.try_acquire(redis_client, "j01", TTL)
    redis_client.delete(lease.lease_key("j01"))  # the worker died; its lease expired
    assert died.started == 1
    reports = {r.job_id: r for r in run_batch([(i, TTL) for i in ids], clock=clock)}
    assert set(reports) == {"j00", "j02"}
    assert [args for _task, args in singles(redis_client)] == [["j01"]]
    assert redis_client.get(lease.running_key("j01")) == "1"  # still one unfinished tick
    assert not redis_client.exists(lease.lease_key("j01"))
    single = tick_job("j01", now=timezone.now())  # what the single message runs
    assert single.status == "ok" and single.takeover


@pytest.mark.django_db(transaction=True)
def test_a_job_that_waits_does_not_hold_back_the_rest_which_poll_side_by_side(
    cfg, redis_client, settings
):
    settings.NEXOPOLL_BATCH_SLOW_MS = 300
    ids = jobs(6)
    setup(cfg, redis_client, ids)
    t, result = batch_in_thread(redis_client, ids, hold="j01")
    # while j01 hangs in its poller, the four jobs after it poll on the poll threads
    wait_for(
        lambda: all(redis_client.llen(f"test:done:{i}") for i in ids[2:]),
        10,
        what="the rest polled",
    )
    assert not redis_client.llen("test:done:j01")
    redis_client.delete("test:hold:j01")
    t.join(15)
    reports = {r.job_id: r for r in result["r"]}
    assert sorted(reports) == ids and all(r.committed for r in reports.values())
    assert all(st(i).ticks_total == 1 for i in ids)  # each once, in the one commit
    assert singles(redis_client) == []  # nothing went back to the queue


def test_a_job_whose_last_tick_was_slow_runs_alone_and_an_unknown_job_is_skipped(
    cfg, redis_client, settings
):
    """A poller that waits on the network (its last tick took longer than
    NEXOPOLL_BATCH_SLOW_MS) polls on the poll threads at once, beside the others."""
    settings.NEXOPOLL_BATCH_SLOW_MS = 50
    ids = jobs(3)
    setup(cfg, redis_client, ids)
    PollState.objects.filter(job_id="j02").update(last_latency_ms=200)
    reports = {r.job_id: r for r in run_batch([(i, TTL) for i in [*ids, "gone"]], clock=clock)}
    assert set(reports) == {"j00", "j01", "j02", "gone"}
    assert reports["gone"].status == "skipped" and reports["gone"].reason == "unknown job"
    assert not redis_client.exists(lease.lease_key("gone"))
    assert reports["j02"].committed and st("j02").ticks_total == 1
    assert singles(redis_client) == []  # polled here, not handed back to the queue
    assert not redis_client.exists(lease.lease_key("j02"), lease.running_key("j02"))


@pytest.mark.django_db(transaction=True)
def test_a_tick_keeps_its_job_in_the_slow_set_beat_reads_while_it_waits_on_the_network(
    cfg, redis_client, settings
):
    settings.NEXOPOLL_BATCH_SLOW_MS = 50
    setup(cfg, redis_client, ["a"])
    slow_set = keys.slow_key()
    redis_client.set("test:block:a", "1")

    def release() -> None:
        wait_for(lambda: redis_client.get("test:blocked:a"), 10, what="a at the barrier")
        time.sleep(0.12)
        redis_client.delete("test:block:a")

    t = threading.Thread(target=release)
    t.start()
    slow = tick_job("a", now=timezone.now())
    t.join(10)
    assert slow.latency_ms > 50 and redis_client.smembers(slow_set) == {"a"}
    fast = tick_job("a", now=timezone.now())  # answers at once again: out of the set
    assert fast.latency_ms < 50 and redis_client.smembers(slow_set) == set()


def test_a_redis_that_lost_its_scripts_still_takes_and_releases_every_lease(cfg, redis_client):
    """Scripts go by SHA alone in the pipelines (no SCRIPT EXISTS round trip); a server
    restarted since, or flushed, answers NOSCRIPT and each call is run again, loading it."""
    ids = jobs(3)
    setup(cfg, redis_client, ids)
    tick_job("j00", now=timezone.now())  # the scripts are loaded now
    redis_client.script_flush()
    reports = run_batch([(i, TTL) for i in ids], clock=clock)
    assert all(r.committed for r in reports)
    redis_client.script_flush()
    assert tick_job("j01", now=timezone.now()).committed
    for job_id in ids:
        assert not redis_client.exists(lease.lease_key(job_id), lease.running_key(job_id))


@pytest.mark.django_db(transaction=True)
def test_an_io_batch_commits_on_its_own_thread_and_its_poll_threads_open_no_connection(
    cfg, redis_client, settings
):
    """The jobs of a batch that wait on the network poll side by side on the poll
    threads, and commit on the batch's own thread (the worker's, which keeps its DB
    connection) as they finish: a poll thread that committed opened a connection per
    wave, each a PostgreSQL backend started and ended."""
    settings.NEXOPOLL_BATCH_SLOW_MS = 50
    ids = jobs(12)
    setup(cfg, redis_client, ids)
    PollState.objects.filter(job_id__in=ids).update(last_latency_ms=200)
    for n, job_id in enumerate(ids):
        redis_client.set(f"test:sleep_ms:{job_id}", 60 + 20 * (n % 4))  # they finish apart
    assert all(r.committed for r in run_batch([(i, TTL) for i in ids], clock=clock))
    opened: list[str] = []

    def on_connect(sender, connection, **_) -> None:
        opened.append(threading.current_thread().name)

    redis_client.delete("test:inflight_max")
    connection_created.connect(on_connect)
    try:
        reports = run_batch([(i, TTL) for i in ids], clock=clock)
    finally:
        connection_created.disconnect(on_connect)
    assert all(r.committed for r in reports) and all(st(i).ticks_total == 2 for i in ids)
    assert int(redis_client.get("test:inflight_max")) >= 4  # side by side
    assert [name for name in opened if name.startswith("nexopoll-poll")] == []


@pytest.mark.django_db(transaction=True)
def test_an_io_batch_polls_at_most_batch_threads_at_once_and_feeds_the_rest_as_room_frees(
    cfg, redis_client, settings
):
    """A process polls at most NEXOPOLL_BATCH_THREADS jobs side by side: an I/O batch
    larger than that feeds its jobs to the poll threads as earlier polls end."""
    settings.NEXOPOLL_BATCH_SLOW_MS, settings.NEXOPOLL_BATCH_THREADS = 50, 4
    ids = jobs(10)
    setup(cfg, redis_client, ids)
    PollState.objects.filter(job_id__in=ids).update(last_latency_ms=200)
    for job_id in ids:
        redis_client.set(f"test:sleep_ms:{job_id}", 60)
    reports = run_batch([(i, TTL) for i in ids], clock=clock)
    assert sorted(r.job_id for r in reports) == ids and all(r.committed for r in reports)
    assert int(redis_client.get("test:inflight_max")) == 4
    assert singles(redis_client) == []


@pytest.mark.django_db(transaction=True)
def test_an_io_batch_that_finds_no_room_in_time_hands_the_rest_back_to_the_queue(
    cfg, redis_client, settings
):
    """A process admits 4 jobs per poll thread (polling, or queued for one). The jobs
    of an I/O batch still without room once a quarter of their lease has passed go back
    to the queue as single ticks, their leases released: a backlog (a source that slowed
    down) waits in the broker, which drops expired ticks, not in the worker with its
    leases held and its deadlines running."""
    settings.NEXOPOLL_BATCH_SLOW_MS, settings.NEXOPOLL_BATCH_THREADS = 50, 1
    ids = jobs(10)
    setup(cfg, redis_client, ids)
    PollState.objects.filter(job_id__in=ids).update(last_latency_ms=200)
    for job_id in ids:
        redis_client.set(f"test:block:{job_id}", "1")  # the source hangs until let go
    result: dict = {}

    def batch() -> None:
        try:
            result["r"] = run_batch([(i, 4000) for i in ids], clock=clock)
        finally:
            connection.close()

    t = threading.Thread(target=batch)
    t.start()
    # a quarter of the 4 s lease later, the six without room are handed back
    wait_for(lambda: len(singles(redis_client)) == 6, 10, what="six handed back")
    assert sorted(args[0] for _task, args in singles(redis_client)) == ids[4:]
    for job_id in ids[4:]:
        assert not redis_client.exists(lease.lease_key(job_id), lease.running_key(job_id))
    for job_id in ids:
        redis_client.delete(f"test:block:{job_id}")
    t.join(20)
    reports = result["r"]
    assert sorted(r.job_id for r in reports) == ids[:4] and all(r.committed for r in reports)
    for job_id in ids[4:]:
        assert st(job_id).ticks_total == 0
    assert int(redis_client.get("test:inflight_max") or 0) <= 1
