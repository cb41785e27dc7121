"""DB faults at the tick's commit (RELIABILITY.md rows 18 and 19, and DataError).

A lock or a lost connection at commit is transient: the transaction rolls back whole
(no cursor, no outbox row, for that attempt), the error is recorded when the DB
answers, and the next attempt succeeds. A value the DB refuses is permanent: the
job pauses with the reason and ``failure_to`` is alerted.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.db import connection

from nexopoll.core.errors import ErrorClass
from nexopoll.models import Delivery, PollState
from nexopoll.runtime import store
from nexopoll.runtime.tick import tick_job
from tests.support.procs import wait_for

from .conftest import scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
ALERT = {"channel": "log", "to": "oncall"}


def is_pg() -> bool:
    return connection.vendor == "postgresql"


def st(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def pg_connect():
    import psycopg

    s = connection.settings_dict
    return psycopg.connect(
        host=s["HOST"] or "127.0.0.1",
        port=s["PORT"] or 5432,
        user=s["USER"] or "postgres",
        dbname=s["NAME"],
        autocommit=True,
    )


@contextlib.contextmanager
def table_locked(table: str):
    """Another session holds an exclusive lock on ``table`` until the block ends."""
    if is_pg():
        conn = pg_connect()
        try:
            with conn.transaction():
                conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                yield conn
        finally:
            conn.close()
    else:  # SQLite locks the whole database
        conn = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            yield conn
            conn.execute("ROLLBACK")
        finally:
            conn.close()


class BlockedTick:
    """A tick in a thread, stopped in its poller (after taking the epoch, before commit)."""

    def __init__(
        self,
        redis_client,
        job_id: str,
        *,
        lock_wait_ms: int = 300,
        now: datetime = NOW,
        lease_ttl_ms: int | None = None,
    ) -> None:
        self.redis, self.job_id, self.result = redis_client, job_id, {}
        self.lock_wait_ms, self.now, self.lease_ttl_ms = lock_wait_ms, now, lease_ttl_ms
        redis_client.set(f"test:block_once:{job_id}", "1")
        redis_client.set(f"test:hold:{job_id}", "1")
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        wait_for(lambda: redis_client.get(f"test:blocked:{job_id}"), 10, what="tick at barrier")

    def _run(self) -> None:
        try:
            with connection.cursor() as cur:  # this thread's own connection
                if is_pg():
                    cur.execute(f"SET lock_timeout = {self.lock_wait_ms}")
                    cur.execute("SELECT pg_backend_pid()")
                    self.result["pid"] = cur.fetchone()[0]
                else:
                    cur.execute(f"PRAGMA busy_timeout = {self.lock_wait_ms}")
            self.result["report"] = tick_job(
                self.job_id, now=self.now, lease_ttl_ms=self.lease_ttl_ms
            )
        except BaseException as exc:  # the test reports it
            self.result["raised"] = exc
        finally:
            connection.close()

    def release(self, *, unhold: bool = True):
        """Let the poller return (``unhold``; else it holds until its deadline) and wait."""
        if unhold:
            self.redis.delete(f"test:hold:{self.job_id}")
        self.thread.join(30)
        assert "raised" not in self.result, self.result.get("raised")
        return self.result["report"]


def test_db_errors_are_classified():
    from django.db import DataError, IntegrityError, InterfaceError, OperationalError

    assert store.db_error_class(OperationalError("database is locked")) is ErrorClass.TRANSIENT
    assert store.db_error_class(InterfaceError("connection already closed")) is (
        ErrorClass.TRANSIENT
    )
    assert store.db_error_class(DataError("value too long")) is ErrorClass.PERMANENT
    assert store.db_error_class(IntegrityError("not null")) is ErrorClass.PERMANENT
    assert store.db_error_class(ValueError("x")) is None


def test_a_locked_db_at_commit_is_transient_writes_nothing_and_heals(cfg, redis_client):
    """RELIABILITY row 19: PG ``LOCK TABLE poll_state``; SQLite ``BEGIN EXCLUSIVE``."""
    cfg.write([scripted("a", failure_to=ALERT)])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    tick = BlockedTick(redis_client, "a")
    with table_locked("poll_state"):
        report = tick.release()  # commits against the lock: waits lock_wait_ms, then fails
        assert report.status == "transient" and report.db_error and not report.committed
        assert "database unavailable at commit" in report.error
    s = st("a")
    # a scheduled tick's one write is its commit (optimistic concurrency): nothing written
    assert s.cursor is None and s.epoch == 0 and s.ticks_total == 0
    assert not Delivery.objects.exists()
    assert not s.paused and s.consecutive_errors == 0  # a DB outage is not the job's fault
    again = tick_job("a", now=NOW)  # the retry, after the lock is gone
    assert again.status == "ok" and again.committed
    assert bytes(st("a").cursor) == b"2"
    assert sorted(d.payload["item_id"] for d in Delivery.objects.all()) == [1, 2]


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="needs PostgreSQL")
def test_a_connection_killed_mid_transaction_rolls_back_cursor_and_outbox(cfg, redis_client):
    """RELIABILITY row 18: the backend is terminated after the state UPDATE, while the
    outbox INSERT of the same transaction waits (the test holds the outbox table)."""
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2, 3)
    tick = BlockedTick(redis_client, "a", lock_wait_ms=20_000)
    with table_locked("poll_outbox") as locker:
        redis_client.delete("test:hold:a")

        def waiting_insert():
            locker.execute("SELECT pg_stat_clear_snapshot()")  # fresh stats in a transaction
            row = locker.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"
                " AND query ILIKE 'INSERT INTO %%poll_outbox%%'",
                [tick.result["pid"]],
            ).fetchone()
            return row and row[0]

        pid = wait_for(waiting_insert, 10, what="the commit waiting inside its transaction")
        locker.execute("SELECT pg_terminate_backend(%s)", [pid])
        report = tick.release()
    assert report.status == "transient" and report.db_error and not report.committed
    s = st("a")
    assert s.cursor is None and s.ticks_total == 0 and s.epoch == 1
    assert not Delivery.objects.exists()
    # recorded on a fresh connection after the old one died
    assert s.last_status == "transient" and "database unavailable at commit" in s.last_error
    assert s.running_since is None
    again = tick_job("a", now=NOW)
    assert again.status == "ok" and bytes(st("a").cursor) == b"3"
    assert Delivery.objects.count() == 3


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="needs PostgreSQL")
def test_a_value_the_db_refuses_pauses_the_job_with_the_reason_and_alerts(cfg, redis_client):
    """PostgreSQL enforces varchar lengths: a recipient longer than the column fails the
    commit with DataError on every tick, so the job pauses instead of looking idle."""
    cfg.write([scripted("a", failure_to=ALERT)])
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    redis_client.set("test:raw_recipient:a", "r" * 600)  # the host refuses it: skip it
    report = tick_job("a", now=NOW)
    assert report.status == "permanent" and report.committed and not report.db_error
    s = st("a")
    assert s.paused and "the database refused the tick's commit" in s.paused_reason
    assert s.last_status == "permanent" and "refused" in s.last_error
    # classified, never the driver's text: no SQL, no table, no refused value
    assert s.paused_reason.endswith("DataError: a value the database cannot store (SQLSTATE 22001)")
    for leak in ("INSERT", "poll_outbox", "rrrrrrrr", "VALUES"):
        assert leak not in s.paused_reason + s.last_error
    assert s.cursor is None and s.epoch == 2 and s.ticks_total == 1
    alert = Delivery.objects.get()  # no item row, only the alert
    assert alert.purpose == "alert" and alert.recipient == "oncall"
    assert "the job is paused" in alert.payload["text"]
    assert tick_job("a", now=NOW).reason == "paused"


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="needs PostgreSQL")
def test_pg_sessions_get_the_configured_lock_and_statement_timeouts(transactional_db):
    with connection.cursor() as cur:
        cur.execute("SHOW lock_timeout")
        lock = cur.fetchone()[0]
        cur.execute("SHOW statement_timeout")
        stmt = cur.fetchone()[0]
    assert lock == f"{int(settings.NEXOPOLL_DB_LOCK_TIMEOUT_SECS)}s"
    assert stmt == f"{int(settings.NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS / 60)}min"
