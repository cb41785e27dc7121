"""Read the Celery messages waiting in the broker's Redis list (kombu's wire format).

Each list entry is a JSON envelope whose ``body`` is the base64 of
``[args, kwargs, embed]``; ``headers.task`` names the task. The Redis broker only (the
tests' default): with RabbitMQ (tests/integration/test_rabbit_broker.py) the messages
are observed where they end up, the worker's effects and the webhook sink.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from typing import Any

QUEUE = "nexopoll"  # ticks, batches, run-now
DELIVERIES = "nexopoll.deliveries"  # deliveries and outbox sweeps (settings: task_routes)


def messages(client: Any, queue: str = QUEUE) -> list[tuple[str, list[Any]]]:
    """``(task name, args)`` of every message in ``queue``, oldest first."""
    out = []
    for raw in reversed(client.lrange(queue, 0, -1)):  # kombu LPUSHes, workers BRPOP
        envelope = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        out.append((envelope["headers"]["task"], args))
    return out


def deliver_etas(client: Any, queue: str = DELIVERIES) -> dict[str, str | None]:
    """Row id → the ``eta`` header (ISO text, None for "now") of its deliver message."""
    out: dict[str, str | None] = {}
    for raw in reversed(client.lrange(queue, 0, -1)):
        envelope = json.loads(raw)
        if envelope["headers"]["task"] == "nexopoll.deliver":
            args, _kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
            out.update(dict.fromkeys(args[0], envelope["headers"].get("eta")))
    return out


def queued_deliveries(client: Any, queue: str = DELIVERIES) -> Counter[str]:
    """How many ``nexopoll.deliver`` messages carry each outbox row id."""
    return Counter(
        row_id
        for task, args in messages(client, queue)
        if task == "nexopoll.deliver"
        for row_id in args[0]
    )
