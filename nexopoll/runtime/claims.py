"""A sender's claim on an outbox row bounds its send.

A claim (``claimed_until``, DB clock) lasts ``NEXOPOLL_DELIVERY_CLAIM_SECS`` (90 s).
The channel's deadline ends a margin before it (:func:`send_deadline`), and the
attempt's outcome is written only through :func:`mine`: the row while its
``claimed_until`` is still the one this worker wrote. A send that outlived its claim
anyway (a channel that ignores its deadline) and lost the row to another worker
writes nothing (:func:`lost`).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.conf import settings

from ..models import Delivery, DeliveryStatus

log = logging.getLogger("nexopoll.delivery")

CLAIM_SECS = 90
SEND_DEADLINE_SECS = 30.0  # per attempt, over connect, headers and body (setting overrides)
# a send ends this long before its claim does (at most this share of the claim)
CLAIM_MARGIN_SECS, CLAIM_MARGIN_SHARE = 5.0, 0.2
CLAIM = timedelta(seconds=CLAIM_SECS)  # NEXOPOLL_DELIVERY_CLAIM_SECS overrides


def claim_secs() -> float:
    """How long a sender holds a row: ``NEXOPOLL_DELIVERY_CLAIM_SECS`` when set to other
    than the default, else ``CLAIM`` (90 s; code may set it)."""
    configured = float(getattr(settings, "NEXOPOLL_DELIVERY_CLAIM_SECS", 0) or CLAIM_SECS)
    if configured != CLAIM_SECS:
        return configured
    return CLAIM.total_seconds()


def send_deadline(claimed_at: float) -> float:
    """Seconds the channel's send may take: the attempt's deadline
    (``NEXOPOLL_DELIVERY_DEADLINE_SECS``), cut to end a margin before the claim taken at
    ``claimed_at`` (``time.monotonic()``) runs out."""
    hold = claim_secs()
    margin = min(CLAIM_MARGIN_SECS, hold * CLAIM_MARGIN_SHARE)
    left = hold - margin - (time.monotonic() - claimed_at)
    configured = getattr(settings, "NEXOPOLL_DELIVERY_DEADLINE_SECS", SEND_DEADLINE_SECS)
    return max(min(float(configured), left), 0.05)


def mine(row: Delivery) -> Any:
    """The row while it is still under the claim this worker took (its ``claimed_until``
    unchanged, DB time): an outcome is written through this, never over another's claim."""
    return Delivery.objects.filter(
        id=row.id, status=DeliveryStatus.PENDING, claimed_until=row.claimed_until
    )


def lost(row: Delivery, outcome: str) -> str:
    log.warning(
        "delivery.claim_lost id=%s job=%s channel=%s outcome=%s: the send outlasted its "
        "claim and another worker took the row; nothing recorded",
        row.id,
        row.job_id,
        row.channel,
        outcome,
    )
    return "lost"
