"""nexopoll's own settings (``NEXOPOLL_*``): the tick, beat, batches, the outbox, plugins,
health, metrics and the API, and what nexopoll.net and Flower are given."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from nexopoll.env import env_bool, env_float, env_int, env_secret, env_str
from nexopoll.settings.base import BASE_DIR

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
