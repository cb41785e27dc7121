"""``/healthz``: one entry per check, 503 when the DB or Redis fails or beat stalls.

Checks: the DB answers; Redis answers; RabbitMQ answers, when it is the broker
(``CELERY_BROKER_URL=amqp://...``; a Redis broker is the Redis check); the beat lock
is held and the holder's last loop is recent; no pending delivery is older than a
threshold (a warning: it does not fail the endpoint, since a slow receiver is not an
outage here). Nothing here shows a secret or a URL; under Redis Sentinel the ``redis``
entry names the current master and the sentinels this process reaches (``host:port``,
as configured in ``NEXOPOLL_REDIS_SENTINELS``), the one place addresses appear.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from .models import Delivery
from .runtime import keys
from .runtime.redis import get_redis, get_sentinel


def _db() -> dict[str, Any]:
    started = time.monotonic()
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchone()
    return {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}


def _redis() -> dict[str, Any]:
    started = time.monotonic()
    get_redis().ping()
    out: dict[str, Any] = {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}
    # only under Sentinel settings (a client left by another configuration is not asked)
    sentinel = get_sentinel() if settings.NEXOPOLL_REDIS_SENTINEL is not None else None
    if sentinel is not None:
        out.update(_sentinels(sentinel))
    return out


def _sentinels(sentinel: Any) -> dict[str, Any]:
    """The master the sentinels name now, and which of them answered."""
    name = settings.NEXOPOLL_REDIS_SENTINEL.master
    reachable, unreachable, master = [], [], None
    for client in sentinel.sentinels:
        kw = client.connection_pool.connection_kwargs
        addr = f"{kw['host']}:{kw['port']}"
        try:
            found = client.sentinel_get_master_addr_by_name(name)
        except Exception:  # down, refused, wrong password: only whether it answered
            unreachable.append(addr)
            continue
        reachable.append(addr)
        if found and master is None:
            host = found[0].decode() if isinstance(found[0], bytes) else found[0]
            master = f"{host}:{found[1]}"
    return {
        "master": master,
        "sentinels_reachable": reachable,
        "sentinels_unreachable": unreachable,
    }


def _broker() -> dict[str, Any]:
    from kombu import Connection

    started = time.monotonic()
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=2) as conn:
        conn.connect()
    return {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}


def _beat() -> dict[str, Any]:
    client = get_redis()
    lock_key = settings.CELERY_REDBEAT_KEY_PREFIX + ":lock"
    held, beat = client.exists(lock_key), client.get(keys.heartbeat_key())
    max_age = settings.NEXOPOLL_HEALTH_BEAT_MAX_AGE_SECS
    if not beat:
        return {
            "ok": False,
            "lock_held": bool(held),
            "last_loop_age_secs": None,
            "reason": "beat has not run (no heartbeat)",
        }
    at, _, pid = beat.partition(":")
    age = round(max(time.time() - float(at), 0.0), 1)
    out = {
        "ok": age <= max_age,
        "lock_held": bool(held),
        "holder_pid": int(pid or 0),
        "last_loop_age_secs": age,
        "max_age_secs": max_age,
    }
    if not out["ok"]:
        out["reason"] = f"beat has not looped for {age} s"
    return out


def _outbox() -> dict[str, Any]:
    from .runtime import dbclock

    threshold = settings.NEXOPOLL_HEALTH_OUTBOX_MAX_AGE_SECS
    now = dbclock.now()  # due times are in the DB's clock
    cutoff = now - timedelta(seconds=threshold)
    old = Delivery.objects.filter(status="pending", next_attempt_at__lt=cutoff)
    oldest = old.order_by("next_attempt_at").values_list("next_attempt_at", flat=True).first()
    return {
        "ok": oldest is None,
        "critical": False,
        "stale_pending": old.count(),
        "oldest_age_secs": round((now - oldest).total_seconds()) if oldest else None,
        "max_age_secs": threshold,
    }


CHECKS = {"db": _db, "redis": _redis, "broker": _broker, "beat": _beat, "outbox": _outbox}
_NEEDS = {"beat": "redis", "outbox": "db"}


def run_checks() -> tuple[bool, dict[str, Any]]:
    """``(healthy, {check: result})``; a failed check reports its error class only."""
    results: dict[str, Any] = {}
    for name, check in CHECKS.items():
        if name == "broker" and not settings.BROKER_IS_AMQP:
            continue  # the broker is Redis: the redis check
        dep = _NEEDS.get(name)
        if dep and not results[dep]["ok"]:
            results[name] = {"ok": False, "reason": f"{dep} unavailable"}
            continue
        try:
            results[name] = check()
        except Exception as exc:  # the class of the failure, never its text (may hold a URL)
            results[name] = {"ok": False, "error": type(exc).__name__}
    healthy = all(r["ok"] or r.get("critical") is False for r in results.values())
    return healthy, results
