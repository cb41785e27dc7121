"""Paused jobs: beat sends them nothing, their skipped ticks evict no history, every
surface shows "paused" instead of a next run, and a reload that changes the definition
of a job an error paused resumes it (an operator's pause stays)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone

from nexopoll import services
from nexopoll.celery import app
from nexopoll.models import PollState
from nexopoll.runtime import history, keys
from nexopoll.runtime.beat import NexopollScheduler
from nexopoll.runtime.definitions import load_all
from nexopoll.runtime.redbeat_sync import installed_hash, resync_from_db, write_entries
from nexopoll.runtime.tick import tick_job

from .conftest import scripted
from .test_beat import due_now, queued_ticks


def entry(redis_client, job_id: str) -> tuple[float | None, dict]:
    score = redis_client.zscore(keys.schedule_key(), keys.entry_key(job_id))
    raw = redis_client.hget(keys.entry_key(job_id), "definition")
    return score, json.loads(raw) if raw else {}


def test_beat_sends_nothing_for_a_paused_job_and_its_next_slot_after_resume(cfg, redis_client):
    cfg.write([scripted("a", every=60), scripted("b", every=60)])
    cfg.reload()
    sched = NexopollScheduler(app=app)
    services.pause_job("a")
    score, definition = entry(redis_client, "a")
    assert score is None and definition["enabled"] is False  # out of the schedule
    assert redis_client.hget(keys.hashes_key(), "a").endswith("/paused")
    redis_client.zadd(keys.schedule_key(), {keys.entry_key("b"): time.time() - 0.5})
    sched._next_resync = 0  # beat's own resync (timer) must not bring it back
    sched.tick()
    assert queued_ticks(redis_client) == [["b"]]
    assert entry(redis_client, "a")[0] is None
    before = time.time()
    services.resume_job("a")
    score, definition = entry(redis_client, "a")
    assert definition["enabled"] is True and before < score <= time.time() + 60
    due_now(redis_client, ["a"])
    sched.tick()
    assert queued_ticks(redis_client) == [["a"]]


def test_a_pause_by_a_permanent_error_takes_the_entry_out_too(cfg, redis_client):
    cfg.write([scripted("a", every=60)])
    cfg.reload()
    redis_client.set("test:mode:a", "permanent")
    assert tick_job("a", now=timezone.now()).status == "permanent"
    state = PollState.objects.get(job_id="a")
    assert state.paused and state.paused_by == "error"
    assert entry(redis_client, "a")[0] is None


def test_a_pause_whose_sync_was_missed_is_repaired(cfg, redis_client):
    """The pause reached the DB but not RedBeat (Redis was down, say): the first tick
    beat still sends parks the entry, and beat's resync writes it disabled."""
    cfg.write([scripted("a", every=60)])
    cfg.reload()
    sched = NexopollScheduler(app=app)
    services.pause_job("a")
    write_entries(redis_client, load_all(["a"]), now=timezone.now())  # as before the pause
    job_hash = PollState.objects.get(job_id="a").definition_hash
    assert redis_client.hget(keys.hashes_key(), "a") == installed_hash(job_hash)
    due_now(redis_client, ["a"])
    sched.tick()
    assert queued_ticks(redis_client) == [["a"]]  # sent before anyone knew
    assert tick_job("a", now=timezone.now()).reason == "paused"
    assert entry(redis_client, "a")[0] is None  # that tick took it out
    resync_from_db(redis_client, now=timezone.now())
    assert redis_client.hget(keys.hashes_key(), "a") == installed_hash(job_hash, True)
    assert entry(redis_client, "a")[1]["enabled"] is False


def test_150_paused_intervals_keep_the_real_history_and_rewind_works(cfg, redis_client):
    cfg.write([scripted("a", every=60)])
    cfg.reload()
    now = timezone.now()
    for i in range(1, 6):  # five real ticks, each starting from the previous cursor
        redis_client.rpush("test:src:a", i)
        assert tick_job("a", now=now + timedelta(minutes=i)).status == "ok"
    services.pause_job("a")
    for i in range(150):  # ticks already queued when it paused, or sent by a stale beat
        report = tick_job("a", now=now + timedelta(minutes=10 + i))
        assert (report.status, report.reason) == ("skipped", "paused")
    entries = history.entries(redis_client, "a")
    assert [e.status for e in entries] == ["skipped"] + ["ok"] * 5
    assert entries[0].repeats == 150 and entries[0].since == now + timedelta(minutes=10)
    assert [e.n for e in entries] == [6, 5, 4, 3, 2, 1]
    assert entries[0].as_dict()["repeats"] == 150
    services.resume_job("a")
    rewound = services.rewind_job("a", tick=3)  # started from the cursor tick 2 left
    assert rewound.cursor == b"2"
    assert bytes(PollState.objects.get(job_id="a").cursor) == b"2"


def test_a_new_reason_or_a_real_tick_starts_a_new_entry(cfg, redis_client):
    cfg.write([scripted("a", every=60)])
    cfg.reload()
    now = timezone.now()
    services.pause_job("a")
    tick_job("a", now=now)
    tick_job("a", now=now + timedelta(seconds=1))
    services.resume_job("a")
    tick_job("a", now=now + timedelta(seconds=2))
    services.pause_job("a")
    tick_job("a", now=now + timedelta(seconds=3))
    got = [(e.status, e.repeats) for e in history.entries(redis_client, "a")]
    assert got == [("skipped", 1), ("ok", 1), ("skipped", 2)]


def test_list_and_show_say_paused_then_the_next_slot_after_resume(cfg, redis_client, capsys):
    cfg.write([scripted("a", every=60)])
    cfg.reload()
    tick_job("a", now=timezone.now() - timedelta(hours=1))  # next_run_at now an hour old
    services.pause_job("a")
    view = services.show_job("a", now=timezone.now())
    assert view["paused"] and view["paused_by"] == "operator"
    assert view["next_run_at"] is None and view["next_slot_at"] is None
    call_command("pollers", "list")
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("a "))
    assert row.split()[-1] == "paused"
    services.resume_job("a")
    now = timezone.now()
    view = services.show_job("a", now=now)
    assert view["next_run_at"] == view["next_slot_at"]
    assert now < timezone.datetime.fromisoformat(view["next_run_at"]) <= now + timedelta(seconds=60)
    call_command("pollers", "list")
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("a "))
    assert row.split()[-1] > now.isoformat()[:19]


def edited(job_id: str, **extra) -> dict:
    spec = scripted(job_id, **extra)
    spec["config"]["max_per_tick"] = 7  # a changed definition
    return spec


def test_a_reload_that_changes_the_definition_resumes_an_error_pause(cfg, redis_client, caplog):
    cfg.write(
        [scripted("err"), scripted("op"), scripted("boot", paused_on_boot=True), scripted("same")]
    )
    cfg.reload()
    for job_id in ("err", "same"):
        redis_client.set(f"test:mode:{job_id}", "permanent")
        tick_job(job_id, now=timezone.now())
    services.pause_job("op")
    redis_client.delete("test:mode:err")
    cfg.write([edited("err"), edited("op"), edited("boot", paused_on_boot=True), scripted("same")])
    plan = cfg.reload(dry_run=True)
    assert plan.resumed == ["err"] and PollState.objects.get(job_id="err").paused
    epoch = PollState.objects.get(job_id="err").epoch
    caplog.set_level("INFO", logger="nexopoll.services")
    res = cfg.reload()
    assert res.resumed == ["err"] and res.as_dict()["resumed"] == ["err"]
    assert "reload.resumed job=err" in caplog.text
    err = PollState.objects.get(job_id="err")
    assert not err.paused and err.paused_by == "" and err.consecutive_errors == 0
    assert err.epoch > epoch + 1  # the definition write and the resume both moved it
    assert entry(redis_client, "err")[0] is not None  # beat sends it again
    paused = {s.job_id: s.paused_by for s in PollState.objects.filter(paused=True)}
    assert paused == {"op": "operator", "boot": "boot", "same": "error"}  # same: unchanged
    assert tick_job("err", now=timezone.now()).status == "ok"


def test_an_open_breakers_next_run_is_its_trial_slot(cfg, redis_client):
    from nexopoll.runtime import store

    cfg.write([scripted("a", every=60)])
    cfg.reload()
    now = timezone.now()
    until = now + timedelta(minutes=10)
    store.write_state([("a", {"breaker_open_until": until})])
    view = services.show_job("a", now=now)
    nxt = timezone.datetime.fromisoformat(view["next_run_at"])
    assert view["breaker"] == "open" and until <= nxt <= until + timedelta(seconds=60)
    assert view["next_slot_at"] == view["next_run_at"]
