"""The pure decisions behind a tick's commit: health, pause, alerts, retries, hints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexopoll.core.breaker import BreakerPolicy, Health
from nexopoll.core.decide import JobPolicy, StartState, plan_failure, plan_success
from nexopoll.core.errors import ErrorClass

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)
POLICY = JobPolicy(
    breaker=BreakerPolicy(threshold=3, base=30 * S, cap=300 * S),
    alert_cooldown=3600 * S,
    has_failure_to=True,
    max_hint=600 * S,
)


def fail(start: StartState, cls=ErrorClass.TRANSIENT, *, now=NOW, nxt=NOW + 60 * S, **kw):
    return plan_failure(start, cls, "boom", now=now, policy=POLICY, next_slot_at=nxt, **kw)


def test_transient_below_threshold_retries_before_the_next_slot_without_alert():
    d = fail(StartState(Health()))
    assert d.status == "transient" and d.health.consecutive_errors == 1
    assert d.retry_in == 30 * S and not d.send_alert and d.pause_reason is None


def test_reaching_the_threshold_alerts_once_per_cooldown_and_never_retries_into_open_breaker():
    d = fail(StartState(Health(consecutive_errors=2)))
    assert d.health.open_until == NOW + 30 * S and d.retry_in is None
    assert d.send_alert and d.alert_active and d.last_failure_alert_at == NOW
    later = StartState(Health(consecutive_errors=3), True, NOW)
    again = fail(later, now=NOW + 600 * S, nxt=NOW + 660 * S)
    assert not again.send_alert  # inside the cooldown
    cooled = fail(later, now=NOW + 3600 * S, nxt=NOW + 3660 * S)
    assert cooled.send_alert


def test_permanent_and_config_errors_pause_and_alert():
    p = fail(StartState(Health()), ErrorClass.PERMANENT)
    assert p.pause_reason == "permanent error: boom" and p.send_alert and p.retry_in is None
    c = fail(StartState(Health()), ErrorClass.CONFIG)
    assert c.pause_reason == "config error: boom" and c.status == "permanent"


def test_no_alert_without_failure_to():
    quiet = JobPolicy(POLICY.breaker, POLICY.alert_cooldown, has_failure_to=False)
    d = plan_failure(
        StartState(Health(consecutive_errors=2)),
        ErrorClass.TRANSIENT,
        "x",
        now=NOW,
        policy=quiet,
        next_slot_at=None,
    )
    assert not d.send_alert and not d.alert_active


def test_retry_after_is_honoured_within_the_breaker_cap_else_left_to_the_schedule():
    d = fail(StartState(Health()), retry_after=45 * S)
    assert d.retry_in == 45 * S and d.not_before == NOW + 45 * S
    long = fail(StartState(Health()), nxt=NOW + 3600 * S, retry_after=1200 * S)
    assert long.retry_in is None  # beyond the cap: the next slot is pushed back instead
    assert long.not_before == NOW + 600 * S  # capped by max_hint


def test_success_resets_health_and_sends_a_recovery_notice_after_an_alert():
    start = StartState(Health(consecutive_errors=4, open_until=NOW, trips=1), True, NOW)
    d = plan_success(start, now=NOW, policy=POLICY)
    assert d.health == Health() and d.send_recovery and not d.alert_active
    assert not plan_success(StartState(Health()), now=NOW, policy=POLICY).send_recovery


def test_interval_hint_is_capped_and_one_shot_pauses():
    d = plan_success(StartState(Health()), now=NOW, policy=POLICY, hint=7200 * S, one_shot=True)
    assert d.not_before == NOW + 600 * S and d.pause_reason == "one-shot schedule fired"
