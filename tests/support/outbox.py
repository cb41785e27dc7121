"""Outbox rows written straight to the DB, for tests that start from a given row."""

from __future__ import annotations

from datetime import datetime

from nexopoll.models import Delivery


def outbox_row(job_id: str, *, at: datetime, **fields) -> Delivery:
    """A row of ``job_id`` (agent ana, epoch 1, pending, to ``log`` ``ops``, an empty
    payload) created and due at ``at``; ``fields`` set any other column."""
    values = {
        "agent": "ana",
        "epoch": 1,
        "channel": "log",
        "recipient": "ops",
        "payload": {},
        "next_attempt_at": at,
        "created_at": at,
        **fields,
    }
    return Delivery.objects.create(job_id=job_id, **values)
