"""rss end to end: real beat and worker subprocesses, a loopback feed server with
ETag/Last-Modified, deliveries to the webhook sink. Ticks after the first are 304s
that deliver nothing; a new entry arrives exactly once."""

from __future__ import annotations

import pytest

from nexopoll.models import Delivery, PollState
from tests.pollers.rss_fixtures import FeedSite, rss
from tests.support.httpserver import TestHTTPServer
from tests.support.procs import wait_for

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_rss_job_delivers_once_then_polls_with_304s_through_worker_and_beat(stack):
    site = FeedSite(rss(("p2", "two"), ("p1", "one")))
    with TestHTTPServer() as feeds:
        feeds.route("GET", "/feed.xml", site)
        config = {
            "feed_url": feeds.url("/feed.xml"),
            "allow_private_networks": True,
            "message_template": "{feed_title}: {title}",
            "deliver": {"channel": "webhook", "to": "ops"},
        }
        stack.write([job("blog", kind="rss", config=config)])
        stack.reload()
        stack.worker()
        stack.beat()
        wait_for(lambda: len(stack.sink.item_ids("blog")) >= 2, 60, what="first two entries")
        wait_for(lambda: site.not_modified >= 3, 60, what="three 304 ticks")
        assert sorted(stack.sink.item_ids("blog")) == ["p1", "p2"]
        conditional = [r for r in feeds.requests if r.header("If-None-Match") == site.etag]
        assert len(conditional) >= 3
        assert Delivery.objects.filter(job_id="blog", purpose="item").count() == 2

        site.set(rss(("p3", "three"), ("p2", "two"), ("p1", "one")))
        wait_for(lambda: "p3" in stack.sink.item_ids("blog"), 60, what="the new entry")
        before = site.not_modified
        wait_for(lambda: site.not_modified >= before + 2, 60, what="304s after the change")
        assert sorted(stack.sink.item_ids("blog")) == ["p1", "p2", "p3"]
        texts = {h["body"]["payload"]["text"] for h in stack.sink.items("blog")}
        assert texts == {"Example: one", "Example: two", "Example: three"}
        state = PollState.objects.get(job_id="blog")
        assert state.last_status == "ok" and state.consecutive_errors == 0
