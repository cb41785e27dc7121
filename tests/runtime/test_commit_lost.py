"""A commit whose reply is lost (RELIABILITY.md row 53, the DB half): the connection
dies after COMMIT was sent, so the tick cannot know from the driver whether it landed.
It reads its row back: a commit that landed is reported committed, never "fenced", and
its after-commit steps (deliveries handed to the queue, history) still run. PostgreSQL
only: SQLite has no connection to lose."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

from nexopoll.models import Delivery, PollState
from nexopoll.runtime import history, lease
from nexopoll.runtime.tick import tick_job
from tests.support.celeryqueue import DELIVERIES, messages
from tests.support.pgcut import CommitCut

from .conftest import run_batch, scripted

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="a lost COMMIT reply needs a DB server"
)


@pytest.fixture
def cut(transactional_db):
    proxy = CommitCut(connection.settings_dict.get("PORT") or 5432).start()
    yield proxy
    proxy.stop()


def through(proxy: CommitCut, run):
    """Run ``run()`` in a thread whose DB connection goes through ``proxy``."""
    result: dict = {}

    def target() -> None:
        connection.settings_dict = {
            **connection.settings_dict,
            "HOST": "127.0.0.1",
            "PORT": str(proxy.port),
        }
        try:
            result["r"] = run()
        except BaseException as exc:  # the test reports it
            result["raised"] = exc
        finally:
            connection.close()

    t = threading.Thread(target=target)
    t.start()
    t.join(60)
    assert "raised" not in result, result.get("raised")
    return result["r"]


def queued(redis_client) -> set[str]:
    return {
        i
        for task, args in messages(redis_client, DELIVERIES)
        if task == "nexopoll.deliver"
        for i in args[0]
    }


def test_a_batch_whose_commit_reply_is_lost_reports_its_ticks_committed(cfg, redis_client, cut):
    ids = ["j00", "j01", "j02"]
    cfg.write([scripted(i) for i in ids])
    cfg.reload()
    redis_client.delete("nexopoll", "nexopoll.deliveries")
    for job_id in ids:
        redis_client.rpush(f"test:src:{job_id}", 1, 2)
    cut.arm()
    reports = through(cut, lambda: run_batch([(i, 30_000) for i in ids], clock=timezone.now))
    assert cut.cuts == 1  # the COMMIT landed, its reply never came
    by_job = {r.job_id: r for r in reports}
    for job_id in ids:
        r = by_job[job_id]
        assert r.status == "ok" and r.committed, r
        s = PollState.objects.get(job_id=job_id)
        assert s.ticks_total == 1 and bytes(s.cursor) == b"2" and s.epoch == r.epoch + 1
        assert history.entries(redis_client, job_id)[0].status == "ok"
        assert not redis_client.exists(lease.lease_key(job_id), lease.running_key(job_id))
    rows = {str(i) for i in Delivery.objects.values_list("id", flat=True)}
    assert len(rows) == 6 and queued(redis_client) == rows  # the after-commit step ran


def test_a_single_tick_whose_commit_reply_is_lost_reports_itself_committed(cfg, redis_client, cut):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.delete("nexopoll", "nexopoll.deliveries")
    redis_client.rpush("test:src:a", 1, 2, 3)
    cut.arm()
    report = through(cut, lambda: tick_job("a", now=timezone.now()))
    assert cut.cuts == 1
    assert report.status == "ok" and report.committed and not report.db_error, report
    assert bytes(PollState.objects.get(job_id="a").cursor) == b"3"
    assert queued(redis_client) == set(report.delivery_ids) and len(report.delivery_ids) == 3
