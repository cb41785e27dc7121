"""Operator verbs shared by the CLI, the admin, the JSON API and the LLM tools."""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from nexopoll.core.config import ConfigIssue, LoadedConfig, load_config
from nexopoll.core.config.values import mask_plain_secrets
from nexopoll.core.schedule import next_slot
from nexopoll.core.yamlsrc import MAX_BYTES

from . import reloadwrite
from .channels import binding_schemas
from .masking import masked, masked_for_ids
from .models import Agent, PollJob, PollState
from .runtime import definitions, store
from .runtime.definitions import runtime_hash
from .runtime.registry import get_registry
from .runtime.secretenv import secret_env
from .runtime.tick import TickReport, tick_job

log = logging.getLogger("nexopoll.services")


class UnknownJob(LookupError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"unknown job {job_id!r}")


class ReloadRefused(Exception):
    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("reload refused (--strict): " + "; ".join(str(i) for i in issues))


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
            "add": self.add, "replace": self.replace, "remove": self.remove, "keep": self.keep,
            "kept_invalid": self.kept_invalid, "resumed": self.resumed, "issues": self.issues,
            "applied": self.applied,
            "source": self.source, "warnings": self.warnings,
        }  # fmt: skip


def config_path() -> Path:
    return Path(settings.NEXOPOLL_CONFIG)


def load_file(*, now: datetime, path: Path | None = None) -> LoadedConfig:
    """Parse and validate pollers.yaml. An absent file is an empty config (subsystem off)."""
    path = path or config_path()
    text = b""
    if path.exists():
        with path.open("rb") as fh:  # never read a huge file whole: one byte past the cap
            text = fh.read(MAX_BYTES + 1)  # is enough for the loader to refuse it by size
    return load_config(
        text,
        source=str(path),
        env=secret_env(),
        now=now,
        validators=get_registry().validators(),
        channels=binding_schemas(),
    )


def _globals(loaded: LoadedConfig) -> dict[str, Any]:
    s = loaded.settings
    return {
        "breaker_threshold": s.breaker_threshold,
        "alert_cooldown_secs": s.failure_alert_cooldown_secs,
        "lease_ttl_factor": s.lease_ttl_factor,
    }


def reload_config(
    *, now: datetime, dry_run: bool = False, strict: bool = False, path: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ReloadResult:  # fmt: skip
    """Validate every job, then apply ``{add, replace, remove, keep}`` in one transaction.

    A job whose new definition is invalid keeps its last good one (``kept_invalid``).
    Raises ``ConfigFileError`` when the file as a whole is unusable (nothing applied)
    and ``ReloadRefused`` under ``strict`` when any job is invalid. ``progress`` is
    told how a reload of at least ``PROGRESS_JOBS`` jobs goes (a line per step).
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
    say(f"writing: {len(res.add)} to add, {len(res.replace)} to replace, "
        f"{len(res.remove)} to remove, {len(res.keep)} unchanged")  # fmt: skip
    with transaction.atomic():
        _apply_agents(loaded, keep_for=res.kept_invalid)
        reloadwrite.write_jobs(desired, glob, add=res.add, replace=res.replace, now=now,
                               progress=say)  # fmt: skip
        res.resumed = reloadwrite.resume_fixed(res.replace)
        reloadwrite.delete(PollJob, res.remove)
        store.write_state((i, {"definition_hash": ""}) for i in res.remove)
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
    from .privatecheck import private_url_warnings

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
    from .runtime.redbeat_sync import bump_kind_versions
    from .runtime.redis import get_redis

    try:
        bump_kind_versions(get_redis(), kinds)
    except Exception as exc:  # the plugins keep their processes: no worse than no reload
        log.warning("reload.plugin_versions_failed: %s", type(exc).__name__)


def _sync_redbeat(
    upsert: list[str], remove: list[str], *, now: datetime,
    progress: Callable[[str], None] | None = None,
) -> None:  # fmt: skip
    from .runtime.redbeat_sync import sync_jobs
    from .runtime.redis import get_redis

    try:
        sync_jobs(get_redis(), upsert=upsert, remove=remove, now=now, progress=progress)
    except Exception as exc:
        log.warning(
            "reload.redbeat_sync_failed: %s; beat re-syncs within %ss",
            exc,
            settings.NEXOPOLL_RESYNC_SECS,
        )


# --- per-job verbs ---------------------------------------------------------------
def require_job(job_id: str) -> PollJob:
    """The job's definition row; UnknownJob when pollers.yaml has no such job."""
    job = PollJob.objects.filter(job_id=job_id).first()
    if job is None:
        raise UnknownJob(job_id)
    return job


def pause_job(job_id: str, *, reason: str = "paused by operator") -> None:
    require_job(job_id)
    paused = {"paused": True, "paused_reason": reason, "paused_by": "operator"}
    store.write_state([(job_id, paused)])


def resume_job(job_id: str) -> None:
    """Unpause and close the breaker: the job starts over with a clean error count.

    Leaving ``consecutive_errors`` at the threshold would re-open the breaker on
    the first transient error after a resume. The epoch moves on (as with every state
    write), so a failing tick in flight cannot write its errors over the resume.
    """
    require_job(job_id)
    store.write_state([(job_id, reloadwrite.RESUMED)])


def reset_job(job_id: str) -> None:
    """Clear the cursor, errors, breaker and alert state (the pause flag is left as is).

    The epoch moves on, so a tick running right now cannot commit its old cursor.
    """
    require_job(job_id)
    store.write_state([(job_id, {
        "cursor": None, "consecutive_errors": 0, "breaker_open_until": None,
        "breaker_trips": 0, "breaker_trial_at": None, "running_since": None, "crash_count": 0,
        "last_error": "", "alert_active": False, "last_failure_alert_at": None,
        "notice": "", "notice_at": None,
    })])  # fmt: skip


class JobPaused(Exception):
    def __init__(self, job_id: str, reason: str) -> None:
        self.job_id, self.reason = job_id, reason
        super().__init__(
            f"job {job_id!r} is paused ({reason or 'no reason given'}): not ticked; "
            f"resume it, or tick it anyway with --force"
        )


def run_job(
    job_id: str, *, now: datetime, dry_run: bool = False, force: bool = False
) -> TickReport:
    """Tick now, bypassing schedule, lease and breaker. A paused job needs ``force``
    (a dry run commits nothing and is always allowed).

    Raises:
        JobPaused: the job is paused and ``force`` was not given; nothing ran.
    """
    require_job(job_id)
    report = tick_job(job_id, now=now, manual=True, dry_run=dry_run, force=force)
    if report.status == "skipped" and report.reason == "paused":
        reason = PollState.objects.filter(job_id=job_id).values_list("paused_reason", flat=True)
        raise JobPaused(job_id, reason.first() or "")
    return report


def cursor_text(cursor: bytes | memoryview | None) -> str | None:
    if cursor is None:
        return None
    raw = bytes(cursor)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()


def job_view(job: PollJob, state: PollState | None, *, now: datetime) -> dict[str, Any]:
    """One job for operators. A paused job has no next run (``next_run_at`` and
    ``next_slot_at`` are None, ``paused`` true); otherwise both are the same time: the
    later of the next schedule slot after ``now`` and a wait the last tick asked for
    (never a time in the past: a job resumed runs at its next slot)."""
    jd = definitions.from_row(job, {})
    nxt = next_run(job, state, now=now, jd=jd)
    view: dict[str, Any] = {
        "id": job.job_id, "kind": job.kind, "agent": job.agent, "schedule": job.schedule,
        "stagger_ms": int(jd.offset.total_seconds() * 1000),
        "failure_to": job.failure_to,
        "next_slot_at": nxt.isoformat() if nxt else None,
    }  # fmt: skip
    if state is not None:
        view.update(
            paused=state.paused, paused_reason=state.paused_reason, paused_by=state.paused_by,
            status=state.last_status or "never", last_error=state.last_error,
            notice=state.notice or None,
            notice_at=state.notice_at.isoformat() if state.notice_at else None,
            consecutive_errors=state.consecutive_errors,
            breaker=_breaker_label(state, now), epoch=state.epoch,
            last_run_at=state.last_run_at.isoformat() if state.last_run_at else None,
            next_run_at=view["next_slot_at"],
            ticks_total=state.ticks_total, items_seen_total=state.items_seen_total,
            items_dispatched_total=state.items_dispatched_total,
        )  # fmt: skip
    return view


def next_run(
    job: PollJob, state: PollState | None, *, now: datetime, jd: Any = None
) -> datetime | None:
    """When the job ticks next: None while paused (or a one-shot that fired); else the
    later of its next slot after ``now`` (after an open breaker closes: the slot of its
    trial) and a wait its last tick asked for."""
    if state is not None and state.paused:
        return None
    jd = jd or definitions.from_row(job, {})
    after = now
    if state is not None and state.breaker_open_until and state.breaker_open_until > now:
        after = state.breaker_open_until - timedelta(microseconds=1)  # a slot at it: trial
    nxt = next_slot(jd.schedule, after=after, offset=jd.offset)
    if nxt and state is not None and state.next_run_at and state.next_run_at > nxt:
        return state.next_run_at  # a Retry-After or a feed's <ttl> pushed it back
    return nxt


def _breaker_label(state: PollState, now: datetime) -> str:
    if state.breaker_open_until is None:
        return "closed"
    return "open" if now < state.breaker_open_until else "half-open"


def list_jobs(*, now: datetime) -> list[dict[str, Any]]:
    states = {s.job_id: s for s in PollState.objects.all()}
    jobs = list(PollJob.objects.all())
    return masked([job_view(j, states.get(j.job_id), now=now) for j in jobs], jobs)


def show_job(job_id: str, *, now: datetime) -> dict[str, Any]:
    job = require_job(job_id)
    state = PollState.objects.filter(job_id=job_id).first()
    view = job_view(job, state, now=now)
    # as written: ${VAR} references, never their values (nor a plain-text credential
    # kept from before such values were refused at load)
    view["config"] = mask_plain_secrets(job.config)
    view["cursor"] = cursor_text(state.cursor) if state else None
    view["pending_deliveries"] = job_pending(job_id)
    return masked(view, [job])


def job_pending(job_id: str) -> int:
    from .models import Delivery

    return Delivery.objects.filter(job_id=job_id, status="pending").count()


# --- outbox verbs -----------------------------------------------------------------
class UnknownDelivery(LookupError):
    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        super().__init__(f"unknown delivery id(s): {', '.join(ids)}")


class RedeliverRefused(Exception):
    """A row may not be queued again as asked (sent without ``force``, or being sent)."""


class BadRequest(ValueError):
    """Arguments that do not make a request (a bad status, limit or combination)."""


DELIVERY_STATUSES = ("pending", "held", "dead", "sent")
DELIVERY_TIMES = ("next_attempt_at", "claimed_until", "enqueued_at", "created_at", "sent_at")


def delivery_view(row: Any) -> dict[str, Any]:
    """One outbox row for operators (the payload is left out; errors are stored masked)."""
    view = {f: getattr(row, f) for f in ("job_id", "agent", "purpose", "channel", "recipient",
                                        "status", "attempts", "last_error")}  # fmt: skip
    view.update({f: getattr(row, f) and getattr(row, f).isoformat() for f in DELIVERY_TIMES})
    return {"id": str(row.id), **view}


def list_deliveries(
    *, status: str | None = None, job_id: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """Outbox rows, newest first, filtered by status and job (at most ``limit``, ≤ 10,000)."""
    from .models import Delivery

    if status is not None and status not in DELIVERY_STATUSES:
        raise BadRequest(f"status must be one of {', '.join(DELIVERY_STATUSES)}, not {status!r}")
    if not 1 <= limit <= 10_000:
        raise BadRequest(f"limit must be between 1 and 10000, not {limit}")
    rows = Delivery.objects.order_by("-created_at", "id")
    rows = rows.filter(status=status) if status else rows
    rows = rows.filter(job_id=job_id) if job_id is not None else rows
    views = [delivery_view(r) for r in rows[:limit]]
    return masked_for_ids(views, {v["job_id"] for v in views})


def redeliver(
    ids: list[str] | None = None, *, job_id: str | None = None, dead: bool = False,
    held: bool = False, force: bool = False, now: datetime,
) -> list[str]:  # fmt: skip
    """Move rows back to pending with their attempts reset, due now, and queue them.

    Either explicit ``ids`` (dead, held or pending rows; a ``sent`` row only with
    ``force``: it is sent again under the same delivery id) or every dead and/or
    held row of ``job_id``. All or nothing: an unknown id, a sent row without
    ``force`` or a row being sent right now refuses the whole request. Returns
    the ids queued again (the delivery ids receivers see do not change).
    """
    from .models import Delivery
    from .runtime import dbclock, outbox
    from .runtime.delivery import live_claim

    if bool(ids) == (job_id is not None):
        raise BadRequest("give delivery ids, or --job ID with --dead and/or --held")
    allowed = ["dead", "held", "pending"] + (["sent"] if force else [])
    if ids:
        parsed = {i: _uuid_text(i) for i in ids}
        rows = dict(Delivery.objects.filter(id__in={u for u in parsed.values() if u})
                    .values_list("id", "status"))  # fmt: skip
        rows = {str(k): v for k, v in rows.items()}
        unknown = sorted(i for i, u in parsed.items() if u not in rows)
        if unknown:
            raise UnknownDelivery(unknown)
        sent = sorted(i for i, st in rows.items() if st == "sent")
        if sent and not force:
            raise RedeliverRefused(f"already sent: {', '.join(sent)} (--force sends it again)")
        selected = Delivery.objects.filter(id__in=list(rows), status__in=allowed)
    else:
        allowed = (["dead"] if dead else []) + (["held"] if held else [])
        if not allowed:
            raise BadRequest("--job needs --dead and/or --held")
        if not (PollJob.objects.filter(job_id=job_id).exists()
                or Delivery.objects.filter(job_id=job_id).exists()):  # fmt: skip
            raise UnknownJob(str(job_id))
        selected = Delivery.objects.filter(job_id=job_id, status__in=allowed)
    with transaction.atomic():
        busy = sorted(str(i) for i in selected.exclude(live_claim()).values_list("id", flat=True))
        if busy:
            raise RedeliverRefused(f"being sent right now: {', '.join(busy)}; try again shortly")
        chosen = [str(i) for i in selected.values_list("id", flat=True)]
        if force:  # a channel's own "already sent" marker must not swallow the re-send
            try:
                outbox.forget_sent(chosen)
            except Exception as exc:
                raise RedeliverRefused(f"cannot send again: {type(exc).__name__}: {exc}") from exc
        Delivery.objects.filter(live_claim(), id__in=chosen, status__in=allowed).update(
            status="pending", attempts=0, next_attempt_at=dbclock.to_db(now), claimed_until=None,
            enqueued_at=None, sent_at=None,
        )  # fmt: skip
        transaction.on_commit(lambda: outbox.enqueue(chosen))
    log.info("delivery.redeliver rows=%s job=%s force=%s", len(chosen), job_id, force)
    return chosen


def _uuid_text(text: str) -> str | None:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def _retry_held(*, now: datetime) -> None:
    """After a reload, held rows go back to pending and are queued (what the reload did
    not fix holds them again at once)."""
    from .runtime import outbox

    try:
        outbox.retry_held_after_reload(now=now)
    except Exception as exc:
        log.warning("reload.held_retry_failed: %s; the sweeper retries held rows", exc)
