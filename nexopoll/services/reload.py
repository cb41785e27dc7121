"""Reload: re-read pollers.yaml, validate every job, apply the difference in one go."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from nexopoll import reloadwrite
from nexopoll.channels import binding_schemas
from nexopoll.core.config import ConfigFileError, LoadedConfig, load_config
from nexopoll.core.yamlsrc import MAX_BYTES
from nexopoll.models import Agent, PollJob, PollState
from nexopoll.privatecheck import private_url_warnings
from nexopoll.runtime import outbox
from nexopoll.runtime.definitions import runtime_hash
from nexopoll.runtime.redbeat_sync import bump_kind_versions, sync_jobs
from nexopoll.runtime.redis import get_redis
from nexopoll.runtime.registry import get_registry
from nexopoll.runtime.secretenv import secret_env

from .errors import ConfigRejected, ReloadRefused
from .jobs import write_state

log = logging.getLogger("nexopoll.services")


@dataclass
class ReloadResult:
    add: list[str] = field(default_factory=list)
    replace: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)
    kept_invalid: list[str] = field(default_factory=list)
    # replaced jobs an error had paused, resumed by this reload (an operator's pause stays)
    resumed: list[str] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    applied: bool = False
    source: str = ""
    warnings: list[str] = field(default_factory=list)  # e.g. a URL on a private address

    def as_dict(self) -> dict[str, Any]:
        return {
            "add": self.add,
            "replace": self.replace,
            "remove": self.remove,
            "keep": self.keep,
            "kept_invalid": self.kept_invalid,
            "resumed": self.resumed,
            "issues": self.issues,
            "applied": self.applied,
            "source": self.source,
            "warnings": self.warnings,
        }


def config_path() -> Path:
    return Path(settings.NEXOPOLL_CONFIG)


def load_file(*, now: datetime, path: Path | None = None) -> LoadedConfig:
    """Parse and validate pollers.yaml. An absent file is an empty config (subsystem off)."""
    path = path or config_path()
    text = b""
    if path.exists():
        with path.open("rb") as fh:  # never read a huge file whole: one byte past the cap
            text = fh.read(MAX_BYTES + 1)  # is enough for the loader to refuse it by size
    try:
        return load_config(
            text,
            source=str(path),
            env=secret_env(),
            now=now,
            validators=get_registry().validators(),
            channels=binding_schemas(),
        )
    except ConfigFileError as exc:
        raise ConfigRejected(exc.issues) from None


def _globals(loaded: LoadedConfig) -> dict[str, Any]:
    s = loaded.settings
    return {
        "breaker_threshold": s.breaker_threshold,
        "alert_cooldown_secs": s.failure_alert_cooldown_secs,
        "lease_ttl_factor": s.lease_ttl_factor,
    }


def reload_config(
    *,
    now: datetime,
    dry_run: bool = False,
    strict: bool = False,
    path: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ReloadResult:
    """Validate every job, then apply ``{add, replace, remove, keep}`` in one transaction.

    A job whose new definition is invalid keeps its last good one (``kept_invalid``).
    Raises ``ConfigRejected`` (a ``ConfigFileError``) when the file as a whole is
    unusable (nothing applied) and ``ReloadRefused`` under ``strict`` when any job is
    invalid. ``progress`` is told how a reload of at least ``PROGRESS_JOBS`` jobs goes
    (a line per step).
    """
    started = time.monotonic()
    loaded = load_file(now=now, path=path)
    say = _stopwatch(progress if len(loaded.jobs) >= PROGRESS_JOBS else None, started)
    say(f"{len(loaded.jobs)} jobs read and validated ({len(loaded.issues)} problems)")
    if strict and loaded.issues:
        raise ReloadRefused(loaded.issues)
    glob = _globals(loaded)
    bindings = {a.id: a.bindings for a in loaded.agents.values()}
    desired = {
        spec.id: (spec, runtime_hash(spec.definition_hash, glob, bindings.get(spec.agent, {})))
        for spec in loaded.jobs.values()
    }
    rows = list(PollJob.objects.values_list("job_id", "definition_hash", "kind"))
    current = {job_id: digest for job_id, digest, _ in rows}
    old_kinds = {job_id: kind for job_id, _, kind in rows}
    invalid = {job_id for i in loaded.issues for job_id in i.job_ids}
    res = ReloadResult(source=str(path or config_path()), issues=[str(i) for i in loaded.issues])
    res.add = sorted(set(desired) - set(current))
    res.remove = sorted(set(current) - set(desired) - invalid)
    res.replace = sorted(i for i in desired if i in current and current[i] != desired[i][1])
    res.keep = sorted(i for i in desired if i in current and current[i] == desired[i][1])
    res.kept_invalid = sorted(invalid & set(current) - set(desired))
    res.warnings = _warnings(loaded, res.source, set(res.add + res.replace))
    if dry_run:
        errored = PollState.objects.filter(job_id__in=res.replace, paused=True, paused_by="error")
        res.resumed = sorted(errored.values_list("job_id", flat=True))
        return res
    say(
        f"writing: {len(res.add)} to add, {len(res.replace)} to replace, "
        f"{len(res.remove)} to remove, {len(res.keep)} unchanged"
    )
    with transaction.atomic():
        _apply_agents(loaded, keep_for=res.kept_invalid)
        reloadwrite.write_jobs(
            desired, glob, add=res.add, replace=res.replace, now=now, progress=say
        )
        res.resumed = reloadwrite.resume_fixed(res.replace)
        reloadwrite.delete(PollJob, res.remove)
        write_state((i, {"definition_hash": ""}) for i in res.remove)
        changed = res.add + res.replace
        kinds = {desired[i][0].kind for i in changed} | {
            old_kinds[i] for i in res.replace + res.remove
        }  # a plugin restarts when its own jobs change (and on no other reload)
        transaction.on_commit(lambda: _sync_redbeat(changed, res.remove, now=now, progress=say))
        transaction.on_commit(lambda: _bump_kinds(kinds))
        transaction.on_commit(lambda: _retry_held(now=now))
        say("committing")
    res.applied = True
    for job_id in res.resumed:
        log.info("reload.resumed job=%s: paused by an error, its definition changed", job_id)
    log.info(
        "reload.applied add=%s replace=%s remove=%s keep=%s invalid=%s secs=%.1f",
        len(res.add),
        len(res.replace),
        len(res.remove),
        len(res.keep),
        len(res.issues),
        time.monotonic() - started,
    )
    return res


def _warnings(loaded: LoadedConfig, source: str, job_ids: set[str]) -> list[str]:
    """What `pollers check` warns about the added and changed jobs (a private URL)."""
    jobs = {i: s for i, s in loaded.jobs.items() if i in job_ids}
    part = LoadedConfig(loaded.settings, jobs, loaded.agents, [])
    return private_url_warnings(part, secret_env(), get_registry(), source)


PROGRESS_JOBS = 10_000  # a reload of this many jobs or more tells how it goes


def _stopwatch(progress: Callable[[str], None] | None, started: float) -> Callable[[str], None]:
    def say(step: str) -> None:
        if progress is not None:
            progress(f"reload {time.monotonic() - started:6.1f}s  {step}")

    return say


def _apply_agents(loaded: LoadedConfig, *, keep_for: list[str]) -> None:
    still_used = set(PollJob.objects.filter(job_id__in=keep_for).values_list("agent", flat=True))
    for agent in loaded.agents.values():
        Agent.objects.update_or_create(agent_id=agent.id, defaults={"bindings": agent.bindings})
    Agent.objects.exclude(agent_id__in=set(loaded.agents) | still_used).delete()


def _bump_kinds(kinds: set[str]) -> None:
    """Long-lived plugins restart when their own jobs changed, never on other reloads."""
    try:
        bump_kind_versions(get_redis(), kinds)
    except Exception as exc:  # the plugins keep their processes: no worse than no reload
        log.warning("reload.plugin_versions_failed: %s", type(exc).__name__)


def _sync_redbeat(
    upsert: list[str],
    remove: list[str],
    *,
    now: datetime,
    progress: Callable[[str], None] | None = None,
) -> None:
    try:
        sync_jobs(get_redis(), upsert=upsert, remove=remove, now=now, progress=progress)
    except Exception as exc:
        log.warning(
            "reload.redbeat_sync_failed: %s; beat re-syncs within %ss",
            exc,
            settings.NEXOPOLL_RESYNC_SECS,
        )


def _retry_held(*, now: datetime) -> None:
    """After a reload, held rows go back to pending and are queued (what the reload did
    not fix holds them again at once)."""
    try:
        outbox.retry_held_after_reload(now=now)
    except Exception as exc:
        log.warning("reload.held_retry_failed: %s; the sweeper retries held rows", exc)
