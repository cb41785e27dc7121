"""RELIABILITY row 54: an operator writes a job's state while a tick of it is in flight.

Every write to the state row moves the epoch (``store.write_state``), so the tick,
which read the row before, cannot commit after: a failing tick cannot write its error
count and open breaker over a ``resume``; a tick that read the old definition cannot
deliver under it after a reload. Real DB (SQLite or PostgreSQL), real Redis.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command

from nexopoll import services
from nexopoll.models import Delivery, PollState
from nexopoll.runtime import store
from nexopoll.runtime.tick import tick_job

from .conftest import scripted
from .test_db_faults import BlockedTick

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
ALERT = {"channel": "log", "to": "oncall"}


def st(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def failing_job(cfg, redis_client) -> int:
    """Job ``a`` one transient error short of its breaker (threshold 2); its epoch."""
    cfg.write([scripted("a", failure_to=ALERT)], breaker_threshold=2)
    cfg.reload()
    redis_client.set("test:mode:a", "transient")
    assert tick_job("a", now=NOW).status == "transient"
    redis_client.delete("test:mode:a")
    assert st("a").consecutive_errors == 1
    return st("a").epoch


def resume_by_cli(job_id: str) -> None:
    call_command("pollers", "resume", job_id)


@pytest.mark.parametrize("resume", [services.resume_job, resume_by_cli], ids=["service", "cli"])
def test_a_resume_survives_a_failing_tick_in_flight(cfg, redis_client, resume):
    """Row 54: the tick that fails after the resume is fenced; errors 0, breaker closed."""
    before = failing_job(cfg, redis_client)
    redis_client.rpush("test:src:a", 1)
    tick = BlockedTick(redis_client, "a", now=NOW + timedelta(seconds=40))
    redis_client.set("test:mode:a", "transient")  # it fails when let go: its 2nd error
    resume("a")
    assert st("a").epoch > before  # the resume moved the epoch
    report = tick.release()
    assert report.status == "fenced" and not report.committed
    s = st("a")
    assert s.consecutive_errors == 0 and s.breaker_open_until is None and not s.paused
    assert s.breaker_trips == 0 and s.ticks_total == 1  # the first tick alone
    assert not Delivery.objects.filter(purpose="alert").exists()  # no alert from the fenced tick
    redis_client.delete("test:mode:a")
    assert tick_job("a", now=NOW + timedelta(seconds=41)).status == "ok"


@pytest.mark.parametrize("verb", ["pause", "reset", "rewind"])
def test_every_operator_write_fences_a_tick_in_flight(cfg, redis_client, verb):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    assert tick_job("a", now=NOW).items_dispatched == 1
    redis_client.rpush("test:src:a", 2)
    before = st("a").epoch
    tick = BlockedTick(redis_client, "a", now=NOW + timedelta(seconds=60))
    if verb == "pause":
        services.pause_job("a")
    elif verb == "reset":
        services.reset_job("a")
    else:
        services.rewind_job("a", tick=1)  # the first tick started from no cursor
    assert st("a").epoch == before + 1
    report = tick.release()
    assert report.status == "fenced" and not report.committed
    s = st("a")
    assert s.cursor is None if verb != "pause" else bytes(s.cursor) == b"1"
    assert s.paused is (verb == "pause") and s.ticks_total == 1
    assert sorted(d.payload["item_id"] for d in Delivery.objects.all()) == [1]


def test_a_reload_mid_tick_fences_the_tick_that_read_the_old_definition(cfg, redis_client):
    """The operator moves the job's deliveries to another recipient while a tick that
    read the old definition polls: none of its deliveries reach the old recipient."""
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    before = st("a").epoch
    tick = BlockedTick(redis_client, "a", now=NOW)  # built its deliveries to "ops"
    cfg.write([scripted("a", config={"deliver": {"channel": "log", "to": "ops2"}})])
    assert cfg.reload().replace == ["a"]
    assert st("a").epoch == before + 1
    report = tick.release()
    assert report.status == "fenced" and not report.committed
    assert not Delivery.objects.exists() and st("a").cursor is None
    assert tick_job("a", now=NOW + timedelta(seconds=60)).status == "ok"
    assert sorted((d.payload["item_id"], d.recipient) for d in Delivery.objects.all()) == [
        (1, "ops2"),
        (2, "ops2"),
    ]


@pytest.mark.parametrize("change", ["removed", "re-added paused_on_boot"])
def test_a_reload_that_removes_or_pauses_a_job_fences_its_tick(cfg, redis_client, change):
    cfg.write([scripted("a"), scripted("b")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    if change == "re-added paused_on_boot":
        cfg.write([scripted("b")])
        cfg.reload()  # a removed: its state row stays (and keeps its cursor)
        cfg.write([scripted("a"), scripted("b")])
        cfg.reload()
    before = st("a").epoch
    tick = BlockedTick(redis_client, "a", now=NOW)
    if change == "removed":
        cfg.write([scripted("b")])
        assert cfg.reload().remove == ["a"]
    else:
        cfg.write([scripted("b")])
        cfg.reload()
        cfg.write([scripted("a", paused_on_boot=True), scripted("b")])
        assert cfg.reload().add == ["a"]
        assert st("a").paused and st("a").paused_reason == "paused_on_boot"
    assert st("a").epoch > before
    report = tick.release()
    assert report.status == "fenced" and not Delivery.objects.exists()


def test_write_state_moves_the_epoch_and_owns_it(cfg):
    cfg.write([scripted("a"), scripted("b")])
    cfg.reload()
    store.write_state([("a", {"paused": True, "paused_reason": "x"}), ("b", {"crash_count": 2})])
    assert (st("a").epoch, st("a").paused, st("b").epoch, st("b").crash_count) == (1, True, 1, 2)
    with pytest.raises(ValueError, match=r"'a'.*epoch"):
        store.write_state([("a", {"epoch": 7})])
    with pytest.raises(ValueError, match=r"'a'.*nope"):
        store.write_state([("a", {"nope": 1})])
    assert st("a").epoch == 1


ROOT = Path(__file__).resolve().parents[2]
# an ORM or SQL write to the state table: only runtime/store.py may issue one
_WRITES = re.compile(
    r"PollState\.objects[^\n]*\.(update|create|bulk_update|update_or_create|delete)\(|"
    r"UPDATE\s+poll_state|\.save\(",
)


def test_no_module_but_the_store_writes_the_state_row():
    """Every writer goes through ``store.write_state`` (or a tick's fenced write)."""
    offenders = []
    for folder in ("nexopoll", "admin_ext"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "nexopoll/runtime/store.py" or "/migrations/" in rel:
                continue
            text = path.read_text()
            for m in _WRITES.finditer(text):
                if m.group(0) == ".save(" and "PollState" not in text:
                    continue  # saves of other models
                line = text.count("\n", 0, m.start()) + 1
                offenders.append(f"{rel}:{line}: {m.group(0)}")
    assert not offenders, offenders
