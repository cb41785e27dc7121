"""When a job runs: the three schedule kinds, their next firing, and the per-job stagger.

Everything here is pure: instants come in as parameters (aware datetimes, answered in
UTC), nothing reads the clock and nothing draws random numbers, so a slot computed in a
test is the slot the runtime computes in production.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: ``nominal_interval`` of a one-shot ``at`` schedule (it has no period); the lease TTL is
#: derived from it, so it only has to be a sane size for one tick.
AT_NOMINAL_INTERVAL = timedelta(seconds=60)

#: How far ahead a cron expression is searched for its next firing. Long on purpose: a
#: valid expression can be silent for years ("0 0 0 29 2 *" skips 2100, and the fifth
#: Friday of February comes round about once in 28 years).
CRON_HORIZON_YEARS = 50

_CRON_FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
_CRON_SAMPLE = 6
_MAX_CANDIDATES = 1000
_STAGGER_REFERENCE = datetime(2000, 1, 1, tzinfo=UTC)
_ONE_SECOND = timedelta(seconds=1)
_ONE_MS = timedelta(milliseconds=1)
# croniter's "R" draws from the global RNG and "H" needs a hash id: neither is reproducible.
_RANDOM_OR_HASHED = re.compile(r"(?:^|,)[hr](?:$|[(/,])", re.IGNORECASE)
_CRONITER_PREFIX = re.compile(r"^\[[^\]]*\] is not acceptable[,.]?\s*")


class ScheduleError(ValueError):
    """A schedule is invalid; the message is meant for the operator who wrote it."""


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
        _check_cron_syntax(self.expr)
        _zone(self.tz)


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
    schedule = CronSchedule(expr, tz)
    if next_run_at(schedule, after=now) is None:
        raise ScheduleError(f"cron expression '{expr}' never fires")
    return schedule


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
        return _next_cron(schedule, after)
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


def schedule_from_dict(d: dict[str, Any]) -> Schedule:
    """Build a schedule from its dict form: ``{"every_secs": 60}``, ``{"cron": …, "tz": …}``
    (``tz`` optional, default UTC) or ``{"at": "2026-04-26T15:00:00Z"}``.

    ``schedule_from_dict(schedule_to_dict(s)) == s``. Cron syntax and zone are checked,
    but not whether the expression ever fires (that needs ``now``: use :func:`parse_cron`
    for operator input). Other keys are rejected: take ``stagger_jitter_ms`` out first.

    Raises:
        ScheduleError: the mapping is not one of the three forms.

    Examples:
        >>> schedule_from_dict({"every_secs": 60})
        EverySchedule(every=datetime.timedelta(seconds=60))
        >>> schedule_from_dict({"at": "2026-04-26T15:00:00Z"})
        AtSchedule(at=datetime.datetime(2026, 4, 26, 15, 0, tzinfo=datetime.timezone.utc))
    """
    if not isinstance(d, dict):
        raise ScheduleError(f"schedule must be a mapping, got {type(d).__name__}")
    kinds = [k for k in ("every_secs", "cron", "at") if k in d]
    if len(kinds) != 1:
        raise ScheduleError(
            "schedule must have exactly one of 'every_secs', 'cron', 'at', "
            f"got {sorted(map(str, d))}"
        )
    kind = kinds[0]
    allowed = {"cron", "tz"} if kind == "cron" else {kind}
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise ScheduleError(f"unknown schedule key(s) {unknown} with '{kind}'")
    if kind == "every_secs":
        return EverySchedule(_every_from(d["every_secs"]))
    if kind == "cron":
        return CronSchedule(d["cron"], d.get("tz", "UTC"))
    return AtSchedule(_at_from(d["at"]))


def _next_cron(schedule: CronSchedule, after: datetime) -> datetime | None:
    # croniter walks naive local wall times (plain calendar arithmetic); the mapping of each
    # wall time to an instant is ours, because croniter's own DST handling is not the
    # once-per-wall-time rule we promise.
    zone = _zone(schedule.tz)
    walls = croniter(
        schedule.expr,
        _start_wall(after, zone),
        second_at_beginning=True,
        max_years_between_matches=CRON_HORIZON_YEARS,
    )
    for _ in range(_MAX_CANDIDATES):
        try:
            wall = walls.get_next(datetime)
        except CroniterBadDateError:
            return None
        instant = _wall_to_instant(wall, zone)
        if instant > after:
            return instant
    return None


def _start_wall(after: datetime, zone: ZoneInfo) -> datetime:
    """The naive wall time to search from: every wall time with a firing > after is later."""
    local = after.astimezone(zone)
    if local.fold:
        # ``after`` is in the repeated hour's second pass: the wall times still ahead in it
        # already fired in the first pass, so resume where the repetition ends.
        first_offset = _offset(local.replace(fold=0))
        jump = _transition(after - (first_offset - _offset(local)), after, zone)
        return jump.replace(tzinfo=None) + first_offset - _ONE_SECOND
    return local.replace(tzinfo=None, microsecond=0, fold=0)


def _wall_to_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """Map a naive local wall time to the instant it fires (first occurrence, or the jump)."""
    first = wall.replace(tzinfo=zone, fold=0)
    instant = first.astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None, fold=0) == wall:
        return instant
    # In a gap: fold=0 and fold=1 read the wall time with the offsets either side of the
    # jump, which brackets the jump instant.
    offsets = (_offset(first), _offset(wall.replace(tzinfo=zone, fold=1)))
    before = (wall - max(offsets)).replace(tzinfo=UTC)
    after = (wall - min(offsets)).replace(tzinfo=UTC)
    return _transition(before, after, zone)


def _transition(lo: datetime, hi: datetime, zone: ZoneInfo) -> datetime:
    """First whole-second instant in ``(lo, hi]`` whose UTC offset differs from ``lo``'s.

    tzdata transitions fall on whole seconds, so a binary search over seconds is exact.
    """
    low = (lo - EPOCH) // _ONE_SECOND
    high = -((EPOCH - hi) // _ONE_SECOND)
    start_offset = _offset((EPOCH + low * _ONE_SECOND).astimezone(zone))
    while high - low > 1:
        mid = (low + high) // 2
        if (EPOCH + mid * _ONE_SECOND).astimezone(zone).utcoffset() == start_offset:
            low = mid
        else:
            high = mid
    return EPOCH + high * _ONE_SECOND


def _check_cron_syntax(expr: object) -> None:
    if not isinstance(expr, str):
        raise ScheduleError(f"invalid cron expression {expr!r}: expected a string")
    fields = expr.split()
    if len(fields) != len(_CRON_FIELDS):
        raise ScheduleError(
            f"invalid cron expression '{expr}': expected 6 fields "
            f"(sec min hour dom mon dow), got {len(fields)}"
        )
    for name, field in zip(_CRON_FIELDS, fields, strict=True):
        if _RANDOM_OR_HASHED.search(field):
            raise ScheduleError(
                f"invalid cron expression '{expr}': {name} field '{field}' uses H/R, "
                "which is not deterministic"
            )
    try:
        _croniter_accepts(expr)
    except CroniterError as exc:
        reason = _bad_field(fields, exc)
        raise ScheduleError(f"invalid cron expression '{expr}': {reason}") from exc


def _bad_field(fields: list[str], whole: CroniterError) -> str:
    """Name the field croniter rejects: its own messages reorder the fields."""
    for index, (name, field) in enumerate(zip(_CRON_FIELDS, fields, strict=True)):
        probe = ["*"] * len(fields)
        probe[index] = field
        try:
            _croniter_accepts(" ".join(probe))
        except CroniterError as exc:
            reason = _CRONITER_PREFIX.sub("", str(exc))
            detail = f" ({reason})" if reason and "field" not in reason else ""
            return f"bad {name} field '{field}'{detail}"
    return str(whole)


def _croniter_accepts(expr: str) -> None:
    croniter(expr, _STAGGER_REFERENCE.replace(tzinfo=None), second_at_beginning=True)


def _zone(key: object) -> ZoneInfo:
    if not isinstance(key, str) or not key:
        raise ScheduleError(f"unknown time zone {key!r}")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown time zone '{key}'") from None


def _as_utc(value: datetime, name: str) -> datetime:
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


def _offset(aware: datetime) -> timedelta:
    offset = aware.utcoffset()
    if offset is None:
        raise ValueError(f"expected an aware datetime, got {aware!r}")
    return offset


def _rfc3339(instant: datetime) -> str:
    text = instant.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z"


def _every_from(raw: object) -> timedelta:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ScheduleError(f"every_secs must be a number, got {raw!r}")
    if (isinstance(raw, float) and not math.isfinite(raw)) or raw <= 0:
        raise ScheduleError(f"every_secs must be a positive number, got {raw!r}")
    try:
        return timedelta(seconds=raw)
    except OverflowError:
        raise ScheduleError(f"every_secs is too large: {raw!r}") from None


def _at_from(raw: object) -> datetime:
    # YAML turns an unquoted timestamp into a datetime already.
    value = raw if isinstance(raw, datetime) else None
    if isinstance(raw, str):
        try:
            value = datetime.fromisoformat(raw)
        except ValueError:
            pass
    if value is None:
        raise ScheduleError(f"at must be an RFC3339 instant, got {raw!r}")
    if value.utcoffset() is None:
        raise ScheduleError(f"at must carry a UTC offset (e.g. '…Z'), got {raw!r}")
    return value
