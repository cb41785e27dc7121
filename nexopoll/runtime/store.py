"""The tick's statements against ``poll_state``, in plain SQL.

The tick is the hot path (hundreds per second per worker), and compiling ORM
queries cost more CPU than running them, so the statements a tick issues
are written out here; every other access goes through the ORM. They are plain
SQL that SQLite and PostgreSQL both accept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.utils.dateparse import parse_datetime

from nexopoll.core.errors import ErrorClass

from ..models import Delivery
from .redbeat_sync import pause_changed

STATE_COLUMNS = (
    "epoch",
    "definition_hash",
    "cursor",
    "paused",
    "consecutive_errors",
    "breaker_open_until",
    "breaker_trips",
    "breaker_trial_at",
    "running_since",
    "crash_count",
    "last_failure_alert_at",
    "alert_active",
    "last_latency_ms",
)
_DATETIMES = {"breaker_open_until", "breaker_trial_at", "running_since", "last_failure_alert_at"}
_SELECT = f"SELECT {', '.join(STATE_COLUMNS)} FROM poll_state WHERE job_id = %s"


class Fenced(Exception):
    """The state row's epoch moved on: a newer tick owns the job; this one must not commit."""


def _dt_in(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        dt = value
    else:
        dt = parse_datetime(str(value))
    if dt is not None and dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt


def _param(value: Any) -> Any:
    if isinstance(value, datetime):
        return connection.ops.adapt_datetimefield_value(value)
    return value


def load_state(job_id: str) -> dict[str, Any] | None:
    """The state row a tick starts from, or None for a job without state."""
    with connection.cursor() as cur:
        cur.execute(_SELECT, [job_id])
        row = cur.fetchone()
    return None if row is None else _state(row)


def load_states(job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The state rows of ``job_ids`` in one query (a batch of ticks), by job id; jobs
    without state are left out."""
    if not job_ids:
        return {}
    marks = ", ".join(["%s"] * len(job_ids))
    sql = f"SELECT job_id, {', '.join(STATE_COLUMNS)} FROM poll_state WHERE job_id IN ({marks})"
    with connection.cursor() as cur:
        cur.execute(sql, list(job_ids))
        rows = cur.fetchall()
    return {row[0]: _state(row[1:]) for row in rows}


def landed(writes: list[TickWrite]) -> set[str]:
    """The jobs whose ``write`` is in the DB: a commit whose reply was lost may have
    landed. A write moved its row's epoch to ``epoch + 1`` and set ``last_run_at`` to its
    tick's start; no other write sets both to the same pair."""
    if not writes:
        return set()
    marks = ", ".join(["%s"] * len(writes))
    sql = f"SELECT job_id, epoch, last_run_at FROM poll_state WHERE job_id IN ({marks})"
    with connection.cursor() as cur:
        cur.execute(sql, [w.job_id for w in writes])
        rows = {job_id: (epoch, _dt_in(at)) for job_id, epoch, at in cur.fetchall()}
    return {
        w.job_id
        for w in writes
        if w.job_id in rows
        and rows[w.job_id][0] == w.epoch + 1
        and rows[w.job_id][1] == w.fields.get("last_run_at", rows[w.job_id][1])
    }


def _state(row: tuple) -> dict[str, Any]:
    state = dict(zip(STATE_COLUMNS, row, strict=True))
    for name in _DATETIMES:
        state[name] = _dt_in(state[name])
    state["paused"] = bool(state["paused"])
    state["alert_active"] = bool(state["alert_active"])
    if state["cursor"] is not None:
        state["cursor"] = bytes(state["cursor"])
    return state


def take_epoch(job_id: str, seen_epoch: int, fields: dict[str, Any]) -> bool:
    """``epoch = seen_epoch + 1`` (plus ``fields``) if nobody moved it since we read it.

    Only ticks that must publish something before they poll take the epoch first (a
    half-open breaker trial, a manual run): a scheduled tick's one write is its commit.
    """
    return _update(job_id, seen_epoch, {"epoch": seen_epoch + 1, **fields}, {}) == 1


def clear_running(job_id: str, epoch: int) -> bool:
    """A tick that took ``epoch`` (``take_epoch``) ended without a commit: no longer
    running, while the row is still at ``epoch`` (the epoch moves on past it)."""
    return _update(job_id, epoch, {"running_since": None, "epoch": epoch + 1}, {}) == 1


@dataclass
class TickWrite:
    """One tick's commit: its fields and counters on the state row, fenced on ``expect``
    (the version the tick read), and its outbox rows. The epoch moves to ``epoch + 1``."""

    job_id: str
    epoch: int
    fields: dict[str, Any]
    increments: dict[str, int]
    deliveries: list[Delivery] = field(default_factory=list)
    expect: int | None = None

    def apply(self) -> bool:
        """Run the fenced UPDATE (in the caller's transaction); False: fenced, nothing written."""
        expect = self.epoch if self.expect is None else self.expect
        fields = {**self.fields, "epoch": self.epoch + 1}
        return _update(self.job_id, expect, fields, self.increments) == 1


def commit_tick(write: TickWrite) -> None:
    """Store the tick's state and its outbox rows together, only while the row's epoch is
    still ``write.expect`` (the version the tick read; default ``write.epoch``, the one it
    took).

    The commit moves the epoch on to ``epoch + 1`` (always past ``expect``), so a tick
    that read the row before this commit cannot commit after it.

    Raises:
        Fenced: the row changed since the tick read it; nothing was written.
    """
    if not write.deliveries:  # one statement is atomic on its own
        if not write.apply():
            raise Fenced(write.job_id)
        return
    with transaction.atomic():
        if not write.apply():
            raise Fenced(write.job_id)
        Delivery.objects.bulk_create(write.deliveries)


def commit_ticks(writes: list[TickWrite]) -> set[str]:
    """Commit a batch of ticks in one transaction; return the job ids that were fenced.

    Each tick stays fenced on its own version: a fenced one writes neither its state nor
    its outbox rows, and the others commit. A DB error rolls the whole batch back (the
    caller then commits each tick alone, so one bad tick cannot hold back the rest).
    """
    fenced: set[str] = set()
    rows: list[Delivery] = []
    with transaction.atomic():
        for write in writes:
            if write.apply():
                rows += write.deliveries
            else:
                fenced.add(write.job_id)
        if rows:
            Delivery.objects.bulk_create(rows)
    return fenced


def _update(job_id: str, epoch: int, fields: dict[str, Any], increments: dict[str, int]) -> int:
    """A tick's write: ``fields`` and ``increments`` while the row is still at ``epoch``;
    the write moves the epoch past it (``fields["epoch"]``), like every state write."""
    if not fields.get("epoch", epoch) > epoch:
        raise ValueError(f"a write to the state of job {job_id!r} must move its epoch")
    sets = [f"{name} = %s" for name in fields] + [f"{name} = {name} + %s" for name in increments]
    params = [_param(v) for v in fields.values()] + list(increments.values()) + [job_id, epoch]
    sql = f"UPDATE poll_state SET {', '.join(sets)} WHERE job_id = %s AND epoch = %s"
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.rowcount


def changed(row: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` less the state columns that already hold that value (an unchanged poll
    rewrites no cursor, no health): the one UPDATE carries only what moved."""
    return {k: v for k, v in fields.items() if k not in row or row[k] != v}


def record_failure(
    job_id: str, epoch: int, fields: dict[str, Any], expect: int | None = None
) -> bool:
    """Write ``fields`` (an error) while the row's epoch is still ``expect`` (default
    ``epoch``); the epoch moves to the tick's own ``epoch`` (past ``expect`` in any case)."""
    expect = epoch if expect is None else expect
    moved = {"running_since": None, "epoch": max(epoch, expect + 1), **fields}
    return _update(job_id, expect, moved, {}) == 1


# --- writes outside a tick -----------------------------------------------------
def write_state(changes: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
    """The one way anything but a tick writes job state rows: operator verbs (pause,
    resume, reset, rewind) from the CLI, admin, API and LLM tools, and a reload's
    definition rewrite and ``paused_on_boot``. Each ``(job_id, fields)`` is written with
    the row's epoch moved on, in the caller's transaction, so a tick that read the row
    before this write cannot commit after it (``Fenced``): it would write its stale
    view (an error count, an open breaker, a cursor, an old definition's deliveries)
    over the operator's.

    A write of ``paused`` also disables (or re-enables) the job's RedBeat entry once
    the caller's transaction commits (``redbeat_sync.pause_changed``): a paused job is
    not dispatched at all.
    """
    grouped: dict[tuple[str, ...], list[list[Any]]] = {}
    pausing: list[str] = []
    for job_id, fields in changes:
        if "paused" in fields:
            pausing.append(job_id)
        if unknown := set(fields) - _WRITABLE:
            raise ValueError(f"not a writable state column of job {job_id!r}: {sorted(unknown)}")
        grouped.setdefault(tuple(fields), []).append(
            [*(_param(v) for v in fields.values()), job_id]
        )
    with connection.cursor() as cur:
        for names, rows in grouped.items():
            sets = "".join(f"{name} = %s, " for name in names)
            sql = f"UPDATE poll_state SET {sets}epoch = epoch + 1 WHERE job_id = %s"
            for start in range(0, len(rows), _WRITE_ROWS):
                cur.executemany(sql, rows[start : start + _WRITE_ROWS])
    if pausing:
        transaction.on_commit(lambda: pause_changed(pausing))


_WRITE_ROWS = 5000  # rows per executemany
_WRITABLE = {
    *STATE_COLUMNS,
    "paused_reason",
    "paused_by",
    "last_error",
    "updated_at",
    "next_run_at",
    "notice",
    "notice_at",
} - {"epoch"}


# --- DB errors ----------------------------------------------------------------
def db_error_class(exc: BaseException) -> ErrorClass | None:
    """How a tick treats a DB error; None for anything that is not one.

    Lost connections, lock and statement timeouts, SQLite's "database is locked",
    an aborted transaction: TRANSIENT (retried). A value or a constraint the DB
    refuses (``DataError``, ``IntegrityError``): PERMANENT (the same commit would
    fail every time). Other DB errors (a schema that is mid-migration, say) heal
    by themselves and are TRANSIENT too.
    """
    if isinstance(exc, DataError | IntegrityError):
        return ErrorClass.PERMANENT
    if isinstance(exc, OperationalError | InterfaceError | DatabaseError):
        return ErrorClass.TRANSIENT
    return None


# SQLSTATE classes (PostgreSQL's, which SQLite's errors do not carry) -> what operators read
_SQLSTATE_CLASSES = {
    "08": "the connection to the database was lost",
    "22": "a value the database cannot store",
    "23": "a value breaks a database constraint",
    "25": "the transaction was aborted",
    "40": "the transaction was rolled back (serialization failure or deadlock)",
    "53": "the database is out of resources",
    "57": "the statement was cancelled (timeout or shutdown)",
}
_SQLSTATES = {  # codes an operator acts on differently from the rest of their class
    "55P03": "lock timeout: another transaction holds the lock",
    "57014": "the statement was cancelled (statement timeout)",
}


def describe_db_error(exc: BaseException) -> str:
    """A short message for a DB error, free of SQL text and of the values in it.

    The driver's own text can quote the statement, its parameters or the refused value
    (an item's text): none of it is kept, only the error's class and SQLSTATE.

    >>> describe_db_error(DataError("invalid input syntax ... INSERT INTO ..."))
    'DataError: a value the database cannot store'
    """
    cause = exc.__cause__ or exc
    state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if isinstance(state, str) and (state in _SQLSTATES or state[:2] in _SQLSTATE_CLASSES):
        what = _SQLSTATES.get(state) or _SQLSTATE_CLASSES[state[:2]]
        return f"{type(exc).__name__}: {what} (SQLSTATE {state})"
    if isinstance(exc, DataError):
        what = "a value the database cannot store"
    elif isinstance(exc, IntegrityError):
        what = "a value breaks a database constraint"
    elif "locked" in str(exc).lower():  # SQLite's "database is locked"
        what = "the database is locked"
    elif isinstance(exc, OperationalError | InterfaceError):
        what = "the database is unreachable or timed out"
    else:
        what = "the database failed the statement"
    return f"{type(exc).__name__}: {what}"


def drop_if_unusable() -> None:
    """Close this thread's DB connection if it broke, so the next query reconnects.

    Inside an atomic block (a caller's transaction) the connection is left alone.
    """
    if connection.connection is None or connection.in_atomic_block:
        return
    try:
        usable = connection.is_usable()
    except Exception:
        usable = False
    if not usable:
        try:
            connection.close()  # forgets the connection even when closing it fails
        except Exception:
            pass
