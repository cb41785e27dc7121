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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.conf import settings

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
# of a process loads all definitions in two queries rather than one job per tick. After
# that a miss loads that job alone: a reload that replaced one job costs each worker one
# small query, not a reload of every job. Only when misses pile up (a reload that
# replaced many jobs: new globals, an agent's bindings) is a bulk load cheaper again.
BULK_LOAD_MISSES = 1000
BULK_LOAD_EVERY_SECS = 60.0


def get(job_id: str, definition_hash: str) -> JobDef | None:
    """The job's definition for ``definition_hash``; None if the job is not defined."""
    cached = _cache.get(job_id)
    if cached is not None and cached.definition_hash == definition_hash:
        return cached
    if _bulk_due():
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
    _cache = {jd.job_id: jd for jd in load_all()}  # swapped whole: readers see old or new
    _warm, _misses, _bulk_loaded_at = True, 0, time.monotonic()


def forget() -> None:
    """Drop the cache (tests; a process that must start cold)."""
    global _cache, _warm, _misses
    _cache, _warm, _misses = {}, False, 0


def load_all(job_ids: list[str] | None = None) -> list[JobDef]:
    """Definitions of ``job_ids`` (all jobs when None), with their agents' bindings.

    A row that cannot be read is logged and left out: it must not stop every
    other job (reload validated it, so this takes a hand-edited DB).
    """
    agents = dict(Agent.objects.values_list("agent_id", "bindings"))
    rows = PollJob.objects.all() if job_ids is None else PollJob.objects.filter(job_id__in=job_ids)
    out = []
    for job in rows:
        try:
            out.append(from_row(job, agents.get(job.agent, {})))
        except Exception:
            log.exception("definitions.unreadable job=%s", job.job_id)
    # every log record of this process masks these jobs' and agents' secrets
    logredact.register(
        secret_values([list(agents.values()), [j.config for j in out]], secret_env())
    )
    return out
