"""The batched RedBeat scheduler, driven in-process against the test Redis and DB."""

from __future__ import annotations

import base64
import json
import time

from nexopoll.celery import app
from nexopoll.runtime import keys
from nexopoll.runtime.beat import NexopollScheduler, beat_id, dispatched_key

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


def queued(redis_client) -> list[tuple[str, list, dict]]:
    """(task, args, headers) of every queued message."""
    out = []
    for raw in redis_client.lrange(QUEUE, 0, -1):
        m = json.loads(raw)
        out.append((m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0], m["headers"]))
    return out


def due_now(redis_client, ids: list[str]) -> None:
    now = time.time()
    redis_client.delete(QUEUE)
    redis_client.zadd(keys.schedule_key(), {keys.entry_key(i): now - 0.5 for i in ids})


def test_many_ticks_due_together_go_out_as_batches_few_go_out_one_by_one(
    cfg, redis_client, settings
):
    settings.NEXOPOLL_BATCH_MIN, settings.NEXOPOLL_BATCH_SIZE = 10, 8
    ids = [f"j{i:02d}" for i in range(20)]
    cfg.write([scripted(i, every=60) for i in ids])
    cfg.reload()
    sched = NexopollScheduler(app=app)
    due_now(redis_client, ids[:9])  # below the threshold: a message per tick (Flower)
    sched.tick()
    assert sorted(args[0] for task, args, _ in queued(redis_client)) == ids[:9]
    assert {task for task, _, _ in queued(redis_client)} == {"nexopoll.tick"}
    due_now(redis_client, ids)  # 20 due together: 3 even batches of at most 8
    sched.tick()
    sent = queued(redis_client)
    assert {task for task, _, _ in sent} == {"nexopoll.tick_batch"}
    sizes = sorted(len(args[0]) for _, args, _ in sent)
    assert sizes == [6, 7, 7]
    pairs = [pair for _, args, _ in sent for pair in args[0]]
    assert sorted(job for job, _ttl in pairs) == ids  # every job once
    assert all(ttl == 120_000 for _job, ttl in pairs)  # each job's own lease TTL
    assert all(h["expires"] for _, _, h in sent)  # a batch expires like its ticks
    assert int(redis_client.hget(dispatched_key(), beat_id())) == 29  # ticks, not messages
    for i in ids:  # every entry moved on to its next slot
        assert redis_client.zscore(keys.schedule_key(), keys.entry_key(i)) > time.time()


def test_batching_off_and_one_shots_keep_a_message_per_tick(cfg, redis_client, settings):
    settings.NEXOPOLL_BATCH_MIN = 2
    at = "2030-01-01T00:00:00+00:00"
    cfg.write(
        [scripted("a", every=60), scripted("b", every=60), scripted("once", schedule={"at": at})]
    )
    cfg.reload()
    sched = NexopollScheduler(app=app)
    due_now(redis_client, ["a", "b", "once"])
    sched.tick()
    sent = sorted((task, args) for task, args, _ in queued(redis_client))
    assert sent == [
        ("nexopoll.tick", ["once"]),
        ("nexopoll.tick_batch", [[["a", 120000], ["b", 120000]]]),
    ]
    settings.NEXOPOLL_BATCH_MIN = 0  # batching off
    redis_client.delete(sched.lock_key)  # the first beat stopped
    sched = NexopollScheduler(app=app)
    due_now(redis_client, ["a", "b"])
    sched.tick()
    assert sorted(args[0] for _, args, _ in queued(redis_client)) == ["a", "b"]


def slow_jobs_due(cfg, redis_client, n: int, slow: list[str]) -> NexopollScheduler:
    """n jobs j0..j<n-1> every 60 s, ``slow`` of them in the slow set; a beat whose next
    tick finds them all due."""
    ids = [f"j{i}" for i in range(n)]
    cfg.write([scripted(i, every=60) for i in ids])
    cfg.reload()
    redis_client.sadd(keys.slow_key(), *slow)  # their last ticks were slow
    sched = NexopollScheduler(app=app)
    due_now(redis_client, ids)
    return sched


def sent_apart(redis_client) -> tuple[list[str], list[list[str]]]:
    """The jobs queued one message each, and each batch's jobs, sorted."""
    sent = queued(redis_client)
    singles = sorted(args[0] for task, args, _ in sent if task == "nexopoll.tick")
    batches = [
        sorted(job for job, _ttl in args[0])
        for task, args, _ in sent
        if task == "nexopoll.tick_batch"
    ]
    return singles, batches


def test_jobs_that_wait_on_the_network_travel_in_batches_of_their_own(cfg, redis_client, settings):
    """A quick job never shares a batch with one that waits on the network (it would
    wait for its turn); each group is batched once it reaches NEXOPOLL_BATCH_MIN."""
    settings.NEXOPOLL_BATCH_MIN, settings.NEXOPOLL_BATCH_SIZE = 4, 50
    sched = slow_jobs_due(cfg, redis_client, 8, ["j1", "j3", "j5"])
    sched.tick()
    # three slow ones: fewer than the threshold, a message each (Flower shows them)
    assert sent_apart(redis_client) == (["j1", "j3", "j5"], [["j0", "j2", "j4", "j6", "j7"]])
    redis_client.sadd(keys.slow_key(), "j0", "j2")  # read again after SLOW_REFRESH_SECS
    sched._slow_at = 0.0
    due_now(redis_client, [f"j{i}" for i in range(8)])
    sched.tick()  # five slow ones: a batch of their own; three quick ones: one each
    assert sent_apart(redis_client) == (["j4", "j6", "j7"], [["j0", "j1", "j2", "j3", "j5"]])


def test_batching_of_io_jobs_off_sends_them_one_message_each(cfg, redis_client, settings):
    settings.NEXOPOLL_BATCH_MIN, settings.NEXOPOLL_BATCH_IO = 2, False
    slow_jobs_due(cfg, redis_client, 6, ["j0", "j1", "j2"]).tick()
    assert sent_apart(redis_client) == (["j0", "j1", "j2"], [["j3", "j4", "j5"]])
