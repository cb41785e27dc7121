"""RELIABILITY row 53: the reply to a lease acquire is lost after Redis ran it.

A fault proxy between the worker and Redis lets the acquire through, drops Redis's
answer and cuts the connection; redis-py sends the command again on a new connection
(its default retry). The retry must recognise the lease the first attempt took: the
tick runs (not "lease busy"), leaves no orphan lease and counts no crash.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from nexopoll.models import Delivery, PollState
from nexopoll.net.http import _Budget
from nexopoll.plugins.semaphore import Semaphore
from nexopoll.runtime import lease, politeness
from nexopoll.runtime import redis as rmod
from nexopoll.runtime.tick import batch, tick_job
from nexopoll.tasks import requeue_tick
from tests.support.faultproxy import FaultProxy

from .conftest import scripted


@pytest.fixture
def lossy(redis_server, redis_client, settings, monkeypatch):
    """The runtime's Redis client goes through a fault proxy (``proxy.cut_after_request``)."""
    for source in (lease._ACQUIRE, lease._RELEASE):  # loaded: no NOSCRIPT round trip to cut
        redis_client.script_load(source)
    proxy = FaultProxy(redis_server.port).start()
    settings.REDIS_URL = proxy.url
    monkeypatch.setattr(rmod, "_client", None)  # the next get_redis() connects to the proxy
    yield proxy
    if rmod._client is not None:
        rmod._client.close()
    proxy.stop()


def test_a_retried_acquire_recognises_its_own_lease(lossy, redis_client):
    client = rmod.get_redis()
    lossy.cut_after_request(b"nexopoll:lease:a")
    held = lease.try_acquire(client, "a", 60_000)
    assert lossy.cuts == 1  # the first reply was lost; redis-py sent it again
    assert held is not None and held.started == 1 and held.unfinished == 0
    assert redis_client.get(lease.lease_key("a")) == held.token
    assert redis_client.get(lease.running_key("a")) == "1"  # one start, counted once
    assert lease.release(client, held)
    assert not redis_client.exists(lease.lease_key("a"), lease.running_key("a"))


def test_a_retried_acquire_still_sees_another_holder_as_busy(lossy, redis_client):
    other = lease.try_acquire(redis_client, "a", 60_000)
    lossy.cut_after_request(b"nexopoll:lease:a")
    assert lease.try_acquire(rmod.get_redis(), "a", 60_000) is None and lossy.cuts == 1
    assert redis_client.get(lease.lease_key("a")) == other.token


def test_a_retried_batch_acquire_recognises_its_own_leases(lossy, redis_client):
    client = rmod.get_redis()
    other = lease.try_acquire(redis_client, "c", 60_000)  # busy before and after the retry
    lossy.cut_after_request(b"nexopoll:lease:")
    held = lease.try_acquire_many(client, [("a", 60_000), ("b", 60_000), ("c", 60_000)])
    assert lossy.cuts == 1
    assert sorted(held) == ["a", "b"]
    assert all(h.started == 1 for h in held.values())
    for job_id in ("a", "b"):
        assert redis_client.get(lease.lease_key(job_id)) == held[job_id].token
        assert redis_client.get(lease.running_key(job_id)) == "1"
    assert redis_client.get(lease.lease_key("c")) == other.token


def test_a_tick_whose_acquire_reply_was_lost_runs_and_leaves_no_orphan(cfg, lossy, redis_client):
    """Row 53: tick not skipped; no orphan lease, no false crash (on the next tick either)."""
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    lossy.cut_after_request(b"nexopoll:lease:a")
    report = tick_job("a", now=timezone.now())
    assert lossy.cuts == 1
    assert report.status == "ok" and report.committed and not report.takeover
    assert not redis_client.exists(lease.lease_key("a"), lease.running_key("a"))
    redis_client.rpush("test:src:a", 3)
    again = tick_job("a", now=timezone.now())
    assert again.status == "ok" and not again.takeover
    s = PollState.objects.get(job_id="a")
    assert bytes(s.cursor) == b"3" and s.crash_count == 0 and s.ticks_total == 2
    assert sorted(d.payload["item_id"] for d in Delivery.objects.all()) == [1, 2, 3]


def test_a_batch_whose_acquire_reply_was_lost_runs_every_job_in_the_batch(cfg, lossy, redis_client):
    """The batch's pipelined acquire, retried: no job counts a crash, so none is handed
    back to run alone, and every lease is released."""
    cfg.write([scripted("a"), scripted("b")])
    cfg.reload()
    for job_id in ("a", "b"):
        redis_client.rpush(f"test:src:{job_id}", 1)
    lossy.cut_after_request(b"nexopoll:lease:")
    reports = batch.run_batch([("a", None), ("b", None)], requeue=requeue_tick, clock=timezone.now)
    assert lossy.cuts == 1
    assert sorted((r.job_id, r.status, r.takeover) for r in reports) == [
        ("a", "ok", False),
        ("b", "ok", False),
    ]
    for job_id in ("a", "b"):
        assert not redis_client.exists(lease.lease_key(job_id), lease.running_key(job_id))
        assert bytes(PollState.objects.get(job_id=job_id).cursor) == b"1"


def test_a_retried_plugin_semaphore_acquire_holds_its_own_slot(lossy, redis_client):
    """The plugins' ``max_concurrent_ticks`` semaphore shares the runtime's client: a
    retry must find its own token, not count it as a stranger's (a slot leaked until
    its TTL and a tick refused)."""
    sem = Semaphore(rmod.get_redis(), "p", 1, 60_000)
    sem.try_acquire()  # the script is loaded: the cut hits the acquire itself
    redis_client.delete("nexopoll:plugin:sem:p")
    lossy.cut_after_request(b"nexopoll:plugin:sem:p")
    token = sem.try_acquire()
    assert lossy.cuts == 1 and token is not None and sem.holders() == 1
    sem.release(token)
    assert sem.holders() == 0


def test_a_retried_host_turn_is_taken_as_the_turn_it_took(lossy, redis_client):
    """Per-host politeness (one request in flight): a retried take finds its own token
    and goes, instead of waiting out its own leaked turn until the fetch's deadline."""
    budget = _Budget(2.0, None, "fetch")
    with politeness.turn("h.example", budget, in_flight=1, per_sec=0):
        pass  # the script is loaded: the cut hits the take itself
    lossy.cut_after_request(b"nexopoll:host:h.example")
    with politeness.turn("h.example", budget, in_flight=1, per_sec=0):
        assert lossy.cuts == 1
        assert redis_client.zcard("nexopoll:host:h.example") == 1
    assert budget.remaining() > 1.5  # it did not wait for a turn
    assert redis_client.zcard("nexopoll:host:h.example") == 0
