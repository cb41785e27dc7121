"""Per-job circuit breaker and retry backoff, as pure transitions over a job's stored health.

The runtime keeps :class:`Health` in the job's DB row (so every worker sees the same
breaker) and moves it with these functions, passing the instant it read once at the edge.

Lifecycle: ``threshold`` consecutive transient errors open the breaker for ``base``
(30 s); once that window has passed it is half-open and lets exactly one trial tick
through; a successful trial closes it, a failed one re-opens it for twice as long, up to
``cap`` (300 s). A permanent error never opens it (the runtime pauses the job instead).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# 2**80 microseconds exceeds timedelta.max, so larger exponents are all "the cap".
_MAX_DOUBLINGS = 80
_ONE_US = timedelta(microseconds=1)


class BreakerState(enum.IntEnum):
    """The breaker's state; the values are the ``nexopoll_breaker_state`` gauge values."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass(frozen=True)
class Health:
    """A job's failure bookkeeping, as stored in its state row.

    Attributes:
        consecutive_errors: failed ticks since the last success (transient or permanent).
        open_until: end of the current open window; None while the breaker is closed.
        trips: times the breaker opened since it last closed (drives the doubling).
        trial_started_at: when the half-open trial tick started, while one runs.
    """

    consecutive_errors: int = 0
    open_until: datetime | None = None
    trips: int = 0
    trial_started_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.consecutive_errors < 0 or self.trips < 0:
            raise ValueError(f"counters must not be negative: {self!r}")
        for name in ("open_until", "trial_started_at"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _as_utc(value, name))


@dataclass(frozen=True)
class BreakerPolicy:
    """How the breaker reacts; ``threshold`` is ``breaker_threshold`` from pollers.yaml."""

    threshold: int = 5
    base: timedelta = timedelta(seconds=30)
    cap: timedelta = timedelta(seconds=300)
    trial_timeout: timedelta = timedelta(seconds=60)

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ValueError(f"threshold must be at least 1, got {self.threshold}")
        if self.base <= timedelta(0) or self.cap < self.base:
            raise ValueError(f"need 0 < base <= cap, got base={self.base} cap={self.cap}")
        if self.trial_timeout <= timedelta(0):
            raise ValueError(f"trial_timeout must be positive, got {self.trial_timeout}")


def breaker_state(h: Health, *, now: datetime) -> BreakerState:
    """Return the breaker's state at ``now``.

    Args:
        h: the job's health.
        now: an aware instant.

    Returns:
        CLOSED without an open window, OPEN before ``open_until``, HALF_OPEN from then on.
    """
    now = _as_utc(now, "now")
    if h.open_until is None:
        return BreakerState.CLOSED
    return BreakerState.OPEN if now < h.open_until else BreakerState.HALF_OPEN


def may_tick(h: Health, *, now: datetime, policy: BreakerPolicy) -> bool:
    """Return whether a tick may run now, as far as the breaker is concerned.

    Half-open admits a single trial: a second tick is refused while the first runs, unless
    it started ``policy.trial_timeout`` or longer ago (its worker is presumed dead).

    Args:
        h: the job's health.
        now: an aware instant.
        policy: the breaker policy.

    Returns:
        True when closed, False when open, and for half-open True only if no live trial runs.
    """
    state = breaker_state(h, now=now)
    if state is BreakerState.CLOSED:
        return True
    if state is BreakerState.OPEN:
        return False
    if h.trial_started_at is None:
        return True
    return _as_utc(now, "now") >= h.trial_started_at + policy.trial_timeout


def start_tick(h: Health, *, now: datetime) -> Health:
    """Return the health to store when a tick that :func:`may_tick` admitted starts.

    Marks the half-open trial as running (``trial_started_at = now``); in any other state
    the health is returned unchanged.
    """
    if breaker_state(h, now=now) is BreakerState.HALF_OPEN:
        return dataclasses.replace(h, trial_started_at=_as_utc(now, "now"))
    return h


def record_success(h: Health) -> Health:
    """Return the health after a successful tick: closed, with every counter reset."""
    return Health()


def record_failure(
    h: Health, *, now: datetime, policy: BreakerPolicy, permanent: bool = False
) -> Health:
    """Return the health after a failed tick.

    * permanent: ``consecutive_errors + 1`` and the trial (if any) ends, but the breaker
      does not move: the runtime pauses the job instead.
    * transient while closed: ``consecutive_errors + 1``; reaching ``policy.threshold``
      opens the breaker for ``base``.
    * transient while half-open (the trial failed): re-open for twice the last window,
      capped at ``policy.cap``.
    * transient while open (a tick that started before the breaker opened): counted, and
      the open window is left as it is.

    Args:
        h: the job's health before the failure.
        now: an aware instant, when the failure is recorded.
        policy: the breaker policy.
        permanent: whether the error was classified permanent.

    Returns:
        The new health.

    Examples:
        With ``threshold=2``, the second transient failure opens for 30 s:

        >>> policy = BreakerPolicy(threshold=2)
        >>> t0 = datetime(2026, 1, 1, tzinfo=UTC)
        >>> h = record_failure(record_failure(Health(), now=t0, policy=policy),
        ...                    now=t0, policy=policy)
        >>> h.open_until - t0, h.trips
        (datetime.timedelta(seconds=30), 1)

        The half-open trial fails 30 s later: open for 60 s.

        >>> t1 = t0 + timedelta(seconds=30)
        >>> h = record_failure(start_tick(h, now=t1), now=t1, policy=policy)
        >>> h.open_until - t1, h.trips, h.trial_started_at
        (datetime.timedelta(seconds=60), 2, None)
    """
    now = _as_utc(now, "now")
    counted = dataclasses.replace(
        h, consecutive_errors=h.consecutive_errors + 1, trial_started_at=None
    )
    if permanent:
        return counted
    state = breaker_state(h, now=now)
    if state is BreakerState.OPEN:
        return counted
    if state is BreakerState.CLOSED and counted.consecutive_errors < policy.threshold:
        return counted
    trips = h.trips + 1
    window = backoff_delay(trips, base=policy.base, cap=policy.cap)
    return dataclasses.replace(counted, open_until=now + window, trips=trips)


def backoff_delay(attempt: int, *, base: timedelta, cap: timedelta) -> timedelta:
    """Return ``base * 2 ** (attempt - 1)``, capped at ``cap``.

    Args:
        attempt: 1 for the first retry (or the first open window).
        base: the first delay, positive.
        cap: the longest delay, at least ``base``.

    Returns:
        The delay.

    Raises:
        ValueError: ``attempt < 1`` or not ``0 < base <= cap``.

    Examples:
        >>> [backoff_delay(n, base=timedelta(seconds=30), cap=timedelta(seconds=300)).seconds
        ...  for n in range(1, 7)]
        [30, 60, 120, 240, 300, 300]
    """
    if attempt < 1:
        raise ValueError(f"attempt must be at least 1, got {attempt}")
    if base <= timedelta(0) or cap < base:
        raise ValueError(f"need 0 < base <= cap, got base={base} cap={cap}")
    micros = (base // _ONE_US) << min(attempt - 1, _MAX_DOUBLINGS)
    return timedelta(microseconds=min(micros, cap // _ONE_US))


def retry_countdown(
    h: Health, *, now: datetime, next_slot_at: datetime | None, policy: BreakerPolicy
) -> timedelta | None:
    """Return how long to wait before retrying a tick that just failed transiently.

    Args:
        h: the job's health, already updated by :func:`record_failure`.
        now: an aware instant.
        next_slot_at: the job's next regular slot, or None if it has none.
        policy: the breaker policy (``base`` and ``cap`` shape the backoff).

    Returns:
        ``backoff_delay(h.consecutive_errors)``; or None — no retry — when the breaker is
        open or half-open (the breaker decides when to try again), or when the retry would
        not land strictly before ``next_slot_at`` (the regular slot comes first).

    Examples:
        >>> t0 = datetime(2026, 1, 1, tzinfo=UTC)
        >>> retry_countdown(Health(consecutive_errors=2), now=t0,
        ...                 next_slot_at=t0 + timedelta(minutes=5), policy=BreakerPolicy())
        datetime.timedelta(seconds=60)
        >>> retry_countdown(Health(consecutive_errors=2), now=t0,
        ...                 next_slot_at=t0 + timedelta(seconds=60), policy=BreakerPolicy())
    """
    now = _as_utc(now, "now")
    if breaker_state(h, now=now) is not BreakerState.CLOSED:
        return None
    delay = backoff_delay(max(h.consecutive_errors, 1), base=policy.base, cap=policy.cap)
    if next_slot_at is not None and not now + delay < _as_utc(next_slot_at, "next_slot_at"):
        return None
    return delay


def _as_utc(value: datetime, name: str) -> datetime:
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


#: the breaker as operators read it (CLI, admin, API, MCP), and as a metric's value
BREAKER_LABELS = {"closed": 0, "half-open": 1, "open": 2}


def breaker_label(open_until: datetime | None, *, now: datetime) -> str:
    """``closed``, ``open`` (before ``open_until``) or ``half-open`` (from then on): the one
    label every operator surface shows."""
    if open_until is None:
        return "closed"
    return "open" if now < open_until else "half-open"
