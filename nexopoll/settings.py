"""Django settings. The only module that reads the environment (through ``env.py``).

Embedded defaults run everything on one machine: SQLite under ``data/``, Redis at
``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Set ``DATABASE_URL`` for
PostgreSQL.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

from .core.extras import MissingExtra, require
from .env import env_bool, env_float, env_int, env_secret, env_str
from .redisconf import celery_overrides, sentinel_conf

# NEXOPOLL_HOME holds data/, config/pollers.yaml and plugins/ (default: the current
# directory, the checkout under `make run`): an installed package writes nothing inside itself.
BASE_DIR = Path(env_str("NEXOPOLL_HOME", "") or ".").resolve()
DATA_DIR = Path(env_str("NEXOPOLL_DATA_DIR", str(BASE_DIR / "data")))
# The demo feed /demo/items that config/pollers.yaml's demo jobs poll (`make run` turns it on)
NEXOPOLL_DEMO = env_bool("NEXOPOLL_DEMO", False)

DEBUG = env_bool("DJANGO_DEBUG", False)
# The built-in key lets the CLI, the workers and the tests run without one; the web
# process (nexopoll/wsgi.py, so gunicorn and runserver) refuses it unless DEBUG is on.
# `make run` generates a key under data/ (DJANGO_SECRET_KEY_FILE).
DEV_SECRET_KEY = "nexopoll-insecure-dev-key-change-me"
SECRET_KEY = env_secret("DJANGO_SECRET_KEY", "") or DEV_SECRET_KEY
ALLOWED_HOSTS = [h for h in env_str("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]

INSTALLED_APPS = [
    "admin_ext.apps.NexopollAdminConfig",  # django.contrib.admin with the nexopoll site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_results",
    "nexopoll.apps.NexopollConfig",
    "admin_ext.apps.AdminExtConfig",
]

MIDDLEWARE = [
    # every answer under /api/ is JSON, errors raised anywhere below included
    "nexopoll.api.middleware.ApiJsonMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # static files (the admin's CSS) served by the web process itself, DEBUG on or off
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "nexopoll.urls"
WSGI_APPLICATION = "nexopoll.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


# A locked row or table fails a statement after this long instead of holding the
# worker (PostgreSQL lock_timeout, SQLite busy timeout); a statement is cancelled
# after NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS (PostgreSQL; 0 = no limit). The tick
# treats both as transient errors and retries.
NEXOPOLL_DB_LOCK_TIMEOUT_SECS = env_float("NEXOPOLL_DB_LOCK_TIMEOUT_SECS", 15.0)
NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS = env_float("NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS", 120.0)


def _database() -> dict:
    url = env_str("DATABASE_URL", "")
    if url:
        db = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    else:
        with contextlib.suppress(OSError):  # a fresh NEXOPOLL_HOME: `nexopoll migrate` makes it
            DATA_DIR.mkdir(parents=True, exist_ok=True)
        db = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(DATA_DIR / "nexopoll.sqlite3"),
            "CONN_MAX_AGE": None,  # keep the connection: reopening costs more than a tick
        }
    # A connection that broke (PostgreSQL restarted, a backend killed) is found by a
    # health check before its next use and replaced (workers re-arm it before each task).
    db["CONN_HEALTH_CHECKS"] = True
    if db["ENGINE"].endswith(("postgresql", "postgis")):
        try:
            require("psycopg", "postgres", "a PostgreSQL DATABASE_URL")
        except MissingExtra as exc:
            raise ImproperlyConfigured(str(exc)) from None
        lock_ms = int(NEXOPOLL_DB_LOCK_TIMEOUT_SECS * 1000)
        stmt_ms = int(NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS * 1000)
        options = db.setdefault("OPTIONS", {})
        options["options"] = (
            f"{options.get('options', '')} -c lock_timeout={lock_ms} -c statement_timeout={stmt_ms}"
        ).strip()
    if db["ENGINE"].endswith("sqlite3"):
        # IMMEDIATE takes the write lock at BEGIN, so a tick's commit never fails
        # half-way on a lock upgrade; WAL lets readers run beside the writer.
        db["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": NEXOPOLL_DB_LOCK_TIMEOUT_SECS,
            # FULL: a committed cursor (whose deliveries may already be sent) survives
            # a power loss; in WAL mode it costs one fsync per commit.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous="
            + env_str("NEXOPOLL_SQLITE_SYNCHRONOUS", "FULL")
            + ";",
        }
    return db


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = str(DATA_DIR / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# `collectstatic` (make run does it) fills STATIC_ROOT; without it WhiteNoise still
# finds the files in the apps, so the admin is styled either way.
WHITENOISE_USE_FINDERS = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # the process's real stderr: under Celery, sys.stderr is a proxy that re-logs every
    # line as WARNING, so beat's and the worker's lines would come out twice-prefixed
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.__stderr__",
        }
    },
    "loggers": {
        "nexopoll": {
            "handlers": ["console"],
            "level": env_str("NEXOPOLL_LOG_LEVEL", "INFO"),
            "propagate": False,
        },
        # urllib3 logs each request line at DEBUG, and a Telegram request's path holds
        # the bot token: those lines never pass, whatever the root level
        "urllib3": {"level": "WARNING"},
    },
}

# --- nexopoll -----------------------------------------------------------------
NEXOPOLL_CONFIG = env_str("NEXOPOLL_CONFIG", str(BASE_DIR / "config" / "pollers.yaml"))
# Out-of-tree poller kinds by dotted name, "pkg.module:Class,…" (entry points also work).
NEXOPOLL_EXTRA_POLLERS = env_str("NEXOPOLL_EXTRA_POLLERS", "")
NEXOPOLL_API_TOKEN = env_secret("NEXOPOLL_API_TOKEN", "")
# `${VAR}`s with a default when unset (a plain shell, the MCP server): the demo jobs in
# config/pollers.yaml poll the web process at PORT (as `make run` sets it).
NEXOPOLL_ENV_DEFAULTS = {
    "NEXOPOLL_DEMO_BASE": env_str("NEXOPOLL_DEMO_BASE", "")
    or f"http://127.0.0.1:{env_int('PORT', 8000)}",
}
# `${VAR}`s whose values are not secret (base URLs): shown unmasked in logs, the CLI,
# the admin, the API and MCP. NEXOPOLL_DEMO_BASE is always public; ${file:…} never is.
NEXOPOLL_PUBLIC_VARS = env_str("NEXOPOLL_PUBLIC_VARS", "")
# Floor of the per-job lease TTL (DESIGN: at least 30 s). Tests shorten it.
NEXOPOLL_LEASE_MIN_SECS = env_float("NEXOPOLL_LEASE_MIN_SECS", 30.0)
# Upper bound of one tick's run time (the poller's deadline); never above the lease TTL.
NEXOPOLL_TICK_TIMEOUT_SECS = env_float("NEXOPOLL_TICK_TIMEOUT_SECS", 120.0)
# At most this many deliver/publish calls per tick; one more fails the tick (permanent).
NEXOPOLL_MAX_DELIVERIES_PER_TICK = env_int("NEXOPOLL_MAX_DELIVERIES_PER_TICK", 1000)
if not 1 <= NEXOPOLL_MAX_DELIVERIES_PER_TICK <= 1_000_000:
    raise ImproperlyConfigured("NEXOPOLL_MAX_DELIVERIES_PER_TICK must be 1..1000000")
# Breaker backoff: base doubling up to cap (DESIGN: 30 s → 300 s).
NEXOPOLL_BREAKER_BASE_SECS = env_float("NEXOPOLL_BREAKER_BASE_SECS", 30.0)
NEXOPOLL_BREAKER_CAP_SECS = env_float("NEXOPOLL_BREAKER_CAP_SECS", 300.0)
# How far a poller's next_interval_hint may push the next slot.
NEXOPOLL_MAX_INTERVAL_HINT_SECS = env_float("NEXOPOLL_MAX_INTERVAL_HINT_SECS", 3600.0)
# Beat re-creates every job's RedBeat entry from the DB this often (and at once
# when it finds the schedule gone, e.g. after a Redis flush).
NEXOPOLL_RESYNC_SECS = env_float("NEXOPOLL_RESYNC_SECS", 30.0)
# Beat wakes at most this often and dispatches everything due in one batch.
NEXOPOLL_BEAT_MIN_SLEEP_SECS = env_float("NEXOPOLL_BEAT_MIN_SLEEP_SECS", 0.05)
# Batched dispatch: when at least BATCH_MIN ticks fall due in one beat loop, beat sends
# them as nexopoll.tick_batch messages of at most BATCH_SIZE jobs (0 turns batching off);
# below that every tick keeps a message of its own. A batch polls its jobs one after
# another; once one of its ticks has run for BATCH_SLOW_MS (a poller waiting on the
# network), or the batch for BATCH_BUDGET_SECS, the rest poll side by side on
# BATCH_THREADS threads per worker process. Jobs slower than BATCH_SLOW_MS travel in
# batches of their own, polled side by side at once (BATCH_IO; off: one message each).
NEXOPOLL_BATCH_MIN = env_int("NEXOPOLL_BATCH_MIN", 8)
NEXOPOLL_BATCH_SIZE = env_int("NEXOPOLL_BATCH_SIZE", 50)
NEXOPOLL_BATCH_SLOW_MS = env_float("NEXOPOLL_BATCH_SLOW_MS", 50.0)
NEXOPOLL_BATCH_BUDGET_SECS = env_float("NEXOPOLL_BATCH_BUDGET_SECS", 1.0)
NEXOPOLL_BATCH_THREADS = env_int("NEXOPOLL_BATCH_THREADS", 64)
NEXOPOLL_BATCH_IO = env_bool("NEXOPOLL_BATCH_IO", True)
# Outbox: delivery attempts before a row is dead-lettered; the sweeper period.
NEXOPOLL_DELIVERY_MAX_ATTEMPTS = env_int("NEXOPOLL_DELIVERY_MAX_ATTEMPTS", 8)
NEXOPOLL_DELIVERY_BASE_SECS = env_float("NEXOPOLL_DELIVERY_BASE_SECS", 5.0)
# A sender holds a row this long (DB clock); its send ends a margin before that.
NEXOPOLL_DELIVERY_CLAIM_SECS = env_float("NEXOPOLL_DELIVERY_CLAIM_SECS", 90.0)
NEXOPOLL_SWEEP_SECS = env_float("NEXOPOLL_SWEEP_SECS", 15.0)
# The stream channel caps each Redis Stream with MAXLEN ~ this many entries.
NEXOPOLL_STREAM_MAXLEN = env_int("NEXOPOLL_STREAM_MAXLEN", 100_000)

# The email channel's SMTP server (Django's mail settings, from the environment).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 30.0)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "nexopoll@localhost")

# Crash cap: a tick whose worker died this many times in a row counts as failed.
NEXOPOLL_MAX_CRASHES = env_int("NEXOPOLL_MAX_CRASHES", 3)
# per-host politeness across all workers (0: no cap); a job's host_limits overrides them
NEXOPOLL_HOST_MAX_IN_FLIGHT = env_int("NEXOPOLL_HOST_MAX_IN_FLIGHT", 16)
NEXOPOLL_HOST_MAX_PER_SEC = env_int("NEXOPOLL_HOST_MAX_PER_SEC", 0)
# Subprocess plugins: where their nexopoll-plugin.toml manifests live, the longest
# stdout line accepted, which environment variables a plugin sees besides its
# manifest's env, and the restart backoff of a long-lived plugin that died.
NEXOPOLL_PLUGINS_DIR = env_str("NEXOPOLL_PLUGINS_DIR", str(BASE_DIR / "plugins"))
NEXOPOLL_PLUGIN_MAX_LINE_BYTES = env_int("NEXOPOLL_PLUGIN_MAX_LINE_BYTES", 1 << 20)
NEXOPOLL_PLUGIN_ENV_ALLOW = env_str(
    "NEXOPOLL_PLUGIN_ENV_ALLOW", "PATH,HOME,LANG,LC_ALL,LC_CTYPE,TZ,TMPDIR"
)
# Plugins run as this user when the worker is root (else as root without capabilities)
NEXOPOLL_PLUGIN_USER = env_str("NEXOPOLL_PLUGIN_USER", "")
NEXOPOLL_PLUGIN_RESTART_BASE_SECS = env_float("NEXOPOLL_PLUGIN_RESTART_BASE_SECS", 1.0)
NEXOPOLL_PLUGIN_RESTART_CAP_SECS = env_float("NEXOPOLL_PLUGIN_RESTART_CAP_SECS", 60.0)

# /healthz: beat's last loop older than this fails the check (503); pending deliveries
# older than this are reported (a warning, not a failure).
NEXOPOLL_HEALTH_BEAT_MAX_AGE_SECS = env_float("NEXOPOLL_HEALTH_BEAT_MAX_AGE_SECS", 60.0)
NEXOPOLL_HEALTH_OUTBOX_MAX_AGE_SECS = env_float("NEXOPOLL_HEALTH_OUTBOX_MAX_AGE_SECS", 600.0)

# Metrics and the JSON API (nexopoll/metrics.py, nexopoll/api/): cluster-wide counters in
# Redis (NEXOPOLL_METRICS=false stops writing them); /metrics wants this bearer token when
# set; API requests per client per minute; agents' LLM tools may act on every job.
NEXOPOLL_METRICS = env_bool("NEXOPOLL_METRICS", True)
NEXOPOLL_METRICS_TOKEN = env_secret("NEXOPOLL_METRICS_TOKEN", "")
# a poller's own metrics (host.metric_inc): distinct values one label of one metric of one
# job may take, and series one job may have; beyond them new series are dropped (counted)
NEXOPOLL_METRICS_MAX_LABEL_VALUES = env_int("NEXOPOLL_METRICS_MAX_LABEL_VALUES", 100)
NEXOPOLL_METRICS_MAX_SERIES_PER_JOB = env_int("NEXOPOLL_METRICS_MAX_SERIES_PER_JOB", 500)
NEXOPOLL_API_RATE_PER_MIN = env_int("NEXOPOLL_API_RATE_PER_MIN", 600)
# how long the API's run/dry-run and the admin's dry run wait for the worker before
# answering "still running" (202 + status URL); keep it under gunicorn's 30 s timeout
NEXOPOLL_RUN_WAIT_SECS = env_float("NEXOPOLL_RUN_WAIT_SECS", 20.0)
NEXOPOLL_TOOLS_ALL_JOBS = env_bool("NEXOPOLL_TOOLS_ALL_JOBS", False)

# --- read for nexopoll.net (given to it by nexopoll/apps.py at use time) and Flower ----
# Provider API base URLs set by the operator (trusted: may be private or loopback), by
# provider name; unset ones use the provider's public URL (nexopoll.net.api_base).
NEXOPOLL_API_BASES = {
    name: value
    for name, value in {
        "telegram": env_str("NEXOPOLL_TELEGRAM_API_BASE", ""),
        "whatsapp": env_str("NEXOPOLL_WHATSAPP_API_BASE", ""),
        "slack": env_str("NEXOPOLL_SLACK_API_BASE", ""),
        "gmail": env_str("NEXOPOLL_GMAIL_API_BASE", ""),
        "gcal": env_str("NEXOPOLL_GCAL_API_BASE", ""),
    }.items()
    if value.strip()
}
# Idle connections of the shared HTTP sessions, per worker process.
NEXOPOLL_HTTP_POOL_HOSTS = env_int("NEXOPOLL_HTTP_POOL_HOSTS", 200)
NEXOPOLL_HTTP_POOL_PER_HOST = env_int("NEXOPOLL_HTTP_POOL_PER_HOST", 64)
# Flower (python -m nexopoll.flower): basic auth "user:password[,…]", required unless
# NEXOPOLL_FLOWER_INSECURE=1; where it listens.
NEXOPOLL_FLOWER_BASIC_AUTH = env_str("NEXOPOLL_FLOWER_BASIC_AUTH", "")
NEXOPOLL_FLOWER_INSECURE = env_str("NEXOPOLL_FLOWER_INSECURE", "") == "1"
NEXOPOLL_FLOWER_ADDRESS = env_str("NEXOPOLL_FLOWER_ADDRESS", "127.0.0.1")
NEXOPOLL_FLOWER_PORT = env_int("NEXOPOLL_FLOWER_PORT", 5555)

# The Procfile's worker launcher (python -m nexopoll.workers) validates these two sizes.
NEXOPOLL_WORKER_PROCESSES = env_str("NEXOPOLL_WORKER_PROCESSES", "")  # "": one per core
NEXOPOLL_WORKER_THREADS = env_str("NEXOPOLL_WORKER_THREADS", "")  # "": 64

# --- Celery -------------------------------------------------------------------
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

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # a file, not :memory:, so worker processes started by the tests share it
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-nexopoll.sqlite3")}
