"""The runtime end to end: real Redis, real Celery worker(s) and beat, the test DB.

RELIABILITY.md rows 1 (kill -9 mid-tick), 8 (Redis flushed), 13/14 (zombie tick
fenced), plus scheduling, pause, reset, breaker and alerts.
"""

from __future__ import annotations

import signal

import pytest

from nexopoll.models import Delivery, PollState
from nexopoll.runtime import keys
from tests.support.procs import wait_for
from tests.support.sink import assert_no_loss_dup_safe

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def state(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def assert_a_fenced_and_b_delivered(stack, a) -> None:
    """The zombie-tick ending (job ``z``, items 1-3): worker A, woken, finds its tick
    fenced; B's commit stands and its deliveries arrive."""
    wait_for(lambda: "tick.fenced" in a.text() or "lease.lost" in a.text(), 30, what="A fenced")
    wait_for(lambda: len(stack.sink.item_ids("z")) >= 3, 30, what="B's deliveries")
    assert sorted(stack.sink.item_ids("z")) == [1, 2, 3]
    assert bytes(state("z").cursor) == b"3"


def test_jobs_tick_on_schedule_and_paused_job_does_not(stack):
    stack.write([job("a"), job("p", paused_on_boot=True)])
    stack.reload()
    stack.publish("a", 1, 2, 3)
    stack.publish("p", 1)
    stack.worker()
    stack.beat()
    wait_for(lambda: len(stack.sink.item_ids("a")) >= 3, 30, what="3 deliveries of job a")
    wait_for(lambda: stack.ticks("a") >= 3, 30, what="3 ticks of a")
    assert_no_loss_dup_safe(stack.sink, "a", [1, 2, 3])
    assert stack.ticks("p") == 0
    assert stack.sink.item_ids("p") == []
    assert state("p").paused and state("p").paused_reason == "paused_on_boot"
    assert bytes(state("a").cursor) == b"3"
    # every delivery carries its row id as the idempotency key
    sent = {str(d.id) for d in Delivery.objects.filter(job_id="a", status="sent")}
    assert {h["delivery_id"] for h in stack.sink.items("a")} <= sent


def test_reset_clears_cursor_and_errors(stack):
    stack.write([job("a")])
    stack.reload()
    stack.publish("a", 1, 2)
    stack.worker()
    stack.beat()
    wait_for(lambda: len(stack.sink.item_ids("a")) >= 2, 30, what="first deliveries")
    from nexopoll import services

    services.reset_job("a")
    wait_for(lambda: len(stack.sink.item_ids("a")) >= 4, 30, what="re-delivery after reset")
    ids = stack.sink.item_ids("a")
    assert sorted(ids) == [1, 1, 2, 2]
    # after a reset the items are new deliveries, with new ids
    assert len({h["delivery_id"] for h in stack.sink.items("a")}) == 4
    assert state("a").consecutive_errors == 0


def test_transient_errors_open_breaker_then_close_after_success(stack):
    stack.env_extra["NEXOPOLL_BREAKER_BASE_SECS"] = "2"
    stack.write(
        [job("f", failure_to={"channel": "webhook", "to": "oncall"})],
        failure_alert_cooldown_secs=3600,
    )
    stack.reload()
    stack.redis.set("test:mode:f", "transient")
    stack.worker()
    stack.beat()
    wait_for(lambda: state("f").breaker_open_until is not None, 40, what="breaker open")
    st = state("f")
    assert st.consecutive_errors >= 3 and st.last_status == "transient"
    assert not st.paused
    wait_for(lambda: stack.sink.purposes("failing"), 20, what="failure alert")
    # while open, no tick runs the poller
    ticks_when_open = stack.ticks("f")
    stack.redis.set("test:mode:f", "ok")
    stack.publish("f", 7)
    wait_for(lambda: state("f").breaker_open_until is None, 40, what="breaker closed")
    st = state("f")
    assert st.consecutive_errors == 0 and st.last_status == "ok"
    assert stack.ticks("f") > ticks_when_open
    wait_for(lambda: stack.sink.item_ids("f") == [7], 20, what="item after recovery")
    wait_for(lambda: stack.sink.purposes("recovered"), 20, what="recovery notice")
    assert len(stack.sink.purposes("failing")) == 1


def test_permanent_error_pauses_and_alerts_once_within_cooldown(stack):
    stack.write([job("perm", failure_to={"channel": "webhook", "to": "oncall"})])
    stack.reload()
    stack.redis.set("test:mode:perm", "permanent")
    stack.worker()
    stack.beat()
    wait_for(lambda: state("perm").paused, 30, what="auto-pause")
    assert "scripted permanent failure" in state("perm").paused_reason
    wait_for(lambda: stack.sink.purposes("failing"), 20, what="alert")
    from nexopoll import services

    ticks = stack.ticks("perm")
    services.resume_job("perm")
    wait_for(lambda: stack.ticks("perm") > ticks and state("perm").paused, 30, what="paused again")
    # the second pause falls inside the cooldown: still exactly one alert
    wait_for(lambda: Delivery.objects.filter(job_id="perm", status="pending").count() == 0, 20)
    assert len(stack.sink.purposes("failing")) == 1
    assert Delivery.objects.filter(job_id="perm", purpose="alert").count() == 1


def test_kill_9_mid_tick_loses_nothing_and_duplicates_nothing(stack):
    """RELIABILITY row 1: SIGKILL after fetch, before commit."""
    stack.write([job("k")])
    stack.reload()
    stack.publish("k", 1, 2, 3, 4, 5)
    stack.redis.set("test:block:k", "1")
    worker = stack.worker()
    stack.beat()
    wait_for(lambda: stack.redis.get("test:blocked:k"), 30, what="tick blocked at the barrier")
    worker.kill()
    st = state("k")
    assert st.cursor is None  # nothing committed
    assert Delivery.objects.filter(job_id="k").count() == 0
    stack.redis.delete("test:block:k")
    stack.worker("w2")
    wait_for(lambda: len(stack.sink.item_ids("k")) >= 5, 60, what="all items after restart")
    assert_no_loss_dup_safe(stack.sink, "k", [1, 2, 3, 4, 5])
    assert sorted(stack.sink.item_ids("k")) == [1, 2, 3, 4, 5]  # killed before commit: none twice
    assert bytes(state("k").cursor) == b"5"


def test_zombie_tick_cannot_commit_after_its_lease_was_taken_over(stack):
    """RELIABILITY rows 13/14: a SIGSTOPped tick whose lease expired is fenced."""
    stack.write([job("z")])
    stack.reload()
    stack.publish("z", 1, 2)
    stack.redis.set("test:block:z", "1")
    a = stack.worker("a")
    stack.beat()
    wait_for(lambda: stack.redis.get("test:blocked:z"), 30, what="tick A at the barrier")
    epoch_a = state("z").epoch
    a.signal_group(signal.SIGSTOP)
    try:
        wait_for(lambda: not stack.redis.exists(keys_lease("z")), 15, what="A's lease to expire")
        stack.redis.delete("test:block:z")
        stack.publish("z", 3)
        b = stack.worker("b")
        wait_for(
            lambda: state("z").cursor is not None and bytes(state("z").cursor) == b"3",
            40,
            what="B commits",
        )
        epoch_b = state("z").epoch
        assert epoch_b > epoch_a
    finally:
        a.signal_group(signal.SIGCONT)
    assert_a_fenced_and_b_delivered(stack, a)
    assert not Delivery.objects.filter(job_id="z", epoch=epoch_a).exists()
    assert b.proc.poll() is None


def keys_lease(job_id: str) -> str:
    from nexopoll.runtime.lease import lease_key

    return lease_key(job_id)


def test_redis_flush_heals_schedules_without_restart_and_keeps_state(stack):
    """RELIABILITY row 8: Redis loses everything; beat re-creates entries from the DB."""
    stack.write([job("r1"), job("r2")])
    stack.reload()
    stack.publish("r1", 1)
    stack.worker()
    beat = stack.beat()
    wait_for(lambda: stack.sink.item_ids("r1") == [1], 30, what="first delivery")
    ticks_before = state("r1").ticks_total
    stack.redis.flushall()
    wait_for(lambda: stack.redis.zcard(keys.schedule_key()) >= 3, 20, what="schedule re-created")
    members = set(stack.redis.zrange(keys.schedule_key(), 0, -1))
    assert {keys.entry_key("r1"), keys.entry_key("r2")} <= members
    stack.publish("r1", 2)
    wait_for(lambda: 2 in stack.sink.item_ids("r1"), 30, what="delivery after flush")
    assert state("r1").ticks_total > ticks_before
    assert sorted(stack.sink.item_ids("r1")) == [1, 2]  # cursor kept: item 1 not re-sent
    assert "schedule missing" in beat.text()
    assert beat.proc.poll() is None


def test_sigterm_mid_tick_finishes_the_tick_and_loses_nothing(stack):
    """RELIABILITY row 3: warm shutdown lets the running tick commit; exit code 0."""
    stack.write([job("t")])
    stack.reload()
    stack.publish("t", 1, 2)
    stack.redis.set("test:block:t", "1")
    worker = stack.worker()
    stack.beat()
    wait_for(lambda: stack.redis.get("test:blocked:t"), 30, what="tick at the barrier")
    worker.proc.send_signal(signal.SIGTERM)  # the main process only: a warm shutdown
    stack.redis.delete("test:block:t")
    assert worker.proc.wait(30) == 0
    assert bytes(state("t").cursor) == b"2"
    stack.worker("w2")
    wait_for(lambda: len(stack.sink.item_ids("t")) >= 2, 30, what="deliveries")
    assert_no_loss_dup_safe(stack.sink, "t", [1, 2])


def test_cron_with_seconds_fires_on_its_slots(stack):
    """A 6-field cron entry, stored through the RedBeat encoder, fires at its seconds.

    Asserted on what beat schedules (every score it writes is a cron slot, a whole
    second divisible by 3) and on the ticks (one per slot), not on how fast a loaded
    machine starts them.
    """
    stack.write([job("c", schedule={"cron": "*/3 * * * * *", "tz": "Asia/Kolkata"})])
    stack.reload()
    stack.worker()
    stack.beat()
    scores: set[float] = set()

    def three_ticks() -> bool:
        scores.add(stack.redis.zscore(keys.schedule_key(), keys.entry_key("c")))
        return stack.redis.llen("test:now:c") >= 4

    wait_for(three_ticks, 60, interval=0.2, what="four cron ticks")
    assert len(scores) >= 2 and all(s == int(s) and int(s) % 3 == 0 for s in scores)
    stamps = [float(x) for x in stack.redis.lrange("test:now:c", 0, -1)]
    # the first tick may catch up a slot missed while beat was starting
    slots = [int(s // 3) for s in stamps[1:]]
    assert len(set(slots)) == len(slots)  # one tick per slot
