"""Values the DB cannot hold (RELIABILITY row 56), through the whole tick.

A feed item with ``&#0;`` or a JSON item with ``"\\u0000"`` (PostgreSQL refuses U+0000
in ``text`` and ``jsonb``) is stored without the NUL; the tick commits, the job stays
unpaused and every other item of the tick is delivered. Run on both databases (the
PostgreSQL run is the one that used to fail: ``DATABASE_URL=postgres://…``). A DB error
that still happens is described without SQL.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import DatabaseError, connection

from nexopoll.models import Delivery, PollState
from nexopoll.runtime import history
from nexopoll.runtime.delivery import deliver_rows
from nexopoll.runtime.redis import get_redis
from nexopoll.runtime.store import describe_db_error
from nexopoll.runtime.tick import tick_job
from tests.pollers.rss_fixtures import rss
from tests.support.httpserver import TestHTTPServer, json_reply, reply
from tests.support.sink import Sink

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def job(job_id: str, kind: str, sink_url: str, **config) -> dict:
    return {
        "id": job_id,
        "kind": kind,
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": {
            "deliver": {"channel": "webhook", "to": "ops"},
            "allow_private_networks": True,
            **config,
        },
    }


def agents(sink_url: str) -> dict:
    return {"ana": {"webhook": {"url": sink_url, "allow_private_networks": True}}}


def delivered(sink: Sink, job_id: str) -> list[dict]:
    rows = list(Delivery.objects.filter(job_id=job_id, purpose="item"))
    assert deliver_rows([str(r.id) for r in rows], clock=lambda: NOW)
    return [h["body"]["payload"] for h in sink.hits if h["body"].get("job_id") == job_id]


def assert_healthy(job_id: str) -> None:
    st = PollState.objects.get(job_id=job_id)
    assert (st.last_status, st.paused, st.last_error) == ("ok", False, "")


def test_a_feed_item_with_nul_is_stored_without_it_and_its_siblings_are_delivered(cfg):
    feed = rss(("post-1", "one"), ("post-2", "t&#0;wo"), ("post-3", "three&#0;"))
    with TestHTTPServer() as srv, Sink() as sink:
        srv.route("GET", "/feed.xml", reply(200, feed, {"Content-Type": "application/rss+xml"}))
        cfg.write(
            [job("blog", "rss", sink.url, feed_url=srv.url("/feed.xml"))], agents=agents(sink.url)
        )
        cfg.reload()
        report = tick_job("blog", now=NOW)
        assert (report.status, report.items_dispatched) == ("ok", 3), report
        assert_healthy("blog")
        payloads = delivered(sink, "blog")
        assert sorted(p["item_id"] for p in payloads) == ["post-1", "post-2", "post-3"]
        assert not any("\x00" in json.dumps(p) or "\\u0000" in json.dumps(p) for p in payloads)
        assert sorted(p["text"].split("\n")[0] for p in payloads) == ["one", "three", "two"]


def test_a_json_item_with_nul_is_stored_without_it_and_its_siblings_are_delivered(cfg):
    items = [
        {"id": 1, "title": "one"},
        {"id": 2, "title": "t\u0000wo", "k\u0000ey": ["a\u0000", {"n": "\u0000"}]},
        {"id": "3\u0000", "title": "three"},
    ]
    with TestHTTPServer() as api, Sink() as sink:
        api.route("GET", "/items", json_reply({"items": items}))
        cfg.write(
            [
                job(
                    "w",
                    "webhook_poll",
                    sink.url,
                    url=api.url("/items"),
                    items_path="items",
                    message_template="{title}",
                )
            ],
            agents=agents(sink.url),
        )
        cfg.reload()
        report = tick_job("w", now=NOW)
        assert (report.status, report.items_dispatched) == ("ok", 3), report
        assert_healthy("w")
        payloads = delivered(sink, "w")
        assert sorted(p["text"] for p in payloads) == ["one", "three", "two"]
        assert not any("\x00" in json.dumps(p) or "\\u0000" in json.dumps(p) for p in payloads)
        # the next tick sees the same items as already delivered: nothing twice
        assert tick_job("w", now=NOW).items_dispatched == 0


def scripted(job_id: str) -> dict:
    return {
        "id": job_id,
        "kind": "scripted",
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": {"deliver": {"channel": "log", "to": "ops"}},
    }


def test_a_poller_error_with_nul_is_stored_and_kept_in_history_without_it(cfg, redis_client):
    cfg.write([scripted("s")])
    cfg.reload()
    redis_client.set("test:mode:s", "raise")
    redis_client.set("test:raise:s", "bad item \x00 <- here")
    report = tick_job("s", now=NOW)
    assert report.status == "transient" and report.error == "bad item  <- here"
    assert PollState.objects.get(job_id="s").last_error == "bad item  <- here"
    [entry] = history.entries(get_redis(), "s")
    assert entry.error == "bad item  <- here"


def test_a_recipient_with_nul_is_stored_without_it(cfg, redis_client):
    """``host.deliver`` refuses a control character in a recipient (a config error); one
    that reaches the outbox some other way is still stored NUL-free."""
    cfg.write([scripted("s")])
    cfg.reload()
    redis_client.rpush("test:src:s", 1, 2)
    redis_client.set("test:raw_recipient:s", "ops\x00room")
    report = tick_job("s", now=NOW)
    assert (report.status, report.items_dispatched) == ("ok", 2)
    assert set(Delivery.objects.values_list("recipient", flat=True)) == {"opsroom"}


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO poll_job (job_id) VALUES (NULL)",  # IntegrityError
        "SELECT * FROM no_such_table_xyz WHERE secret_col = 'item text'",
        "INSERT INTO poll_job (job_id) VALUES ('item text \x00')",  # DataError on PostgreSQL
        "SELECT CAST('item text' AS INTEGER) FROM no_such_table_xyz",
    ],
)
def test_a_db_error_is_described_without_sql(transactional_db, sql):
    with pytest.raises(DatabaseError) as raised, connection.cursor() as cur:
        cur.execute(sql)
    text = describe_db_error(raised.value)
    assert text.startswith(type(raised.value).__name__ + ": ")
    for leak in ("SELECT", "INSERT", "poll_job", "no_such_table", "item text", "secret_col"):
        assert leak not in text, text


def test_row_56_a_huge_setting_is_refused_and_the_last_good_config_keeps_running(cfg, redis_client):
    """10**15 in a numeric setting: refused at load with file:line, nothing applied, and
    the jobs of the last good file still tick and commit."""
    from nexopoll.core.config import ConfigFileError

    cfg.write([scripted("s")])
    cfg.reload()
    cfg.write([scripted("s"), scripted("t")], failure_alert_cooldown_secs=10**15)
    with pytest.raises(ConfigFileError) as raised:
        cfg.reload()
    assert f"{cfg.path}:3: pollers.failure_alert_cooldown_secs: " in str(raised.value)
    redis_client.rpush("test:src:s", 1)
    assert tick_job("s", now=NOW).items_dispatched == 1
    assert not PollState.objects.filter(job_id="t").exists()
