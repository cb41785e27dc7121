"""Whether a tick runs (core.decide.should_run): pure, ``now`` a parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nexopoll.core.breaker import BreakerPolicy, Health
from nexopoll.core.decide import JobPolicy, Run, RunState, Skip, should_run

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)
POLICY = JobPolicy(
    breaker=BreakerPolicy(threshold=3, base=30 * S, cap=300 * S, trial_timeout=60 * S),
    alert_cooldown=3600 * S,
    has_failure_to=False,
    max_crashes=3,
)
OPEN = Health(consecutive_errors=3, open_until=NOW + 10 * S, trips=1)
HALF_OPEN = Health(consecutive_errors=3, open_until=NOW - 1 * S, trips=1)


def test_a_known_healthy_job_runs_without_trial_or_cap():
    assert should_run(RunState(known=True), now=NOW, policy=POLICY) == Run()


@pytest.mark.parametrize(
    "state", [RunState(known=False), RunState(known=False, manual=True, force=True, dry_run=True)]
)
def test_an_unknown_job_is_skipped_whatever_was_asked(state):
    assert should_run(state, now=NOW, policy=POLICY) == Skip("unknown job")


def test_a_job_without_a_definition_is_unknown():
    assert should_run(RunState(known=True), now=NOW, policy=None) == Skip("unknown job")


def test_a_paused_job_is_skipped_unless_forced_by_hand_or_dry_run():
    paused = RunState(known=True, paused=True)
    assert should_run(paused, now=NOW, policy=POLICY) == Skip("paused")
    manual = RunState(known=True, paused=True, manual=True)
    assert should_run(manual, now=NOW, policy=POLICY) == Skip("paused")
    forced_by_beat = RunState(known=True, paused=True, force=True)  # force needs manual
    assert should_run(forced_by_beat, now=NOW, policy=POLICY) == Skip("paused")
    forced = RunState(known=True, paused=True, manual=True, force=True)
    assert should_run(forced, now=NOW, policy=POLICY) == Run()
    dry = RunState(known=True, paused=True, dry_run=True)
    assert isinstance(should_run(dry, now=NOW, policy=POLICY), Run)


def test_an_open_breaker_skips_a_scheduled_tick_but_not_a_manual_run():
    scheduled = RunState(known=True, health=OPEN)
    assert should_run(scheduled, now=NOW, policy=POLICY) == Skip("breaker open")
    manual = RunState(known=True, health=OPEN, manual=True)
    assert should_run(manual, now=NOW, policy=POLICY) == Run()  # no trial while open
    assert should_run(scheduled, now=NOW + 11 * S, policy=POLICY) == Run(trial=NOW + 11 * S)


def test_paused_is_told_before_breaker_open():
    state = RunState(known=True, paused=True, health=OPEN)
    assert should_run(state, now=NOW, policy=POLICY) == Skip("paused")


def test_half_open_admits_one_trial_then_refuses_until_it_times_out():
    assert should_run(RunState(known=True, health=HALF_OPEN), now=NOW, policy=POLICY) == Run(
        trial=NOW
    )
    running = Health(consecutive_errors=3, open_until=NOW - 1 * S, trips=1, trial_started_at=NOW)
    state = RunState(known=True, health=running)
    assert should_run(state, now=NOW + 30 * S, policy=POLICY) == Skip("breaker open")
    # the trial's worker is presumed dead: a new trial starts
    assert should_run(state, now=NOW + 60 * S, policy=POLICY) == Run(trial=NOW + 60 * S)


def test_the_crash_cap_runs_the_tick_without_the_poller():
    below = RunState(known=True, crash_count=2)
    assert should_run(below, now=NOW, policy=POLICY) == Run(capped=False)
    at_cap = RunState(known=True, crash_count=3)
    assert should_run(at_cap, now=NOW, policy=POLICY) == Run(capped=True)
    # an unknown, paused or breaker-open job is skipped before the cap counts
    assert should_run(
        RunState(known=True, paused=True, crash_count=5), now=NOW, policy=POLICY
    ) == Skip("paused")


def test_now_must_be_aware():
    with pytest.raises(ValueError):
        should_run(
            RunState(known=True, health=HALF_OPEN), now=NOW.replace(tzinfo=None), policy=POLICY
        )
