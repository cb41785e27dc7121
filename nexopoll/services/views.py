"""How operators read things, one view each: a job, a tick's report, a cursor, the
breaker, a definition, the summary counts. Every view a service returns is masked
by :func:`redact` (one rule for every front-end: :mod:`.masking`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import yaml
from django.conf import settings
from django.db.models import Q

from nexopoll.core.breaker import breaker_label as _label
from nexopoll.core.config.values import mask_plain_secrets
from nexopoll.core.schedule import next_slot
from nexopoll.models import Delivery, PollJob, PollState
from nexopoll.runtime import definitions

from .masking import masked, masked_for_ids, redact_tree, secrets_for

__all__ = [
    "CursorView",
    "breaker_label",
    "cursor_pretty",
    "cursor_text",
    "cursor_view",
    "definition_source",
    "definition_yaml",
    "job_view",
    "masked",
    "masked_for_ids",
    "next_run",
    "redact",
    "redact_tree",
    "secrets_for",
    "summary",
    "tick_view",
]


# --- redaction ------------------------------------------------------------------------
def redact(value: Any, jobs: Any) -> Any:
    """``value`` (output about ``jobs``: ``PollJob`` rows, or job ids) with the values of
    their ``${VAR}``s, their agents' and the server's own tokens masked."""
    jobs = list(jobs)
    if jobs and isinstance(jobs[0], str):
        return masked_for_ids(value, jobs)
    return masked(value, jobs)


# --- the breaker ----------------------------------------------------------------------
def breaker_label(open_until: datetime | None, now: datetime) -> str:
    """``closed``, ``open`` or ``half-open`` (:func:`nexopoll.core.breaker.breaker_label`)."""
    return _label(open_until, now=now)


# --- a cursor -------------------------------------------------------------------------
@dataclass(frozen=True)
class CursorView:
    """A cursor for people: ``text`` round-trips (UTF-8, else ``base64:…``; None: no
    cursor); ``format`` (``none``, ``json``, ``hex``) and ``pretty`` are for reading."""

    text: str | None
    format: str
    pretty: str


def cursor_view(cursor: bytes | memoryview | None) -> CursorView:
    if cursor is None:
        return CursorView(None, "none", "(no cursor yet)")
    raw = bytes(cursor)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return CursorView("base64:" + base64.b64encode(raw).decode(), "hex", raw.hex(" ", 2))
    try:
        return CursorView(text, "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False))
    except ValueError:
        return CursorView(text, "hex", raw.hex(" ", 2))


def cursor_text(cursor: bytes | memoryview | None) -> str | None:
    return cursor_view(cursor).text


def cursor_pretty(cursor: bytes | memoryview | None) -> tuple[str, str]:
    """``(format, text)``: pretty-printed JSON where the cursor is JSON, otherwise hex."""
    view = cursor_view(cursor)
    return view.format, view.pretty


# --- a tick's report --------------------------------------------------------------------
def tick_view(report: Any, *, dry_run: bool) -> dict[str, Any]:
    """A ``TickReport`` as JSON-ready data (not masked: the caller knows the job)."""
    return {
        "job_id": report.job_id,
        "status": report.status,
        "reason": report.reason,
        "error": report.error,
        "epoch": report.epoch,
        "items_seen": report.items_seen,
        "items_dispatched": report.items_dispatched,
        "committed": report.committed,
        "dry_run": dry_run,
        "next_cursor": cursor_text(report.next_cursor),
        "deliveries": [
            {"channel": d.channel, "to": d.recipient, "purpose": d.purpose, "payload": d.payload}
            for d in report.deliveries
        ],
        "delivery_ids": [str(i) for i in report.delivery_ids],
    }


# --- a job ----------------------------------------------------------------------------
def job_view(job: PollJob, state: PollState | None, *, now: datetime) -> dict[str, Any]:
    """One job for operators (not masked: see ``jobs.query_jobs``). A paused job has no
    next run (``next_run_at`` and ``next_slot_at`` are None, ``paused`` true); otherwise
    both are the same time: the later of the next schedule slot after ``now`` and a wait
    the last tick asked for (never a time in the past: a job resumed runs at its next
    slot)."""
    jd = definitions.from_row(job, {})
    nxt = next_run(job, state, now=now, jd=jd)
    view: dict[str, Any] = {
        "id": job.job_id,
        "kind": job.kind,
        "agent": job.agent,
        "schedule": job.schedule,
        "stagger_ms": int(jd.offset.total_seconds() * 1000),
        "failure_to": job.failure_to,
        "next_slot_at": nxt.isoformat() if nxt else None,
    }
    if state is not None:
        view.update(
            paused=state.paused,
            paused_reason=state.paused_reason,
            paused_by=state.paused_by,
            status=state.last_status or "never",
            last_error=state.last_error,
            notice=state.notice or None,
            notice_at=state.notice_at.isoformat() if state.notice_at else None,
            consecutive_errors=state.consecutive_errors,
            breaker=breaker_label(state.breaker_open_until, now),
            epoch=state.epoch,
            last_run_at=state.last_run_at.isoformat() if state.last_run_at else None,
            next_run_at=view["next_slot_at"],
            ticks_total=state.ticks_total,
            items_seen_total=state.items_seen_total,
            items_dispatched_total=state.items_dispatched_total,
        )
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


def definition_yaml(job: PollJob) -> str:
    """The job's definition as written in pollers.yaml (``${VAR}`` references unexpanded)."""
    doc: dict[str, Any] = {"id": job.job_id, "kind": job.kind, "agent": job.agent}
    doc["schedule"] = job.schedule
    doc["config"] = mask_plain_secrets(job.config)
    if job.failure_to:
        doc["failure_to"] = job.failure_to
    if job.paused_on_boot:
        doc["paused_on_boot"] = True
    return yaml.safe_dump([doc], sort_keys=False, allow_unicode=True)


def definition_source(job: PollJob) -> str:
    """``file:line`` the definition came from."""
    line = f":{job.source_line}" if job.source_line else ""
    return f"{settings.NEXOPOLL_CONFIG}{line}"


# --- the numbers on the admin index ------------------------------------------------
def summary(*, now: datetime) -> dict[str, int]:
    states = PollState.objects.filter(job_id__in=PollJob.objects.values("job_id"))
    failing = Q(last_status__in=["transient", "permanent"]) | Q(consecutive_errors__gt=0)
    counts = {
        "jobs": PollJob.objects.count(),
        "paused": states.filter(paused=True).count(),
        "failing": states.filter(failing).count(),
        "breaker_open": states.filter(breaker_open_until__gt=now).count(),
    }
    for status in ("pending", "held", "dead"):
        counts[f"deliveries_{status}"] = Delivery.objects.filter(status=status).count()
    return counts
