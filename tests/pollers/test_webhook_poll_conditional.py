"""webhook_poll's conditional GET (pollers/_http.py), against a loopback JSON server
that answers 304 to a matching If-None-Match / If-Modified-Since."""

from __future__ import annotations

import json

import pytest

from pollers.webhook_poll import WebhookPollPoller, decode_cursor, encode_cursor
from pollers.webhook_seen import decode_validators
from tests.pollers.conftest import guarded_fetch
from tests.support.fakes import FakeHost, make_context
from tests.support.httpserver import TestHTTPServer

from .rss_fixtures import FeedSite

HOST = "api.example.test"


def listing(*ids: int) -> bytes:
    return json.dumps({"items": [{"id": i, "title": f"item {i}"} for i in ids]}).encode()


@pytest.fixture
def poller(srv) -> WebhookPollPoller:
    fetch = guarded_fetch(srv, HOST)
    return WebhookPollPoller(fetch=fetch)


def config(srv: TestHTTPServer, **overrides) -> dict:
    return {
        "url": srv.url("/items", host=HOST),
        "items_path": "items",
        "message_template": "{title}",
        "deliver": {"channel": "log", "to": "ops"},
        **overrides,
    }


def ticks(poller, cfg, n, cursor=None):
    out = []
    for _ in range(n):
        host = FakeHost()
        ack = poller.tick(make_context(cfg, host=host, cursor=cursor))
        out.append((host.item_ids, ack.next_cursor))
        cursor = ack.next_cursor or cursor
    return out, cursor


def sent(srv: TestHTTPServer) -> list[tuple[str | None, str | None]]:
    return [(r.header("If-None-Match"), r.header("If-Modified-Since")) for r in srv.requests]


def test_a_304_delivers_nothing_and_keeps_the_cursor(srv, poller) -> None:
    site = FeedSite(listing(1, 2), content_type="application/json")
    srv.route("GET", "/items", site)
    out, cursor = ticks(poller, config(srv), 2)
    assert out[0][0] == ["1", "2"]
    assert decode_validators(out[0][1]) == (site.etag, site.last_modified)
    assert sent(srv) == [(None, None), (site.etag, site.last_modified)]
    assert site.not_modified == 1
    assert out[1] == ([], None)  # nothing delivered, the cursor kept
    site.set(listing(3, 1, 2))
    out, _ = ticks(poller, config(srv), 2, cursor)
    assert [ids for ids, _ in out] == [["3"], []]
    assert site.not_modified == 2


def test_held_back_items_still_arrive_before_validators_are_stored(srv, poller) -> None:
    site = FeedSite(listing(1, 2, 3, 4, 5), content_type="application/json")
    srv.route("GET", "/items", site)
    out, cursor = ticks(poller, config(srv, max_per_tick=2), 4)
    assert [ids for ids, _ in out] == [["1", "2"], ["3", "4"], ["5"], []]
    assert sent(srv)[:3] == [(None, None)] * 3
    assert sent(srv)[3] == (site.etag, site.last_modified) and site.not_modified == 1
    assert decode_cursor(cursor) == ["1", "2", "3", "4", "5"]


def test_post_never_sends_or_stores_validators(srv, poller) -> None:
    site = FeedSite(listing(1), content_type="application/json")
    srv.route("POST", "/items", site)
    out, cursor = ticks(poller, config(srv, method="POST", body={"q": 1}), 2)
    assert [ids for ids, _ in out] == [["1"], []]
    assert sent(srv) == [(None, None), (None, None)] and site.not_modified == 0
    assert decode_validators(cursor) == (None, None)


def test_a_configured_conditional_header_is_left_alone(srv, poller) -> None:
    site = FeedSite(listing(1), content_type="application/json")
    srv.route("GET", "/items", site)
    cfg = config(srv, headers={"If-None-Match": '"pinned"'})
    ticks(poller, cfg, 2)
    assert sent(srv) == [('"pinned"', None), ('"pinned"', None)]


def test_a_cursor_from_before_validators_still_works(srv, poller) -> None:
    site = FeedSite(listing(1, 2), content_type="application/json")
    srv.route("GET", "/items", site)
    old = encode_cursor(["1"])
    assert json.loads(old) == {"v": 1, "seen": ["1"]}
    out, _ = ticks(poller, config(srv), 2, old)
    assert [ids for ids, _ in out] == [["2"], []]
    assert sent(srv) == [(None, None), (site.etag, site.last_modified)]


def test_validators_with_control_characters_are_not_stored(srv, poller) -> None:
    srv.route("GET", "/items", lambda req: (200, {"ETag": '"a\x01b"'}, listing(1)))
    out, _ = ticks(poller, config(srv), 1)
    assert decode_validators(out[0][1]) == (None, None)
