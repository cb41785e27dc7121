"""Promises of the tick's glue code, each guarded by a test that fails when it breaks:
one transaction for state and outbox, enqueue after commit (and at once), the half-open
trial marker, cursors kept across reloads, no commit after a lost lease."""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
from datetime import UTC, datetime, timedelta

import pytest
from celery.signals import before_task_publish
from django.db import connection

from nexopoll.models import Delivery, PollState
from nexopoll.runtime import lease
from nexopoll.runtime.tick import tick_job
from tests.support.procs import wait_for

from .conftest import scripted
from .test_db_faults import BlockedTick, pg_connect, table_locked

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def st(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def other_connection_sees(ids: list[str]) -> int:
    """How many of the outbox rows ``ids`` a separate DB connection sees (committed ones)."""
    hexes = [i.replace("-", "") for i in ids]
    if connection.vendor == "postgresql":
        with pg_connect() as conn:
            return conn.execute(
                "SELECT count(*) FROM poll_outbox WHERE id::text = ANY(%s)", [ids]
            ).fetchone()[0]
    conn = sqlite3.connect(connection.settings_dict["NAME"])
    try:
        marks = ",".join("?" * len(hexes))
        return conn.execute(
            f"SELECT count(*) FROM poll_outbox WHERE id IN ({marks})", hexes
        ).fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def failing_outbox_insert(transactional_db):
    """Every outbox INSERT fails inside the tick's transaction (a DB trigger):
    PostgreSQL raises disk_full; SQLite's trigger writes to a table that is missing."""
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute(
                "CREATE FUNCTION np_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION 'could not extend file: No space left on device' "
                "USING ERRCODE = 'disk_full'; END $$"
            )
            cur.execute(
                "CREATE TRIGGER np_full BEFORE INSERT ON poll_outbox "
                "FOR EACH ROW EXECUTE FUNCTION np_full()"
            )
        else:
            cur.execute(
                "CREATE TRIGGER np_full BEFORE INSERT ON poll_outbox "
                "BEGIN INSERT INTO np_missing_table VALUES (1); END"
            )
    yield
    with connection.cursor() as cur:
        cur.execute(
            "DROP TRIGGER np_full ON poll_outbox"
            if connection.vendor == "postgresql"
            else "DROP TRIGGER np_full"
        )
        if connection.vendor == "postgresql":
            cur.execute("DROP FUNCTION np_full()")


def test_when_the_outbox_insert_fails_cursor_and_epoch_roll_back_with_it(
    cfg, redis_client, failing_outbox_insert
):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2, 3)
    report = tick_job("a", now=NOW)
    assert report.status == "transient" and not report.committed and report.db_error
    s = st("a")
    # the tick took epoch 1; its commit (cursor 3, epoch 2, counters) never happened
    assert s.cursor is None and s.epoch == 1 and s.ticks_total == 0 and s.items_seen_total == 0
    assert s.last_run_at is None
    assert not Delivery.objects.exists()


def test_the_tick_works_again_once_the_outbox_accepts_rows(cfg, redis_client):
    """(the counterpart of the test above, without the trigger: same job, same items)"""
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2, 3)
    assert tick_job("a", now=NOW).committed
    assert bytes(st("a").cursor) == b"3" and st("a").epoch == 2 and Delivery.objects.count() == 3


def queued_deliver_messages(client) -> list[list[str]]:
    """The ``nexopoll.deliver`` messages waiting in the broker (list ``nexopoll.deliveries``)."""
    out = []
    for raw in client.lrange("nexopoll.deliveries", 0, -1):
        msg = json.loads(raw)
        if msg["headers"]["task"] == "nexopoll.deliver":
            args = json.loads(base64.b64decode(msg["body"]))[0]
            out.append(args[0])
    return out


def test_deliveries_are_published_right_after_the_commit_never_before(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    seen_at_publish: list[tuple[list[str], int]] = []

    def check(sender=None, body=None, **_):  # runs in the publishing process, before sending
        if sender == "nexopoll.deliver":
            ids = body[0][0]
            seen_at_publish.append((ids, other_connection_sees(ids)))

    before_task_publish.connect(check, weak=False)
    try:
        report = tick_job("a", now=NOW)
    finally:
        before_task_publish.disconnect(check)
    assert report.committed and len(report.delivery_ids) == 2
    # published once, and only when another connection could already read the rows
    assert seen_at_publish == [(report.delivery_ids, 2)]
    # promptly: the message is in the broker when the tick returns, not left to the sweeper
    assert queued_deliver_messages(redis_client) == [report.delivery_ids]


def test_the_half_open_trial_marker_stops_a_second_trial_from_any_worker(cfg, redis_client):
    cfg.write([scripted("a")], breaker_threshold=1)
    cfg.reload()
    redis_client.set("test:mode:a", "transient")
    tick_job("a", now=NOW)  # opens the breaker for 30 s
    s = st("a")
    assert s.breaker_open_until == NOW + timedelta(seconds=30)
    redis_client.set("test:mode:a", "ok")
    half_open = NOW + timedelta(seconds=31)
    trial = BlockedTick(redis_client, "a", now=half_open)  # the trial, in its poller
    assert st("a").breaker_trial_at == half_open  # the marker is in the DB, not in a process
    ticks = int(redis_client.get("test:ticks:a"))
    # another worker (no lease in common: it expired or Redis lost it) reads the marker
    redis_client.delete(lease.lease_key("a"))
    result = {}

    def second() -> None:
        try:
            result["r"] = tick_job("a", now=half_open + timedelta(seconds=1))
        finally:
            connection.close()

    t = threading.Thread(target=second)
    t.start()
    t.join(30)
    assert result["r"].status == "skipped" and result["r"].reason == "breaker open"
    assert int(redis_client.get("test:ticks:a")) == ticks  # its poller never ran
    assert trial.release().status == "ok"
    s = st("a")
    assert s.breaker_open_until is None and s.breaker_trial_at is None


def test_reload_keeps_the_cursor_of_a_replaced_and_of_a_removed_then_re_added_job(
    cfg, redis_client
):
    jobs = [scripted("a"), scripted("b")]
    cfg.write(jobs)
    cfg.reload()
    for job_id in ("a", "b"):
        redis_client.rpush(f"test:src:{job_id}", 1, 2)
        assert tick_job(job_id, now=NOW).items_dispatched == 2
    assert bytes(st("a").cursor) == b"2" and bytes(st("b").cursor) == b"2"
    # a replaced (a new config), b removed
    cfg.write([scripted("a", config={"deliver": {"channel": "log", "to": "ops2"}})])
    res = cfg.reload()
    assert res.replace == ["a"] and res.remove == ["b"]
    assert bytes(st("a").cursor) == b"2" and bytes(st("b").cursor) == b"2"
    # b added back
    cfg.write([scripted("a", config={"deliver": {"channel": "log", "to": "ops2"}}), scripted("b")])
    assert cfg.reload().add == ["b"]
    assert bytes(st("b").cursor) == b"2"
    for job_id in ("a", "b"):
        redis_client.rpush(f"test:src:{job_id}", 3)
        report = tick_job(job_id, now=NOW)
        assert report.items_dispatched == 1  # only the new item: 1 and 2 are not sent again
    items = sorted((d.job_id, d.payload["item_id"], d.recipient) for d in Delivery.objects.all())
    assert items == [
        ("a", 1, "ops"),
        ("a", 2, "ops"),
        ("a", 3, "ops2"),
        ("b", 1, "ops"),
        ("b", 2, "ops"),
        ("b", 3, "ops"),
    ]


@pytest.mark.parametrize("how", ["taken over", "expired"])
def test_a_tick_whose_lease_extension_fails_does_not_commit(cfg, redis_client, how):
    """The poller runs past half the lease TTL, so the tick extends the lease before
    committing; the lease is no longer its own, so it commits nothing."""
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    # the poller holds until its deadline (0.8 x the 1 s TTL), well past TTL / 2
    tick = BlockedTick(redis_client, "a", now=NOW, lease_ttl_ms=1000)
    if how == "taken over":
        redis_client.set(lease.lease_key("a"), "another-worker:token", px=10_000)
    else:
        redis_client.delete(lease.lease_key("a"))
    report = tick.release(unhold=False)
    assert report.status == "fenced" and report.reason == "lease lost before commit"
    assert not report.committed
    s = st("a")
    # it writes nothing at all, not even a clean-up: moving the epoch would fence the
    # tick that took its lease over (test_a_zombie_that_gives_up_does_not_fence_its_successor)
    assert s.cursor is None and s.epoch == 0 and s.ticks_total == 0 and s.running_since is None
    assert not Delivery.objects.exists()
    if how == "taken over":  # the other worker's lease is untouched
        assert redis_client.get(lease.lease_key("a")) == "another-worker:token"


def successor_at_the_barrier(redis_client) -> tuple[threading.Thread, dict]:
    """Job a's lease is gone (expired, or Redis lost it) while tick A still polls: tick B,
    a second later, takes it over and stops in its poller too, after reading the row.
    Returns B's thread and the dict its report lands in (``"r"``)."""
    redis_client.delete(lease.lease_key("a"))
    redis_client.delete("test:blocked:a")
    redis_client.set("test:block:a", "1")
    result = {}

    def successor() -> None:
        try:
            result["r"] = tick_job("a", now=NOW + timedelta(seconds=1))
        finally:
            connection.close()

    b = threading.Thread(target=successor)
    b.start()
    wait_for(lambda: redis_client.get("test:blocked:a"), 10, what="B at the barrier")
    return b, result


def test_a_zombie_that_gives_up_does_not_fence_its_successor(cfg, redis_client):
    """A's lease expires mid-poll; B takes it over and reads the same version of the row;
    A then finds its lease lost and rightly commits nothing. Its ending must not move the
    epoch either, or B (which did everything right) is fenced too and nobody commits."""
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    # A polls until its deadline (0.8 x 2 s), past TTL / 2: it must extend before committing
    zombie = BlockedTick(redis_client, "a", now=NOW, lease_ttl_ms=2000)
    b, result = successor_at_the_barrier(redis_client)
    gave_up = zombie.release(unhold=False)  # A: lease lost, nothing committed
    assert gave_up.status == "fenced" and gave_up.reason == "lease lost before commit"
    assert st("a").epoch == 0  # A's ending wrote nothing
    redis_client.delete("test:block:a")
    b.join(30)
    took_over = result["r"]
    assert took_over.status == "ok" and took_over.committed and took_over.takeover
    s = st("a")
    assert bytes(s.cursor) == b"2" and s.ticks_total == 1 and s.epoch > took_over.epoch
    assert sorted(d.payload["item_id"] for d in Delivery.objects.all()) == [1, 2]
    assert {d.epoch for d in Delivery.objects.all()} == {took_over.epoch}


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="needs PostgreSQL")
def test_a_zombie_whose_commit_failed_records_nothing_over_its_successor(cfg, redis_client):
    """A's commit fails on a lock timeout (the outbox table is held) after its lease was
    taken over by B, which read the same row: A's failure record would move the epoch and
    fence B. A records nothing; B commits."""
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    zombie = BlockedTick(redis_client, "a", now=NOW, lock_wait_ms=300)
    b, result = successor_at_the_barrier(redis_client)
    with table_locked("poll_outbox"):
        failed = zombie.release()
    assert failed.status == "transient" and failed.db_error and not failed.committed
    assert st("a").epoch == 0 and st("a").last_status == ""
    redis_client.delete("test:block:a")
    b.join(30)
    assert result["r"].status == "ok" and result["r"].committed
    assert bytes(st("a").cursor) == b"2" and Delivery.objects.count() == 2
