"""The Celery app. Configuration comes from Django settings (``CELERY_*``).

The broker is kombu's Redis transport with one change (``Transport`` below): a task
whose ack fails (Redis hung past the socket timeout, or restarted) no longer wedges
the worker. Stock kombu raises before it frees the message's prefetch slot, so a
worker with ``prefetch 1`` keeps waiting for an ack that will never come and stops
fetching for good. Here the slot is freed whatever Redis answered; the message's
unacked copy in Redis is restored after the visibility timeout and runs again,
which ticks and deliveries tolerate (lease, epoch fencing, delivery claims).
The same holds when the consumer reconnects (a Redis failover): Celery collects the
old connection first and only then closes its channel and acks the tasks still
running on it, and kombu would reach Redis through the collected transport
(AttributeError, which ended the worker). Here those acks and the channel's restore
leave the messages in the unacked hash for the visibility timeout instead.
With Redis Sentinel (``NEXOPOLL_REDIS_SENTINELS``) the broker is kombu's sentinel
transport with the same fix (``SentinelTransport``): it asks the sentinels for the
current master on every new connection, so a failover costs one reconnect.

On RabbitMQ (``CELERY_BROKER_URL=amqp://...``) kombu's own AMQP transport is used as
is: the broker redelivers an unacked message when its channel closes. With quorum
queues Celery delays countdown/ETA messages in the broker itself (native delayed
delivery), in whole seconds only: a delay under one second (a delivery's first
backoff, a tick's retry) would be refused there, so ``NexopollCelery`` rounds it up to
one second.
"""

from __future__ import annotations

import logging
import math
import os
from datetime import datetime
from functools import cached_property
from typing import Any

from celery import Celery, signals
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")
logger = logging.getLogger(__name__)


class QoS(kombu_redis.QoS):
    def _collected(self) -> bool:
        """The consumer's reconnect has collected this channel's connection: kombu
        cleared the transport's client, so any new Redis client (``_connparams``) raises
        AttributeError. Celery acks and closes the old channel after that."""
        transport = self.channel.connection
        return transport is None or transport.client is None

    def ack(self, delivery_tag: str) -> None:
        try:
            if self._collected():  # the copy in the unacked hash comes back and reruns
                logger.info(
                    "ack %s after the broker connection was collected: the message "
                    "reruns after the visibility timeout",
                    delivery_tag,
                )
            else:
                self._remove_from_indices(delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)  # free the prefetch slot in any case

    def restore_unacked(self, client: Any = None) -> None:
        """Closing the channel puts its unacked messages back on their queues. Never
        raise here: Celery closes the old channel in its reconnect path, outside its
        recoverable errors, so an exception ends the worker ("Unrecoverable error").
        Whatever is not restored now stays in the unacked hash (each restore is one
        transaction: moved, or left there), and the visibility timeout restores it."""
        if self._delivered and self._collected():
            logger.warning(
                "%d unacked messages left for the visibility timeout restore "
                "(the broker connection was collected)",
                len(self._delivered),
            )
            self._delivered.clear()
            return
        try:
            super().restore_unacked(client)
        except Exception as exc:  # nothing may end the worker (above)
            logger.warning(
                "%d unacked messages left for the visibility timeout restore: %r",
                len(self._delivered),
                exc,
            )
            self._delivered.clear()

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if self._collected():
            self.ack(delivery_tag)  # left in the unacked hash: restored after the timeout
            return
        try:
            if requeue:
                self.restore_by_tag(delivery_tag, leftmost=True)
            else:
                self._remove_from_indices(delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)


class _ReusedClients:
    """kombu builds a new ``redis.Redis`` on every ``channel.client`` access (each ack,
    each publish): some 170 response callbacks copied per object, two per task. The
    client is only a view on the channel's connection pool and is thread-safe, so one
    per pool is kept and handed out again until kombu replaces the pool."""

    def _create_client(self, asynchronous: bool = False) -> Any:
        pool = self.async_pool if asynchronous else self.pool
        cache = self.__dict__.setdefault("_nexopoll_clients", {})
        hit = cache.get(asynchronous)
        if hit is not None and hit[0] is pool:
            return hit[1]
        client = super()._create_client(asynchronous)
        cache[asynchronous] = (pool, client)
        return client


class Channel(_ReusedClients, kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(_ReusedClients, kombu_redis.SentinelChannel):
    QoS = QoS


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


class NexopollCelery(Celery):
    @cached_property
    def _whole_second_delays(self) -> bool:
        """Countdowns go through RabbitMQ's native delayed delivery (quorum queues)."""
        return str(self.conf.broker_url).startswith(("amqp", "pyamqp")) and any(
            (q.queue_arguments or {}).get("x-queue-type") == "quorum"
            for q in self.amqp.queues.values()
        )

    def send_task(
        self,
        name: str,
        *args: Any,
        countdown: float | None = None,
        eta: datetime | str | None = None,
        **options: Any,
    ) -> Any:
        if (countdown or eta) and self._whole_second_delays:
            if countdown is not None and 0 < countdown < 1:
                countdown = 1
            if isinstance(eta, str):
                eta = datetime.fromisoformat(eta)
            if isinstance(eta, datetime) and eta.tzinfo is not None:
                # Celery turns the eta into int(seconds) later, so 0.9 s would be 0 there
                # and refused: hand it a whole countdown of at least one second instead
                # (an eta already past, e.g. in another clock or a late retry, is now)
                delay = (eta - self.now()).total_seconds()
                eta = None
                countdown = max(1, math.ceil(delay)) if delay > 0 else None
        return super().send_task(name, *args, countdown=countdown, eta=eta, **options)


app = NexopollCelery("nexopoll")
app.config_from_object("django.conf:settings", namespace="CELERY")
if not str(app.conf.broker_url).startswith(("amqp", "pyamqp")):  # not RabbitMQ: Redis
    _sentinel = str(app.conf.broker_url or "").startswith("sentinel://")
    app.conf.broker_transport = (
        f"nexopoll.celery:{'SentinelTransport' if _sentinel else 'Transport'}"
    )
# RedBeat looks its options up by their bare names; set them so, not only under the
# CELERY_ namespace (otherwise it warns and falls back to the broker settings).
app.conf.update(
    {
        key.lower(): app.conf[f"CELERY_{key}"]
        for key in (
            "REDBEAT_REDIS_URL",
            "REDBEAT_REDIS_OPTIONS",
            "REDBEAT_KEY_PREFIX",
            "REDBEAT_LOCK_TIMEOUT",
        )
    }
)
app.autodiscover_tasks(["nexopoll"])


def _harden(**_: object) -> None:
    from .hardening import make_undumpable

    make_undumpable()  # a plugin cannot read the worker's or beat's environment or memory


# The worker (main and each pool child) and beat, before any task or schedule runs.
for _signal in (signals.worker_init, signals.worker_process_init, signals.beat_init):
    _signal.connect(_harden, weak=False)
