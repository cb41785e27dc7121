"""How job state reads in the admin: schedule in words, times in the job's zone,
breaker labels, the tick strip. Presentation only; no queries here."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

STATUS_CLASS = {
    "ok": "np-ok",
    "transient": "np-transient",
    "permanent": "np-permanent",
    "skipped": "np-skipped",
    "fenced": "np-fenced",
}


def schedule_words(schedule: dict) -> str:
    if "every_secs" in schedule:
        return "every " + duration_words(float(schedule["every_secs"]))
    if "cron" in schedule:
        return f"cron {schedule['cron']} ({schedule.get('tz', 'UTC')})"
    if "at" in schedule:
        return f"once at {schedule['at']}"
    return "?"


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


def when(value: datetime | None, zone: ZoneInfo) -> SafeString | str:
    """A time in the job's zone, with UTC on hover."""
    if value is None:
        return "-"
    local = value.astimezone(zone)
    return format_html(
        '<span title="{} UTC">{} {}</span>',
        value.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%d %H:%M:%S"),
        local.strftime("%Y-%m-%d %H:%M:%S"),
        local.tzname() or "",
    )


def breaker_label(open_until: datetime | None, now: datetime) -> str:
    if open_until is None:
        return "closed"
    return "open" if now < open_until else "half-open"


def truncate(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _repeats(e) -> str:  # type: ignore[no-untyped-def]
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
