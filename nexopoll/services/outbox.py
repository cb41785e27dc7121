"""The outbox verbs: read rows (``query_deliveries``) and queue them again (``redeliver``)."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

import nexopoll.services.views as views
from nexopoll.models import Delivery, PollJob
from nexopoll.runtime import dbclock, outbox
from nexopoll.runtime.delivery import live_claim

from .errors import BadRequest, NotFound, RedeliverRefused, UnknownDelivery, UnknownJob
from .jobs import Page

log = logging.getLogger("nexopoll.services")

DELIVERY_STATUSES = ("pending", "held", "dead", "sent")
DELIVERY_TIMES = ("next_attempt_at", "claimed_until", "enqueued_at", "created_at", "sent_at")
MAX_LIMIT = 10_000


def delivery_view(row: Any) -> dict[str, Any]:
    """One outbox row for operators (the payload is left out; errors are stored masked)."""
    view = {
        f: getattr(row, f)
        for f in (
            "job_id",
            "agent",
            "purpose",
            "channel",
            "recipient",
            "status",
            "attempts",
            "last_error",
        )
    }
    view.update({f: getattr(row, f) and getattr(row, f).isoformat() for f in DELIVERY_TIMES})
    return {"id": str(row.id), **view}


def query_deliveries(
    *,
    status: str | None = None,
    job_id: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> Page:
    """Outbox rows, newest first, filtered by status and job, one page of at most
    ``limit`` (≤ 10,000) after the row ``after`` (a delivery id), masked.

    Raises:
        BadRequest: an unknown status, a limit out of range.
        NotFound: ``after`` is no delivery.
    """
    if status is not None and status not in DELIVERY_STATUSES:
        raise BadRequest(f"status must be one of {', '.join(DELIVERY_STATUSES)}, not {status!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
    rows = Delivery.objects.order_by("-created_at", "-id").defer("payload")
    rows = rows.filter(status=status) if status else rows
    rows = rows.filter(job_id=job_id) if job_id is not None else rows
    if after is not None:
        last = _after(after)
        rows = rows.filter(Q(created_at__lt=last[0]) | Q(created_at=last[0], id__lt=last[1]))
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    items = views.redact([delivery_view(r) for r in page], {r.job_id for r in page})
    return Page(items, None, str(page[-1].id) if more else None, page)


def _after(delivery_id: str) -> tuple[datetime, Any]:
    found = _uuid_text(delivery_id)
    last = found and Delivery.objects.filter(id=found).values_list("created_at", "id").first()
    if not last:
        raise NotFound(f"after: no delivery {delivery_id}")
    return last


def list_deliveries(
    *, status: str | None = None, job_id: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """Outbox rows, newest first, filtered by status and job (at most ``limit``, ≤ 10,000)."""
    return query_deliveries(status=status, job_id=job_id, limit=limit).items


def redeliver(
    ids: list[str] | None = None,
    *,
    job_id: str | None = None,
    dead: bool = False,
    held: bool = False,
    force: bool = False,
    now: datetime,
) -> list[str]:
    """Move rows back to pending with their attempts reset, due now, and queue them.

    Either explicit ``ids`` (dead, held or pending rows; a ``sent`` row only with
    ``force``: it is sent again under the same delivery id) or every dead and/or
    held row of ``job_id``. All or nothing: an unknown id, a sent row without
    ``force`` or a row being sent right now refuses the whole request. Returns
    the ids queued again (the delivery ids receivers see do not change).
    """
    if bool(ids) == (job_id is not None):
        raise BadRequest("give delivery ids, or --job ID with --dead and/or --held")
    allowed = ["dead", "held", "pending"] + (["sent"] if force else [])
    if ids:
        parsed = {i: _uuid_text(i) for i in ids}
        rows = dict(
            Delivery.objects.filter(id__in={u for u in parsed.values() if u}).values_list(
                "id", "status"
            )
        )
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
        if not (
            PollJob.objects.filter(job_id=job_id).exists()
            or Delivery.objects.filter(job_id=job_id).exists()
        ):
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
            status="pending",
            attempts=0,
            next_attempt_at=dbclock.to_db(now),
            claimed_until=None,
            enqueued_at=None,
            sent_at=None,
        )
        transaction.on_commit(lambda: outbox.enqueue(chosen))
    log.info("delivery.redeliver rows=%s job=%s force=%s", len(chosen), job_id, force)
    return chosen


def _uuid_text(text: str) -> str | None:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None
