"""``/healthz`` against a real Redis and a real beat: 200 while all is well, 503 with
Redis stopped or beat stopped, and nothing secret in the answer."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from nexopoll.runtime import redis as rmod
from tests.support.procs import RedisServer, free_port, wait_for

from .conftest import job

pytestmark = pytest.mark.integration


def health() -> tuple[int, dict]:
    resp = Client().get("/healthz")
    return resp.status_code, json.loads(resp.content)


@pytest.fixture
def fresh_redis_client(monkeypatch):
    """This process's Redis client made anew for this test's settings: in the whole
    suite's order an earlier test's client (another server, another configuration)
    made the ``redis`` check fail with an AttributeError."""
    from nexopoll.runtime import redis as rmod

    monkeypatch.setattr(rmod, "_client", None)
    monkeypatch.setattr(rmod, "_sentinel", None)


def test_healthy_with_beat_then_503_when_beat_stops(
    stack, settings, monkeypatch, fresh_redis_client
):
    monkeypatch.setenv("CANARY_SECRET", "hz-canary-secret-value")
    settings.NEXOPOLL_HEALTH_BEAT_MAX_AGE_SECS = 2.0
    stack.write([job("a", every=1)])
    stack.reload()
    beat = stack.beat()
    try:
        wait_for(lambda: health()[0] == 200, 30, what="healthz 200 with beat running")
    except AssertionError as exc:  # say which check failed
        raise AssertionError(f"{exc}; last answer: {health()}") from None
    _, body = health()
    assert body["ok"] and body["checks"]["db"]["ok"] and body["checks"]["redis"]["ok"]
    assert body["checks"]["beat"]["lock_held"] and body["checks"]["beat"]["last_loop_age_secs"] < 2
    assert "hz-canary" not in json.dumps(body) and "redis://" not in json.dumps(body)
    # beat's own lines come out once, at their level (not re-logged as WARNING)
    lines = [ln for ln in beat.text().splitlines() if "beat.resync" in ln]
    assert lines and all("INFO nexopoll.beat" in ln and "WARNING" not in ln for ln in lines)
    beat.stop()
    wait_for(lambda: health()[0] == 503, 30, what="healthz 503 after beat stopped")
    _, body = health()
    assert not body["ok"] and not body["checks"]["beat"]["ok"]
    assert "has not looped" in body["checks"]["beat"]["reason"]
    assert body["checks"]["db"]["ok"] and body["checks"]["redis"]["ok"]


def test_503_with_redis_stopped(db, settings):
    port = free_port()
    server = RedisServer(port)
    server.start()
    settings.REDIS_URL = server.url
    rmod._client = None  # the per-process client follows the setting
    try:
        server.client().set(
            settings.CELERY_REDBEAT_KEY_PREFIX + "nexopoll:beat-heartbeat", "9999999999:1"
        )
        assert health()[0] == 200
        server.stop()
        code, body = health()
        assert code == 503 and not body["checks"]["redis"]["ok"]
        assert body["checks"]["redis"]["error"] in ("ConnectionError", "TimeoutError")
        assert body["checks"]["beat"] == {"ok": False, "reason": "redis unavailable"}
        assert body["checks"]["db"]["ok"]
    finally:
        server.stop()
        rmod._client = None
