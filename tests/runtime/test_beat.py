"""The batched RedBeat scheduler, driven in-process against the test Redis and DB."""

from __future__ import annotations

import base64
import json
import time

from nexopoll.celery import app
from nexopoll.runtime import keys
from nexopoll.runtime.beat import NexopollScheduler

from .conftest import scripted

QUEUE = "nexopoll"


def queued_ticks(redis_client) -> list[list]:
    msgs = [json.loads(m) for m in redis_client.lrange(QUEUE, 0, -1)]
    return [
        json.loads(base64.b64decode(m["body"]))[0]
        for m in msgs
        if m["headers"]["task"] == "nexopoll.tick"
    ]


def test_due_entries_are_dispatched_once_and_moved_to_their_next_slot(cfg, redis_client):
    cfg.write([scripted("a", every=60), scripted("b", every=60)])
    cfg.reload()
    sched = NexopollScheduler(app=app)
    now = time.time()
    redis_client.zadd(keys.schedule_key(), {keys.entry_key("a"): now - 0.5})
    sleep = sched.tick()
    assert queued_ticks(redis_client) == [["a"]]
    score = redis_client.zscore(keys.schedule_key(), keys.entry_key("a"))
    assert now < score <= now + 60  # the next slot, not a replay of the missed one
    assert 0 <= sleep <= sched.max_interval
    sched.tick()
    assert len(queued_ticks(redis_client)) == 1  # nothing else was due


def test_a_standby_beat_without_the_lock_dispatches_nothing(cfg, redis_client):
    cfg.write([scripted("a", every=60)])
    cfg.reload()
    sched = NexopollScheduler(app=app)
    redis_client.set(sched.lock_key, "another-beat", px=60_000)
    redis_client.zadd(keys.schedule_key(), {keys.entry_key("a"): time.time() - 1})
    assert sched.tick() == sched.max_interval
    assert queued_ticks(redis_client) == []
    redis_client.delete(sched.lock_key)  # the active beat died and its lock expired
    sched.tick()
    assert queued_ticks(redis_client) == [["a"]]


def test_a_flushed_schedule_is_rebuilt_from_the_db(cfg, redis_client):
    cfg.write([scripted("a", every=60), scripted("b", schedule={"cron": "0 0 * * * *"})])
    cfg.reload()
    sched = NexopollScheduler(app=app)
    redis_client.flushall()
    sched.tick()
    members = set(redis_client.zrange(keys.schedule_key(), 0, -1))
    assert {keys.entry_key("a"), keys.entry_key("b")} <= members
    assert any("sweep" in m for m in members)  # beat_schedule statics restored too
