"""A job's tick history (kept in Redis) and rewinding its cursor to a tick's start."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import nexopoll.services.views as views
from nexopoll.runtime import history, hostwait
from nexopoll.runtime.redis import get_redis

from .errors import RewindRefused
from .jobs import require_job, write_state

log = logging.getLogger("nexopoll.services")


def tick_history(job_id: str, limit: int = history.HISTORY_LEN) -> list[history.TickEntry]:
    """The newest ``limit`` ticks, newest first, masked (Redis down: none)."""
    job = require_job(job_id)
    try:
        return views.redact(history.entries(get_redis(), job_id, limit), [job])
    except Exception as exc:  # Redis down: the page still renders, without history
        log.warning("history.unavailable job=%s: %s", job_id, exc)
        return []


def host_wait(job_id: str) -> dict | None:
    """The job's latest wait for a turn on a capped host (``runtime/hostwait.py``), or None."""
    try:
        return hostwait.last_wait(get_redis(), job_id)
    except Exception:  # Redis down: no note
        return None


@dataclass(frozen=True)
class Rewound:
    job_id: str
    tick: int
    tick_at: datetime
    cursor: bytes | None


def rewind_job(job_id: str, *, tick: int, actor: str = "operator") -> Rewound:
    """Restore the cursor tick ``tick`` started from, so the window after it is replayed.

    Fenced like a reset: the epoch moves on, so a tick running right now cannot
    commit over the restored cursor. Errors and breaker state are left alone.

    Raises:
        UnknownJob: no such job.
        RewindRefused: the tick is not in the kept history, or did not run (a
            ``LookupError``, as before the error family).
    """
    require_job(job_id)
    try:
        entry, cursor = history.start_cursor(get_redis(), job_id, tick)
    except LookupError as exc:
        raise RewindRefused(str(exc)) from None
    if entry.status == "skipped":
        raise RewindRefused(
            f"tick {tick} of {job_id!r} was skipped ({entry.reason}): nothing to rewind to"
        )
    write_state([(job_id, {"cursor": cursor})])
    log.warning(
        "job.rewind job=%s to_tick=%s tick_at=%s by=%s", job_id, tick, entry.at.isoformat(), actor
    )
    return Rewound(job_id, tick, entry.at, cursor)
