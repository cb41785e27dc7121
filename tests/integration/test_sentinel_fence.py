"""Redis Sentinel failover loses a lease (asynchronous replication): the DB fence holds.

A tick holds its lease when the primary is SIGKILLed and the sentinels promote the
replica. Replication is asynchronous: a lease the primary acknowledged may never have
reached the replica. The test cannot time that loss reliably (a sentinel puts a replica
behind a fault proxy straight back on the primary), so it removes the lease from the new
master right after the promotion: the state such a lost write leaves behind. A second
tick of the same job then takes the lease and commits; the first, still running, believes
it holds its lease and tries to commit: the DB epoch fence refuses it (RELIABILITY row 59;
docs/reliability.md "Redis failover").
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone
from redis.sentinel import SentinelConnectionPool

from nexopoll.models import Delivery, PollState
from nexopoll.redisconf import sentinel_conf
from nexopoll.runtime import lease
from nexopoll.runtime import redis as rmod
from nexopoll.runtime.tick import tick_job
from tests.runtime.conftest import Config, scripted
from tests.support.procs import wait_for
from tests.support.sentinel import MASTER, SentinelGroup

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def sentinel_redis(settings, monkeypatch, transactional_db):
    group = SentinelGroup().start()
    try:
        monkeypatch.setenv("NEXOPOLL_REDIS_SENTINELS", group.addresses)
        monkeypatch.setenv("NEXOPOLL_REDIS_SENTINEL_MASTER", MASTER)
        settings.NEXOPOLL_REDIS_SENTINEL = sentinel_conf(group.addresses, MASTER, "", group.url)
        monkeypatch.setattr(rmod, "_client", None)  # get_redis() now asks the sentinels
        yield group
    finally:
        group.stop()


def test_a_lease_lost_at_failover_lets_only_one_tick_commit(sentinel_redis, tmp_path):
    group = sentinel_redis
    cfg = Config(tmp_path / "pollers.yaml")
    cfg.write([scripted("f")])
    cfg.reload()
    r = rmod.get_redis()
    assert isinstance(r.connection_pool, SentinelConnectionPool)
    r.rpush("test:src:f", 1, 2)
    r.set("test:hold:f", 1)
    r.set("test:ignore_cancel:f", 1)  # the first tick goes on to its commit whatever happens
    r.set("test:block_once:f", 1)
    result: dict = {}

    def first_tick() -> None:
        try:
            result["r"] = tick_job("f", now=timezone.now())
        finally:
            connection.close()

    t = threading.Thread(target=first_tick)
    t.start()
    wait_for(lambda: r.get("test:blocked:f"), 20, what="first tick at the barrier")
    assert r.exists(lease.lease_key("f")), "the first tick holds its lease (on the primary)"
    assert r.wait(1, 5000) == 1, "the replica has the job and the test's keys"
    old = group.kill_primary()
    new = wait_for(lambda: group.promoted(old), 30, interval=0.1, what="the replica promoted")
    wait_for(lambda: r.connection_pool.get_master_address()[1] == new, 10, what="client follows")
    assert r.get("test:hold:f") and not r.exists("test:block_once:f"), "r is on the new master"
    # the lease write the primary acknowledged and never replicated (with the tick's
    # start counter, written in the same script)
    r.delete(lease.lease_key("f"), lease.running_key("f"))
    r.rpush("test:src:f", 3)
    second = tick_job("f", now=timezone.now())  # takes the lease again on the new master
    r.delete("test:hold:f")  # the first tick now tries to commit
    t.join(30)
    first = result["r"]
    assert second.status == "ok" and second.committed
    assert first.status == "fenced" and not first.committed, first
    # its lease is young (well inside half its TTL), so the tick trusted it without asking
    # Redis: the DB's epoch compare-and-swap is what refused the second commit
    assert first.reason == "epoch moved on", first
    assert [int(x) for x in r.lrange("test:done:f", 0, -1)] != [], "both ticks ran the poller"
    s = PollState.objects.get(job_id="f")
    assert bytes(s.cursor) == b"3"
    items = sorted(d.payload["item_id"] for d in Delivery.objects.filter(job_id="f"))
    assert items == [1, 2, 3], "one commit's outbox rows, no second copy"
    assert set(Delivery.objects.filter(job_id="f").values_list("epoch", flat=True)) == {
        second.epoch
    }
