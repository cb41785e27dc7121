"""webhook_poll's conditional GET through the whole tick: a 304 writes no outbox row
and keeps the committed cursor."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from nexopoll.models import Delivery, PollState
from nexopoll.runtime.tick import tick_job
from tests.pollers.rss_fixtures import FeedSite
from tests.support.httpserver import TestHTTPServer
from tests.support.jobs import webhook_poll_job

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def test_a_304_tick_writes_no_outbox_row_and_keeps_the_cursor(cfg):
    body = json.dumps({"items": [{"id": 1, "title": "one"}, {"id": 2, "title": "two"}]})
    site = FeedSite(body.encode(), content_type="application/json")
    with TestHTTPServer() as api:
        api.route("GET", "/items", site)
        cfg.write([webhook_poll_job("w", api.url("/items"))])
        cfg.reload()
        assert tick_job("w", now=NOW).items_dispatched == 2
        cursor = bytes(PollState.objects.get(job_id="w").cursor)
        assert json.loads(cursor)["etag"] == site.etag
        rows = Delivery.objects.count()
        report = tick_job("w", now=NOW)
        assert report.status == "ok" and report.items_dispatched == 0
        assert api.requests[-1].header("If-None-Match") == site.etag and site.not_modified == 1
        assert Delivery.objects.count() == rows
        assert bytes(PollState.objects.get(job_id="w").cursor) == cursor
