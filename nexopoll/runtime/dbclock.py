"""The shared clock outbox due times are kept in, as this process's offset to it.

Workers' clocks differ; a row stamped "due now" by a worker 300 s fast would wait
300 s for every other worker and the sweeper. So ``next_attempt_at`` (and an outbox
row's ``created_at``) are written and compared in one clock for every process: the
DB server's (PostgreSQL ``clock_timestamp()``). SQLite runs inside each process, on
that process's clock, so there the shared clock is Redis's (``TIME``) instead.

Reading it for every row would cost a round trip each, so each process keeps its
offset to that clock (:func:`offset`), measured again every :data:`REFRESH_SECS`, or
at once when the local clock jumps (an NTP step). Offsets under
:data:`NEGLIGIBLE` count as 0 (the measure's own noise; the sweeper's grace is 5 s).
When the clock cannot be read, the last offset stays (0 before the first) for
:data:`RETRY_SECS`.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from django.db import DatabaseError, connection
from django.utils import timezone
from redis.exceptions import RedisError

from .redis import get_redis

log = logging.getLogger("nexopoll.delivery")

REFRESH_SECS = 60.0
RETRY_SECS = 5.0  # after the clock could not be read
NEGLIGIBLE = timedelta(seconds=1)
_JUMP_SECS = 0.5  # the wall clock moved this far against the monotonic one: measure again

_lock = threading.Lock()
_offset: timedelta | None = None
_measured_at = 0.0  # time.monotonic()
_wall_minus_mono = 0.0


def _reference() -> float:
    """The shared clock, in Unix seconds."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
            return float(cur.fetchone()[0])

    sec, usec = get_redis().time()
    return sec + usec / 1e6


def _measure() -> timedelta | None:
    try:
        before = time.time()
        ref = _reference()
        after = time.time()
    except (DatabaseError, RedisError, OSError) as exc:
        log.warning("dbclock.unavailable: %s: keeping the last offset", type(exc).__name__)
        return None
    skew = timedelta(seconds=ref - (before + after) / 2)
    return timedelta(0) if abs(skew) < NEGLIGIBLE else skew


def offset() -> timedelta:
    """The shared clock minus this process's clock (cached; see the module's doc)."""
    global _offset, _measured_at, _wall_minus_mono
    mono = time.monotonic()
    wall_minus_mono = time.time() - mono
    with _lock:
        fresh = (
            _offset is not None
            and mono - _measured_at < REFRESH_SECS
            and abs(wall_minus_mono - _wall_minus_mono) < _JUMP_SECS
        )
        if fresh:
            return _offset
    measured = _measure()
    with _lock:
        if measured is None:  # keep the last offset; try again in RETRY_SECS, not per row
            _offset = _offset or timedelta(0)
            _measured_at, _wall_minus_mono = mono - REFRESH_SECS + RETRY_SECS, wall_minus_mono
            return _offset
        if _offset is not None and measured != _offset:
            log.info("dbclock.offset secs=%.3f", measured.total_seconds())
        _offset, _measured_at, _wall_minus_mono = measured, mono, wall_minus_mono
        return measured


def to_db(local: datetime) -> datetime:
    """``local`` (a time read from this process's clock) in the shared clock."""
    return local + offset()


def now() -> datetime:
    """The shared clock's current time (this process's clock plus the offset)."""
    return to_db(timezone.now())


def forget() -> None:
    """Measure again at the next read (tests; after a clock change)."""
    global _offset
    with _lock:
        _offset = None
