"""rss against loopback feed servers, through the real SSRF guard.

The poller gets ``fetch`` bound to a :class:`FakeResolver` mapping ``feeds.example.test``
to 127.0.0.1 and ``allow_addresses`` naming the fixture's exact port, so the guard
stays on for everything else.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest

from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.net import http
from pollers import BUILTINS
from pollers.rss import MAX_FEED_ENTRIES, RssConfig, RssCursor, RssPoller, remember, ring_capacity
from pollers.rss_feed import MalformedFeedError, parse_feed
from tests.pollers.conftest import guarded_fetch
from tests.support.fakes import FakeHost, make_context
from tests.support.httpserver import TestHTTPServer, drip, reply

from .rss_fixtures import FEEDS, FeedSite, fixture, rss

HOST = "feeds.example.test"


@pytest.fixture
def poller(srv) -> RssPoller:
    fetch = guarded_fetch(srv, HOST)
    return RssPoller(fetch=fetch)


def config(srv: TestHTTPServer, path: str = "/feed.xml", **overrides) -> dict:
    return {
        "feed_url": srv.url(path, host=HOST),
        "deliver": {"channel": "telegram", "to": "1194292426"},
        **overrides,
    }


def run(poller: RssPoller, cfg: dict, cursor: bytes | None = None):
    host = FakeHost()
    ack = poller.tick(make_context(cfg, host=host, cursor=cursor))
    return ack, host


def ticks(poller: RssPoller, cfg: dict, n: int, cursor: bytes | None = None):
    """Run ``n`` ticks feeding each cursor back; return per-tick item ids and the cursor."""
    out = []
    for _ in range(n):
        ack, host = run(poller, cfg, cursor)
        out.append(host.item_ids)
        cursor = ack.next_cursor or cursor
    return out, cursor


# --- config ---------------------------------------------------------------------------
def test_registered_as_a_builtin_with_the_seed_defaults() -> None:
    assert RssPoller in BUILTINS and RssPoller.kind == "rss"
    cfg = RssPoller().parse_config(
        {"feed_url": "https://example.com/feed.xml", "deliver": {"channel": "log", "to": "x"}}
    )
    assert (cfg.max_per_tick, cfg.message_template, cfg.first_run) == (
        5,
        "{title}\n{link}",
        "deliver",
    )
    assert cfg.allow_private_networks is False and cfg.seen_capacity == 1000


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        (
            {"feed_url": "https://e.com/f", "deliver": {"channel": "log", "to": "x"}, "url": "x"},
            "config.url",
            "Extra inputs",
        ),
        ({"feed_url": "file:///etc/passwd"}, "config.feed_url", "http"),
        ({"feed_url": "feed://example.com/rss"}, "config.feed_url", "http"),
        ({"feed_url": "/var/feeds/a.xml"}, "config.feed_url", "http"),
        ({"feed_url": "example.com/feed.xml"}, "config.feed_url", "http"),
        ({"feed_url": "https:///nohost"}, "config.feed_url", "host"),
        ({"max_per_tick": "5"}, "config.max_per_tick", "integer"),
        ({"max_per_tick": 0}, "config.max_per_tick", "greater than"),
        ({"first_run": "later"}, "config.first_run", "'deliver' or 'skip'"),
        ({"message_template": "{titel}"}, "config.message_template", "unknown field(s) titel"),
        ({"message_template": "{title"}, "config.message_template", "unclosed"),
        ({"deliver": {"channel": "log"}}, "config.deliver.to", "required"),
    ],
)
def test_invalid_config_is_rejected_naming_the_field(raw, path, words) -> None:
    base = {"feed_url": "https://e.com/f", "deliver": {"channel": "log", "to": "x"}}
    with pytest.raises(ConfigError) as err:
        RssPoller().validate({**base, **raw})
    assert err.value.path == path and words in err.value.reason


# --- formats and fields ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "count", "first_text"),
    [
        (
            "rss091.xml",
            3,
            "Personal web server integrates file sharing and messaging\n"
            "http://writetheweb.example/read.php?item=22",
        ),
        ("rss092.xml", 3, "Moonlight Mile, by the Stones."),
        ("rss10.rdf", 2, "Über die Zukunft — café ☕\nhttp://meerkat.example/news/1"),
        ("rss20.xml", 3, "Hello world\nhttps://blog.example.com/posts/hello"),
        ("atom.xml", 2, "Relative links resolve\nhttp://{host}/2026/01/14/relative"),
    ],
)
def test_each_format_is_parsed_and_delivered_oldest_first(srv, poller, name, count, first_text):
    srv.route("GET", "/feed.xml", reply(200, fixture(name), {"Content-Type": "text/xml"}))
    template = "{summary}" if name == "rss092.xml" else "{title}\n{link}"
    ack, host = run(poller, config(srv, max_per_tick=10, message_template=template))
    assert (ack.items_seen, ack.items_dispatched) == (count, count)
    # a relative link resolves against the URL the feed was fetched from
    assert host.texts[0] == first_text.format(host=f"{HOST}:{srv.port}")
    assert len(set(host.item_ids)) == count  # distinct ids, even for RSS 0.92's bare items


def test_template_has_every_entry_field(srv, poller) -> None:
    srv.route("GET", "/feed.xml", reply(200, fixture("rss20.xml")))
    template = "{feed_title}|{id}|{title}|{link}|{summary}|{published}|{author}|{tags}"
    _, host = run(poller, config(srv, message_template=template))
    assert host.texts[-1] == (
        "Example Engineering Blog|post-3|Release 3.0|https://blog.example.com/posts/release-3|"
        "<p>Version <b>3.0</b> is out.</p>|2026-01-15T10:00:00+00:00|Ana Gómez|releases, news"
    )
    assert host.deliveries[-1].payload["item_id"] == "post-3"
    assert host.deliveries[-1].payload["job_id"] == "job1"


def test_entry_id_falls_back_from_guid_to_link_to_a_hash(srv, poller) -> None:
    doc = (
        b'<rss version="2.0"><channel><title>t</title>'
        b"<item><title>a</title><guid>g-1</guid><link>https://x/1</link></item>"
        b"<item><title>b</title><link>https://x/2</link></item>"
        b"<item><title>c</title><pubDate>Mon, 12 Jan 2026 08:00:00 GMT</pubDate></item>"
        b"</channel></rss>"
    )
    srv.route("GET", "/feed.xml", reply(200, doc))
    _, host = run(poller, config(srv))
    ids = set(host.item_ids)
    assert {"g-1", "https://x/2"} <= ids
    (hashed,) = ids - {"g-1", "https://x/2"}
    assert hashed.startswith("hash:")
    again = parse_feed(doc).entries[2].id  # stable: the same title and date, the same id
    assert again == hashed


def test_parse_feed_takes_bytes_only_and_never_opens_a_path() -> None:
    with pytest.raises(TypeError):
        parse_feed(str(FEEDS / "rss20.xml"))
    # bytes naming a file: feedparser given these raw bytes would open() the file
    with pytest.raises(MalformedFeedError):
        parse_feed(str(FEEDS / "rss20.xml").encode())


# --- cursor, dedup, backlog -----------------------------------------------------------
def test_cursor_round_trips_and_rejects_corruption() -> None:
    cur = RssCursor(("a", "b"), 'W/"x"', "Wed, 14 Jan 2026 09:00:00 GMT", 1800)
    raw = cur.encode()
    assert json.loads(raw)["v"] == 1
    assert RssCursor.decode(raw) == cur
    assert RssCursor.decode(None) == RssCursor()
    for bad in (b"{", b'{"v": 2, "seen": []}', b'{"v": 1, "seen": [1]}', b"[]"):
        with pytest.raises(PermanentError, match="reset the job"):
            RssCursor.decode(bad)


def test_entries_are_delivered_once_across_ticks(srv, poller) -> None:
    site = FeedSite(rss(("p2", "two"), ("p1", "one")), etag=False, last_modified=False)
    srv.route("GET", "/feed.xml", site)
    per_tick, cursor = ticks(poller, config(srv), 2)
    assert per_tick == [["p1", "p2"], []]
    site.set(rss(("p3", "three"), ("p2", "two"), ("p1", "one")))
    per_tick, _ = ticks(poller, config(srv), 2, cursor)
    assert per_tick == [["p3"], []]


def test_backlog_beyond_max_per_tick_arrives_and_validators_wait_for_it(srv, poller) -> None:
    site = FeedSite(rss(*[(f"p{i}", f"t{i}") for i in range(7, 0, -1)]))
    srv.route("GET", "/feed.xml", site)
    cfg = config(srv, max_per_tick=3)
    per_tick, cursor = ticks(poller, cfg, 4)
    assert per_tick == [["p1", "p2", "p3"], ["p4", "p5", "p6"], ["p7"], []]
    sent = [(r.header("If-None-Match"), r.header("If-Modified-Since")) for r in srv.requests]
    # while entries were held back, no validators went out; after the drain they did
    assert sent[:3] == [(None, None)] * 3
    assert sent[3] == (site.etag, site.last_modified)
    assert site.not_modified == 1
    assert RssCursor.decode(cursor).etag == site.etag


def test_304_is_a_cheap_tick_that_keeps_the_cursor(srv, poller) -> None:
    site = FeedSite(fixture("rss20.xml"))
    srv.route("GET", "/feed.xml", site)
    ack1, host1 = run(poller, config(srv))
    assert len(host1.deliveries) == 3
    ack2, host2 = run(poller, config(srv), ack1.next_cursor)
    request = srv.requests[-1]
    assert request.header("If-None-Match") == site.etag
    assert request.header("If-Modified-Since") == site.last_modified
    assert site.not_modified == 1
    assert host2.deliveries == [] and ack2.next_cursor is None and ack2.items_seen == 0
    assert ack2.next_interval_hint == timedelta(minutes=30)  # the feed's <ttl>, remembered


def test_last_modified_alone_is_used_when_there_is_no_etag(srv, poller) -> None:
    site = FeedSite(fixture("atom.xml"), etag=False)
    srv.route("GET", "/feed.xml", site)
    ticks(poller, config(srv), 2)
    last = srv.requests[-1]
    assert last.header("If-None-Match") is None
    assert last.header("If-Modified-Since") == site.last_modified and site.not_modified == 1


def test_a_feed_larger_than_the_ring_never_loops(srv, poller) -> None:
    site = FeedSite(
        rss(*[(f"p{i}", f"t{i}") for i in range(30, 0, -1)]), etag=False, last_modified=False
    )
    srv.route("GET", "/feed.xml", site)
    cfg = config(srv, max_per_tick=4, seen_capacity=5)
    per_tick, cursor = ticks(poller, cfg, 10)
    delivered = [i for tick in per_tick for i in tick]
    assert sorted(delivered, key=lambda s: int(s[1:])) == [f"p{i}" for i in range(1, 31)]
    assert len(delivered) == 30 and per_tick[-2:] == [[], []]
    # the feed slides: one new entry, the oldest gone; only the new one goes out
    site.set(rss(*[(f"p{i}", f"t{i}") for i in range(31, 1, -1)]))
    per_tick, cursor = ticks(poller, cfg, 3, cursor)
    assert per_tick == [["p31"], [], []]
    assert len(RssCursor.decode(cursor).seen) == 30


def test_remember_keeps_feed_ids_and_drops_the_oldest_others() -> None:
    ring = remember(("old1", "old2", "a"), ["b", "a", "c"], ["b"], capacity=3)
    assert ring == ["old2", "b", "a"]  # c is held back (not marked): not remembered
    assert remember(("x",), ["a", "b", "c"], ["a", "b", "c"], capacity=2) == ["a", "b", "c"]


def test_first_run_skip_marks_everything_seen_and_delivers_later_entries(srv, poller) -> None:
    site = FeedSite(rss(*[(f"p{i}", f"t{i}") for i in range(8, 0, -1)]))
    srv.route("GET", "/feed.xml", site)
    cfg = config(srv, first_run="skip", max_per_tick=2)
    ack, host = run(poller, cfg)
    assert host.deliveries == [] and ack.items_seen == 8
    assert RssCursor.decode(ack.next_cursor).etag == site.etag  # no backlog: validators kept
    site.set(rss(*[(f"p{i}", f"t{i}") for i in range(9, 0, -1)]))
    per_tick, _ = ticks(poller, cfg, 2, ack.next_cursor)
    assert per_tick == [["p9"], []]


def test_first_run_deliver_is_the_default(srv, poller) -> None:
    srv.route("GET", "/feed.xml", FeedSite(rss(("p1", "one"))))
    _, host = run(poller, config(srv))
    assert host.item_ids == ["p1"]


# --- timing hints ---------------------------------------------------------------------
def test_hints_take_the_longest_of_retry_after_max_age_and_ttl(srv, poller) -> None:
    srv.route("GET", "/a", reply(200, fixture("rss20.xml"), {"Cache-Control": "max-age=3600"}))
    srv.route("GET", "/b", reply(200, fixture("rss20.xml"), {"Retry-After": "120"}))
    srv.route("GET", "/c", reply(200, fixture("rss10.rdf")))
    srv.route("GET", "/d", reply(200, rss(("p1", "x"))))
    assert run(poller, config(srv, "/a"))[0].next_interval_hint == timedelta(hours=1)
    assert run(poller, config(srv, "/b"))[0].next_interval_hint == timedelta(minutes=30)  # ttl
    # sy:updatePeriod hourly, sy:updateFrequency 2 -> every 30 minutes
    assert run(poller, config(srv, "/c"))[0].next_interval_hint == timedelta(minutes=30)
    assert run(poller, config(srv, "/d"))[0].next_interval_hint is None


def test_a_backlog_ignores_freshness_hints_but_not_retry_after(srv, poller) -> None:
    headers = {"Cache-Control": "max-age=3600", "Retry-After": "90"}
    srv.route("GET", "/feed.xml", reply(200, fixture("rss20.xml"), headers))
    ack, _ = run(poller, config(srv, max_per_tick=1))
    assert ack.next_interval_hint == timedelta(seconds=90)


# --- status codes and failures --------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, "feed needs credentials (401)"),
        (403, "feed access forbidden (403)"),
        (404, "feed not found (404): fix the URL"),
        (410, "feed gone (410): remove or fix the URL"),
        (400, "feed answered HTTP 400 Bad Request"),
    ],
)
def test_permanent_statuses_say_what_to_fix(srv, poller, status, words) -> None:
    srv.route("GET", "/feed.xml", reply(status, b"nope"))
    with pytest.raises(PermanentError) as err:
        run(poller, config(srv))
    assert words in str(err.value)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses_retry_with_retry_after(srv, poller, status) -> None:
    srv.route("GET", "/feed.xml", reply(status, b"busy", {"Retry-After": "30"}))
    with pytest.raises(TransientError) as err:
        run(poller, config(srv))
    assert f"({status})" in str(err.value)
    if status in (408, 429, 503):
        assert err.value.retry_after == timedelta(seconds=30)


def test_a_timeout_is_transient(srv, poller) -> None:
    srv.route("GET", "/feed.xml", drip(fixture("rss20.xml"), interval=0.2))
    with pytest.raises(http.DeadlineExceededError):
        run(poller, config(srv, timeout_secs=0.5))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "feed response is empty"),
        (b'<?xml version="1.0"?><rss version="2.0"><channel><title>x</ti', "not well-formed"),
        (b"<html><body><h1>Maintenance</h1></body></html>", "not an RSS or Atom feed"),
        (b'{"items": []}', "not well-formed"),
    ],
)
def test_a_malformed_feed_is_a_clear_transient_error(srv, poller, body, words) -> None:
    srv.route("GET", "/feed.xml", reply(200, body))
    with pytest.raises(MalformedFeedError) as err:
        run(poller, config(srv))
    assert isinstance(err.value, TransientError) and words in str(err.value)


def test_a_recoverable_feed_is_delivered_with_a_warning(srv, poller) -> None:
    doc = rss(("p1", "one")).replace(b"<title>one</title>", b"<title>one & two</title>")
    srv.route("GET", "/feed.xml", reply(200, doc))
    _, host = run(poller, config(srv))
    assert host.texts == ["one & two\nhttps://blog.example.com/p1"]
    assert [m for _, m, _ in host.logs] == ["rss.feed_not_well_formed"]


def test_a_private_address_is_refused_without_opt_in(srv) -> None:
    srv.route("GET", "/feed.xml", reply(200, fixture("rss20.xml")))
    with pytest.raises(http.BlockedURLError):
        run(RssPoller(), {**config(srv), "feed_url": srv.url("/feed.xml")})
    assert srv.hits() == 0


# --- concurrency ----------------------------------------------------------------------
def test_one_poller_ticks_many_feeds_concurrently_in_threads(srv, poller) -> None:
    for i in range(8):
        items = [(f"f{i}-{k}", f"feed {i} item {k}") for k in range(3, 0, -1)]
        srv.route("GET", f"/f{i}.xml", FeedSite(rss(*items, title=f"F{i}")))
    results: dict[int, tuple] = {}

    def work(i: int) -> None:
        cfg = config(srv, f"/f{i}.xml", message_template="{feed_title}:{title}")
        per_tick, cursor = ticks(poller, cfg, 3)
        results[i] = (per_tick, RssCursor.decode(cursor).seen)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for i in range(8):
        per_tick, seen = results[i]
        assert per_tick == [[f"f{i}-1", f"f{i}-2", f"f{i}-3"], [], []]
        assert set(seen) == {f"f{i}-1", f"f{i}-2", f"f{i}-3"}


def test_config_model_is_strict_and_frozen() -> None:
    cfg = RssConfig.model_validate(
        {"feed_url": "http://e.com/f", "deliver": {"channel": "log", "to": 5}}
    )
    assert cfg.deliver.to == "5"
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error
        cfg.max_per_tick = 9


def thirty_entries_read(srv, poller):
    """A 30-entry feed (no validators) read whole by one tick with ``seen_capacity`` 5:
    the feed, its site, the config and the cursor after."""
    full = rss(*[(f"p{i}", f"t{i}") for i in range(30, 0, -1)])
    site = FeedSite(full, etag=False, last_modified=False)
    srv.route("GET", "/feed.xml", site)
    cfg = config(srv, max_per_tick=100, seen_capacity=5)
    per_tick, cursor = ticks(poller, cfg, 1)
    assert len(per_tick[0]) == 30
    return full, site, cfg, cursor


def test_a_truncated_response_neither_redelivers_nor_shrinks_the_ring(srv, poller) -> None:
    full, site, cfg, cursor = thirty_entries_read(srv, poller)
    site.set(full[: full.index(b"<item><title>t27")])  # cut after three entries: not well-formed
    per_tick, cursor = ticks(poller, cfg, 1, cursor)
    assert per_tick == [[]] and len(RssCursor.decode(cursor).seen) == 30
    site.set(full)
    per_tick, _ = ticks(poller, cfg, 1, cursor)
    assert per_tick == [[]]


def test_a_feed_that_shrinks_for_a_while_is_not_forgotten(srv, poller) -> None:
    full, site, cfg, cursor = thirty_entries_read(srv, poller)
    site.set(rss(("p30", "t30"), ("p29", "t29")))  # the publisher trims it, then restores it
    per_tick, cursor = ticks(poller, cfg, 2, cursor)
    assert per_tick == [[], []] and len(RssCursor.decode(cursor).seen) == 30
    site.set(full)
    per_tick, _ = ticks(poller, cfg, 1, cursor)
    assert per_tick == [[]]


def test_ring_capacity_follows_webhook_polls_rule() -> None:
    assert ring_capacity(1000, 1500, 0) == 1500
    assert ring_capacity(1000, 20, 1500) == 1500
    assert ring_capacity(1000, 20, 50_000) == MAX_FEED_ENTRIES


def test_a_feed_over_the_hard_cap_stops_the_job(srv, poller) -> None:
    n = MAX_FEED_ENTRIES + 1
    srv.route("GET", "/feed.xml", reply(200, rss(*[(f"p{i}", "t") for i in range(n, 0, -1)])))
    with pytest.raises(PermanentError, match=f"the feed has {n} entries, more than rss's hard cap"):
        run(poller, config(srv))
