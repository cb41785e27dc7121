"""The seen ring of ``webhook_poll`` (issue 5, break 6) at the poller level: it
covers the listing, never forgets an id still listed, and a listing past the hard
cap is a permanent error. The runtime version, counting outbox rows, is
tests/runtime/test_webhook_poll_listing.py."""

from __future__ import annotations

import pytest

from nexopoll.core.errors import PermanentError
from pollers.webhook_poll import WebhookPollPoller, decode_cursor, encode_cursor, remember
from tests.pollers.conftest import guarded_fetch
from tests.support.fakes import FakeHost, make_context
from tests.support.httpserver import TestHTTPServer, json_reply

HOST = "api.example.test"
HARD_CAP = 10_000


@pytest.fixture
def poller(srv) -> WebhookPollPoller:
    fetch = guarded_fetch(srv, HOST)
    return WebhookPollPoller(fetch=fetch)


def serve(srv: TestHTTPServer, ids: list[int]) -> None:
    srv.route("GET", "/l", json_reply(lambda: {"items": [{"id": i} for i in ids]}))


def tick(poller, srv, cursor: bytes | None, **overrides):
    cfg = {
        "url": srv.url("/l", host=HOST),
        "items_path": "items",
        "deliver": {"channel": "log", "to": "ops"},
        **overrides,
    }
    host = FakeHost()
    ack = poller.tick(make_context(cfg, host=host, cursor=cursor))
    return (ack.next_cursor or cursor), host.item_ids


def test_a_full_ring_keeps_every_id_still_listed(srv, poller) -> None:
    """The old ring dropped ids 0-9 here, so the next tick delivered them again."""
    serve(srv, list(range(1010)))
    cursor = encode_cursor([str(i) for i in range(1000)])
    cursor, sent = tick(poller, srv, cursor, seen_capacity=1000)
    assert sent == [str(i) for i in range(1000, 1010)]
    assert set(decode_cursor(cursor)) == {str(i) for i in range(1010)}
    cursor, sent = tick(poller, srv, cursor, seen_capacity=1000)
    assert sent == []


@pytest.mark.parametrize(
    ("size", "per_tick", "capacity"), [(12, 5, 3), (250, 40, 100), (1500, 1000, 1)]
)
def test_any_listing_up_to_the_cap_goes_out_once(srv, poller, size, per_tick, capacity) -> None:
    serve(srv, list(range(size)))
    cursor, everything = None, []
    for _ in range(size // per_tick + 3):
        cursor, sent = tick(poller, srv, cursor, seen_capacity=capacity, max_per_tick=per_tick)
        everything += sent
    assert sorted(everything, key=int) == [str(i) for i in range(size)]


def test_the_hard_cap_is_a_permanent_error_naming_both_numbers(srv, poller) -> None:
    serve(srv, list(range(HARD_CAP + 5)))
    host = FakeHost()
    cfg = {
        "url": srv.url("/l", host=HOST),
        "items_path": "items",
        "deliver": {"channel": "log", "to": "ops"},
    }
    with pytest.raises(PermanentError, match=f"{HARD_CAP + 5} items.*hard cap of {HARD_CAP}"):
        poller.tick(make_context(cfg, host=host))
    assert host.deliveries == []


def test_a_listing_at_the_cap_is_accepted(srv, poller) -> None:
    serve(srv, list(range(HARD_CAP)))
    _, sent = tick(poller, srv, None, max_per_tick=1000)
    assert len(sent) == 1000


def test_remember_drops_the_oldest_unlisted_ids_first() -> None:
    ring = remember(["a", "b", "c", "d"], ["e"], 3, keep=frozenset({"a", "e"}))
    assert ring == ["a", "d", "e"]


def test_remember_at_the_listing_size_keeps_exactly_the_listing() -> None:
    ring = remember(["x", "0", "y", "1"], ["2"], 3, keep=frozenset({"0", "1", "2"}))
    assert ring == ["0", "1", "2"]


def test_remember_under_capacity_drops_nothing() -> None:
    assert remember(["a"], ["b"], 5, keep=frozenset()) == ["a", "b"]


@pytest.mark.parametrize(
    ("seen_capacity", "listed", "held", "expected"),
    [
        (1000, 1500, 0, 1500),
        (1000, 550, 1500, 1500),
        (1000, 10, 50_000, HARD_CAP),
        (50_000, 10, 60_000, 50_000),
        (3, 2, 3, 3),
    ],
)
def test_ring_capacity(seen_capacity, listed, held, expected) -> None:
    from pollers.webhook_poll import ring_capacity

    assert ring_capacity(seen_capacity, listed, held) == expected
