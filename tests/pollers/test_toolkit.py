"""The poller toolkit (pollers/_base.py): SeenRing, the versioned cursor codec, and
cursors stored by today's kinds still decoding through it."""

from __future__ import annotations

import hashlib
import json

import pytest

from nexopoll.core.errors import PermanentError
from pollers import gmail, google_calendar, rss, webhook_seen
from pollers._base import CursorCodec, SeenRing, covering_capacity, seen_key


def test_seen_ring_keeps_insertion_order_and_evicts_the_oldest() -> None:
    ring = SeenRing(3).remember(["a", "b"]).remember(["c", "a", "d"])
    assert ring.keys == ("b", "c", "d") and len(ring) == 3
    assert "a" not in ring and "d" in ring and 42 not in ring


def test_seen_ring_never_evicts_kept_keys_and_may_exceed_capacity_by_them() -> None:
    ring = SeenRing(2, ("old", "x", "y")).remember(["z"], keep={"x", "y", "z"})
    assert ring.keys == ("x", "y", "z")
    assert SeenRing(2, ("a", "b")).remember(["c"], keep={"a"}).keys == ("a", "c")


def test_seen_ring_is_a_value_and_touch_moves_listed_ids_to_the_newest_end() -> None:
    before = SeenRing(5, ("a", "b", "c"))
    after = before.touch(["b", "nope", "a"])
    assert before.keys == ("a", "b", "c") and after.keys == ("c", "b", "a")
    assert before.touch(["nope"]) is before
    assert SeenRing(5, ("a",)) == SeenRing(5, ["a"]) != SeenRing(5, ("b",))


def test_seen_ring_keys_long_ids_by_their_sha256() -> None:
    long_id = "x" * 201
    ring = SeenRing(10).remember([long_id, "y" * 200])
    assert ring.keys[0] == "sha256:" + hashlib.sha256(long_id.encode()).hexdigest()
    assert ring.keys[1] == "y" * 200 and long_id in ring and seen_key("y" * 200) == "y" * 200


def test_covering_capacity() -> None:
    assert covering_capacity(1000, 1500, 0, 10_000) == 1500
    assert covering_capacity(1000, 20, 1500, 10_000) == 1500
    assert covering_capacity(1000, 20, 50_000, 10_000) == 10_000
    assert covering_capacity(20_000, 5, 50_000, 10_000) == 20_000


def test_codec_round_trip_puts_the_version_first() -> None:
    codec = CursorCodec("demo")
    raw = codec.encode({"seen": ["é"], "n": 2, "v": 99})
    assert raw == '{"v":1,"seen":["é"],"n":2}'.encode()
    assert codec.decode(raw) == {"seen": ["é"], "n": 2}
    assert codec.decode(None) is None
    assert codec.seen(codec.decode(raw), 5) == SeenRing(5, ("é",))
    assert codec.seen(None, 5) == SeenRing(5)
    assert codec.encode({"seen": SeenRing(5, ("a", "b"))}) == b'{"v":1,"seen":["a","b"]}'


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"v": 2, "seen": []}', "unsupported demo cursor version 2; reset the job"),
        (b'{"v": "1"}', "unsupported demo cursor version '1'; reset the job"),
        (b'{"v": true}', "unsupported demo cursor version 'true'; reset the job"),
        (b'{"seen": []}', "unsupported demo cursor version None; reset the job"),
        (b"[1]", "unsupported demo cursor version None; reset the job"),
        (b"{", "demo cursor is not valid JSON; reset the job"),
    ],
)
def test_codec_refuses_unknown_versions_and_garbage_with_a_permanent_error(raw, message) -> None:
    with pytest.raises(PermanentError) as info:
        CursorCodec("demo").decode(raw)
    assert str(info.value) == message


def test_codec_refuses_a_seen_list_that_is_not_strings() -> None:
    codec = CursorCodec("demo")
    with pytest.raises(PermanentError, match="demo cursor has no valid 'seen' list; reset"):
        codec.seen(codec.decode(b'{"v": 1, "seen": [1]}'), 5)


def test_codec_upgrades_older_versions_and_reads_unversioned_cursors_when_told() -> None:
    codec = CursorCodec(
        "demo",
        3,
        upgrades={1: lambda d: {"ids": d["seen"]}, 2: lambda d: {**d, "n": 0}},
        unversioned=1,
    )
    assert codec.decode(b'{"seen": ["a"]}') == {"ids": ["a"], "n": 0}
    assert codec.decode(b'{"v": 2, "ids": ["b"]}') == {"ids": ["b"], "n": 0}
    assert codec.decode(b'{"v": 3, "ids": [], "n": 4}') == {"ids": [], "n": 4}
    with pytest.raises(PermanentError, match="version 4"):
        codec.decode(b'{"v": 4}')


# Cursors exactly as the kinds wrote them before the toolkit (bytes a user's DB holds).
WEBHOOK_BEFORE = b'{"v":1,"seen":["1","2","sha256:ab"],"etag":"W/\\"e\\"","last_modified":"x"}'
RSS_BEFORE = b'{"v":1,"seen":["a","b"],"etag":null,"last_modified":"Wed","feed_hint_secs":1800}'
GMAIL_BEFORE = b'{"v":1,"seen":["18c1","18c2"]}'
GCAL_BEFORE = b'{"v":1,"sync_token":"s1","page_token":"p2","seen":["e@u:confirmed"]}'


def test_todays_cursors_still_decode_and_encode_to_the_same_bytes() -> None:
    assert webhook_seen.decode_cursor(WEBHOOK_BEFORE) == ["1", "2", "sha256:ab"]
    assert webhook_seen.decode_validators(WEBHOOK_BEFORE) == ('W/"e"', "x")
    assert webhook_seen.encode_cursor(["1", "2", "sha256:ab"], 'W/"e"', "x") == WEBHOOK_BEFORE
    cur = rss.RssCursor.decode(RSS_BEFORE)
    assert cur == rss.RssCursor(("a", "b"), None, "Wed", 1800) and cur.encode() == RSS_BEFORE
    assert gmail.decode_cursor(GMAIL_BEFORE) == ["18c1", "18c2"]
    assert gmail.encode_cursor(["18c1", "18c2"]) == GMAIL_BEFORE
    sync = google_calendar.decode_cursor(GCAL_BEFORE)
    assert (sync.sync_token, sync.page_token, sync.seen) == ("s1", "p2", ["e@u:confirmed"])
    assert google_calendar.encode_cursor(sync) == GCAL_BEFORE


@pytest.mark.parametrize(
    ("decode", "kind"),
    [
        (webhook_seen.decode_cursor, "webhook_poll"),
        (rss.RssCursor.decode, "rss"),
        (gmail.decode_cursor, "gmail"),
        (google_calendar.decode_cursor, "google_calendar"),
    ],
)
def test_every_kind_refuses_an_unknown_cursor_version_naming_itself(decode, kind) -> None:
    with pytest.raises(PermanentError, match=f"unsupported {kind} cursor version 9; reset"):
        decode(json.dumps({"v": 9, "seen": []}).encode())
