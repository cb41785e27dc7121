"""What beat says when it finds its lock gone: expired while it hung, taken by another
beat, or lost with the rest of Redis (a flush). The scheduler's own loop, real Redis."""

from __future__ import annotations

import time

import pytest
import redis

from nexopoll.celery import app
from nexopoll.runtime.beat import NexopollScheduler

from .conftest import scripted


@pytest.fixture
def sched(cfg, redis_client):
    cfg.write([scripted("a", every=60)])
    cfg.reload()
    s = NexopollScheduler(app=app)
    s.lock_timeout = 1  # seconds: the hang below outlasts it
    s.tick()
    assert redis_client.exists(s.lock_key)  # this beat holds the lock
    return s


def test_a_beat_that_hung_past_its_lock_timeout_says_the_lock_expired(sched, redis_client, caplog):
    # the beat hangs (no loop runs, nothing refreshes the lock) until the lock expires
    deadline = time.monotonic() + 10
    while redis_client.exists(sched.lock_key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not redis_client.exists(sched.lock_key)
    caplog.set_level("WARNING", logger="nexopoll.beat")
    sched.tick()  # the loop runs again
    (record,) = [r for r in caplog.records if "beat.lock" in r.getMessage()]
    text = record.getMessage()
    assert text.startswith("beat.lock_reacquired: the lock expired")
    assert "had not refreshed it for 1s (lock timeout 1s" in text and "flushed" not in text
    assert redis_client.exists(sched.lock_key)


def test_a_flushed_redis_is_named_as_such(sched, redis_client, caplog):
    redis_client.flushall()
    caplog.set_level("WARNING", logger="nexopoll.beat")
    sched._extend_lock()
    assert "beat.lock_reacquired: Redis lost the lock and the schedule" in caplog.text
    assert "expired" not in caplog.text


def test_a_lock_another_beat_took_is_named_as_such(sched, redis_client, caplog):
    redis_client.set(sched.lock_key, "another-beat", px=60_000)
    caplog.set_level("WARNING", logger="nexopoll.beat")
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        sched._extend_lock()
    assert "beat.lock_lost: another beat holds the lock now" in caplog.text
