"""Beat's resync from the DB keeps the beat lock fresh, however long it takes.

The scheduler runs in-process against the test Redis and DB; the DB is made slow
through the scheduler's ``on_resync_chunk`` hook (it runs before every resync
step), so the whole resync lasts about twice the lock's TTL. A standby thread
tries to take the lock all along, as a second beat would.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
import yaml
from django.utils import timezone

from nexopoll import services
from nexopoll.celery import app
from nexopoll.runtime import keys
from nexopoll.runtime.beat import NexopollScheduler

LOCK_TIMEOUT = 2  # seconds; RedBeat extends by whole seconds


def load_jobs(tmp_path, n: int) -> None:
    jobs = [
        {
            "id": f"j{i:03d}",
            "kind": "scripted",
            "agent": "ana",
            "schedule": {"every_secs": 60},
            "config": {"deliver": {"channel": "log", "to": "ops"}},
        }
        for i in range(n)
    ]
    path = tmp_path / "pollers.yaml"
    doc = {"pollers": {"default_jitter_ms": 0, "jobs": jobs}, "agents": {"ana": {"log": {}}}}
    path.write_text(yaml.safe_dump(doc))
    services.reload_config(now=timezone.now(), path=path)


class Standby(threading.Thread):
    """Tries to take the beat lock every 20 ms; records the lock's lowest TTL seen."""

    def __init__(self, url: str, lock_key: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.lock_key = lock_key
        self.stop = threading.Event()
        self.took_over = False
        self.min_ttl_ms: int | None = None

    def run(self) -> None:
        lock = self.client.lock(self.lock_key, timeout=60)
        while not self.stop.is_set():
            ttl = self.client.pttl(self.lock_key)
            self.min_ttl_ms = ttl if self.min_ttl_ms is None else min(self.min_ttl_ms, ttl)
            if lock.acquire(blocking=False):
                self.took_over = True
                return
            self.stop.wait(0.02)


@pytest.fixture
def scheduler(redis_client, transactional_db, tmp_path):
    load_jobs(tmp_path, 60)
    sched = NexopollScheduler(app=app, lock_timeout=LOCK_TIMEOUT)
    sched.resync_chunk = 5  # 12 write steps
    assert sched._hold_lock()  # the active beat
    return sched


def test_a_resync_longer_than_the_lock_ttl_keeps_the_lock(scheduler, redis_client):
    steps: list[float] = []

    def slow_db() -> None:  # every step takes 0.3 s: 13 steps = about 2x the lock's TTL
        steps.append(time.monotonic())
        time.sleep(0.3)

    redis_client.delete(keys.hashes_key())  # every entry must be rewritten
    token = redis_client.get(scheduler.lock_key)
    standby = Standby(scheduler.app.conf.redbeat_redis_url, scheduler.lock_key)
    scheduler.on_resync_chunk = slow_db
    standby.start()
    started = time.monotonic()
    try:
        scheduler._resync("timer", statics=False)
    finally:
        standby.stop.set()
        standby.join(5)
    took = time.monotonic() - started
    assert took > 1.5 * LOCK_TIMEOUT, f"the resync was not slow enough to test anything: {took}"
    assert len(steps) == 13  # 12 chunks of 5 jobs, then the synced marker
    assert not standby.took_over, "a standby took the lock during the resync"
    assert standby.min_ttl_ms is not None and standby.min_ttl_ms > 0
    assert redis_client.get(scheduler.lock_key) == token  # never lost, never re-taken
    assert redis_client.hlen(keys.hashes_key()) == 60
    assert redis_client.zcard(keys.schedule_key()) >= 60
    assert scheduler._hold_lock()


def test_a_resync_aborts_when_another_beat_took_the_lock(scheduler, redis_client):
    """Lost lock mid-resync (the TTL ran out while the process was stopped): no more writes."""
    redis_client.delete(keys.hashes_key())
    written: list[int] = []

    def lose_lock_after_two_steps() -> None:
        written.append(redis_client.hlen(keys.hashes_key()))
        if len(written) == 3:  # a stall past the TTL: the lock expired, beat B took it
            time.sleep(LOCK_TIMEOUT / 3 + 0.1)
            redis_client.set(scheduler.lock_key, "beat-b", px=60_000)

    scheduler.on_resync_chunk = lose_lock_after_two_steps
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        scheduler._resync("timer", statics=False)
    assert redis_client.hlen(keys.hashes_key()) == 10  # two chunks, nothing after the loss
    assert redis_client.get(scheduler.lock_key) == "beat-b"
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        scheduler.tick()  # beat exits; its supervisor restarts it as a standby
