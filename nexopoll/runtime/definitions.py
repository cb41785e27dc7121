"""Job definitions as the runtime uses them, cached per process by definition hash.

The state row carries the hash of the definition it belongs to, so a tick reads
one row and only goes to ``poll_job`` when a reload changed the definition.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import connection

from nexopoll.core.breaker import BreakerPolicy
from nexopoll.core.config import expand_env
from nexopoll.core.redact import secret_values
from nexopoll.core.schedule import (
    AtSchedule,
    Schedule,
    nominal_interval,
    schedule_from_dict,
    stagger_offset,
)

from ..models import Agent, PollJob
from . import logredact
from .secretenv import secret_env

log = logging.getLogger("nexopoll.tick")


@dataclass(frozen=True)
class JobDef:
    job_id: str
    kind: str
    agent: str
    schedule: Schedule
    jitter_ms: int
    config: dict[str, Any]
    failure_to: dict[str, str] | None
    breaker_threshold: int
    alert_cooldown_secs: int
    lease_ttl_factor: float
    definition_hash: str
    agent_bindings: dict[str, Any] = field(default_factory=dict)
    host_limits: dict[str, int] | None = None  # overrides the per-host politeness caps

    @cached_property
    def offset(self) -> timedelta:
        return stagger_offset(self.job_id, timedelta(milliseconds=self.jitter_ms), self.schedule)

    def expanded_config(self, env: Any) -> dict[str, Any]:
        """The config with ``${VAR}`` expanded (once per process and definition)."""
        cached = self.__dict__.get("_expanded")
        if cached is None:
            cached = expand_env(self.config, env, path="config")
            object.__setattr__(self, "_expanded", cached)
        return copy.deepcopy(cached)

    @property
    def one_shot(self) -> bool:
        return isinstance(self.schedule, AtSchedule)

    def interval(self, now: datetime) -> timedelta:
        return nominal_interval(self.schedule, now=now)

    def lease_ttl_ms(self, now: datetime) -> int:
        """``lease_ttl_factor`` times the interval, never below ``NEXOPOLL_LEASE_MIN_SECS``."""
        secs = self.interval(now).total_seconds() * self.lease_ttl_factor
        return int(max(secs, settings.NEXOPOLL_LEASE_MIN_SECS) * 1000)

    def breaker_policy(self, now: datetime) -> BreakerPolicy:
        # a half-open trial counts as running for as long as a tick may run (its lease)
        trial = max(60.0, self.lease_ttl_ms(now) / 1000)
        return BreakerPolicy(
            threshold=self.breaker_threshold,
            base=timedelta(seconds=settings.NEXOPOLL_BREAKER_BASE_SECS),
            cap=timedelta(seconds=settings.NEXOPOLL_BREAKER_CAP_SECS),
            trial_timeout=timedelta(seconds=trial),
        )

    def secret_values(self, env: Any) -> frozenset[str]:
        """Values of the ``${VAR}``s in the job's config and agent bindings (to redact)."""
        cached = self.__dict__.get("_secrets")
        if cached is None:
            cached = secret_values([self.config, self.agent_bindings], env)
            object.__setattr__(self, "_secrets", cached)
        return cached


def runtime_hash(spec_hash: str, globals_: dict[str, Any], bindings: dict[str, Any]) -> str:
    """The hash stored with a job: its YAML definition plus the globals and agent it uses."""
    blob = json.dumps([spec_hash, globals_, bindings], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def from_row(job: PollJob, bindings: dict[str, Any]) -> JobDef:
    return JobDef(
        job_id=job.job_id,
        kind=job.kind,
        agent=job.agent,
        schedule=schedule_from_dict(job.schedule),
        jitter_ms=job.jitter_ms,
        config=job.config,
        failure_to=job.failure_to,
        breaker_threshold=job.breaker_threshold,
        alert_cooldown_secs=job.alert_cooldown_secs,
        lease_ttl_factor=job.lease_ttl_factor,
        definition_hash=job.definition_hash,
        agent_bindings=bindings,
        host_limits=job.host_limits,
    )


_cache: dict[str, JobDef] = {}
_warm = False  # this process bulk-loaded once
_misses = 0  # cache misses since the last bulk load
_bulk_loaded_at = float("-inf")
_lock = threading.Lock()  # one bulk load at a time (-P threads); readers never wait
# A worker meets every job sooner or later (ticks land on any worker), so the first miss
# of a process loads all definitions in one query rather than one job per tick. After
# that a miss loads that job alone: a reload that replaced one job costs each worker one
# small query, not a reload of every job. Only when misses pile up (a reload that
# replaced many jobs: new globals, an agent's bindings) is a bulk load cheaper again.
BULK_LOAD_MISSES = 1000
BULK_LOAD_EVERY_SECS = 60.0
# A worker process (see workerhooks) bulk-loads in a background thread instead: a tick
# that misses meanwhile loads its own job (one small query) rather than waiting seconds
# for 100,000 definitions. Set by ``warm_in_background``; a failed load retries after:
BACKGROUND_RETRY_SECS = 10.0
_background = False
_loader: threading.Thread | None = None
_loader_started_at = float("-inf")


def get(job_id: str, definition_hash: str) -> JobDef | None:
    """The job's definition for ``definition_hash``; None if the job is not defined."""
    cached = _cache.get(job_id)
    if cached is not None and cached.definition_hash == definition_hash:
        return cached
    if _bulk_due():
        if _background:
            _start_loader()
        else:
            with _lock:
                if not _warm or _misses >= BULK_LOAD_MISSES:  # not done by a thread just now
                    _bulk_load()
            cached = _cache.get(job_id)
            if cached is None or cached.definition_hash == definition_hash:
                return cached
    loaded = load_all([job_id])
    if not loaded:
        _cache.pop(job_id, None)
        return None
    _cache[job_id] = loaded[0]
    return loaded[0]


def _bulk_due() -> bool:
    global _misses
    if not _warm:
        return True
    _misses += 1  # a lost update between threads only delays a bulk load a little
    return _misses >= BULK_LOAD_MISSES and time.monotonic() - _bulk_loaded_at > BULK_LOAD_EVERY_SECS


def _bulk_load() -> None:
    global _cache, _warm, _misses, _bulk_loaded_at
    started = time.monotonic()
    loaded = {jd.job_id: jd for jd in load_all()}
    _cache = loaded  # swapped whole: readers see the old dict or the new one
    _warm, _misses, _bulk_loaded_at = True, 0, time.monotonic()
    log.debug("definitions.bulk_loaded jobs=%s secs=%.2f", len(loaded), _bulk_loaded_at - started)


def warm_in_background() -> None:
    """From now on bulk loads run in a background thread, and one starts now.

    Called when a worker process starts (before its first task, see workerhooks): the
    first ticks find the cache filling and load their own job meanwhile.
    """
    global _background
    _background = True
    _start_loader()


def _start_loader() -> None:
    global _loader, _loader_started_at
    with _loader_lock:
        if _loader is not None and _loader.is_alive():
            return
        if _loader_failed and time.monotonic() - _loader_started_at < BACKGROUND_RETRY_SECS:
            return  # the last one failed just now (the DB is down?): single loads meanwhile
        _loader_started_at = time.monotonic()
        _loader = threading.Thread(
            target=_load_in_background, name="nexopoll-definitions", daemon=True
        )
        _loader.start()


_loader_lock = threading.Lock()
_loader_failed = False


def _load_in_background() -> None:
    global _loader_failed
    from django.db import connections

    try:
        with _lock:
            if not _warm or _misses >= BULK_LOAD_MISSES:
                _bulk_load()
        _loader_failed = False
    except Exception as exc:
        _loader_failed = True
        log.warning("definitions.bulk_load_failed: %s; single loads meanwhile", exc)
    finally:
        connections.close_all()  # this thread's own connections


def wait_warm(timeout: float) -> bool:
    """Wait for a background bulk load to end (tests); True when the cache is warm."""
    loader = _loader
    if loader is not None:
        loader.join(timeout)
    return _warm


def forget() -> None:
    """Drop the cache (tests; a process that must start cold)."""
    global _cache, _warm, _misses, _background
    wait_warm(30)
    _cache, _warm, _misses, _background = {}, False, 0, False


# The columns a definition is built from; read as plain values (no model instances).
_COLUMNS = (
    "job_id",
    "kind",
    "agent",
    "schedule",
    "jitter_ms",
    "config",
    "failure_to",
    "breaker_threshold",
    "alert_cooldown_secs",
    "lease_ttl_factor",
    "definition_hash",
    "host_limits",
)
_CHUNK = 500  # job ids per query when loading chosen jobs


def load_all(job_ids: list[str] | None = None) -> list[JobDef]:
    """Definitions of ``job_ids`` (all jobs when None), with their agents' bindings.

    A row that cannot be read is logged and left out: it must not stop every
    other job (reload validated it, so this takes a hand-edited DB). 100,000 jobs
    load in about a second: plain rows, one schedule parsed per distinct schedule.
    """
    agents = dict(Agent.objects.values_list("agent_id", "bindings"))
    schedules: dict[Any, Schedule] = {}
    out: list[JobDef] = []
    configs: list[Any] = []  # configs that reference ${VAR}s (their values are secrets)
    for row in _rows(job_ids):
        try:
            jd = _from_values(row, agents, schedules)
        except Exception:
            log.exception("definitions.unreadable job=%s", row[0])
            continue
        out.append(jd)
        if not isinstance(row[5], str) or "${" in row[5]:  # the text is cheap to look at
            configs.append(jd.config)
    # every log record of this process masks these jobs' and agents' secrets
    logredact.register(secret_values([list(agents.values()), configs], secret_env()))
    return out


def _rows(job_ids: list[str] | None) -> Iterator[tuple]:
    table = connection.ops.quote_name(PollJob._meta.db_table)
    select = f"SELECT {', '.join(_COLUMNS)} FROM {table}"
    with connection.cursor() as cur:
        if job_ids is None or len(job_ids) > 40 * _CHUNK:  # most jobs: one scan, filtered
            wanted = None if job_ids is None else set(job_ids)
            cur.execute(select)
            while rows := cur.fetchmany(2000):
                yield from (r for r in rows if wanted is None or r[0] in wanted)
            return
        for i in range(0, len(job_ids), _CHUNK):
            chunk = job_ids[i : i + _CHUNK]
            cur.execute(f"{select} WHERE job_id IN ({', '.join(['%s'] * len(chunk))})", chunk)
            yield from cur.fetchall()


def _json(value: Any) -> Any:
    # JSON columns arrive as text (PostgreSQL's jsonb as Django reads it, SQLite's text)
    if value == "{}":
        return {}  # most configs of a big installation: a third of json.loads' cost
    return json.loads(value) if isinstance(value, str | bytes) else value


def _from_values(row: tuple, agents: dict[str, Any], schedules: dict[Any, Schedule]) -> JobDef:
    (
        job_id,
        kind,
        agent,
        schedule,
        jitter_ms,
        config,
        failure_to,
        threshold,
        cooldown,
        factor,
        definition_hash,
        host_limits,
    ) = row
    key = schedule if isinstance(schedule, str | bytes) else json.dumps(schedule, sort_keys=True)
    parsed = schedules.get(key)
    if parsed is None:  # schedules are immutable: 100,000 jobs share a handful
        parsed = schedules[key] = schedule_from_dict(_json(schedule))
    # JobDef(**fields) sets each field of the frozen dataclass through object.__setattr__
    # (5 µs a job); every field is given here, so filling __dict__ is the same object
    jd = object.__new__(JobDef)
    jd.__dict__.update(
        job_id=job_id,
        kind=kind,
        agent=agent,
        schedule=parsed,
        jitter_ms=jitter_ms,
        config=_json(config),
        failure_to=_json(failure_to),
        breaker_threshold=threshold,
        alert_cooldown_secs=cooldown,
        lease_ttl_factor=factor,
        definition_hash=definition_hash,
        agent_bindings=agents.get(agent, {}),
        host_limits=_json(host_limits),
    )
    return jd
