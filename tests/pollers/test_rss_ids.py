"""rss entry ids never depend on the URL the feed was fetched from.

An entry without a guid is known by its link as the feed writes it. A relative
link used to be resolved against the fetch URL first, so a redirect, a moved feed
or an http→https switch gave those entries new ids and delivered them again. The
feed is served by a local server under two host names and two paths.
"""

from __future__ import annotations

import functools
import json

import pytest

from nexopoll.net import http
from pollers.rss import RssCursor, RssPoller
from pollers.rss_feed import parse_feed
from tests.support.fakes import FakeHost, FakeResolver, make_context
from tests.support.httpserver import TestHTTPServer, redirect, reply

OLD, NEW = "feeds.example.test", "www.example.test"
RSS = {"Content-Type": "application/rss+xml"}


def feed(*links: str) -> bytes:
    items = "".join(
        f"<item><title>post {i}</title><link>{link}</link>"
        f"<pubDate>Thu, 0{i + 1} Jan 2026 10:00:00 GMT</pubDate></item>"
        for i, link in enumerate(links)
    )
    return (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
        f"<link>/</link>{items}</channel></rss>"
    ).encode()


def poller(srv: TestHTTPServer) -> RssPoller:
    resolver = FakeResolver({OLD: ["127.0.0.1"], NEW: ["127.0.0.1"]})
    fetch = functools.partial(http.fetch, resolver=resolver, allow_addresses=[srv.address])
    return RssPoller(fetch=fetch)


def tick(srv, url: str, cursor: bytes | None):
    host = FakeHost()
    cfg = {"feed_url": url, "deliver": {"channel": "log", "to": "x"}, "max_per_tick": 50}
    ack = poller(srv).tick(make_context(cfg, host=host, cursor=cursor))
    return [d.payload["item_id"] for d in host.deliveries], ack.next_cursor or cursor


LINKS = ("posts/1", "/posts/2", "../posts/3", "?p=4", "//cdn.example.test/posts/5")


@pytest.mark.parametrize("move", ["redirect to another path", "another host", "new path"])
def test_a_moved_feed_with_relative_links_delivers_nothing_again(srv, move):
    body = feed(*LINKS)
    srv.route("GET", "/blog/feed.xml", reply(200, body, RSS))
    srv.route("GET", "/v2/news/feed.xml", reply(200, body, RSS))
    first, cursor = tick(srv, srv.url("/blog/feed.xml", host=OLD), None)
    assert sorted(first) == sorted(LINKS)
    if move == "redirect to another path":
        srv.route("GET", "/blog/feed.xml", redirect(srv.url("/v2/news/feed.xml", host=NEW), 301))
        url = srv.url("/blog/feed.xml", host=OLD)
    elif move == "another host":
        url = srv.url("/blog/feed.xml", host=NEW)
    else:
        url = srv.url("/v2/news/feed.xml", host=OLD)
    again, _ = tick(srv, url, cursor)
    assert again == []


def test_the_link_field_is_still_absolute_for_the_message():
    [entry] = parse_feed(feed("posts/1"), base_url="https://blog.example.com/a/feed.xml").entries
    assert entry.id == "posts/1"
    assert entry.fields["link"] == "https://blog.example.com/a/posts/1"


def test_guids_and_absolute_links_keep_the_ids_older_versions_stored():
    body = (
        b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
        b"<item><guid>g-1</guid><link>/x</link></item>"
        b"<item><link>https://blog.example.com/p/2</link></item></channel></rss>"
    )
    ids = [e.id for e in parse_feed(body, base_url="http://a.example/feed").entries]
    assert ids == ["g-1", "https://blog.example.com/p/2"]


def test_a_cursor_from_an_older_version_is_adopted_without_re_delivering(srv):
    body = feed(*LINKS)
    srv.route("GET", "/blog/feed.xml", reply(200, body, RSS))
    url = srv.url("/blog/feed.xml", host=OLD)
    # what the older code stored: each relative link resolved against the fetch URL
    legacy = [e.fields["link"] for e in parse_feed(body, base_url=url).entries]
    assert all("://" in x for x in legacy)
    cursor = RssCursor(tuple(legacy)).encode()
    delivered, cursor = tick(srv, url, cursor)
    assert delivered == []
    assert set(LINKS) <= set(json.loads(cursor)["seen"])  # remembered under the new ids
    # and now the feed may move
    moved, _ = tick(srv, srv.url("/blog/feed.xml", host=NEW), cursor)
    assert moved == []
    srv.route("GET", "/blog/feed.xml", reply(200, feed(*LINKS, "posts/6"), RSS))
    fresh, _ = tick(srv, url, cursor)
    assert fresh == ["posts/6"]
