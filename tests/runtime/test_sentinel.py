"""Redis Sentinel configuration: every client of nexopoll asks the sentinels for the master.

Real sentinels on loopback (``SentinelGroup``), with passwords on the data nodes and on the
sentinels; ``REDIS_URL`` names a port nobody listens on (only its db and password count).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.core.exceptions import ImproperlyConfigured
from kombu import Connection
from redbeat.schedulers import get_redis as redbeat_get_redis

from nexopoll import celery as nexo_celery
from nexopoll import health
from nexopoll.redisconf import celery_overrides, parse_sentinels, sentinel_conf
from nexopoll.runtime import redis as rmod
from tests.support.sentinel import MASTER, SentinelGroup

PW, SPW = "p@ss/word:1", "sentinel-secret"


def test_sentinels_parse_and_bad_values_name_the_variable():
    assert parse_sentinels(" a:1, [::1]:26379 ,") == [("a", 1), ("::1", 26379)]
    for bad in ("a", "a:", ":1", "a:x", "a:70000"):
        with pytest.raises(ImproperlyConfigured, match="NEXOPOLL_REDIS_SENTINELS"):
            parse_sentinels(bad)
    with pytest.raises(ImproperlyConfigured, match="NEXOPOLL_REDIS_SENTINEL_MASTER"):
        sentinel_conf("a:1", "", "", "redis://x/0")
    with pytest.raises(ImproperlyConfigured, match="NEXOPOLL_REDIS_SENTINELS is empty"):
        sentinel_conf("", "m", "", "redis://x/0")
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        sentinel_conf("a:1", "m", "", "redis://x/zero")
    assert sentinel_conf("", "", "", "redis://x/0") is None


def test_overrides_point_broker_and_redbeat_at_the_sentinels():
    conf = sentinel_conf(
        "h1:26379,h2:26380", "mymaster", SPW, f"redis://:{quote(PW, safe='')}@ignored:1/3"
    )
    assert "p@ss" not in repr(conf) and SPW not in repr(conf)
    out = celery_overrides(conf, {"visibility_timeout": 9}, {"socket_timeout": 10})
    broker = out["CELERY_BROKER_URL"]
    assert broker.split(";") == [
        "sentinel://:p%40ss%2Fword%3A1@h1:26379/3",
        "sentinel://:p%40ss%2Fword%3A1@h2:26380/3",
    ]
    opts = out["CELERY_BROKER_TRANSPORT_OPTIONS"]
    assert opts["visibility_timeout"] == 9 and opts["master_name"] == "mymaster"
    assert opts["sentinel_kwargs"]["password"] == SPW
    assert out["CELERY_REDBEAT_REDIS_URL"].startswith("redis-sentinel://")
    rb = out["CELERY_REDBEAT_REDIS_OPTIONS"]
    assert rb["sentinels"] == [("h1", 26379), ("h2", 26380)] and rb["service_name"] == "mymaster"
    assert rb["password"] == PW and rb["db"] == 3 and rb["sentinel_kwargs"]["password"] == SPW
    assert rb["socket_timeout"] == 10


def test_the_sentinel_transport_keeps_the_ack_fix():
    assert nexo_celery.SentinelChannel.QoS is nexo_celery.QoS
    assert nexo_celery.SentinelTransport.Channel is nexo_celery.SentinelChannel


@pytest.fixture(scope="module")
def group():
    g = SentinelGroup(password=PW, sentinel_password=SPW).start()
    yield g
    g.stop()


@pytest.fixture
def sentinel_settings(group, settings, monkeypatch, db):
    conf = sentinel_conf(group.addresses, MASTER, SPW, group.url.replace("/0", "/2"))
    settings.NEXOPOLL_REDIS_SENTINEL = conf
    monkeypatch.setattr(rmod, "_client", None)
    return conf


def _master(group: SentinelGroup) -> str:
    return f"127.0.0.1:{group.master_port()}"


def test_get_redis_and_the_metrics_client_follow_the_master(group, sentinel_settings):
    client = rmod.get_redis()
    client.set("sentinel:probe", "1")
    direct = group.client()  # the test's own view of the master
    assert direct.execute_command("SELECT", 2) and direct.get("sentinel:probe") == "1"
    assert rmod.new_client(encoding_errors="replace").get("sentinel:probe") == "1"
    assert rmod.get_sentinel() is not None


def test_broker_connection_publishes_and_consumes_through_the_sentinels(group, sentinel_settings):
    out = celery_overrides(sentinel_settings, {}, {})
    with Connection(
        out["CELERY_BROKER_URL"],
        transport=nexo_celery.SentinelTransport,
        transport_options=out["CELERY_BROKER_TRANSPORT_OPTIONS"],
    ) as conn:
        q = conn.SimpleQueue("nexopoll-sentinel-probe")
        q.put({"n": 1})
        msg = q.get(timeout=5)
        assert msg.payload == {"n": 1}
        msg.ack()
        q.close()


def test_redbeat_finds_the_master_through_the_sentinels(group, sentinel_settings):
    from celery import Celery

    out = celery_overrides(sentinel_settings, {}, {"socket_timeout": 5})
    app = Celery("probe", set_as_current=False)
    app.conf.redbeat_redis_url = out["CELERY_REDBEAT_REDIS_URL"]
    app.conf.redbeat_redis_options = out["CELERY_REDBEAT_REDIS_OPTIONS"]
    assert redbeat_get_redis(app) is not redbeat_get_redis(app)  # RedBeat: a pool per call
    client = rmod.pin_redbeat_client(app)
    assert redbeat_get_redis(app) is client and redbeat_get_redis(app) is client
    client.set("sentinel:redbeat", "1")
    assert rmod.get_redis().get("sentinel:redbeat") == "1"  # same master, same db


def test_healthz_names_the_master_and_the_sentinels_it_reaches(group, sentinel_settings):
    _, results = health.run_checks()
    redis_entry = results["redis"]
    assert redis_entry["ok"] and redis_entry["master"] == _master(group)
    assert sorted(redis_entry["sentinels_reachable"]) == sorted(group.addresses.split(","))
    assert redis_entry["sentinels_unreachable"] == []
    assert PW not in str(results) and SPW not in str(results)
    down = group.sentinels[0]
    down.stop()
    try:
        _, results = health.run_checks()
        assert results["redis"]["ok"] and results["redis"]["master"] == _master(group)
        assert results["redis"]["sentinels_unreachable"] == [f"127.0.0.1:{down.port}"]
        assert len(results["redis"]["sentinels_reachable"]) == 2
    finally:
        group.sentinels[0] = type(down)(down.port, down.proc.args, SPW)
