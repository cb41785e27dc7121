"""Faults in a batch of ticks (runtime/batch.py, batchcommit.py): a stalled mate
(RELIABILITY.md row 52), an exception at commit, a slow after-commit hook, deliveries
published only after the commit. Real Redis, real DB, the scripted test poller."""

from __future__ import annotations

import os
import threading
import time

import pytest
from celery.signals import before_task_publish
from django.db import connection
from django.utils import timezone

from nexopoll.models import Delivery, DeliveryStatus, PollState
from nexopoll.runtime import delivery, history, lease
from nexopoll.runtime.tick import tick_job
from nexopoll.runtime.tick import write as tickwrite
from tests.integration.faults import wait_clock
from tests.support.celeryqueue import DELIVERIES, messages
from tests.support.procs import wait_for

from .conftest import run_batch, scripted
from .test_tick_promises import other_connection_sees

# RELIABILITY.md row 52 in its own units: a 45 s stall, 30 s leases, mates delivered
# within 15 s. NEXOPOLL_STALL_SCALE=1 runs it at full size (about 50 s of wall time).
SCALE = float(os.environ.get("NEXOPOLL_STALL_SCALE") or 0.1)


@pytest.fixture(autouse=True)
def _batch_settings(settings):
    """A stall is noticed after 200 ms (a busy CI machine must not spill a fast tick)."""
    settings.NEXOPOLL_BATCH_SLOW_MS = 200


def st(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def setup(cfg, redis_client, ids: list[str], **globals_) -> None:
    cfg.write([scripted(i) for i in ids], **globals_)
    cfg.reload()
    redis_client.delete("nexopoll", "nexopoll.deliveries")  # the reload's own messages, if any
    for job_id in ids:
        redis_client.rpush(f"test:src:{job_id}", 1, 2)


# Each promise test runs on a quick batch (its jobs polled one after another on the
# batch's thread until one stalls) and on an I/O batch (jobs whose last tick waited on the
# network, as beat batches them: all polled side by side on the poll threads at once,
# their commits pumped by the batch's thread).
KINDS = pytest.mark.parametrize("io", [False, True], ids=["quick", "io"])


def as_kind(ids: list[str], io: bool) -> None:
    if io:
        PollState.objects.filter(job_id__in=ids).update(last_latency_ms=1000)


def queued(redis_client) -> set[str]:
    """Outbox row ids handed to the queue (``nexopoll.deliver`` messages)."""
    return {
        i
        for task, args in messages(redis_client, DELIVERIES)
        if task == "nexopoll.deliver"
        for i in args[0]
    }


def rows_of(job_ids: list[str]) -> set[str]:
    rows = Delivery.objects.filter(job_id__in=job_ids)
    return {str(i) for i in rows.values_list("id", flat=True)}


def hang(redis_client, job_id: str) -> None:
    """``job_id``'s next tick hangs in its poller, past its deadline, until ``unhang``."""
    redis_client.set(f"test:block_once:{job_id}", "1")
    redis_client.set(f"test:hold:{job_id}", "1")
    redis_client.set(f"test:ignore_cancel:{job_id}", "1")


def unhang(redis_client, job_id: str) -> None:
    redis_client.delete(f"test:hold:{job_id}", f"test:ignore_cancel:{job_id}")


class Batch:
    """``run_batch`` in a thread of its own (its own DB connection)."""

    def __init__(self, ids: list[str], ttl_ms: int) -> None:
        self.result: dict = {}
        self.began = time.monotonic()
        self.thread = threading.Thread(target=self._run, args=(ids, ttl_ms))
        self.thread.start()

    def _run(self, ids: list[str], ttl_ms: int) -> None:
        try:
            self.result["r"] = run_batch([(i, ttl_ms) for i in ids], clock=timezone.now)
        except BaseException as exc:  # the test reports it
            self.result["raised"] = exc
        finally:
            connection.close()

    def join(self) -> dict:
        self.thread.join(60)
        assert "raised" not in self.result, self.result.get("raised")
        return {r.job_id: r for r in self.result["r"]}


def no_lease_or_marker(redis_client, job_id: str) -> bool:
    return not redis_client.exists(lease.lease_key(job_id), lease.running_key(job_id))


@pytest.mark.django_db(transaction=True)
@KINDS
def test_mates_of_a_stalled_tick_commit_at_once_and_its_stale_write_fences_no_successor(
    cfg, redis_client, io
):
    ids = ["j00", "j01", "j02", "j03"]
    mates = ["j00", "j02", "j03"]
    setup(cfg, redis_client, ids)
    as_kind(ids, io)
    hang(redis_client, "j01")
    batch = Batch(ids, ttl_ms=1500)
    # while j01 hangs, its mates commit, hand their rows to the queue, release their leases
    wait_for(lambda: len(queued(redis_client)) == 6, 10, what="the mates' deliveries queued")
    assert redis_client.get("test:blocked:j01") and batch.thread.is_alive()
    assert queued(redis_client) == rows_of(mates)
    for job_id in mates:
        assert st(job_id).ticks_total == 1 and st(job_id).last_status == "ok"
        assert no_lease_or_marker(redis_client, job_id)
        assert history.entries(redis_client, job_id)[0].status == "ok"
    # j01's lease runs out under it; its next slot takes over (a real takeover) and commits
    wait_for(lambda: not redis_client.exists(lease.lease_key("j01")), 10, what="lease expiry")
    redis_client.rpush("test:src:j01", 3)
    successor = tick_job("j01", now=timezone.now())
    assert successor.committed and successor.takeover
    unhang(redis_client, "j01")
    reports = batch.join()
    assert all(reports[j].committed for j in mates)
    stale = reports["j01"]
    assert stale.status == "fenced" and not stale.committed
    assert stale.reason == "lease lost before commit"
    # the successor's commit stands: its cursor, its epoch, its rows alone
    s = st("j01")
    assert bytes(s.cursor) == b"3" and s.epoch == successor.epoch + 1 and s.ticks_total == 1
    assert Delivery.objects.filter(job_id="j01", epoch=successor.epoch).count() == 3
    assert Delivery.objects.filter(job_id="j01").count() == 3
    for job_id in mates:  # the mates' next slots: no crash, no takeover
        again = tick_job(job_id, now=timezone.now())
        assert again.committed and not again.takeover and st(job_id).crash_count == 0


@pytest.mark.django_db(transaction=True)
@KINDS
def test_a_tick_whose_lease_is_older_than_its_ttl_never_commits(cfg, redis_client, io):
    """Even when Redis still shows its token (its clock lags, say): the lease's age on
    the worker's clock decides, counted from when it was taken."""
    ids = ["j00", "j01"]
    setup(cfg, redis_client, ids)
    as_kind(ids, io)
    hang(redis_client, "j01")
    batch = Batch(ids, ttl_ms=1000)
    wait_for(lambda: redis_client.get("test:blocked:j01"), 10, what="j01 hangs")
    token = redis_client.get(lease.lease_key("j01"))
    wait_for(lambda: not redis_client.exists(lease.lease_key("j01")), 10, what="lease expiry")
    redis_client.set(lease.lease_key("j01"), token, px=60_000)  # Redis still says: yours
    unhang(redis_client, "j01")
    reports = batch.join()
    assert reports["j00"].committed
    assert reports["j01"].status == "fenced" and not reports["j01"].committed
    s = st("j01")
    assert s.cursor is None and s.ticks_total == 0 and s.running_since is None
    assert not Delivery.objects.filter(job_id="j01").exists()


@pytest.mark.django_db(transaction=True)
def test_a_ticks_deadline_counts_from_its_lease_not_from_its_start(cfg, redis_client, settings):
    """j01 starts late in its batch (j00 held the batch's thread for 40% of the TTL); it
    waits on the network until its deadline: 80% of the TTL after its lease was taken,
    so it still commits inside the lease (counted from its start, it would outlive it)."""
    settings.NEXOPOLL_BATCH_SLOW_MS = 60_000  # no side by side: one after the other
    settings.NEXOPOLL_BATCH_BUDGET_SECS = 60
    ids = ["j00", "j01"]
    setup(cfg, redis_client, ids)
    ttl_ms = 3000
    redis_client.set("test:block_once:j00", "1")
    redis_client.set("test:hold:j00", "1")
    redis_client.set("test:block_once:j01", "1")
    redis_client.set("test:hold:j01", "1")  # never deleted: j01 polls until its deadline
    batch = Batch(ids, ttl_ms=ttl_ms)
    wait_for(lambda: redis_client.get("test:blocked:j00"), 10, what="j00 polls")
    wait_clock(ttl_ms / 1000 * 0.4)  # the fault: j00 keeps the batch's thread this long
    redis_client.delete("test:hold:j00")
    reports = batch.join()
    assert reports["j00"].committed
    assert reports["j01"].committed, reports["j01"]
    assert reports["j01"].latency_ms < ttl_ms * 0.8 - 400  # cut short: the lease's deadline
    assert bytes(st("j01").cursor) == b"2"


@pytest.mark.django_db(transaction=True)
def test_row_52_mates_of_a_45s_stall_are_delivered_within_15s(cfg, redis_client):
    """RELIABILITY.md row 52 at ``SCALE`` (0.1: a 4.5 s stall, 3 s leases, 1.5 s bound)."""
    ids = [f"j{i:02d}" for i in range(6)]
    stalled, mates = "j02", [i for i in ids if i != "j02"]
    setup(cfg, redis_client, ids)
    hang(redis_client, stalled)
    batch = Batch(ids, ttl_ms=int(30_000 * SCALE))
    expect = rows_of([])  # filled as the mates commit

    def mates_delivered() -> bool:  # a worker takes each deliver message as it comes
        nonlocal expect
        if ids_ := queued(redis_client) - expect:
            delivery.deliver_rows(sorted(ids_), clock=timezone.now)
            expect |= ids_
        sent = Delivery.objects.filter(job_id__in=mates, status=DeliveryStatus.SENT).count()
        return sent == 2 * len(mates)

    wait_for(mates_delivered, 15 * SCALE, what="the mates' items delivered within 15 s")
    delivered_after = time.monotonic() - batch.began
    assert batch.thread.is_alive()  # the stall goes on
    wait_clock(45 * SCALE - (time.monotonic() - batch.began))
    unhang(redis_client, stalled)
    reports = batch.join()
    assert delivered_after < 15 * SCALE
    assert not reports[stalled].committed  # its lease ran out at 30 s: no commit at 45 s
    assert st(stalled).cursor is None and not Delivery.objects.filter(job_id=stalled).exists()
    for job_id in mates:
        assert reports[job_id].committed and not reports[job_id].takeover
        assert no_lease_or_marker(redis_client, job_id)
        again = tick_job(job_id, now=timezone.now())  # the next slot: no crash, no takeover
        assert again.status == "ok" and not again.takeover and st(job_id).crash_count == 0


@pytest.mark.django_db(transaction=True)
@KINDS
def test_a_slow_after_commit_hook_does_not_hold_back_the_mates_deliveries(cfg, redis_client, io):
    ids = ["j00", "j01", "j02"]
    setup(cfg, redis_client, ids)
    as_kind(ids, io)
    redis_client.set("test:hook_hold:j00", "1")  # j00's after-commit hook hangs
    batch = Batch(ids, ttl_ms=30_000)
    wait_for(lambda: len(queued(redis_client)) == 6, 10, what="every row queued")
    assert queued(redis_client) == rows_of(ids)
    wait_for(
        lambda: all(no_lease_or_marker(redis_client, j) for j in ids),
        10,
        what="every lease released",
    )
    assert not redis_client.exists("test:hook_done:j00")
    redis_client.delete("test:hook_hold:j00")
    reports = batch.join()
    assert all(r.committed for r in reports.values())
    assert redis_client.llen("test:hook_done:j00") == 1  # it ran, once, before the batch ended


def test_a_batch_publishes_its_deliveries_after_the_commit_never_before(cfg, redis_client):
    ids = ["j00", "j01", "j02"]
    setup(cfg, redis_client, ids)
    seen_at_publish: list[tuple[int, int]] = []

    def check(sender=None, body=None, **_):  # in the publishing thread, before sending
        if sender == "nexopoll.deliver":
            ids_ = body[0][0]
            seen_at_publish.append((len(ids_), other_connection_sees(ids_)))

    before_task_publish.connect(check, weak=False)
    try:
        reports = run_batch([(i, 30_000) for i in ids], clock=timezone.now)
    finally:
        before_task_publish.disconnect(check)
    assert all(r.committed for r in reports)
    assert seen_at_publish == [(6, 6)]  # one message, every row readable by then
    assert queued(redis_client) == rows_of(ids)


def _commit_raises_for(monkeypatch, bad: str) -> None:
    """The store's commit raises a non-DB error for ``bad``'s write (what a value the JSON
    encoder refuses did before ``deliver`` validated its payload): the seam every commit
    goes through, single or batched, so whatever raises there is covered."""
    from nexopoll.runtime import store

    single, many = store.commit_tick, store.commit_ticks

    def check(writes):  # the tick's own write (its items' rows); not the failure record
        if any(w.job_id == bad and w.deliveries for w in writes):
            raise TypeError("Object of type set is not JSON serializable (UnicodeEncodeError)")

    monkeypatch.setattr(store, "commit_tick", lambda w: (check([w]), single(w))[1])
    monkeypatch.setattr(store, "commit_ticks", lambda ws: (check(ws), many(ws))[1])


def test_an_exception_at_commit_is_recorded_as_a_failure_and_releases_the_lease(
    cfg, redis_client, monkeypatch
):
    """A single tick whose commit raises something other than a DB error: status, error
    count, breaker, history."""
    setup(cfg, redis_client, ["a"], breaker_threshold=2)
    _commit_raises_for(monkeypatch, "a")
    first = tick_job("a", now=timezone.now())
    assert first.status == "transient" and first.committed and first.reason == "commit failed"
    s = st("a")
    assert s.last_status == "transient" and s.consecutive_errors == 1
    assert "UnicodeEncodeError" in s.last_error and s.cursor is None
    assert no_lease_or_marker(redis_client, "a")
    entry = history.entries(redis_client, "a")[0]
    assert entry.status == "transient" and "UnicodeEncodeError" in entry.error
    tick_job("a", now=timezone.now())
    assert st("a").breaker_open_until is not None  # the breaker counts it like any failure


def test_an_exception_at_commit_in_a_batch_fails_that_tick_alone(cfg, redis_client, monkeypatch):
    ids = ["j00", "j01", "j02"]
    setup(cfg, redis_client, ids)
    _commit_raises_for(monkeypatch, "j01")
    reports = {r.job_id: r for r in run_batch([(i, 30_000) for i in ids], clock=timezone.now)}
    assert reports["j00"].committed and reports["j02"].committed
    assert queued(redis_client) == rows_of(["j00", "j02"])
    bad = reports["j01"]
    assert bad.status == "transient" and bad.reason == "commit failed"
    assert st("j01").consecutive_errors == 1 and "UnicodeEncodeError" in st("j01").last_error
    assert history.entries(redis_client, "j01")[0].status == "transient"
    for job_id in ids:  # every lease and crash marker released
        assert no_lease_or_marker(redis_client, job_id)
    monkeypatch.undo()
    again = {r.job_id: r for r in run_batch([(i, 30_000) for i in ids], clock=timezone.now)}
    assert set(again) == set(ids)  # none handed back as a crash
    assert not any(r.takeover for r in again.values()) and again["j01"].committed


def test_an_internal_error_in_a_batch_reaches_the_history_redacted(cfg, redis_client, monkeypatch):
    """A bug outside the poller (here: building the alert) fails that tick alone; its
    text is masked like every error the runtime keeps."""
    monkeypatch.setenv("NP_TEST_TOKEN", "s3cr3t-t0ken-value")
    jobs = [
        scripted("j00"),
        scripted(
            "j01", config={"deliver": {"channel": "log", "to": "ops"}, "token": "${NP_TEST_TOKEN}"}
        ),
    ]
    cfg.write(jobs)
    cfg.reload()

    def bug(job, decision, now):
        if job.job_id == "j01":
            raise RuntimeError(f"cannot build the alert with {job.expanded_config(os.environ)}")
        return []

    monkeypatch.setattr(tickwrite, "notices", bug)
    reports = {
        r.job_id: r for r in run_batch([("j00", 30_000), ("j01", 30_000)], clock=timezone.now)
    }
    assert reports["j00"].committed
    assert reports["j01"].reason == "internal error"
    assert "s3cr3t-t0ken-value" not in reports["j01"].error
    entry = history.entries(redis_client, "j01")[0]
    assert "s3cr3t" not in entry.error and "cannot build the alert" in entry.error
    assert no_lease_or_marker(redis_client, "j01")


@pytest.mark.django_db(transaction=True)
def test_mates_do_not_wait_for_a_job_that_polls_on_the_poll_threads_and_hangs(
    cfg, redis_client, settings
):
    """A job whose last tick was slow polls on the poll threads from the start; when it
    hangs, the jobs the batch polled itself commit as soon as they are done."""
    settings.NEXOPOLL_BATCH_SLOW_MS = 60_000  # only the slow job polls on the threads
    settings.NEXOPOLL_BATCH_BUDGET_SECS = 60
    ids = ["j00", "j01", "j02"]
    setup(cfg, redis_client, ids)
    PollState.objects.filter(job_id="j00").update(last_latency_ms=120_000)
    hang(redis_client, "j00")
    batch = Batch(ids, ttl_ms=30_000)
    wait_for(lambda: redis_client.get("test:blocked:j00"), 10, what="j00 hangs")
    wait_for(lambda: len(queued(redis_client)) == 4, 10, what="the mates' rows queued")
    assert queued(redis_client) == rows_of(["j01", "j02"])
    assert not redis_client.llen("test:done:j00") and batch.thread.is_alive()
    wait_for(lambda: no_lease_or_marker(redis_client, "j01"), 10, what="j01 released")
    unhang(redis_client, "j00")
    reports = batch.join()
    assert all(r.committed for r in reports.values())
    assert queued(redis_client) == rows_of(ids)


def test_a_wave_whose_hand_off_to_the_queue_fails_after_its_commit_keeps_its_reports(
    cfg, redis_client, monkeypatch
):
    """The wave committed, then handing its rows to the queue raised (the broker, or
    the DB marking the rows queued): its ticks stay committed, in their reports and in
    their history, and the rows wait for the sweeper (nothing lost, nothing re-run)."""
    from nexopoll.runtime.tick import batchcommit

    ids = ["j00", "j01", "j02"]
    setup(cfg, redis_client, ids)

    def broken(ids_):
        raise ConnectionError("broker gone after the commit")

    monkeypatch.setattr(batchcommit, "enqueue_deliveries", broken)
    reports = {r.job_id: r for r in run_batch([(i, 30_000) for i in ids], clock=timezone.now)}
    for job_id in ids:
        assert reports[job_id].committed and reports[job_id].status == "ok", reports[job_id]
        assert st(job_id).ticks_total == 1 and bytes(st(job_id).cursor) == b"2"
        assert history.entries(redis_client, job_id)[0].status == "ok"
        assert no_lease_or_marker(redis_client, job_id)
    assert Delivery.objects.filter(job_id__in=ids).count() == 6  # the sweeper's to send
