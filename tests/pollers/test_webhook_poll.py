"""webhook_poll against loopback JSON servers, through the real SSRF guard.

The poller gets ``fetch`` bound to a :class:`FakeResolver` that maps
``api.example.test`` to 127.0.0.1 and to ``allow_addresses`` naming the fixture's
exact port, so the guard stays on for everything else.
"""

from __future__ import annotations

import functools
import json
from datetime import timedelta

import pytest

from nexopoll.core.contract import Cancelled, CancelToken
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.net import http
from pollers import BUILTINS
from pollers.webhook_poll import WebhookPollPoller, decode_cursor, encode_cursor
from tests.pollers.conftest import guarded_fetch
from tests.support.fakes import FakeHost, FakeResolver, make_context
from tests.support.httpserver import TestHTTPServer, json_reply, redirect, reply, stream_zeros

HOST = "api.example.test"


def issues(*keys: int) -> dict:
    return {
        "issues": [
            {"id": str(k), "key": f"NP-{k}", "fields": {"summary": f"task {k}", "prio": k % 3}}
            for k in keys
        ]
    }


@pytest.fixture
def poller(srv) -> WebhookPollPoller:
    fetch = guarded_fetch(srv, HOST)
    return WebhookPollPoller(fetch=fetch)


def config(srv: TestHTTPServer, path: str = "/search", **overrides) -> dict:
    return {
        "url": srv.url(path, host=HOST),
        "headers": {"Authorization": "Bearer jira-s3cr3t", "Accept": "application/json"},
        "items_path": "issues",
        "message_template": "[{key}] {fields.summary} (p{fields.prio})",
        "deliver": {"channel": "telegram", "to": "1194292426"},
        **overrides,
    }


def run(poller: WebhookPollPoller, cfg: dict, cursor: bytes | None = None):
    host = FakeHost()
    ack = poller.tick(make_context(cfg, host=host, cursor=cursor))
    return ack, host


def test_registered_as_a_builtin() -> None:
    assert WebhookPollPoller in BUILTINS
    assert WebhookPollPoller.kind == "webhook_poll"


def test_first_tick_delivers_every_item_and_stores_their_ids(srv, poller) -> None:
    srv.route("GET", "/search", json_reply(issues(1, 2, 3)))
    ack, host = run(poller, config(srv))
    assert host.texts == ["[NP-1] task 1 (p1)", "[NP-2] task 2 (p2)", "[NP-3] task 3 (p0)"]
    first = host.deliveries[0]
    assert (first.channel, first.recipient) == ("telegram", "1194292426")
    assert first.payload == {
        "text": "[NP-1] task 1 (p1)",
        "item_id": "1",
        "job_id": "job1",
        "text_trusted": [[0, 1], [5, 7], [13, 16], [17, 18]],  # the template's own text
    }
    assert (ack.items_seen, ack.items_dispatched) == (3, 3)
    assert json.loads(ack.next_cursor) == {"v": 1, "seen": ["1", "2", "3"]}
    sent = srv.requests[0]
    assert sent.header("Authorization") == "Bearer jira-s3cr3t"
    assert sent.header("Host") == f"{HOST}:{srv.port}"


def test_cursor_fed_back_deduplicates_across_ticks(srv, poller) -> None:
    document = {"value": issues(1, 2)}
    srv.route("GET", "/search", json_reply(lambda: document["value"]))
    ack1, _ = run(poller, config(srv))
    ack2, host2 = run(poller, config(srv), cursor=ack1.next_cursor)
    assert host2.deliveries == [] and ack2.next_cursor is None  # None keeps the cursor
    assert (ack2.items_seen, ack2.items_dispatched) == (2, 0)
    document["value"] = issues(3, 1, 2)
    ack3, host3 = run(poller, config(srv), cursor=ack1.next_cursor)
    assert host3.item_ids == ["3"]
    assert decode_cursor(ack3.next_cursor) == ["1", "2", "3"]


def test_items_beyond_max_per_tick_wait_for_the_next_tick(srv, poller) -> None:
    srv.route("GET", "/search", json_reply(issues(1, 2, 3, 4, 5)))
    cfg = config(srv, max_per_tick=2)
    cursor, delivered = None, []
    for _ in range(4):
        ack, host = run(poller, cfg, cursor)
        delivered.append(host.item_ids)
        cursor = ack.next_cursor or cursor
    assert delivered == [["1", "2"], ["3", "4"], ["5"], []]


def test_seen_ring_keeps_the_newest_ids(srv, poller) -> None:
    srv.route("GET", "/search", json_reply(issues(4, 5)))
    ack, _ = run(poller, config(srv, seen_capacity=3), cursor=encode_cursor(["1", "2", "3"]))
    assert decode_cursor(ack.next_cursor) == ["3", "4", "5"]


def test_items_without_an_id_are_skipped_and_reported(srv, poller) -> None:
    doc = [{"id": 1, "t": "a"}, {"t": "no id"}, {"id": None}, {"id": ""}, "scalar", {"id": 2}]
    srv.route("GET", "/search", json_reply(doc))
    ack, host = run(poller, config(srv, items_path="", message_template="{t}"))
    assert host.item_ids == ["1", "2"]
    assert host.texts == ["a", ""]
    assert host.logs == [
        ("warning", "webhook_poll.items_without_id", {"count": 4, "id_field": "id"})
    ]
    assert (ack.items_seen, ack.items_dispatched) == (6, 2)


def test_dotted_id_field_and_items_path(srv, poller) -> None:
    doc = {"data": {"results": [{"meta": {"uid": "a"}}, {"meta": {"uid": "b"}}]}}
    srv.route("GET", "/search", json_reply(doc))
    cfg = config(srv, items_path="data.results", id_field="meta.uid", message_template="{meta}")
    _, host = run(poller, cfg)
    assert host.item_ids == ["a", "b"]
    assert host.texts == ['{"uid":"a"}', '{"uid":"b"}']


def test_post_sends_the_json_body(srv, poller) -> None:
    srv.route("POST", "/search", json_reply(issues(7)))
    _, host = run(poller, config(srv, method="POST", body={"jql": "assignee = me"}))
    assert host.item_ids == ["7"]
    sent = srv.requests[0]
    assert (sent.method, json.loads(sent.body)) == ("POST", {"jql": "assignee = me"})
    assert sent.header("Content-Type") == "application/json"


def test_retry_after_on_success_becomes_the_interval_hint(srv, poller) -> None:
    srv.route("GET", "/search", json_reply(issues(1), headers={"Retry-After": "600"}))
    ack, _ = run(poller, config(srv))
    assert ack.next_interval_hint == timedelta(minutes=10)


@pytest.mark.parametrize("status", [401, 403, 404, 410, 400])
def test_client_errors_are_permanent(srv, poller, status: int) -> None:
    srv.route("GET", "/search", reply(status, b"{}"))
    with pytest.raises(PermanentError) as info:
        run(poller, config(srv))
    assert str(status) in str(info.value)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503])
def test_server_errors_and_throttling_are_transient(srv, poller, status: int) -> None:
    srv.route("GET", "/search", reply(status))
    with pytest.raises(TransientError):
        run(poller, config(srv))


def test_429_carries_retry_after(srv, poller) -> None:
    srv.route("GET", "/search", reply(429, b"", {"Retry-After": "120"}))
    with pytest.raises(TransientError) as info:
        run(poller, config(srv))
    assert info.value.retry_after == timedelta(seconds=120)


@pytest.mark.parametrize("body", [b"{not json", b"", b"   ", b'{"issues": [NaN]}', b"\xff\xfe{"])
def test_invalid_json_is_transient(srv, poller, body: bytes) -> None:
    srv.route("GET", "/search", reply(200, body))
    with pytest.raises(TransientError):
        run(poller, config(srv))


@pytest.mark.parametrize(
    ("doc", "found"), [({"issues": {"a": 1}}, "object"), ({"other": []}, "nothing")]
)
def test_items_path_not_an_array_is_permanent(srv, poller, doc, found: str) -> None:
    srv.route("GET", "/search", json_reply(doc))
    with pytest.raises(PermanentError, match=f"items_path 'issues'.*{found}"):
        run(poller, config(srv))


@pytest.mark.parametrize("cursor", [b'{"v": 2, "seen": []}', b"garbage", b'{"v": 1, "seen": 3}'])
def test_unknown_or_corrupt_cursor_is_permanent(srv, poller, cursor: bytes) -> None:
    srv.route("GET", "/search", json_reply(issues(1)))
    with pytest.raises(PermanentError, match="reset"):
        run(poller, config(srv), cursor=cursor)


def test_oversized_body_is_rejected(srv, poller) -> None:
    srv.route("GET", "/search", stream_zeros(200_000, content_length=False))
    with pytest.raises(http.ResponseTooLargeError, match="too large"):
        run(poller, config(srv, max_bytes=100_000))


def test_cancelled_tick_does_not_fetch(srv, poller) -> None:
    token = CancelToken()
    token.cancel("reload")
    with pytest.raises(Cancelled):
        poller.tick(make_context(config(srv), cancel=token))
    assert srv.hits() == 0


# --- SSRF: redirect to loopback, names resolving to private addresses -------------------


def test_redirect_to_loopback_is_refused_unless_private_networks_are_allowed(srv, poller) -> None:
    with TestHTTPServer() as internal:
        internal.route("GET", "/admin", json_reply(issues(9)))
        srv.route("GET", "/search", redirect(internal.url("/admin")))
        with pytest.raises(http.BlockedURLError):
            run(poller, config(srv))
        assert internal.hits() == 0
        _, host = run(poller, config(srv, allow_private_networks=True))
        assert host.item_ids == ["9"] and internal.hits() == 1


def test_name_resolving_to_a_private_address_needs_the_opt_in(srv) -> None:
    srv.route("GET", "/search", json_reply(issues(1)))
    resolver = FakeResolver({"intranet.example.test": ["127.0.0.1"]})
    poller = WebhookPollPoller(fetch=functools.partial(http.fetch, resolver=resolver))
    cfg = config(srv, url=srv.url("/search", host="intranet.example.test"))
    with pytest.raises(http.BlockedURLError) as info:
        run(poller, cfg)
    assert isinstance(info.value, PermanentError) and srv.hits() == 0
    _, host = run(poller, {**cfg, "allow_private_networks": True})
    assert host.item_ids == ["1"]


def test_cross_host_redirect_drops_configured_secret_headers(srv) -> None:
    with TestHTTPServer() as other:
        other.route("GET", "/moved", json_reply(issues(1)))
        srv.route("GET", "/search", redirect(other.url("/moved", host="cdn.example.test")))
        resolver = FakeResolver({HOST: ["127.0.0.1"], "cdn.example.test": ["127.0.0.1"]})
        fetch = functools.partial(
            http.fetch, resolver=resolver, allow_addresses=[srv.address, other.address]
        )
        headers = {
            "X-Api-Key": "k-s3cr3t",
            "Private-Token": "p-s3cr3t",
            "Accept": "application/json",
        }
        _, host = run(WebhookPollPoller(fetch=fetch), config(srv, headers=headers))
    assert host.item_ids == ["1"]
    landed = other.requests[0]
    assert landed.header("X-Api-Key") is None and landed.header("Private-Token") is None
    assert landed.header("Accept") == "application/json"


# --- config validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "path"),
    [
        ({"url": "file:///etc/passwd"}, "config.url"),
        ({"url": "feed://example.com/rss"}, "config.url"),
        ({"url": "/etc/passwd"}, "config.url"),
        ({"method": "DELETE"}, "config.method"),
        ({"body": {"a": 1}}, "config.body"),  # body with GET
        ({"max_per_tick": 0}, "config.max_per_tick"),
        ({"max_per_tick": 1001}, "config.max_per_tick"),
        ({"timeout_secs": 121}, "config.timeout_secs"),
        ({"max_bytes": 51 * 1024 * 1024}, "config.max_bytes"),
        ({"message_template": "{unclosed"}, "config.message_template"),
        ({"headers": {"X-Api-Key": "a\r\nInjected: 1"}}, "config.headers"),
        ({"headers": {"Host": "evil.example"}}, "config.headers"),
        ({"deliver": {"channel": "telegram"}}, "config.deliver.to"),
        ({"surprise": True}, "config.surprise"),
    ],
)
def test_invalid_config_names_the_field(srv, override: dict, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        WebhookPollPoller().validate(config(srv, **override))
    assert info.value.path == path
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://b.example\\@a.example/s3cr3t", "backslash"),
        ("http://%61pi.example/s3cr3t", "percent-encoded"),
        ("http://b\u00fccher.example/s3cr3t", "non-ASCII"),
        ("http://a@b@api.example/s3cr3t", "userinfo"),
        ("http://api.example/\x9bs3cr3t", "control"),  # C1 CSI: not a space
    ],
)
def test_url_spellings_two_parsers_read_differently_are_refused_at_load(srv, url, why) -> None:
    """Issue 5, break 1: the job's own URL obeys the same rule as a redirect target."""
    with pytest.raises(ConfigError, match=why) as info:
        WebhookPollPoller().validate(config(srv, url=url))
    assert info.value.path == "config.url"
    assert "s3cr3t" not in str(info.value)


def test_valid_config_parses_with_defaults(srv) -> None:
    cfg = WebhookPollPoller().parse_config(
        {"url": "https://x.example/api", "deliver": {"channel": "telegram", "to": 1194292426}}
    )
    assert (cfg.method, cfg.items_path, cfg.id_field, cfg.max_per_tick) == ("GET", "", "id", 10)
    assert (cfg.message_template, cfg.allow_private_networks, cfg.seen_capacity) == (
        "{id}",
        False,
        1000,
    )
    assert (cfg.timeout_secs, cfg.max_bytes, cfg.deliver.to) == (
        20.0,
        5 * 1024 * 1024,
        "1194292426",
    )


def test_bad_config_at_tick_is_a_config_error(srv, poller) -> None:
    with pytest.raises(ConfigError):
        run(poller, config(srv, url="gopher://x/"))
    assert srv.hits() == 0
