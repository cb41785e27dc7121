from __future__ import annotations

import doctest
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from nexopoll.core import breaker as breaker_module
from nexopoll.core.breaker import (
    BreakerPolicy,
    BreakerState,
    Health,
    backoff_delay,
    breaker_state,
    may_tick,
    record_failure,
    record_success,
    retry_countdown,
    start_tick,
)

POLICY = BreakerPolicy()
T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
SEC = timedelta(seconds=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fail(h: Health, now: datetime, *, times: int = 1, permanent: bool = False) -> Health:
    for _ in range(times):
        h = record_failure(h, now=now, policy=POLICY, permanent=permanent)
    return h


def opened(now: datetime = T0) -> Health:
    """A health whose breaker has just opened at ``now`` (default threshold 5)."""
    return fail(Health(), now, times=POLICY.threshold)


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(breaker_module)
    assert result.attempted > 5
    assert result.failed == 0


def test_gauge_values() -> None:
    states = (BreakerState.CLOSED, BreakerState.HALF_OPEN, BreakerState.OPEN)
    assert [int(s) for s in states] == [0, 1, 2]


def test_default_policy_matches_the_design() -> None:
    assert POLICY == BreakerPolicy(
        threshold=5, base=30 * SEC, cap=300 * SEC, trial_timeout=60 * SEC
    )


# --- opening -----------------------------------------------------------------------------


def test_stays_closed_below_the_threshold() -> None:
    h = fail(Health(), T0, times=4)
    assert h == Health(consecutive_errors=4)
    assert breaker_state(h, now=T0) is BreakerState.CLOSED
    assert may_tick(h, now=T0, policy=POLICY)


def test_opens_exactly_at_the_threshold_for_the_base_window() -> None:
    h = fail(Health(), T0, times=5)
    assert h == Health(consecutive_errors=5, open_until=at(30), trips=1)
    assert breaker_state(h, now=T0) is BreakerState.OPEN
    assert not may_tick(h, now=T0, policy=POLICY)
    assert not may_tick(h, now=at(30) - timedelta(microseconds=1), policy=POLICY)


def test_threshold_of_one_opens_on_the_first_error() -> None:
    h = record_failure(Health(), now=T0, policy=BreakerPolicy(threshold=1), permanent=False)
    assert breaker_state(h, now=T0) is BreakerState.OPEN


def test_becomes_half_open_when_the_window_ends() -> None:
    h = opened()
    assert breaker_state(h, now=at(29.999999)) is BreakerState.OPEN
    assert breaker_state(h, now=at(30)) is BreakerState.HALF_OPEN
    assert breaker_state(h, now=at(3600)) is BreakerState.HALF_OPEN
    assert may_tick(h, now=at(30), policy=POLICY)


def test_failure_while_open_is_counted_but_does_not_extend_the_window() -> None:
    h = fail(opened(), at(10))
    assert h == Health(consecutive_errors=6, open_until=at(30), trips=1)


# --- half-open trial -----------------------------------------------------------------------


def test_windows_double_on_each_failed_trial_up_to_the_cap() -> None:
    h = opened()
    now = T0
    windows = [h.open_until - now]
    for _ in range(5):
        now = h.open_until
        assert may_tick(h, now=now, policy=POLICY)
        h = fail(start_tick(h, now=now), now)
        windows.append(h.open_until - now)
        assert breaker_state(h, now=now) is BreakerState.OPEN
    assert [w // SEC for w in windows] == [30, 60, 120, 240, 300, 300]
    assert h.trips == 6
    assert h.consecutive_errors == 10


def test_only_one_trial_runs_while_half_open() -> None:
    h = start_tick(opened(), now=at(30))
    assert h.trial_started_at == at(30)
    assert breaker_state(h, now=at(31)) is BreakerState.HALF_OPEN
    assert not may_tick(h, now=at(31), policy=POLICY)
    assert not may_tick(h, now=at(89.999), policy=POLICY)


def test_a_trial_whose_worker_died_is_replaced_after_the_trial_timeout() -> None:
    h = start_tick(opened(), now=at(30))
    assert may_tick(h, now=at(90), policy=POLICY)
    short = BreakerPolicy(trial_timeout=5 * SEC)
    assert not may_tick(h, now=at(34), policy=short)
    assert may_tick(h, now=at(35), policy=short)
    retried = start_tick(h, now=at(90))
    assert retried.trial_started_at == at(90)
    assert not may_tick(retried, now=at(91), policy=POLICY)


def test_start_tick_only_marks_half_open_trials() -> None:
    closed = Health(consecutive_errors=2)
    assert start_tick(closed, now=T0) is closed
    still_open = opened()
    assert start_tick(still_open, now=at(5)) is still_open


def test_successful_trial_closes_and_resets_everything() -> None:
    h = start_tick(fail(start_tick(opened(), now=at(30)), at(30)), now=at(90))
    assert h.trips == 2
    h = record_success(h)
    assert h == Health()
    assert breaker_state(h, now=at(90)) is BreakerState.CLOSED
    # It takes a full threshold again to re-open, and it re-opens for the base window.
    h = fail(h, at(100), times=4)
    assert breaker_state(h, now=at(100)) is BreakerState.CLOSED
    h = fail(h, at(100))
    assert h.open_until == at(130)
    assert h.trips == 1


def test_failed_trial_ends_the_trial() -> None:
    h = fail(start_tick(opened(), now=at(30)), at(40))
    assert h.trial_started_at is None
    assert h.open_until == at(100)  # 60 s from the failure, not from the trial's start
    assert may_tick(h, now=at(100), policy=POLICY)


# --- permanent errors ------------------------------------------------------------------------


def test_permanent_errors_count_but_never_open_the_breaker() -> None:
    h = fail(Health(), T0, times=12, permanent=True)
    assert h == Health(consecutive_errors=12)
    assert breaker_state(h, now=T0) is BreakerState.CLOSED


def test_a_transient_error_after_permanent_ones_opens_past_the_threshold() -> None:
    h = fail(fail(Health(), T0, times=4), T0, permanent=True)
    assert breaker_state(h, now=T0) is BreakerState.CLOSED
    assert h.consecutive_errors == 5
    h = fail(h, at(1))
    assert h.open_until == at(31)


def test_permanent_failure_of_the_trial_keeps_the_breaker_half_open_for_one_new_trial() -> None:
    trial = start_tick(opened(), now=at(30))
    h = fail(trial, at(31), permanent=True)
    assert h == Health(consecutive_errors=6, open_until=at(30), trips=1)
    assert may_tick(h, now=at(32), policy=POLICY)


# --- backoff ---------------------------------------------------------------------------------


def test_backoff_doubles_from_base_up_to_cap() -> None:
    delays = [backoff_delay(n, base=30 * SEC, cap=300 * SEC) for n in range(1, 8)]
    assert delays == [s * SEC for s in (30, 60, 120, 240, 300, 300, 300)]
    assert backoff_delay(3, base=timedelta(milliseconds=250), cap=SEC) == timedelta(seconds=1)
    assert backoff_delay(2, base=timedelta(milliseconds=250), cap=SEC) == timedelta(
        milliseconds=500
    )


def test_backoff_of_a_huge_attempt_is_the_cap() -> None:
    assert backoff_delay(10**9, base=30 * SEC, cap=300 * SEC) == 300 * SEC
    assert backoff_delay(81, base=timedelta(microseconds=1), cap=timedelta.max) == timedelta.max


@pytest.mark.parametrize(
    ("attempt", "base", "cap"),
    [(0, 30 * SEC, 300 * SEC), (-1, 30 * SEC, 300 * SEC), (1, 0 * SEC, SEC), (1, 10 * SEC, SEC)],
)
def test_backoff_rejects_nonsense(attempt: int, base: timedelta, cap: timedelta) -> None:
    with pytest.raises(ValueError):
        backoff_delay(attempt, base=base, cap=cap)


# --- retry_countdown -----------------------------------------------------------------------


def test_retry_uses_the_backoff_of_the_consecutive_errors() -> None:
    far = at(3600)
    delays = [
        retry_countdown(fail(Health(), T0, times=n), now=T0, next_slot_at=far, policy=POLICY)
        for n in range(1, 5)
    ]
    assert delays == [30 * SEC, 60 * SEC, 120 * SEC, 240 * SEC]
    custom = BreakerPolicy(base=10 * SEC, cap=15 * SEC)
    h = Health(consecutive_errors=3)
    assert retry_countdown(h, now=T0, next_slot_at=far, policy=custom) == 15 * SEC


def test_no_retry_when_the_next_slot_comes_first() -> None:
    h = Health(consecutive_errors=2)  # 60 s backoff
    assert retry_countdown(h, now=T0, next_slot_at=at(60), policy=POLICY) is None
    assert retry_countdown(h, now=T0, next_slot_at=at(45), policy=POLICY) is None
    almost = at(60) + timedelta(microseconds=1)
    assert retry_countdown(h, now=T0, next_slot_at=almost, policy=POLICY) == 60 * SEC


def test_retry_without_a_next_slot() -> None:
    h = Health(consecutive_errors=1)
    assert retry_countdown(h, now=T0, next_slot_at=None, policy=POLICY) == 30 * SEC


def test_no_retry_into_an_open_or_half_open_breaker() -> None:
    h = opened()
    assert retry_countdown(h, now=T0, next_slot_at=None, policy=POLICY) is None
    assert retry_countdown(h, now=at(30), next_slot_at=None, policy=POLICY) is None  # half-open
    h = fail(start_tick(h, now=at(30)), at(30))
    assert retry_countdown(h, now=at(30), next_slot_at=at(3600), policy=POLICY) is None


def test_retry_countdown_with_no_recorded_error_uses_the_base() -> None:
    assert retry_countdown(Health(), now=T0, next_slot_at=None, policy=POLICY) == 30 * SEC


# --- validation ------------------------------------------------------------------------------


def test_naive_instants_are_rejected() -> None:
    naive = datetime(2026, 1, 1, 12)
    with pytest.raises(ValueError, match="aware"):
        breaker_state(Health(), now=naive)
    with pytest.raises(ValueError, match="aware"):
        may_tick(Health(), now=naive, policy=POLICY)
    with pytest.raises(ValueError, match="aware"):
        record_failure(Health(), now=naive, policy=POLICY)
    with pytest.raises(ValueError, match="aware"):
        retry_countdown(Health(), now=naive, next_slot_at=None, policy=POLICY)
    with pytest.raises(ValueError, match="aware"):
        retry_countdown(Health(consecutive_errors=1), now=T0, next_slot_at=naive, policy=POLICY)
    with pytest.raises(ValueError, match="aware"):
        Health(open_until=naive)
    with pytest.raises(ValueError, match="aware"):
        Health(trial_started_at=naive)


def test_health_instants_are_kept_in_utc() -> None:
    bogota = datetime(2026, 1, 1, 7, tzinfo=ZoneInfo("America/Bogota"))
    h = Health(open_until=bogota, trial_started_at=bogota)
    assert h.open_until == T0 and h.open_until.tzinfo is UTC
    assert h.trial_started_at is not None and h.trial_started_at.tzinfo is UTC
    reopened = fail(Health(consecutive_errors=4), bogota)
    assert reopened.open_until is not None and reopened.open_until.tzinfo is UTC


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": 0},
        {"base": timedelta(0)},
        {"base": 30 * SEC, "cap": 10 * SEC},
        {"trial_timeout": timedelta(0)},
    ],
)
def test_policy_rejects_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        BreakerPolicy(**kwargs)


def test_health_rejects_negative_counters() -> None:
    with pytest.raises(ValueError):
        Health(consecutive_errors=-1)
    with pytest.raises(ValueError):
        Health(trips=-1)
