"""Schedule preview: the next fire times of a job, with the DST changes that move them.

Pure: ``after`` is a parameter. A cron job runs on wall-clock time in its zone
(see :mod:`nexopoll.core.schedule`): a wall time that a spring-forward gap skips
fires at the jump, and a wall time that a fall-back repeats fires once, at its
first occurrence. The preview says so next to each fire time it affects::

    02:30 does not exist on 2027-03-28 in Europe/Paris: fires at 03:00
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from .schedule import CronSchedule, Schedule, next_slot

_ONE_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class FireTime:
    at: datetime  # UTC
    local: datetime  # in the job's zone (UTC for every/at schedules)
    tz: str
    note: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "utc": self.at.isoformat(),
            "local": self.local.isoformat(),
            "tz": self.tz,
            "note": self.note,
        }


def preview(
    schedule: Schedule, *, after: datetime, offset: timedelta, count: int = 10
) -> list[FireTime]:
    """The next ``count`` fire times after ``after`` (stagger ``offset`` included)."""
    tz = schedule.tz if isinstance(schedule, CronSchedule) else "UTC"
    zone = ZoneInfo(tz)
    out: list[FireTime] = []
    cursor = after
    for _ in range(count):
        at = next_slot(schedule, after=cursor, offset=offset)
        if at is None:
            break
        note = _dst_note(schedule, at - offset, zone) if isinstance(schedule, CronSchedule) else ""
        out.append(FireTime(at=at, local=at.astimezone(zone), tz=tz, note=note))
        cursor = at
    return out


def _dst_note(schedule: CronSchedule, fire: datetime, zone: ZoneInfo) -> str:
    """Why a DST change moves this (unstaggered) fire instant, or ``""``."""
    local = fire.astimezone(zone)
    before = (fire - _ONE_SECOND).astimezone(zone)
    if before.utcoffset() != local.utcoffset() and local.utcoffset() > before.utcoffset():
        # ``fire`` is a spring-forward jump: was it moved here from a wall time in the gap?
        start = before.replace(tzinfo=None, microsecond=0)
        wanted = croniter(schedule.expr, start, second_at_beginning=True).get_next(datetime)
        if wanted < local.replace(tzinfo=None):
            return (
                f"{_hm(wanted)} does not exist on {wanted.date()} in {schedule.tz}: "
                f"fires at {_hm(local)}"
            )
    again = local.replace(fold=1)
    if local.fold == 0 and again.utcoffset() != local.utcoffset():
        second = again.astimezone(UTC)
        return (
            f"{_hm(local)} happens twice on {local.date()} in {schedule.tz} (clocks go back): "
            f"fires once, at the first ({local.strftime('%H:%M')} UTC{_utc_offset(local)}), "
            f"not again at {second.strftime('%H:%M')} UTC"
        )
    return ""


def _hm(t: datetime) -> str:
    return t.strftime("%H:%M:%S") if t.second else t.strftime("%H:%M")


def _utc_offset(t: datetime) -> str:
    off = t.utcoffset() or timedelta(0)
    sign = "+" if off >= timedelta(0) else "-"
    minutes = abs(int(off.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
