"""RELIABILITY row 19 with a real worker: the DB is locked by another session
(PostgreSQL ``LOCK TABLE poll_state IN ACCESS EXCLUSIVE MODE``, SQLite ``BEGIN
EXCLUSIVE``). The worker's ticks fail cleanly after ``NEXOPOLL_DB_LOCK_TIMEOUT_SECS``
as retryable errors, write nothing, and catch up once the lock is released."""

from __future__ import annotations

import contextlib
import sqlite3
import time

import pytest
from django.db import connection

from nexopoll.models import PollState
from tests.support.procs import wait_for
from tests.support.sink import assert_no_loss_dup_safe

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@contextlib.contextmanager
def db_locked():
    if connection.vendor == "postgresql":
        import psycopg

        s = connection.settings_dict
        conn = psycopg.connect(
            host=s["HOST"] or "127.0.0.1",
            port=s["PORT"] or 5432,
            user=s["USER"] or "postgres",
            dbname=s["NAME"],
        )
        try:
            conn.execute("LOCK TABLE poll_state IN ACCESS EXCLUSIVE MODE")
            yield
            conn.rollback()
        finally:
            conn.close()
    else:
        conn = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            yield
            conn.execute("ROLLBACK")
        finally:
            conn.close()


def test_a_locked_db_fails_ticks_cleanly_and_they_catch_up_after_release(stack):
    stack.env_extra["NEXOPOLL_DB_LOCK_TIMEOUT_SECS"] = "1"
    stack.write([job("a")])
    stack.reload()
    stack.publish("a", 1)
    worker = stack.worker()
    stack.beat()
    wait_for(lambda: stack.sink.item_ids("a") == [1], 30, what="first delivery")
    failed_before = worker.text().count("tick.db_error")
    with db_locked():
        stack.publish("a", 2, 3)
        wait_for(
            lambda: worker.text().count("tick.db_error") >= failed_before + 3,
            30,
            what="ticks failing on the lock",
        )
        log = worker.text()
        assert "database is locked" in log or "lock timeout" in log
        assert stack.sink.item_ids("a") == [1]  # nothing sent while nothing committed
        released = time.monotonic()
    wait_for(lambda: set(stack.sink.item_ids("a")) >= {2, 3}, 15, what="catch-up after release")
    print(f"caught up {time.monotonic() - released:.1f} s after the release")
    assert_no_loss_dup_safe(stack.sink, "a", [1, 2, 3])
    s = PollState.objects.get(job_id="a")
    assert bytes(s.cursor) == b"3" and not s.paused
    # ticks, deliveries and sweeps keep no results in the DB (not one write per task)
    from django_celery_results.models import TaskResult

    assert not TaskResult.objects.filter(
        task_name__in=["nexopoll.tick", "nexopoll.deliver", "nexopoll.sweep_outbox"]
    ).exists()
    log = worker.text()  # classified and retried, not an unhandled failure of the tick task
    assert "nexopoll.tick" not in "".join(
        line for line in log.splitlines() if "raised unexpected" in line or "outside body" in line
    )


def test_a_tick_that_met_a_locked_db_is_retried_by_the_task_before_the_next_slot(stack):
    """No beat and an hourly job: the only tick is the one sent here, so the item can
    only arrive through the task's own retry after the lock is gone."""
    from nexopoll.celery import app

    stack.env_extra["NEXOPOLL_DB_LOCK_TIMEOUT_SECS"] = "1"
    stack.write([job("slow", every=3600)])
    stack.reload()
    stack.publish("slow", 1)
    worker = stack.worker()
    with db_locked():
        app.send_task("nexopoll.tick", args=["slow"])
        wait_for(lambda: "tick.db_error job=slow" in worker.text(), 30, what="a failed tick")
    wait_for(lambda: stack.sink.item_ids("slow") == [1], 20, what="the retried tick's delivery")
    assert "retry: Retry in" in worker.text()
    assert bytes(PollState.objects.get(job_id="slow").cursor) == b"1"
