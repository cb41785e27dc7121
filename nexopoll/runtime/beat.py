"""RedBeat, extended: nexopoll's own schedule class and a batched scheduler loop.

Stock RedBeat stores only interval/crontab/rrule schedules and drops seconds and
time zones, so each job's entry carries a ``NexoSchedule`` (every / 6-field cron
with tz / at, plus the job's deterministic stagger) through an extended JSON
encoder and decoder. Keys, the lock and HA stay RedBeat's.

``NexopollScheduler.tick`` differs from stock RedBeat where PERFORMANCE.md found
its time going: one pipelined round trip finds every due entry (fractional scores)
and the earliest future one; decoded entries are cached until an entry write
bumps the version key; new scores and meta go back in one pipeline; the sleep is
bounded by the next due score. It also re-creates every job's entry from the DB
at start, every ``NEXOPOLL_RESYNC_SECS``, and at once when the schedule vanished
(a flushed Redis), in chunks with the lock extended between them (a resync on a
slow DB must not outlive the lock and let a standby take over mid-way), and
re-takes a lost lock when nobody else holds it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import redis
from kombu.utils.objects import cached_property
from redbeat.decoder import RedBeatJSONEncoder
from redbeat.schedulers import LUA_EXTEND_TO_SCRIPT, RedBeatScheduler

from . import keys, metricstore
from .beatentry import NexoEntry, NexoSchedule
from .publish import TickPublisher
from .redbeat_sync import fingerprint, resync_from_db
from .redis import pin_redbeat_client

log = logging.getLogger("nexopoll.beat")

#: one field per beat process (host:pid): the ticks it dispatched (a hash under the prefix)
DISPATCHED = keys.ns("beat:dispatched")  # NEXOPOLL_REDIS_PREFIX


def dispatched_key() -> str:
    return keys.key_prefix() + DISPATCHED


def beat_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


BATCH = 1000
SLOW_REFRESH_SECS = 5.0


class NexopollScheduler(RedBeatScheduler):
    Entry = NexoEntry
    #: jobs loaded and written per resync step; the lock is extended between steps
    resync_chunk = 500
    #: called before every resync step (tests inject a slow DB here)
    on_resync_chunk: Callable[[], None] | None = None

    def __init__(self, app: Any, **kwargs: Any) -> None:
        import django
        from django.conf import settings

        django.setup()
        self._cache: dict[str, NexoEntry] = {}
        self._version: str | None = None
        self._next_resync = 0.0
        self._fingerprint: tuple | None = None
        self._lock_extended = 0.0
        # Dispatch in batches at most every MIN_SLEEP: bounds wake-ups (and their round
        # trips) per second whatever the number of jobs, for at most that much lag.
        self.min_sleep = settings.NEXOPOLL_BEAT_MIN_SLEEP_SECS
        self.batch_min = settings.NEXOPOLL_BATCH_MIN
        self.batch_size = max(1, settings.NEXOPOLL_BATCH_SIZE)
        self.batch_io = settings.NEXOPOLL_BATCH_IO
        self._slow: set[str] = set()  # jobs whose ticks wait on I/O: batched apart
        self._slow_at = 0.0
        self.publisher = TickPublisher(app)
        super().__init__(app, **kwargs)

    @cached_property
    def client(self) -> Any:
        # RedBeat's get_redis() re-reads the Celery config on every call (~1 ms): once here
        return pin_redbeat_client(self.app)

    def setup_schedule(self) -> None:
        super().setup_schedule()
        self._resync("beat start", statics=False)  # RedBeat's setup just wrote the statics

    # --- resync from the DB -------------------------------------------------
    def _resync(self, why: str, *, statics: bool) -> None:
        """Mirror the DB's jobs into RedBeat; ``statics`` also restores beat_schedule entries
        (only needed when Redis lost them: rewriting them would move their slots)."""
        from django.conf import settings
        from django.db import close_old_connections

        # whatever happens, try again one period later rather than on every loop
        self._next_resync = time.monotonic() + settings.NEXOPOLL_RESYNC_SECS
        close_old_connections()
        try:
            current = fingerprint(self.client)
            if why == "timer" and current == self._fingerprint:
                return  # nothing changed in the DB, every entry still installed
            stats = resync_from_db(
                self.client, now=datetime.now(UTC), chunk=self.resync_chunk, between=self._between
            )
            if statics and self.app.redbeat_conf.schedule:
                self.update_from_dict(self.app.redbeat_conf.schedule)
            self._fingerprint = fingerprint(self.client)
        finally:
            close_old_connections()
        for job_id in stats.pop("changed_ids"):
            self._cache.pop(keys.entry_key(job_id), None)
        if statics:
            self._cache.clear()
        log.info("beat.resync why=%s %s", why, stats)

    def _between(self) -> None:
        """Between resync chunks: keep the lock fresh (a resync may outlast its TTL)."""
        if self.on_resync_chunk is not None:
            self.on_resync_chunk()
        if self.lock is not None and self._lock_due():
            self._extend_lock()

    # --- the loop -------------------------------------------------------------
    def _lock_due(self) -> bool:
        return time.monotonic() - self._lock_extended >= self.lock_timeout / 3

    def _extend_lock(self) -> None:
        try:
            self.lock.extend(int(self.lock_timeout))
        except redis.exceptions.LockNotOwnedError:
            why = self._lock_lost_why()
            if not self.lock.acquire(blocking=False):
                # another beat took over: exit, the supervisor restarts us as standby
                idle = time.monotonic() - self._lock_extended
                log.warning(
                    "beat.lock_lost: another beat holds the lock now%s",
                    f"; {why}, and a standby took over" if idle >= self.lock_timeout else "",
                )
                raise
            log.warning("beat.lock_reacquired: %s", why)
        self._lock_extended = time.monotonic()

    def _lock_lost_why(self) -> str:
        """Why this beat no longer held its lock: it expired while this beat did not
        refresh it (a hung or stopped process), or Redis lost it (flushed: the schedule
        went too), or it was deleted before its timeout."""
        idle = time.monotonic() - self._lock_extended
        try:
            schedule_kept = bool(self.client.exists(keys.synced_key()))
        except redis.exceptions.RedisError:
            schedule_kept = True  # unknown: say nothing about a flush
        if idle >= self.lock_timeout:
            text = (
                f"the lock expired: this beat had not refreshed it for {idle:.0f}s "
                f"(lock timeout {self.lock_timeout:.0f}s; the process was stalled)"
            )
            return text + ("" if schedule_kept else "; Redis lost the schedule too (flushed)")
        if not schedule_kept:
            return "Redis lost the lock and the schedule (flushed or restarted empty)"
        return (
            f"the lock was gone {idle:.0f}s after its last refresh, before its "
            f"{self.lock_timeout:.0f}s timeout (deleted, or Redis restarted)"
        )

    def _hold_lock(self) -> bool:
        """Keep (or take) the beat lock; False while another beat holds it (standby)."""
        if not self.lock_key:
            return True
        if self.lock is None:
            # RedBeat takes the lock in a beat_init handler whose errors Celery swallows
            # (e.g. Redis was down then): never dispatch without it, keep trying instead.
            lock = self.client.lock(self.lock_key, timeout=self.lock_timeout)
            lock.lua_extend = self.client.register_script(LUA_EXTEND_TO_SCRIPT)
            if not lock.acquire(blocking=False):
                return False
            self.lock = lock
            self._lock_extended = time.monotonic()
            log.info("beat.lock_acquired")
            return True
        if self._lock_due():
            self._extend_lock()
        return True

    def tick(self, min=min, **kwargs: Any) -> float:
        try:
            return self._tick()
        except redis.exceptions.LockNotOwnedError:
            raise
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            log.warning("beat.redis_unavailable: %s", exc)
            return 1.0
        except Exception:  # a DB outage during a resync, say: beat must outlive it
            log.exception("beat.tick_failed")
            return 1.0

    def _tick(self) -> float:
        if not self._hold_lock():
            return self.max_interval
        client = self.client
        zkey = self.app.redbeat_conf.schedule_key
        now_ts = time.time()
        with client.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(zkey, 0, now_ts, start=0, num=BATCH, withscores=True)
            pipe.zrangebyscore(zkey, f"({now_ts}", "+inf", start=0, num=1, withscores=True)
            pipe.get(keys.version_key())
            pipe.exists(keys.synced_key())
            # the lock holder's last loop, for /healthz (same round trip)
            pipe.set(keys.heartbeat_key(), f"{now_ts}:{os.getpid()}")
            due, upcoming, version, synced, _ = pipe.execute()
        if not synced:
            self._resync("schedule missing", statics=True)
            return 0.0
        if time.monotonic() >= self._next_resync:
            self._resync("timer", statics=False)
        if version != self._version:
            # entries were rewritten outside beat (a reload): decode them afresh
            self._cache.clear()
            self._version = version
        wake = [upcoming[0][1]] if upcoming else []
        if due:
            wake += self._dispatch(client, zkey, due, now_ts)
            if len(due) >= BATCH:
                return 0.0
        if not wake:
            return self.max_interval
        return min(max(min(wake) - time.time(), self.min_sleep), self.max_interval)

    def _entry(self, client: Any, key: str) -> NexoEntry | None:
        entry = self._cache.get(key)
        if entry is None:
            try:
                entry = self.Entry.from_key(key, app=self.app)
            except KeyError:
                log.warning("beat.entry_missing key=%s: removing", key)
                client.zrem(self.app.redbeat_conf.schedule_key, key)
                return None
            except Exception:
                # an undecodable entry must not stall beat: look again after the next resync
                log.exception("beat.entry_undecodable key=%s", key)
                client.zadd(
                    self.app.redbeat_conf.schedule_key,
                    {key: time.time() + self.max_interval * 30},
                    xx=True,
                )
                return None
            self._cache[key] = entry
        return entry

    def _dispatch(self, client: Any, zkey: str, due: list, now_ts: float) -> list[float]:
        """Publish every due entry in one batch; store their next slots; return those."""
        now = datetime.fromtimestamp(now_ts, UTC)
        scores: dict[str, float] = {}
        stock: list[str] = []
        ticks: list[NexoEntry] = []  # jobs' ticks, batched below when many fell due
        sent = 0
        batch = getattr(self.producer, "batch", None)  # kombu >= 5.7: one pipeline
        with batch(max_size=2 * BATCH) if batch else contextlib.nullcontext():
            for key, _score in due:
                entry = self._entry(client, key)
                if entry is None:
                    continue
                scores[key] = self._next_score(entry, now)
                if not isinstance(entry.schedule, NexoSchedule):
                    stock.append(key)
                if not entry.enabled:
                    continue
                if self.publisher.batchable(entry):
                    ticks.append(entry)
                elif self._publish(entry, now):
                    sent += 1
            sent += self._publish_ticks(ticks, now)
        done = [key for key, score in scores.items() if score < 0]  # one-shots that fired
        upcoming = {key: score for key, score in scores.items() if score >= 0}
        meta = json.dumps({"last_run_at": now}, cls=RedBeatJSONEncoder)
        with client.pipeline(transaction=False) as pipe:
            # poller_beat_dispatch_lag_seconds, in the same round trip
            metricstore.queue_beat_lag(pipe, (now_ts - score for _key, score in due))
            if upcoming:  # GT keeps a later slot a tick pushed meanwhile (next_interval_hint)
                pipe.zadd(zkey, upcoming, xx=True, gt=True)
            if done:
                pipe.zadd(zkey, dict.fromkeys(done, -1), xx=True)
            for key in stock:  # nexopoll entries derive slots from the clock, not from meta
                pipe.hset(key, "meta", meta)
            if sent:  # who dispatched how much: two beats must never both count up
                pipe.hincrby(dispatched_key(), beat_id(), sent)
            pipe.execute()
        return list(upcoming.values())

    def _publish_ticks(self, ticks: list[NexoEntry], now: datetime) -> int:
        """Jobs' ticks: one message each at low rates (Flower shows every tick), or
        ``nexopoll.tick_batch`` messages of at most ``batch_size`` jobs when at least
        ``batch_min`` fell due in this loop (Celery's message path costs more CPU than
        most ticks). Returns how many ticks were sent."""
        if not self.batch_min or len(ticks) < self.batch_min:  # the slow set is not read
            return sum(self._publish(entry, now) for entry in ticks)
        # A job that waits on the network (the slow set, which ticks keep current)
        # travels in a batch of such jobs, which the worker polls side by side on its poll
        # threads and commits as each finishes; the others go in batches that poll one
        # job after another. Mixed, a quick job would wait for a slow one's turn.
        slow = self._slow_jobs()
        waits = [entry for entry in ticks if entry.args[0] in slow]
        quick = [entry for entry in ticks if entry.args[0] not in slow]
        sent = self._publish_batches(quick, now)
        if self.batch_io:
            return sent + self._publish_batches(waits, now)
        return sent + sum(self._publish(entry, now) for entry in waits)

    def _publish_batches(self, ticks: list[NexoEntry], now: datetime) -> int:
        """``ticks`` in even batches of at most ``batch_size`` (no straggler batch of one
        or two); fewer than ``batch_min`` go one message each."""
        if len(ticks) < self.batch_min:
            return sum(self._publish(entry, now) for entry in ticks)
        sent = 0
        parts = -(-len(ticks) // self.batch_size)
        size = -(-len(ticks) // parts)
        for start in range(0, len(ticks), size):
            chunk = ticks[start : start + size]
            try:
                self.publisher.publish_batch(self.producer, chunk, now)
            except Exception:
                log.exception("beat.publish_failed batch=%s", len(chunk))
                continue
            sent += len(chunk)
        return sent

    def _slow_jobs(self) -> set[str]:
        """The slow set (ticks keep it current), read again every SLOW_REFRESH_SECS."""
        if time.monotonic() >= self._slow_at:
            self._slow_at = time.monotonic() + SLOW_REFRESH_SECS
            try:
                self._slow = set(self.client.smembers(keys.slow_key()))
            except redis.exceptions.RedisError as exc:  # keep the last one known
                log.warning("beat.slow_set_unread: %s", exc)
        return self._slow

    def _publish(self, entry: NexoEntry, now: datetime) -> bool:
        try:
            if self.publisher.can_publish(entry):
                self.publisher.publish(self.producer, entry, now)
            else:
                self.apply_async(entry, producer=self.producer, advance=False)
        except Exception:
            log.exception("beat.publish_failed entry=%s", entry.name)
            return False
        return True

    @staticmethod
    def _next_score(entry: NexoEntry, now: datetime) -> float:
        if isinstance(entry.schedule, NexoSchedule):
            nxt = entry.schedule.next_after(now)
        else:
            rem = entry.schedule.remaining_estimate(now)
            nxt = None if rem is None else now + rem
        return -1 if nxt is None else nxt.timestamp()
