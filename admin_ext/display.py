"""How job state reads in the admin: schedule in words, times in the job's zone,
breaker labels, the tick strip. Presentation only; no queries here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID
from zoneinfo import ZoneInfo

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

STATUS_CLASS = {
    "ok": "np-ok",
    "transient": "np-transient",
    "permanent": "np-permanent",
    "skipped": "np-skipped",
    "fenced": "np-fenced",
}


def job_url(job_id: str, view: str = "change") -> str:
    """A job's admin URL. Every admin link to an object goes through ``quote`` (``_`` reads
    ``_5F``) and every view taking an ``object_id`` through ``unquote``, as Django's own."""
    return reverse(f"admin:admin_ext_job_{view}", args=[quote(job_id)])


def schedule_words(schedule: dict) -> str:
    if "every_secs" in schedule:
        return "every " + duration_words(float(schedule["every_secs"]))
    if "cron" in schedule:
        return f"cron {schedule['cron']} ({schedule.get('tz', 'UTC')})"
    if "at" in schedule:
        return f"once at {schedule['at']}"
    return "?"


def schedule_cell(schedule: dict) -> SafeString:
    """The jobs list's schedule: short, on one line; the words with the zone on hover."""
    short = f"cron {schedule['cron']}" if "cron" in schedule else schedule_words(schedule)
    words = schedule_words(schedule)
    return format_html('<span class="np-sched" title="{}">{}</span>', words, short)


def duration_words(secs: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if secs >= size and secs % size == 0:
            return f"{int(secs // size)} {unit}"
    return f"{secs:g} s"


def job_zone(schedule: dict) -> ZoneInfo:
    try:
        return ZoneInfo(schedule.get("tz") or "UTC")
    except Exception:
        return ZoneInfo("UTC")


UTC = ZoneInfo("UTC")
SHORT_ID = 8  # hex digits of a delivery id shown in lists; the full id is on hover and its page


def stamp(value: datetime, zone: ZoneInfo = UTC, seconds: bool = True) -> str:
    """The one time format of the admin, as the CLI prints times: ISO date and time plus
    the zone's name (``2026-11-26 14:18:03 UTC``, ``2026-11-26 15:18 CET``)."""
    local = value.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M{':%S' if seconds else ''}} {local.tzname() or zone.key}"


def when(value: datetime | None, zone: ZoneInfo = UTC, seconds: bool = True) -> SafeString | str:
    """A time in ``zone`` (the job's, else UTC), with UTC to the second on hover; one line."""
    if value is None:
        return "-"
    return format_html(
        '<span class="np-time" title="{}">{}</span>', stamp(value), stamp(value, zone, seconds)
    )


def short_id(value: UUID | str) -> str:
    """A delivery id as lists show it: its first 8 hex digits (like a short git hash)."""
    return str(value).replace("-", "")[:SHORT_ID]


def id_list(ids: Sequence[str], shown: int = 3) -> str:
    """Job ids for a message, as written: ``a, b, c and 47 more`` past ``shown``."""
    head = ", ".join(ids[:shown])
    return head if len(ids) <= shown else f"{head} and {len(ids) - shown} more"


def paused_label(paused: bool, reason: str = "") -> SafeString:
    """The jobs list's paused cell: red only for a paused job, green for a running one."""
    if paused:
        return format_html('<span class="np-state np-paused" title="{}">‖ paused</span>', reason)
    return mark_safe('<span class="np-state np-running" title="not paused">✓ running</span>')


def truncate(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _repeats(e) -> str:
    """A run of skipped ticks kept as one entry: how many, since when."""
    if getattr(e, "repeats", 1) <= 1 or e.since is None:
        return ""
    return f" (x{e.repeats} since {e.since:%Y-%m-%d %H:%M:%S} UTC)"


def tick_strip(entries: list) -> SafeString:
    """One coloured cell per tick, oldest on the left; hover for the details."""
    cells = format_html_join(
        "",
        '<span class="np-cell {}" title="#{} {} {} {} ms, {} seen, {} sent{}"></span>',
        (
            (
                STATUS_CLASS.get(e.status, "np-skipped"),
                e.n,
                e.at.strftime("%Y-%m-%d %H:%M:%S UTC"),
                e.status,
                e.ms if e.ms is not None else "-",
                e.seen,
                e.dispatched,
                (f" — {truncate(e.error or e.reason, 120)}" if (e.error or e.reason) else "")
                + _repeats(e),
            )
            for e in reversed(entries)
        ),
    )
    return format_html('<div class="np-strip" aria-label="recent ticks">{}</div>', cells)


def host_wait_note(wait: dict | None, zone: ZoneInfo = UTC) -> str:
    """The job page's note when its ticks waited for a turn on a capped host."""
    if not wait:
        return ""
    at = stamp(datetime.fromtimestamp(wait["at"], UTC), zone)
    cap = f"in-flight cap {wait['cap']}" if wait["cap"] else "per-second cap"
    return (
        f"ticks waited for a turn on host {wait['host']} ({cap}): last {wait['ms']} ms at {at}."
        " One host serves at most cap ÷ latency requests per second (16 / 0.2 s = 80/s);"
        " raise the job's host_limits if the host allows more."
    )
