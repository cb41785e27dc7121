"""A bounded per-job tick history, kept in Redis beside the lease.

The tick's hot path must not gain a DB write, so each tick appends one small
JSON entry to a capped Redis list in the same pipeline that releases its lease
(one round trip, as before). Each entry keeps the cursor the tick started from,
which is what ``pollers rewind`` restores. Cursors are stored once per distinct
value (a hash keyed by their digest), because most ticks start from the cursor
the previous one started from.

Consecutive skipped ticks for the same reason (a paused job whose tick was already
queued, an open breaker) share one entry, which counts them (``repeats``, since
``since``): a long pause never evicts the real ticks ``rewind`` goes back to.

Redis is not the source of truth: a flushed Redis loses the history, never a
cursor, a state row or a delivery.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from .keys import ns
from .lease import Lease, queue_script, release_in, released, rerun_if_unloaded
from .politeness import queue_releases

log = logging.getLogger("nexopoll.tick")

HISTORY_LEN = 100
_PREFIX = ns("history:")  # "nexopoll:history:" (NEXOPOLL_REDIS_PREFIX)
_ERROR_CHARS = 300


def list_key(job_id: str) -> str:
    return f"{_PREFIX}{job_id}"


def cursors_key(job_id: str) -> str:
    return f"{_PREFIX}{job_id}:cursors"


@dataclass(frozen=True)
class TickEntry:
    """One tick as the history shows it (``n`` counts ticks, newest highest)."""

    n: int
    at: datetime
    status: str
    ms: int | None
    seen: int
    dispatched: int
    error: str
    epoch: int | None
    cursor_digest: str | None
    reason: str = ""
    manual: bool = False
    repeats: int = 1  # consecutive skipped ticks this entry stands for (same reason)
    since: datetime | None = None  # the first of them (``at``: the last)

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "at": self.at.isoformat(),
            "status": self.status,
            "ms": self.ms,
            "seen": self.seen,
            "dispatched": self.dispatched,
            "error": self.error,
            "epoch": self.epoch,
            "reason": self.reason,
            "manual": self.manual,
            "has_cursor": self.cursor_digest is not None,
            "repeats": self.repeats,
            "since": (self.since or self.at).isoformat(),
        }


def digest(cursor: bytes) -> str:
    return hashlib.blake2b(cursor, digest_size=12).hexdigest()


def record(
    client: redis.Redis,
    job_id: str,
    *,
    held: Lease | None = None,
    metrics: Callable[[redis.client.Pipeline], None] | None = None,
    **entry: Any,
) -> None:
    """Append one entry (and release ``held``) in one pipelined round trip.

    ``entry`` holds ``Entry``'s fields; ``error`` must already be redacted (the runtime
    only stores masked errors). ``metrics`` queues the tick's metric increments on the
    same pipeline.
    """
    record_many(client, [Entry(job_id, held=held, metrics=metrics, **entry)])


@dataclass
class Entry:
    """One tick to append to its job's history (what ``record_many`` writes)."""

    job_id: str
    at: datetime
    status: str
    ms: int | None
    seen: int = 0
    dispatched: int = 0
    error: str = ""
    epoch: int | None = None
    start_cursor: bytes | None = None
    reason: str = ""
    manual: bool = False
    held: Lease | None = None  # released in the same round trip
    metrics: Callable[[redis.client.Pipeline], None] | None = None
    slow: Callable[[redis.client.Pipeline], None] | None = None  # the job's slow-set mark


def record_many(client: redis.Redis, entries_: list[Entry], *, pipe: Any = None) -> list:
    """Append a batch of ticks' entries, release their leases (and the host turns of a
    ``politeness.deferring`` block) and queue their metrics in one pipelined round trip
    (``pipe``: one the caller already queued commands on, whose results come first in the
    returned list)."""
    pipe = pipe if pipe is not None else client.pipeline(transaction=False)
    queue_releases(pipe)  # the host turns a scheduled tick kept for this round trip
    lens: list[tuple[str, int]] = []
    appends: list[tuple[int, list, list]] = []
    releases: list[tuple[Lease, int]] = []
    for e in entries_:
        if e.held is not None:
            releases.append((e.held, len(pipe)))
            release_in(client, pipe, e.held)
        if e.metrics is not None:
            e.metrics(pipe)
        if e.slow is not None:
            e.slow(pipe)
        _queue(client, pipe, e, appends)
        lens.append((e.job_id, len(pipe) - 1))
    results = pipe.execute(raise_on_error=False)
    for at, keys_, args in appends:  # a server that did not know the script yet
        if isinstance(results[at], redis.exceptions.NoScriptError):
            try:
                rerun_if_unloaded(client, _APPEND, results[at], keys_, args)
            except redis.exceptions.RedisError as exc:
                log.warning("history.append_failed job=%s: %s", keys_[0], exc)
    for held, at in releases:
        try:
            released(client, held, results[at])
        except redis.exceptions.RedisError as exc:  # the lease expires on its own
            log.warning("lease.release_failed job=%s: %s", held.job_id, exc)
    for job_id, at in lens:
        if isinstance(results[at], int) and results[at] > HISTORY_LEN + 20:
            _drop_orphan_cursors(client, job_id)
    return results


def _queue(client: redis.Redis, pipe: Any, e: Entry, appends: list) -> None:
    entry: dict[str, Any] = {
        "at": e.at.timestamp(),
        "status": e.status,
        "ms": e.ms,
        "seen": e.seen,
        "dispatched": e.dispatched,
        "error": e.error[:_ERROR_CHARS],
        "epoch": e.epoch,
        "reason": e.reason[:_ERROR_CHARS],
    }
    if e.manual:
        entry["manual"] = True
    if e.start_cursor is not None:
        d = entry["c"] = digest(e.start_cursor)
        pipe.hsetnx(cursors_key(e.job_id), d, base64.b64encode(e.start_cursor).decode())
    fold = e.reason if e.status == "skipped" and not e.manual and e.reason else ""
    call = (
        [list_key(e.job_id), f"{list_key(e.job_id)}:n"],
        [json.dumps(entry, separators=(",", ":")), HISTORY_LEN, fold],
    )
    appends.append((len(pipe), *call))
    queue_script(client, pipe, _APPEND, *call)
    pipe.hlen(cursors_key(e.job_id))  # last: record_many reads it


# Append an entry (KEYS[1]: the list, KEYS[2]: its tick counter; ARGV: entry, cap, fold).
# A skipped tick (ARGV[3]: its reason) whose newest entry is a skipped one for the same
# reason replaces it, counting the run (x) and keeping its start (since): it evicts nothing.
_APPEND = """
if ARGV[3] ~= '' then
  local head = redis.call('LINDEX', KEYS[1], 0)
  if head then
    local ok, old = pcall(cjson.decode, head)
    if ok and old.status == 'skipped' and old.reason == ARGV[3] and not old.manual then
      -- the start as written (a decode and encode would round it to 14 digits)
      local since = string.match(head, '"since":([-%d.eE+]+)') or
                    string.match(head, '"at":([-%d.eE+]+)')
      local n = (tonumber(old.x) or 1) + 1
      local new = string.sub(ARGV[1], 1, -2) .. ',"x":' .. n .. ',"since":' .. since .. '}'
      redis.call('LSET', KEYS[1], 0, new)
      return 0
    end
  end
end
redis.call('INCR', KEYS[2])
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
return 1
"""


def _drop_orphan_cursors(client: redis.Redis, job_id: str) -> None:
    live = {e.cursor_digest for e in entries(client, job_id)}
    stale = [d for d in client.hkeys(cursors_key(job_id)) if d not in live]
    if stale:
        client.hdel(cursors_key(job_id), *stale)


def entries(client: redis.Redis, job_id: str, limit: int = HISTORY_LEN) -> list[TickEntry]:
    """The newest ``limit`` entries, newest first, numbered so that ``n`` is stable."""
    pipe = client.pipeline(transaction=False)
    pipe.get(f"{list_key(job_id)}:n")
    pipe.lrange(list_key(job_id), 0, limit - 1)
    total, raw = pipe.execute()
    total = int(total or len(raw))
    out = []
    for i, text in enumerate(raw):
        e = json.loads(text)
        out.append(
            TickEntry(
                n=total - i,
                at=datetime.fromtimestamp(e["at"], tz=UTC),
                status=e["status"],
                ms=e.get("ms"),
                seen=e.get("seen", 0),
                dispatched=e.get("dispatched", 0),
                error=e.get("error", ""),
                epoch=e.get("epoch"),
                cursor_digest=e.get("c"),
                reason=e.get("reason", ""),
                manual=e.get("manual", False),
                repeats=int(e.get("x", 1)),
                since=datetime.fromtimestamp(e["since"], tz=UTC) if e.get("since") else None,
            )
        )
    return out


def start_cursor(client: redis.Redis, job_id: str, n: int) -> tuple[TickEntry, bytes | None]:
    """The entry numbered ``n`` and the cursor its tick started from (None: no cursor yet).

    Raises:
        LookupError: no such entry in the kept history.
    """
    for e in entries(client, job_id):
        if e.n == n:
            if e.cursor_digest is None:
                return e, None
            value = client.hget(cursors_key(job_id), e.cursor_digest)
            if value is None:
                raise LookupError(f"the cursor of tick {n} of {job_id!r} is no longer kept")
            return e, base64.b64decode(value)
    raise LookupError(f"tick {n} of {job_id!r} is not in its history (the last {HISTORY_LEN})")


def clear(client: redis.Redis, job_id: str) -> None:
    client.delete(list_key(job_id), cursors_key(job_id), f"{list_key(job_id)}:n")
