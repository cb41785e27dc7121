"""Cron expressions: the syntax check, and the next firing in a zone with our DST rules.

Pure: instants come in as parameters. A wall time inside a spring-forward gap fires
at the jump; a wall time that occurs twice (fall-back) fires at its first occurrence.
:mod:`nexopoll.core.schedule` wraps this behind ``CronSchedule``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: How far ahead a cron expression is searched for its next firing. Long on purpose: a
#: valid expression can be silent for years ("0 0 0 29 2 *" skips 2100, and the fifth
#: Friday of February comes round about once in 28 years).
CRON_HORIZON_YEARS = 50

_CRON_FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
_MAX_CANDIDATES = 1000
_REFERENCE = datetime(2000, 1, 1, tzinfo=UTC)
_ONE_SECOND = timedelta(seconds=1)
# croniter's "R" draws from the global RNG and "H" needs a hash id: neither is reproducible.
_RANDOM_OR_HASHED = re.compile(r"(?:^|,)[hr](?:$|[(/,])", re.IGNORECASE | re.ASCII)
_CRONITER_PREFIX = re.compile(r"^\[[^\]]*\] is not acceptable[,.]?\s*")


class CronError(ValueError):
    """A cron expression or zone is invalid; the message is meant for the operator."""


def next_cron(expr: str, tz: str, after: datetime) -> datetime | None:
    # croniter walks naive local wall times (plain calendar arithmetic); the mapping of each
    # wall time to an instant is ours, because croniter's own DST handling is not the
    # once-per-wall-time rule we promise.
    zone = zone_of(tz)
    walls = croniter(
        expr,
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


def check_cron_syntax(expr: object) -> None:
    if not isinstance(expr, str):
        raise CronError(f"invalid cron expression {expr!r}: expected a string")
    fields = expr.split()
    if len(fields) != len(_CRON_FIELDS):
        raise CronError(
            f"invalid cron expression '{expr}': expected 6 fields "
            f"(sec min hour dom mon dow), got {len(fields)}"
        )
    for name, field in zip(_CRON_FIELDS, fields, strict=True):
        if _RANDOM_OR_HASHED.search(field):
            raise CronError(
                f"invalid cron expression '{expr}': {name} field '{field}' uses H/R, "
                "which is not deterministic"
            )
    try:
        _croniter_accepts(expr)
    except CroniterError as exc:
        reason = _bad_field(fields, exc)
        raise CronError(f"invalid cron expression '{expr}': {reason}") from exc


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
    croniter(expr, _REFERENCE.replace(tzinfo=None), second_at_beginning=True)


def zone_of(key: object) -> ZoneInfo:
    if not isinstance(key, str) or not key:
        raise CronError(f"unknown time zone {key!r}")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(f"unknown time zone '{key}'") from None


def _offset(aware: datetime) -> timedelta:
    offset = aware.utcoffset()
    if offset is None:
        raise ValueError(f"expected an aware datetime, got {aware!r}")
    return offset
