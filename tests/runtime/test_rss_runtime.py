"""rss through the whole tick (real DB, real Redis, loopback feed server): dedup across
ticks, a 304 writes no outbox row and keeps the cursor, the backlog drains before
validators are stored, timing hints move the next slot, 410 pauses with an operator
message, 503 retries, a hostile feed pauses the job."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from nexopoll.models import Delivery, PollState
from nexopoll.runtime.tick import tick_job
from tests.pollers.rss_fixtures import FeedSite, fixture, rss
from tests.support.httpserver import TestHTTPServer, reply, sequence

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def rss_job(url: str, **config) -> dict:
    return {
        "id": "blog",
        "kind": "rss",
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": {
            "feed_url": url,
            "deliver": {"channel": "log", "to": "ops"},
            "allow_private_networks": True,
            **config,
        },
        "failure_to": {"channel": "log", "to": "oncall"},
    }


def state() -> PollState:
    return PollState.objects.get(job_id="blog")


def items() -> list[str]:
    """Delivered item ids, sorted by their number (outbox rows have no order)."""
    rows = Delivery.objects.filter(job_id="blog", purpose="item")
    return sorted((r.payload["item_id"] for r in rows), key=lambda s: int(re.sub(r"\D", "", s)))


def test_dedup_across_ticks_and_a_304_writes_no_outbox_row(cfg):
    site = FeedSite(fixture("rss20.xml"))
    with TestHTTPServer() as srv:
        srv.route("GET", "/feed.xml", site)
        cfg.write([rss_job(srv.url("/feed.xml"))])
        cfg.reload()
        first = tick_job("blog", now=NOW)
        assert first.status == "ok" and first.items_dispatched == 3
        assert items() == ["post-1", "post-2", "post-3"]
        cursor = bytes(state().cursor)
        rows = Delivery.objects.count()

        second = tick_job("blog", now=NOW)
        request = srv.requests[-1]
        assert request.header("If-None-Match") == site.etag
        assert request.header("If-Modified-Since") == site.last_modified
        assert site.not_modified == 1
        assert second.status == "ok" and second.items_dispatched == 0
        assert Delivery.objects.count() == rows  # the 304: no outbox row at all
        assert bytes(state().cursor) == cursor  # and the cursor is kept
        assert state().ticks_total == 2

        site.set(rss(("post-4", "four")))
        third = tick_job("blog", now=NOW)
        assert third.items_dispatched == 1 and items()[-1] == "post-4"
        text = Delivery.objects.get(payload__item_id="post-4").payload["text"]
        assert text == "four\nhttps://blog.example.com/post-4"


def test_backlog_drains_over_ticks_before_validators_are_kept(cfg):
    site = FeedSite(rss(*[(f"p{i}", f"t{i}") for i in range(12, 0, -1)]))
    with TestHTTPServer() as srv:
        srv.route("GET", "/feed.xml", site)
        cfg.write([rss_job(srv.url("/feed.xml"))])  # max_per_tick defaults to 5
        cfg.reload()
        delivered = []
        for _ in range(4):
            tick_job("blog", now=NOW)
            delivered.append(items())
        upto = [[f"p{i}" for i in range(1, n + 1)] for n in (5, 10, 12, 12)]
        assert delivered == upto  # oldest first, five a tick
        assert [r.header("If-None-Match") for r in srv.requests] == [None, None, None, site.etag]
        assert site.not_modified == 1


def test_the_feed_ttl_pushes_the_next_slot(cfg):
    with TestHTTPServer() as srv:
        srv.route("GET", "/feed.xml", FeedSite(fixture("rss20.xml")))  # <ttl>30</ttl>
        cfg.write([rss_job(srv.url("/feed.xml"))])
        cfg.reload()
        tick_job("blog", now=NOW)
        assert state().next_run_at >= NOW + timedelta(minutes=30)
        tick_job("blog", now=NOW)  # the 304 remembers the feed's ttl
        assert state().next_run_at >= NOW + timedelta(minutes=30)


def test_410_pauses_with_an_operator_message_and_alerts(cfg):
    with TestHTTPServer() as srv:
        srv.route("GET", "/feed.xml", reply(410, b"gone"))
        cfg.write([rss_job(srv.url("/feed.xml"))])
        cfg.reload()
        report = tick_job("blog", now=NOW)
        assert report.status == "permanent"
        assert state().paused and "feed gone (410): remove or fix the URL" in state().paused_reason
        alert = Delivery.objects.get(purpose="alert")
        assert "feed gone (410)" in alert.payload["text"]


def test_429_is_transient_and_the_next_tick_succeeds(cfg):
    with TestHTTPServer() as srv:
        srv.route(
            "GET",
            "/feed.xml",
            sequence(reply(429, b"", {"Retry-After": "5"}), reply(200, rss(("p1", "one")))),
        )
        cfg.write([rss_job(srv.url("/feed.xml"))])
        cfg.reload()
        first = tick_job("blog", now=NOW)
        assert first.status == "transient" and not state().paused
        assert first.retry_at is not None and first.retry_at >= NOW + timedelta(seconds=5)
        second = tick_job("blog", now=NOW)
        assert second.status == "ok" and items() == ["p1"]
        assert state().consecutive_errors == 0


def test_a_hostile_feed_pauses_the_job_and_delivers_nothing(cfg):
    doc = b'<!DOCTYPE r [<!ENTITY a "' + b"x" * 30_000 + b'">]><rss version="2.0"><channel>'
    doc += b"<item><guid>1</guid><title>" + b"&a;" * 10_000 + b"</title></item></channel></rss>"
    with TestHTTPServer() as srv:
        srv.route("GET", "/feed.xml", reply(200, doc))
        cfg.write([rss_job(srv.url("/feed.xml"))])
        cfg.reload()
        report = tick_job("blog", now=NOW)
        assert report.status == "permanent" and "feed refused" in state().paused_reason
        assert items() == []


def test_first_run_skip_through_the_runtime(cfg):
    site = FeedSite(rss(("p2", "two"), ("p1", "one")))
    with TestHTTPServer() as srv:
        srv.route("GET", "/feed.xml", site)
        cfg.write([rss_job(srv.url("/feed.xml"), first_run="skip")])
        cfg.reload()
        assert tick_job("blog", now=NOW).items_dispatched == 0
        site.set(rss(("p3", "three"), ("p2", "two"), ("p1", "one")))
        assert tick_job("blog", now=NOW).items_dispatched == 1
        assert items() == ["p3"]
