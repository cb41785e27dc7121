"""The tick's commit protocol against the real DB and a real Redis (no worker)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from nexopoll import services
from nexopoll.models import Delivery, PollState
from nexopoll.runtime import lease
from nexopoll.runtime.tick import tick_job
from tests.support.procs import wait_for

from .conftest import scripted


def st(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def test_tick_commits_cursor_counters_and_outbox_together(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2, 3)
    report = tick_job("a", now=timezone.now())
    assert report.status == "ok" and report.committed
    s = st("a")
    # the tick took epoch 1 and its commit moved the row on to 2
    assert bytes(s.cursor) == b"3" and s.epoch == 2 and s.ticks_total == 1
    assert s.items_seen_total == 3 and s.items_dispatched_total == 3
    rows = Delivery.objects.filter(job_id="a").order_by("created_at")
    assert sorted(r.payload["item_id"] for r in rows) == [1, 2, 3]
    assert {r.epoch for r in rows} == {1}
    assert not redis_client.exists(lease.lease_key("a"))  # released


def test_dry_run_commits_nothing(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    report = services.run_job("a", now=timezone.now(), dry_run=True)
    assert report.next_cursor == b"2" and len(report.deliveries) == 2 and not report.committed
    s = st("a")
    assert s.cursor is None and s.epoch == 0 and s.ticks_total == 0
    assert not Delivery.objects.exists()


def test_paused_job_is_skipped_and_run_needs_force(cfg, redis_client):
    cfg.write([scripted("a", paused_on_boot=True)])
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    assert tick_job("a", now=timezone.now()).reason == "paused"
    with pytest.raises(services.JobPaused, match="paused_on_boot"):
        services.run_job("a", now=timezone.now())
    assert st("a").cursor is None and st("a").epoch == 0
    assert redis_client.get("test:ticks:a") is None  # the poller never ran
    assert services.run_job("a", now=timezone.now(), dry_run=True).next_cursor == b"1"
    assert services.run_job("a", now=timezone.now(), force=True).status == "ok"
    assert bytes(st("a").cursor) == b"1" and st("a").paused  # still paused afterwards


def test_busy_lease_skips(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    held = lease.try_acquire(redis_client, "a", 10_000)
    assert held is not None
    report = tick_job("a", now=timezone.now())
    assert report.status == "skipped" and report.reason == "lease busy"
    assert st("a").epoch == 0


def test_unknown_job_is_skipped_and_cli_verbs_refuse_it(cfg):
    assert tick_job("nope", now=timezone.now()).reason == "unknown job"
    with pytest.raises(services.UnknownJob):
        services.pause_job("nope")


@pytest.mark.django_db(transaction=True)
def test_a_tick_whose_epoch_moved_on_is_fenced(cfg, redis_client):
    """RELIABILITY row 13: the lease vanishes mid-tick, another tick takes the epoch."""
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    redis_client.set("test:block_once:a", "1")
    redis_client.set("test:hold:a", "1")
    result = {}

    def first_tick() -> None:
        try:
            result["r"] = tick_job("a", now=timezone.now())
        finally:
            connection.close()  # this thread's own DB connection

    t = threading.Thread(target=first_tick)
    t.start()
    wait_for(lambda: redis_client.get("test:blocked:a"), 10, what="tick at the barrier")
    redis_client.delete(lease.lease_key("a"))  # failover / eviction
    redis_client.rpush("test:src:a", 3)
    second = tick_job("a", now=timezone.now())  # takes the lease and epoch 2, commits
    redis_client.delete("test:hold:a")  # now the first tick tries to commit
    t.join(10)
    first = result["r"]
    assert second.status == "ok" and second.epoch == 2
    assert first.status == "fenced" and first.epoch == 1
    s = st("a")
    assert bytes(s.cursor) == b"3" and s.epoch == 3  # 2 taken by the second tick, 3 its commit
    assert not Delivery.objects.filter(epoch=1).exists()
    assert sorted(d.payload["item_id"] for d in Delivery.objects.all()) == [1, 2, 3]


def test_transient_errors_count_and_open_breaker_at_threshold(cfg, redis_client):
    cfg.write([scripted("a", failure_to={"channel": "log", "to": "oncall"})], breaker_threshold=2)
    cfg.reload()
    redis_client.set("test:mode:a", "transient")
    now = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)  # the next 60 s slot is 59 s away
    r1 = tick_job("a", now=now)
    assert r1.status == "transient" and st("a").consecutive_errors == 1
    assert st("a").breaker_open_until is None
    assert r1.retry_at == now + timedelta(seconds=30)  # the backoff lands before the next slot
    late = now + timedelta(seconds=40)  # now the next slot is sooner than any backoff
    assert tick_job("a", now=late).retry_at is None
    s = st("a")
    assert s.breaker_open_until == late + timedelta(seconds=30)
    assert Delivery.objects.filter(purpose="alert").count() == 1
    assert tick_job("a", now=late + timedelta(seconds=1)).reason == "breaker open"
    # no deliveries from failed ticks
    assert not Delivery.objects.filter(purpose="item").exists()


def test_permanent_error_pauses_with_reason_and_alerts(cfg, redis_client):
    cfg.write([scripted("a", failure_to={"channel": "log", "to": "oncall"})])
    cfg.reload()
    redis_client.set("test:mode:a", "permanent")
    report = tick_job("a", now=timezone.now())
    s = st("a")
    assert report.status == "permanent" and s.paused
    assert s.paused_reason == "permanent error: scripted permanent failure"
    alert = Delivery.objects.get(purpose="alert")
    assert alert.recipient == "oncall" and "failing" in alert.payload["text"]


def test_one_shot_job_pauses_after_it_fires(cfg, redis_client):
    cfg.write([scripted("once", schedule={"at": "2030-01-01T00:00:00Z"})])
    cfg.reload()
    report = tick_job("once", now=timezone.now())
    assert report.status == "ok"
    s = st("once")
    assert s.paused and s.paused_reason == "one-shot schedule fired"


def test_a_tick_that_read_the_row_before_another_commit_cannot_take_the_epoch(cfg, redis_client):
    """A stale read (e.g. a manual run racing a scheduled tick) never polls from an old cursor."""
    from nexopoll.runtime import store

    cfg.write([scripted("a")])
    cfg.reload()
    stale = store.load_state("a")
    redis_client.rpush("test:src:a", 1)
    tick_job("a", now=timezone.now())  # commits cursor 1 and moves the epoch on
    assert not store.take_epoch("a", stale["epoch"], {"last_started_at": timezone.now()})
    assert bytes(st("a").cursor) == b"1"


def test_a_tick_that_fails_to_commit_is_not_counted_as_a_crash(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    held = lease.try_acquire(redis_client, "a", 3000)
    # a manual run does not mark the job running, so a scheduled tick after it sees no crash
    assert services.run_job("a", now=timezone.now()).status == "ok"
    assert st("a").running_since is None
    lease.release(redis_client, held)
    assert tick_job("a", now=timezone.now()).status == "ok"
    assert st("a").crash_count == 0


def test_reset_clears_cursor_errors_and_bumps_epoch(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    tick_job("a", now=timezone.now())
    redis_client.set("test:mode:a", "transient")
    tick_job("a", now=timezone.now())
    assert st("a").consecutive_errors == 1
    before = st("a").epoch
    services.reset_job("a")
    s = st("a")
    assert s.cursor is None and s.consecutive_errors == 0 and s.epoch == before + 1


def test_resume_resets_errors_and_breaker_so_one_error_does_not_reopen_it(cfg, redis_client):
    cfg.write([scripted("a")], breaker_threshold=2)
    cfg.reload()
    redis_client.set("test:mode:a", "transient")
    now = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
    tick_job("a", now=now)
    tick_job("a", now=now + timedelta(seconds=1))
    s = st("a")
    assert s.consecutive_errors == 2 and s.breaker_open_until is not None and s.breaker_trips == 1
    services.pause_job("a")
    services.resume_job("a")
    s = st("a")
    assert not s.paused and s.consecutive_errors == 0 and s.breaker_trips == 0
    assert s.breaker_open_until is None and s.breaker_trial_at is None
    later = now + timedelta(seconds=2)
    report = tick_job("a", now=later)  # still failing: the first error after the resume
    assert report.status == "transient"
    s = st("a")
    assert s.consecutive_errors == 1 and s.breaker_open_until is None  # breaker stays closed
    assert tick_job("a", now=later + timedelta(seconds=1)).reason != "breaker open"
