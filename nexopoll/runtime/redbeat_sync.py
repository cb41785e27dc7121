"""Mirror the DB's job definitions into RedBeat entries (one per job).

Used by beat (at start, on a timer, and when the schedule vanished) and by reload
(for the jobs it changed). A kept entry keeps its score, so a resync never moves
or replays a slot; a new or changed one gets the next slot after ``now``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, Max

from nexopoll.core.schedule import next_slot, schedule_to_dict

from ..models import PollJob, PollState
from . import keys
from .beatentry import schedule_json
from .definitions import JobDef, load_all
from .redis import get_redis

log = logging.getLogger("nexopoll.beat")


#: Ticks carry an absolute ``expires`` set by beat's clock and read by the worker's: a
#: worker whose clock runs ahead by more than the window would drop every tick it takes
#: as expired (RELIABILITY row 16). The window allows this much skew on top.
CLOCK_SKEW_ALLOWANCE_SECS = 600.0
#: Bumped when ``entry_definition`` changes shape: entries written before are rewritten
#: by the next resync (the installed hash carries the format).
ENTRY_FORMAT = "2"


def installed_hash(definition_hash: str, paused: bool = False) -> str:
    return f"{definition_hash}/{ENTRY_FORMAT}" + ("/paused" if paused else "")


def paused_ids(job_ids: Iterable[str] | None = None) -> set[str]:
    """The paused jobs (of ``job_ids``; of all jobs when None)."""
    rows = PollState.objects.filter(paused=True)
    ids = None if job_ids is None else list(job_ids)
    if ids is None or len(ids) > 10 * CHUNK:  # most jobs, likely: one query for all
        every = set(rows.values_list("job_id", flat=True))
        return every if ids is None else every & set(ids)
    found: set[str] = set()
    for chunk in _chunks(ids, CHUNK):
        found.update(rows.filter(job_id__in=chunk).values_list("job_id", flat=True))
    return found


def entry_definition(job: JobDef, *, now: datetime, enabled: bool = True) -> str:
    interval = job.interval(now).total_seconds()
    definition = {
        "name": keys.entry_name(job.job_id),
        "task": "nexopoll.tick",
        "args": [job.job_id],
        "kwargs": {"lease_ttl_ms": job.lease_ttl_ms(now)},
        # A tick still queued an interval (at least 30 s) plus the clock-skew allowance after
        # it was sent is dropped: a later one polls from the same cursor. A one-shot never
        # expires: it has no later one.
        "options": {}
        if job.one_shot
        else {"expires": max(interval, 30.0) + CLOCK_SKEW_ALLOWANCE_SECS},
        "schedule": schedule_json(
            schedule_to_dict(job.schedule), int(job.offset.total_seconds() * 1000)
        ),
        "enabled": enabled,
    }
    return json.dumps(definition, sort_keys=True)


def _score(job: JobDef, now: datetime) -> float:
    nxt = next_slot(job.schedule, after=now, offset=job.offset)
    return -1 if nxt is None else nxt.timestamp()


def write_entries(
    client: Any, jobs: Iterable[JobDef], *, now: datetime, paused: Iterable[str] = ()
) -> int:
    """Write (or rewrite) the entries of ``jobs`` with their next slot after ``now``;
    those of ``paused`` jobs disabled and out of the schedule (beat sends them nothing).

    One pipeline: each entry's definition (its meta only if new), then the schedule's
    scores and the installed hashes of all of them in one command each.
    """
    jobs = list(jobs)
    if not jobs:
        return 0
    paused = set(paused)
    scores: dict[str, float] = {}
    parked: list[str] = []
    hashes: dict[str, str] = {}
    meta = json.dumps({"last_run_at": None})
    with client.pipeline(transaction=False) as pipe:
        for job in jobs:
            key = keys.entry_key(job.job_id)
            off = job.job_id in paused
            pipe.hset(key, "definition", entry_definition(job, now=now, enabled=not off))
            pipe.hsetnx(key, "meta", meta)
            if off:
                parked.append(key)
            else:
                scores[key] = _score(job, now)
            hashes[job.job_id] = installed_hash(job.definition_hash, off)
        if scores:
            pipe.zadd(keys.schedule_key(), scores)
        if parked:
            pipe.zrem(keys.schedule_key(), *parked)
        pipe.hset(keys.hashes_key(), mapping=hashes)
        pipe.incr(keys.version_key())
        pipe.execute()
    return len(jobs)


def delete_entries(client: Any, job_ids: Iterable[str]) -> int:
    ids = list(job_ids)
    if not ids:
        return 0
    with client.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.zrem(keys.schedule_key(), keys.entry_key(job_id))
            pipe.delete(keys.entry_key(job_id))
            pipe.hdel(keys.hashes_key(), job_id)
        pipe.incr(keys.version_key())
        pipe.execute()
    return len(ids)


def bump_kind_versions(client: Any, kinds: Iterable[str]) -> None:
    """Move the reload version of each of ``kinds`` (their jobs changed): the long-lived
    plugins serving them restart; the others keep their processes and in-flight ticks."""
    kinds = sorted(set(kinds))
    if not kinds:
        return
    with client.pipeline(transaction=False) as pipe:
        for kind in kinds:
            pipe.incr(keys.kind_version_key(kind))
        pipe.execute()


CHUNK = 500


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def resync_from_db(
    client: Any,
    *,
    now: datetime,
    chunk: int = CHUNK,
    between: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Make RedBeat's job entries match the DB; return counts of what changed.

    The DB is read as ``(job_id, definition_hash)`` pairs first; only the jobs whose
    entry is changed or missing are loaded, ``chunk`` at a time, each chunk written
    in one pipeline. ``between()`` runs before every chunk: beat extends its lock
    there, so a resync on a slow DB never outlives the lock (and it raises to abort
    the resync once the lock is lost).
    """
    between = between or (lambda: None)
    paused = paused_ids()
    db = {
        i: installed_hash(h, i in paused)
        for i, h in PollJob.objects.values_list("job_id", "definition_hash")
    }
    installed: dict[str, str] = client.hgetall(keys.hashes_key())
    prefix = keys.key_prefix() + keys.ENTRY_PREFIX
    scheduled = {
        m[len(prefix) :] for m in client.zrange(keys.schedule_key(), 0, -1) if m.startswith(prefix)
    }
    stale = sorted((set(installed) | scheduled) - set(db))
    changed = sorted(i for i, h in db.items() if installed.get(i) != h)
    missing = sorted(
        i for i, h in db.items() if i not in scheduled and i not in paused and installed.get(i) == h
    )
    written = 0
    for ids in _chunks(changed + missing, chunk):
        between()
        written += write_entries(client, load_all(ids), now=now, paused=paused)
    for ids in _chunks(stale, chunk):
        between()
        delete_entries(client, ids)
    between()
    client.set(keys.synced_key(), now.isoformat())
    return {
        "jobs": len(db),
        "written": len(changed),
        "restored": len(missing),
        "removed": len(stale),
        "loaded": written,
        "changed_ids": changed + stale,
    }


def sync_jobs(
    client: Any,
    *,
    upsert: Iterable[str],
    remove: Iterable[str],
    now: datetime,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Apply a reload's changes to RedBeat right away (beat's resync covers a failure here)."""
    jobs = load_all(list(upsert))
    paused = paused_ids(j.job_id for j in jobs)
    for n, chunk in enumerate(_chunks(jobs, SYNC_CHUNK), 1):
        write_entries(client, chunk, now=now, paused=paused)
        done = min(n * SYNC_CHUNK, len(jobs))
        if progress and (n % 5 == 0 or done == len(jobs)):
            progress(f"RedBeat: {done}/{len(jobs)} entries written")
    delete_entries(client, remove)


SYNC_CHUNK = 5000  # entries per pipeline when a reload writes them


def pause_changed(job_ids: Iterable[str], *, now: datetime | None = None) -> None:
    """The paused flag of ``job_ids`` was written: disable (or re-enable, at the next
    slot after ``now``) their entries. A failure is logged; beat's resync repairs it."""
    ids = sorted(set(job_ids))
    if not ids:
        return
    try:
        sync_jobs(get_redis(), upsert=ids, remove=[], now=now or datetime.now(UTC))
    except Exception as exc:
        log.warning(
            "beat.pause_sync_failed jobs=%s: %s; beat's resync repairs it",
            len(ids),
            type(exc).__name__,
        )


def park(client: Any, job_id: str) -> None:
    """A scheduled tick found its job paused (its entry was not disabled: a pause whose
    sync failed, or a message sent just before it): take the entry out of the schedule.
    Its installed hash is left as is, so beat's next resync writes it properly."""
    with client.pipeline(transaction=False) as pipe:
        pipe.zrem(keys.schedule_key(), keys.entry_key(job_id))
        pipe.incr(keys.version_key())
        pipe.execute()


def fingerprint(client: Any) -> tuple:
    """Cheap summary of the DB's definitions and of what RedBeat holds.

    Beat's periodic resync is skipped while it is unchanged, so a large
    installation does not reload every definition every period.
    """
    db = PollJob.objects.aggregate(n=Count("job_id"), last=Max("updated_at"))
    paused = PollState.objects.filter(paused=True).count()
    return (
        db["n"],
        db["last"],
        paused,
        client.hlen(keys.hashes_key()),
        client.zcard(keys.schedule_key()),
    )


def move_entry(client: Any, job_id: str, at: datetime, *, later_only: bool = False) -> None:
    """Move the job's RedBeat slot to ``at`` (``later_only``: only if that is later); an
    entry that is not there (parked, removed) stays away."""
    client.zadd(
        keys.schedule_key(), {keys.entry_key(job_id): at.timestamp()}, xx=True, gt=later_only
    )
