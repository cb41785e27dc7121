"""Whether a tick runs, and what its result means for the job: the pure part of the
tick (``runtime/tick/run.py`` does its I/O).

``should_run`` decides from the state row a tick read whether it runs at all (an
unknown job, a paused one, an open breaker: ``Skip``) and how (a half-open trial, or
a crash cap that fails the tick without calling the poller: ``Run``).

``plan_success`` / ``plan_failure``: given the state a tick read when it started and
how the poller ended, decide the job's next health, whether it pauses, whether
``failure_to`` gets an alert (or a recovery notice) and whether Celery should retry.
No I/O, no clock: ``now`` is a parameter, like every time-dependent function in
``nexopoll.core``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .breaker import (
    BreakerPolicy,
    Health,
    may_tick,
    record_failure,
    record_success,
    retry_countdown,
    start_tick,
)  # fmt: skip
from .errors import ErrorClass


@dataclass(frozen=True)
class JobPolicy:
    breaker: BreakerPolicy
    alert_cooldown: timedelta
    has_failure_to: bool
    max_hint: timedelta = timedelta(hours=1)
    # the worker died during this many consecutive ticks: the next fails without polling
    max_crashes: int = 3


@dataclass(frozen=True)
class StartState:
    """The parts of the job's state row a decision depends on."""

    health: Health
    alert_active: bool = False
    last_failure_alert_at: datetime | None = None


@dataclass(frozen=True)
class RunState:
    """What whether a tick runs depends on: the job's state row as the tick read it
    (``known``: there is one, with a definition), and how the tick was asked for."""

    known: bool
    health: Health = field(default_factory=Health)
    paused: bool = False
    crash_count: int = 0  # consecutive ticks of this job whose worker died
    manual: bool = False  # the CLI's run: the breaker does not apply
    force: bool = False  # with ``manual``: a paused job runs too
    dry_run: bool = False  # polls, commits nothing: a paused job runs too


@dataclass(frozen=True)
class Skip:
    """The tick does not run: ``unknown job``, ``paused`` or ``breaker open``."""

    reason: str


@dataclass(frozen=True)
class Run:
    """The tick runs. ``trial``: a half-open breaker trial starts now (its marker must be
    stored before polling). ``capped``: the crash cap is reached, the poller is not
    called and the tick ends as a transient failure."""

    trial: datetime | None = None
    capped: bool = False


def should_run(state: RunState, *, now: datetime, policy: JobPolicy | None) -> Skip | Run:
    """Whether (and how) a tick runs now. ``policy`` is None when the job has no
    definition."""
    if not state.known or policy is None:
        return Skip("unknown job")
    if state.paused and not state.dry_run and not (state.manual and state.force):
        return Skip("paused")
    if not state.manual and not may_tick(state.health, now=now, policy=policy.breaker):
        return Skip("breaker open")
    trial = start_tick(state.health, now=now).trial_started_at
    return Run(
        trial=trial if trial != state.health.trial_started_at else None,
        capped=state.crash_count >= policy.max_crashes,
    )


@dataclass(frozen=True)
class Decision:
    status: str  # "ok" | "transient" | "permanent"
    health: Health
    error: str = ""
    pause_reason: str | None = None
    send_alert: bool = False
    send_recovery: bool = False
    alert_active: bool = False
    last_failure_alert_at: datetime | None = None
    retry_in: timedelta | None = None
    not_before: datetime | None = None


def plan_success(
    start: StartState,
    *,
    now: datetime,
    policy: JobPolicy,
    hint: timedelta | None = None,
    one_shot: bool = False,
) -> Decision:
    """Decide the job's state after a successful tick.

    A poller's ``next_interval_hint`` becomes ``not_before = now + hint`` (capped at
    ``policy.max_hint``); a one-shot (``at``) job pauses after it fires. If an alert
    was sent while failing, a recovery notice goes to ``failure_to``.
    """
    not_before = None
    if hint is not None and hint > timedelta(0):
        not_before = now + min(hint, policy.max_hint)
    return Decision(
        status="ok",
        health=record_success(start.health),
        pause_reason="one-shot schedule fired" if one_shot else None,
        send_recovery=start.alert_active and policy.has_failure_to,
        alert_active=False,
        last_failure_alert_at=start.last_failure_alert_at,
        not_before=not_before,
    )


def plan_failure(
    start: StartState,
    error_class: ErrorClass,
    message: str,
    *,
    now: datetime,
    policy: JobPolicy,
    next_slot_at: datetime | None,
    retry_after: timedelta | None = None,
) -> Decision:
    """Decide the job's state after a failed tick.

    Transient errors count toward the breaker and may be retried before the next
    slot; permanent and config errors pause the job. ``failure_to`` is alerted when
    the job pauses or its consecutive errors reach the breaker threshold, at most
    once per ``policy.alert_cooldown``.

    Example: threshold 3, cooldown 1 h, two earlier errors, a third transient one at
    12:00 → the breaker opens, ``send_alert`` is True, ``retry_in`` is None (never
    retry into an open breaker); a fourth error at 12:10 sends no alert (cooldown).
    """
    permanent = error_class is not ErrorClass.TRANSIENT
    health = record_failure(start.health, now=now, policy=policy.breaker, permanent=permanent)
    pause_reason = None
    retry_in = None
    if error_class is ErrorClass.PERMANENT:
        pause_reason = f"permanent error: {message}"
    elif error_class is ErrorClass.CONFIG:
        pause_reason = f"config error: {message}"
    else:
        retry_in = retry_countdown(
            health, now=now, next_slot_at=next_slot_at, policy=policy.breaker
        )
        if retry_in is not None and retry_after is not None and retry_after > retry_in:
            # Honour the server's Retry-After, but never hold a Celery retry longer than
            # the breaker cap (the broker's visibility timeout is sized for that): a
            # longer wait is served by ``not_before`` pushing the job's next slot back.
            fits = retry_after <= policy.breaker.cap
            before_slot = next_slot_at is None or now + retry_after < next_slot_at
            retry_in = retry_after if fits and before_slot else None

    crossing = pause_reason is not None or health.consecutive_errors >= policy.breaker.threshold
    cooled = (
        start.last_failure_alert_at is None
        or now - start.last_failure_alert_at >= policy.alert_cooldown
    )
    send_alert = policy.has_failure_to and crossing and cooled
    not_before = None
    if retry_after is not None and retry_after > timedelta(0):
        not_before = now + min(retry_after, policy.max_hint)
    return Decision(
        status="transient" if error_class is ErrorClass.TRANSIENT else "permanent",
        health=health,
        error=message,
        pause_reason=pause_reason,
        send_alert=send_alert,
        alert_active=start.alert_active or send_alert,
        last_failure_alert_at=now if send_alert else start.last_failure_alert_at,
        retry_in=retry_in,
        not_before=not_before,
    )
