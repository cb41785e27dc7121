"""Publishing scheduled ticks from beat: Celery's own message, built once per entry.

Celery's ``send_task`` re-reads its configuration and re-renders the whole message
on every call, about 1 ms of beat CPU per dispatch. A scheduled entry sends the
same task with the same arguments every time, so beat builds the message once
with Celery's ``create_task_message`` and, per send, only sets what changes (the
task id and the expiry). On Redis, messages go through the nameless exchange straight
to the queue, inside the producer's publish batch. Only tasks routed to the tick queue
(``task_routes``: ticks and batches) take this path. On RabbitMQ they go through the
queue's own exchange, declare the (durable) queue first, since a message routed to
a queue nobody declared yet is dropped, and reconnect once when the broker went away
(a restarted RabbitMQ closes the producer's channel for good; Redis reconnects alone).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

PERSISTENT = 2
#: on RabbitMQ: one reconnect per failed publish, so a broker that is down costs beat a
#: refused connection per message, not a long retry loop (the tick is skipped and logged)
AMQP_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
TICK_TASK = "nexopoll.tick"
BATCH_TASK = "nexopoll.tick_batch"


@dataclass(frozen=True)
class _Template:
    entry: Any
    headers: dict[str, Any]
    reply_to: str
    body: Any
    expires: timedelta | None


class TickPublisher:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.queue = app.conf.task_default_queue
        self.serializer = app.conf.task_serializer
        queue = app.amqp.queues[self.queue]
        self.exchange = queue.exchange.name if queue.exchange else ""
        self.routing_key = queue.routing_key or self.queue
        # what every publish adds on RabbitMQ (nothing on Redis: see the module doc)
        amqp = app.connection_for_write().transport.driver_type == "amqp"
        self.options: dict[str, Any] = (
            {"declare": [queue], "retry": True, "retry_policy": AMQP_RETRY} if amqp else {}
        )
        self._templates: dict[str, _Template] = {}
        self._routes: dict[str, str] = {}  # task name -> its queue (task_routes)

    def can_publish(self, entry: Any) -> bool:
        """Entries with routing or other options, and tasks routed to another queue
        (the outbox sweep goes to the delivery queue), go through Celery's own path."""
        return set(entry.options or {}) <= {"expires"} and self._queue_of(entry.task) == self.queue

    def _queue_of(self, task: str) -> str:
        queue = self._routes.get(task)
        if queue is None:
            routed = self.app.amqp.router.route({}, task).get("queue")
            queue = self._routes[task] = getattr(routed, "name", None) or self.queue
        return queue

    def publish(self, producer: Any, entry: Any, now: datetime) -> str:
        """Send one tick of ``entry``; return its task id."""
        t = self._templates.get(entry.name)
        if t is None or t.entry is not entry:  # a re-decoded entry may have changed
            t = self._templates[entry.name] = self._build(entry)
        task_id = str(uuid.uuid4())
        headers = {**t.headers, "id": task_id, "root_id": task_id}
        if t.expires is not None:
            headers["expires"] = (now + t.expires).isoformat()
        producer.publish(
            t.body,
            exchange=self.exchange,
            routing_key=self.routing_key,
            serializer=self.serializer,
            headers=headers,
            delivery_mode=PERSISTENT,
            correlation_id=task_id,
            reply_to=t.reply_to,
            **self.options,
        )
        return task_id

    def publish_batch(self, producer: Any, entries: list[Any], now: datetime) -> str:
        """Send one ``nexopoll.tick_batch`` for ``entries`` (each a job's tick entry, see
        ``batchable``); it expires with the soonest of theirs. Return its task id."""
        task_id = str(uuid.uuid4())
        jobs = [[e.args[0], (e.kwargs or {}).get("lease_ttl_ms")] for e in entries]
        expires = min(float(e.options["expires"]) for e in entries)
        message = self.app.amqp.create_task_message(
            task_id, BATCH_TASK, [jobs], {}, expires=now + timedelta(seconds=expires)
        )
        producer.publish(
            message.body,
            exchange=self.exchange,
            routing_key=self.routing_key,
            serializer=self.serializer,
            headers=message.headers,
            delivery_mode=PERSISTENT,
            correlation_id=task_id,
            reply_to=message.properties.get("reply_to", ""),
            **self.options,
        )
        return task_id

    def batchable(self, entry: Any) -> bool:
        """A job's scheduled tick that may travel in a batch: the plain ``nexopoll.tick``
        of one job, with an expiry (one-shots and routed entries keep their own message)."""
        options = entry.options or {}
        return (
            entry.task == TICK_TASK
            and len(entry.args or ()) == 1
            and set(entry.kwargs or {}) <= {"lease_ttl_ms"}
            and set(options) == {"expires"}
        )

    def _build(self, entry: Any) -> _Template:
        expires = (entry.options or {}).get("expires")
        message = self.app.amqp.create_task_message(
            "template", entry.task, entry.args, entry.kwargs
        )
        return _Template(
            entry=entry,
            headers=dict(message.headers),
            reply_to=message.properties.get("reply_to", ""),
            body=message.body,
            expires=None if expires is None else timedelta(seconds=float(expires)),
        )
