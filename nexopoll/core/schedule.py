"""When a job runs: the three schedule kinds, their next firing, and the per-job stagger.

Everything here is pure: instants come in as parameters (aware datetimes, answered in
UTC), nothing reads the clock and nothing draws random numbers, so a slot computed in a
test is the slot the runtime computes in production. Cron parsing and the DST rules
live in :mod:`nexopoll.core.cron`.

:func:`schedule_from_dict` is the one way from a written schedule (``pollers.yaml`` or
the DB's JSON copy) to a :class:`Schedule`, and it is strict.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .cron import CRON_HORIZON_YEARS, EPOCH, CronError, check_cron_syntax, next_cron, zone_of

__all__ = ["CRON_HORIZON_YEARS", "EPOCH"]

#: ``nominal_interval`` of a one-shot ``at`` schedule (it has no period); the lease TTL is
#: derived from it, so it only has to be a sane size for one tick.
AT_NOMINAL_INTERVAL = timedelta(seconds=60)

#: Bounds of ``every_secs``: a job runs at most once a second, at least once in 366 days.
MIN_EVERY_SECS = 1
MAX_EVERY_SECS = 366 * 86_400

#: Years an ``at`` may name: far enough from ``datetime``'s limits that adding a lease
#: TTL or a backoff to it cannot overflow.
AT_YEARS = (1970, 9000)
SCHEDULE_FIELDS = ("at", "cron", "every_secs", "tz")
_CRON_SAMPLE = 6
_STAGGER_REFERENCE = datetime(2000, 1, 1, tzinfo=UTC)
_ONE_SECOND = timedelta(seconds=1)
_ONE_MS = timedelta(milliseconds=1)
_RFC3339_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})?", re.ASCII
)


class ScheduleError(ValueError):
    """A schedule is invalid; the message is meant for the operator who wrote it.

    ``field`` names the schedule key at fault (``"cron"``, ``"tz"``…), or None when
    the block as a whole is wrong.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class EverySchedule:
    """Fire every ``every``, on slots anchored at the Unix epoch."""

    every: timedelta

    def __post_init__(self) -> None:
        if not isinstance(self.every, timedelta) or self.every <= timedelta(0):
            raise ScheduleError(f"every must be a positive duration, got {self.every!r}")


@dataclass(frozen=True)
class CronSchedule:
    """Fire on a 6-field cron expression (``sec min hour dom mon dow``) in time zone ``tz``.

    Construction checks the syntax and the zone; :func:`parse_cron` also rejects an
    expression that never fires.
    """

    expr: str
    tz: str = "UTC"

    def __post_init__(self) -> None:
        try:
            check_cron_syntax(self.expr)
            zone_of(self.tz)
        except CronError as exc:
            raise ScheduleError(str(exc)) from None


@dataclass(frozen=True)
class AtSchedule:
    """Fire once, at ``at`` (stored in UTC)."""

    at: datetime

    def __post_init__(self) -> None:
        if not isinstance(self.at, datetime) or self.at.utcoffset() is None:
            raise ScheduleError(f"at must be an aware datetime, got {self.at!r}")
        object.__setattr__(self, "at", self.at.astimezone(UTC))


Schedule = EverySchedule | CronSchedule | AtSchedule


def parse_cron(expr: str, tz: str, *, now: datetime) -> CronSchedule:
    """Validate a cron expression and its zone, as loaded from ``pollers.yaml``.

    Args:
        expr: six whitespace-separated fields, seconds first: ``sec min hour dom mon dow``.
        tz: an IANA zone key such as ``"America/Bogota"``.
        now: the load instant; the expression must fire within ``CRON_HORIZON_YEARS`` of it.

    Returns:
        The validated schedule.

    Raises:
        ScheduleError: wrong field count, a field croniter rejects, an unknown zone, or an
            expression that never fires.

    Examples:
        >>> parse_cron("0 */5 * * * *", "America/Bogota", now=datetime(2026, 1, 1, tzinfo=UTC))
        CronSchedule(expr='0 */5 * * * *', tz='America/Bogota')
        >>> parse_cron("0 0 0 31 2 *", "UTC", now=datetime(2026, 1, 1, tzinfo=UTC))
        Traceback (most recent call last):
        ...
        nexopoll.core.schedule.ScheduleError: cron expression '0 0 0 31 2 *' never fires
    """
    return _cron_from(expr, tz, now)


def next_run_at(schedule: Schedule, *, after: datetime) -> datetime | None:
    """Return the first firing instant strictly after ``after`` (aware UTC), without stagger.

    * ``every``: slots are ``epoch + k * every``, so they do not depend on when the job
      was loaded.
    * ``at``: the instant itself while it is still ahead, then None.
    * ``cron``: wall-clock semantics in the schedule's zone. Every matching local wall time
      fires once: one that falls in a spring-forward gap fires when the clock jumps, one
      that occurs twice (fall-back) fires at its first occurrence only.

    Returns None when there is none: a past ``at``, or a cron expression with no firing
    within ``CRON_HORIZON_YEARS``.

    Raises:
        ValueError: ``after`` is naive.

    Examples:
        >>> every = EverySchedule(timedelta(minutes=5))
        >>> next_run_at(every, after=datetime(2026, 1, 1, 10, 7, tzinfo=UTC))
        datetime.datetime(2026, 1, 1, 10, 10, tzinfo=datetime.timezone.utc)
        >>> next_run_at(every, after=datetime(2026, 1, 1, 10, 10, tzinfo=UTC))  # strictly after
        datetime.datetime(2026, 1, 1, 10, 15, tzinfo=datetime.timezone.utc)

        Paris springs forward at 02:00 on 2026-03-29, so 02:30 does not exist that day and
        the job fires at the jump (03:00 CEST = 01:00 UTC):

        >>> paris = CronSchedule("0 30 2 * * *", "Europe/Paris")
        >>> next_run_at(paris, after=datetime(2026, 3, 28, 12, tzinfo=UTC))
        datetime.datetime(2026, 3, 29, 1, 0, tzinfo=datetime.timezone.utc)

        Paris falls back at 03:00 on 2026-10-25, so 02:30 happens twice; only the first
        (CEST, 00:30 UTC) fires and the next firing is the following day:

        >>> next_run_at(paris, after=datetime(2026, 10, 24, 12, tzinfo=UTC))
        datetime.datetime(2026, 10, 25, 0, 30, tzinfo=datetime.timezone.utc)
        >>> next_run_at(paris, after=datetime(2026, 10, 25, 0, 30, tzinfo=UTC))
        datetime.datetime(2026, 10, 26, 1, 30, tzinfo=datetime.timezone.utc)
    """
    after = _as_utc(after, "after")
    if isinstance(schedule, EverySchedule):
        slots = (after - EPOCH) // schedule.every
        return EPOCH + (slots + 1) * schedule.every
    if isinstance(schedule, AtSchedule):
        return schedule.at if schedule.at > after else None
    if isinstance(schedule, CronSchedule):
        return next_cron(schedule.expr, schedule.tz, after)
    raise TypeError(f"not a schedule: {schedule!r}")


def next_slot(schedule: Schedule, *, after: datetime, offset: timedelta) -> datetime | None:
    """Return ``next_run_at(schedule, after=after - offset) + offset``: the next slot shifted
    by the job's :func:`stagger_offset`, strictly after ``after``; None if there is none.

    Examples:
        >>> every = EverySchedule(timedelta(minutes=1))
        >>> next_slot(every, after=datetime(2026, 1, 1, 10, 0, 1, tzinfo=UTC),
        ...           offset=timedelta(seconds=2))
        datetime.datetime(2026, 1, 1, 10, 0, 2, tzinfo=datetime.timezone.utc)
    """
    nominal = next_run_at(schedule, after=_as_utc(after, "after") - offset)
    return None if nominal is None else nominal + offset


def stagger_offset(job_id: str, jitter: timedelta, schedule: Schedule) -> timedelta:
    """Return the job's deterministic stagger, in whole milliseconds.

    The offset is a BLAKE2b hash of ``job_id`` reduced into ``[0, jitter)``, so a herd of
    jobs on the same schedule is spread while each job's slot stays reproducible. It is
    also kept below the schedule's nominal interval (measured for cron from a fixed
    reference instant, 2000-01-01 UTC, so the answer does not depend on the clock), so a
    shifted slot never overtakes the next one.

    Args:
        job_id: the job's id.
        jitter: the spread (``stagger_jitter_ms``); zero or negative means no stagger.
        schedule: the job's schedule; ``at`` schedules are never staggered.

    Returns:
        The offset, in ``[0, min(jitter, interval))``.

    Examples:
        >>> stagger_offset("ana_leads", timedelta(seconds=2), EverySchedule(timedelta(minutes=1)))
        datetime.timedelta(seconds=1, microseconds=35000)
        >>> stagger_offset("ana_leads", timedelta(seconds=2), EverySchedule(timedelta(seconds=1)))
        datetime.timedelta(microseconds=35000)
    """
    if jitter <= timedelta(0) or isinstance(schedule, AtSchedule):
        return timedelta(0)
    modulus = min(jitter // _ONE_MS, _interval_ms(schedule))
    if modulus <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(
        job_id.encode("utf-8"), digest_size=8, person=b"nexopoll-stagger"
    ).digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % modulus)


def nominal_interval(schedule: Schedule, *, now: datetime) -> timedelta:
    """Return the schedule's period, the basis of lease TTLs and of the stagger cap.

    * ``every``: ``every``.
    * ``cron``: the smallest gap between consecutive firings among the next six after
      ``now`` (at least one second); ``AT_NOMINAL_INTERVAL`` if it fires fewer than twice.
    * ``at``: ``AT_NOMINAL_INTERVAL`` (60 s): a one-shot has no period.

    Examples:
        >>> nominal_interval(CronSchedule("0 0 9,17 * * *"), now=datetime(2026, 1, 1, tzinfo=UTC))
        datetime.timedelta(seconds=28800)
    """
    now = _as_utc(now, "now")
    if isinstance(schedule, EverySchedule):
        return schedule.every
    if isinstance(schedule, AtSchedule):
        return AT_NOMINAL_INTERVAL
    firings: list[datetime] = []
    cursor: datetime | None = now
    while cursor is not None and len(firings) < _CRON_SAMPLE:
        cursor = next_run_at(schedule, after=cursor)
        if cursor is not None:
            firings.append(cursor)
    if len(firings) < 2:
        return AT_NOMINAL_INTERVAL
    gap = min(later - earlier for earlier, later in itertools.pairwise(firings))
    return max(gap, _ONE_SECOND)


@functools.lru_cache(maxsize=4096)
def _interval_ms(schedule: Schedule) -> int:
    # Cached: a reload computes this for every job, and most share a handful of schedules.
    return nominal_interval(schedule, now=_STAGGER_REFERENCE) // _ONE_MS


def schedule_to_dict(schedule: Schedule) -> dict[str, Any]:
    """Return the JSON-safe form of a schedule (the inverse of :func:`schedule_from_dict`).

    Examples:
        >>> schedule_to_dict(EverySchedule(timedelta(seconds=60)))
        {'every_secs': 60.0}
        >>> schedule_to_dict(AtSchedule(datetime(2026, 4, 26, 15, tzinfo=UTC)))
        {'at': '2026-04-26T15:00:00Z'}
    """
    if isinstance(schedule, EverySchedule):
        return {"every_secs": schedule.every.total_seconds()}
    if isinstance(schedule, CronSchedule):
        return {"cron": schedule.expr, "tz": schedule.tz}
    if isinstance(schedule, AtSchedule):
        return {"at": _rfc3339(schedule.at)}
    raise TypeError(f"not a schedule: {schedule!r}")


def schedule_from_dict(d: Mapping[str, Any], *, now: datetime | None = None) -> Schedule:
    """Build a schedule from its written form, strictly: ``{"every_secs": 60}``,
    ``{"cron": "0 */5 * * * *", "tz": "America/Bogota"}`` (``tz`` optional, default UTC,
    only with ``cron``) or ``{"at": "2026-04-26T15:00:00Z"}`` (RFC3339 with an offset).

    The same function reads ``pollers.yaml`` and the DB's copy, so both are held to
    the same rules: numbers are numbers (not strings or booleans), finite and within
    [:data:`MIN_EVERY_SECS`, :data:`MAX_EVERY_SECS`]; ``at`` is a string; other keys are
    rejected (take ``stagger_jitter_ms`` out first). ``schedule_from_dict(
    schedule_to_dict(s)) == s``. With ``now``, a cron expression must also fire within
    ``CRON_HORIZON_YEARS`` of it.

    Raises:
        ScheduleError: with ``field`` naming the key at fault.

    Examples:
        >>> schedule_from_dict({"every_secs": 60})
        EverySchedule(every=datetime.timedelta(seconds=60))
        >>> schedule_from_dict({"at": "2026-04-26T15:00:00Z"})
        AtSchedule(at=datetime.datetime(2026, 4, 26, 15, 0, tzinfo=datetime.timezone.utc))
    """
    if not isinstance(d, Mapping):
        raise ScheduleError(f"schedule must be a mapping, got {type(d).__name__}")
    unknown = sorted(str(k) for k in d if k not in SCHEDULE_FIELDS)
    if unknown:
        allowed = ", ".join(SCHEDULE_FIELDS)
        raise ScheduleError(f"unknown field (allowed: {allowed})", field=unknown[0])
    given = [k for k in ("every_secs", "cron", "at") if k in d]
    if len(given) != 1:
        got = f" (got {', '.join(given)})" if given else ""
        raise ScheduleError(f"must set exactly one of every_secs, cron, at{got}")
    if "tz" in d and "cron" not in d:
        raise ScheduleError("tz is only valid with cron", field="tz")
    if "every_secs" in d:
        return EverySchedule(_every_from(d["every_secs"]))
    if "at" in d:
        return AtSchedule(_at_from(d["at"]))
    return _cron_from(d["cron"], d.get("tz", "UTC"), now)


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC3339 instant with an explicit offset; return it in UTC.

    ``"2026-04-26T17:00:00+02:00"`` -> ``2026-04-26 15:00:00+00:00``. A timestamp
    without an offset is refused rather than guessed; digits are ASCII only.
    """
    match = _RFC3339_RE.fullmatch(text.strip())
    if match is None:
        raise ScheduleError(
            f"{text!r} is not an RFC3339 timestamp (e.g. '2026-04-26T15:00:00Z')", field="at"
        )
    date, time, fraction, offset = match.groups()
    if offset is None:
        raise ScheduleError(f"{text!r} has no UTC offset: add 'Z' or e.g. '+02:00'", field="at")
    micros = f".{(fraction or '0')[:6]:0<6}"
    try:
        parsed = datetime.fromisoformat(f"{date}T{time}{micros}{offset.upper()}")
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # 0001-01-01T00:00:00+01:00 is before datetime.min
        raise ScheduleError(f"{text!r} is not a valid date and time", field="at") from None


def _as_utc(value: datetime, name: str) -> datetime:
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


def _rfc3339(instant: datetime) -> str:
    text = instant.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z"


def _every_from(raw: object) -> timedelta:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        kind = "a boolean" if isinstance(raw, bool) else f"a {type(raw).__name__}"
        raise ScheduleError(f"must be a number of seconds, got {kind}", field="every_secs")
    if isinstance(raw, float) and not math.isfinite(raw):
        raise ScheduleError("must be a finite number of seconds", field="every_secs")
    if raw < MIN_EVERY_SECS:
        raise ScheduleError(
            f"must be at least {MIN_EVERY_SECS} second (got {raw!r}); every_secs is in seconds",
            field="every_secs",
        )
    if raw > MAX_EVERY_SECS:
        raise ScheduleError(
            f"must be less than or equal to {MAX_EVERY_SECS} (366 days)", field="every_secs"
        )
    return timedelta(seconds=raw)


def _at_from(raw: object) -> datetime:
    if not isinstance(raw, str):
        raise ScheduleError(
            f"must be an RFC3339 timestamp string, got a {type(raw).__name__}", field="at"
        )
    at = parse_rfc3339(raw)
    if not AT_YEARS[0] <= at.year <= AT_YEARS[1]:
        raise ScheduleError(
            f"must be between the years {AT_YEARS[0]} and {AT_YEARS[1]}", field="at"
        )
    return at


def _cron_from(expr: object, tz: object, now: datetime | None) -> CronSchedule:
    if not isinstance(expr, str):
        raise ScheduleError(f"invalid cron expression {expr!r}: expected a string", field="cron")
    try:
        zone_of(tz)
    except CronError as exc:
        raise ScheduleError(str(exc), field="tz") from None
    try:
        schedule = CronSchedule(expr, str(tz))
    except ScheduleError as exc:
        raise ScheduleError(exc.message, field="cron") from None
    if now is not None and next_run_at(schedule, after=now) is None:
        raise ScheduleError(f"cron expression '{expr}' never fires", field="cron")
    return schedule
