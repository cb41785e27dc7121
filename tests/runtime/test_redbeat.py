"""nexopoll's schedule class round-trips through Redis and fires at the right second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from nexopoll.celery import app
from nexopoll.runtime import keys, lease
from nexopoll.runtime.beat import NexoEntry, NexoSchedule

from .conftest import scripted


def test_cron_with_seconds_and_tz_round_trips_through_redis(cfg, redis_client):
    cfg.write(
        [
            scripted(
                "c",
                schedule={"cron": "15 30 2 * * *", "tz": "Europe/Paris", "stagger_jitter_ms": 0},
            )
        ]
    )
    assert cfg.reload().issues == []
    entry = NexoEntry.from_key(keys.entry_key("c"), app=app)
    assert isinstance(entry.schedule, NexoSchedule)
    assert entry.schedule.spec == {"cron": "15 30 2 * * *", "tz": "Europe/Paris"}
    assert entry.args == ["c"] and entry.task == "nexopoll.tick"
    assert entry.kwargs["lease_ttl_ms"] >= 3000
    # 02:30:15 Paris on a winter day is 01:30:15 UTC; on a summer day 00:30:15 UTC
    winter = entry.schedule.next_after(datetime(2026, 1, 10, 0, 0, tzinfo=UTC))
    summer = entry.schedule.next_after(datetime(2026, 7, 10, 0, 0, tzinfo=UTC))
    assert winter == datetime(2026, 1, 10, 1, 30, 15, tzinfo=UTC)
    assert summer == datetime(2026, 7, 10, 0, 30, 15, tzinfo=UTC)
    # the stored score is that next slot, to the second
    score = redis_client.zscore(keys.schedule_key(), keys.entry_key("c"))
    assert score == entry.schedule.next_after(timezone.now()).timestamp()


def test_every_schedule_with_stagger_is_reproducible(cfg, redis_client):
    cfg.write([scripted("s", schedule={"every_secs": 10, "stagger_jitter_ms": 5000})])
    cfg.reload()
    entry = NexoEntry.from_key(keys.entry_key("s"), app=app)
    offset = entry.schedule.offset
    assert timedelta(0) <= offset < timedelta(seconds=5)
    base = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)
    assert entry.schedule.next_after(base) == base + offset
    assert entry.schedule.next_after(base + offset) == base + offset + timedelta(seconds=10)
    again = NexoSchedule(entry.schedule.spec, entry.schedule.offset_ms)
    assert again == entry.schedule


def test_lease_is_released_and_extended_only_by_its_owner(redis_client):
    mine = lease.try_acquire(redis_client, "j", 5000)
    assert mine is not None and lease.try_acquire(redis_client, "j", 5000) is None
    impostor = lease.Lease("j", "someone-else", 5000)
    assert not lease.release(redis_client, impostor) and not lease.extend(redis_client, impostor)
    assert redis_client.exists(lease.lease_key("j"))
    assert lease.extend(redis_client, mine)
    assert lease.release(redis_client, mine)
    assert not lease.release(redis_client, mine)
