"""Celery's settings: Redis (or Sentinel), the broker, the task queues and beat."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

from nexopoll.env import env_float, env_int, env_secret, env_str
from nexopoll.redisconf import celery_overrides, sentinel_conf
from nexopoll.settings.tunables import (
    NEXOPOLL_BREAKER_CAP_SECS,
    NEXOPOLL_SWEEP_SECS,
    NEXOPOLL_TICK_TIMEOUT_SECS,
)

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
# Every Redis key nexopoll writes starts with this (leases, rate limits, politeness,
# semaphores, history, metrics, RedBeat's entries and lock), and it names the Celery
# queue: two deployments sharing one Redis set different prefixes. The default keeps
# the names of earlier versions ("nexopoll:…", queue "nexopoll").
NEXOPOLL_REDIS_PREFIX = env_str("NEXOPOLL_REDIS_PREFIX", "nexopoll") or "nexopoll"
if not all(c.isalnum() or c in "-_." for c in NEXOPOLL_REDIS_PREFIX):
    raise ImproperlyConfigured(
        f"NEXOPOLL_REDIS_PREFIX may hold letters, digits, '-', '_' and '.', "
        f"not {NEXOPOLL_REDIS_PREFIX!r}"
    )
# Redis Sentinel (nexopoll/redisconf.py): every client follows the current master; REDIS_URL
# then gives only the db number and the master's password
NEXOPOLL_REDIS_SENTINEL = sentinel_conf(
    env_str("NEXOPOLL_REDIS_SENTINELS", ""),
    env_str("NEXOPOLL_REDIS_SENTINEL_MASTER", ""),
    env_secret("NEXOPOLL_REDIS_SENTINEL_PASSWORD", ""),
    REDIS_URL,
)
# The broker: Redis (REDIS_URL) unless CELERY_BROKER_URL names another, e.g. RabbitMQ
# (amqp://user:pass@host:port/vhost). Redis stays at REDIS_URL for RedBeat, leases and
# the rest whatever the broker is (docs/deploy.md).
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "") or REDIS_URL
BROKER_IS_AMQP = CELERY_BROKER_URL.partition("://")[0] in ("amqp", "amqps", "pyamqp")
# RabbitMQ queue type: quorum (replicated; RabbitMQ >= 3.8) or classic; both durable
NEXOPOLL_AMQP_QUEUE_TYPE = env_str("NEXOPOLL_AMQP_QUEUE_TYPE", "quorum")
if NEXOPOLL_AMQP_QUEUE_TYPE not in ("quorum", "classic"):
    raise ImproperlyConfigured(
        f"NEXOPOLL_AMQP_QUEUE_TYPE must be quorum or classic, not {NEXOPOLL_AMQP_QUEUE_TYPE!r}"
    )
CELERY_RESULT_BACKEND = "django-db"
CELERY_TASK_IGNORE_RESULT = True  # ticks keep no results; "run now" does (django-celery-results)
CELERY_RESULT_EXTENDED = True
CELERY_RESULT_EXPIRES = 7 * 24 * 3600
CELERY_TASK_ACKS_LATE = True
# Keep the DB connection across tasks: Celery's Django fixup otherwise closes and reopens
# it around every task, which cost more than the tick itself. A broken one is not kept:
# runtime/workerhooks.py drops unusable connections before every task (health checks).
CELERY_DB_REUSE_MAX = env_int("NEXOPOLL_DB_REUSE_MAX", 10_000)
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_TASK_SOFT_TIME_LIMIT = int(NEXOPOLL_TICK_TIMEOUT_SECS) + 30
CELERY_TASK_TIME_LIMIT = int(NEXOPOLL_TICK_TIMEOUT_SECS) + 60
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
_VISIBILITY = env_int(
    "NEXOPOLL_VISIBILITY_TIMEOUT",
    # above the longest retry countdown (the breaker cap) plus the hard time limit
    int(NEXOPOLL_BREAKER_CAP_SECS) + CELERY_TASK_TIME_LIMIT + 60,
)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _VISIBILITY,
    # another prefix also moves kombu's own keys (unacked, bindings, events, control)
    **(
        {"global_keyprefix": NEXOPOLL_REDIS_PREFIX + ":"}
        if NEXOPOLL_REDIS_PREFIX != "nexopoll"
        else {}
    ),
    "unacked_restore_throttle": env_float("NEXOPOLL_UNACKED_RESTORE_THROTTLE", 0.1),
    "socket_timeout": 10,
    "socket_connect_timeout": 5,
    "health_check_interval": 10,
}
CELERY_REDBEAT_REDIS_URL = REDIS_URL
CELERY_REDBEAT_REDIS_OPTIONS = {
    "socket_timeout": 10,
    "socket_connect_timeout": 5,
    "health_check_interval": 10,
}
CELERY_REDBEAT_KEY_PREFIX = NEXOPOLL_REDIS_PREFIX + ":redbeat:"
if NEXOPOLL_REDIS_SENTINEL is not None:
    _overrides = celery_overrides(
        NEXOPOLL_REDIS_SENTINEL, CELERY_BROKER_TRANSPORT_OPTIONS, CELERY_REDBEAT_REDIS_OPTIONS
    )
    if BROKER_IS_AMQP:  # RabbitMQ stays the broker; the sentinels serve the rest
        _overrides = {k: v for k, v in _overrides.items() if not k.startswith("CELERY_BROKER")}
    globals().update(_overrides)
CELERY_REDBEAT_LOCK_TIMEOUT = env_int("NEXOPOLL_BEAT_LOCK_TIMEOUT", 30)
CELERY_BEAT_MAX_LOOP_INTERVAL = env_float("NEXOPOLL_BEAT_MAX_LOOP", 1.0)
CELERY_BEAT_SCHEDULER = "nexopoll.runtime.beat:NexopollScheduler"
CELERY_BEAT_SCHEDULE = {
    "nexopoll-sweep-outbox": {"task": "nexopoll.sweep_outbox", "schedule": NEXOPOLL_SWEEP_SECS},
}
# Two queues, so a slow channel's sends never wait in front of ticks: ticks, batches
# and run-now on the tick queue (the prefix, the name earlier versions used for all);
# deliveries and the outbox sweeps on the delivery queue ("<prefix>.deliveries").
# The Procfile's worker passes no -Q: it consumes CELERY_TASK_QUEUES, both queues; a
# pool of its own per queue is `-Q <queue>` (docs/deploy.md, "Queues").
CELERY_TASK_DEFAULT_QUEUE = NEXOPOLL_TICK_QUEUE = NEXOPOLL_REDIS_PREFIX
NEXOPOLL_DELIVERY_QUEUE = NEXOPOLL_REDIS_PREFIX + ".deliveries"
CELERY_TASK_ROUTES = {
    task: {"queue": queue}
    for queue, tasks in (
        (NEXOPOLL_TICK_QUEUE, ("nexopoll.tick", "nexopoll.tick_batch", "nexopoll.run_now")),
        (NEXOPOLL_DELIVERY_QUEUE, ("nexopoll.deliver", "nexopoll.sweep_outbox")),
    )
    for task in tasks
}
# Publish through the nameless exchange: kombu's Redis transport then pushes to the
# queue's list directly instead of looking up `_kombu.binding.*` keys, which a
# flushed Redis loses (publishes would be dropped until every worker restarts).
CELERY_TASK_QUEUES = tuple(
    Queue(name, Exchange("", type="direct"), routing_key=name)
    for name in (NEXOPOLL_TICK_QUEUE, NEXOPOLL_DELIVERY_QUEUE)
)
CELERY_TASK_DEFAULT_EXCHANGE = ""
if BROKER_IS_AMQP:
    # RabbitMQ: each a durable queue bound to a durable topic exchange of its name
    # (Celery's native delayed delivery, which quorum queues need for countdowns, wants a
    # topic exchange); the messages are persistent (delivery_mode 2, Celery's default)
    CELERY_TASK_QUEUES = tuple(
        Queue(
            name,
            Exchange(name, type="topic", durable=True),
            routing_key=name,
            durable=True,
            queue_arguments={"x-queue-type": NEXOPOLL_AMQP_QUEUE_TYPE},
        )
        for name in (NEXOPOLL_TICK_QUEUE, NEXOPOLL_DELIVERY_QUEUE)
    )
    CELERY_TASK_DEFAULT_EXCHANGE = CELERY_TASK_DEFAULT_QUEUE
    CELERY_TASK_DEFAULT_EXCHANGE_TYPE = "topic"
    CELERY_TASK_DEFAULT_QUEUE_TYPE = NEXOPOLL_AMQP_QUEUE_TYPE
    CELERY_TASK_DEFAULT_DELIVERY_MODE = "persistent"
CELERY_TASK_DEFAULT_ROUTING_KEY = CELERY_TASK_DEFAULT_QUEUE
