"""``dispatch_delay_ms``: spacing one job's deliveries in time.

A job whose config has ``dispatch_delay_ms: N`` (any kind may; a kind may declare
``dispatch_delay_ms_default``, gmail's is 1000) gets
its item deliveries spread ``N`` ms apart: at commit each row's ``next_attempt_at``
is set one step after the previous one, continuing after the job's rows still
waiting from earlier ticks. The deliver task sends a row when it is due and puts
the others back on the queue with a countdown (:mod:`nexopoll.runtime.delivery`),
so no worker sleeps and no row waits for the sweeper. Alerts and recoveries are
not paced.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max

from ..models import Delivery, DeliveryStatus
from .registry import get_registry

MAX_DELAY_MS = 60_000
PACED = "item"


def delay_of(config: dict[str, Any], default: Any = None) -> timedelta | None:
    """The job's ``dispatch_delay_ms`` (else its kind's ``dispatch_delay_ms_default``)
    as a delay, if positive."""
    value = config.get("dispatch_delay_ms", default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return timedelta(milliseconds=min(value, MAX_DELAY_MS))


def _kind_default(kind: str) -> Any:

    try:
        return getattr(get_registry().get(kind), "dispatch_delay_ms_default", None)
    except Exception:  # an unknown kind paces nothing (the tick reports it)
        return None


def due_times(job: Any, deliveries: Sequence[Any], *, now: datetime) -> list[datetime]:
    """``next_attempt_at`` for each of a tick's deliveries (``now`` unless paced)."""
    delay = delay_of(job.config, _kind_default(job.kind))
    paced = [d for d in deliveries if d.purpose == PACED]
    if delay is None or not paced:
        return [now for _ in deliveries]
    # continue after this job's paced rows not yet tried (attempts == 0): rows backing
    # off after a failure do not push new items back
    last = (
        Delivery.objects.filter(
            job_id=job.job_id, status=DeliveryStatus.PENDING, purpose=PACED, attempts=0
        )
        .aggregate(last=Max("next_attempt_at"))
        .get("last")
    )
    at = now if last is None or last + delay <= now else last + delay
    times: list[datetime] = []
    for d in deliveries:
        if d.purpose == PACED:
            times.append(at)
            at += delay
        else:
            times.append(now)
    return times
