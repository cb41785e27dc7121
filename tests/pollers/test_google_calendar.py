"""google_calendar poller against a local server speaking Calendar v3 incremental sync."""

from __future__ import annotations

import json

import pytest

from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from pollers.google_calendar import (
    GoogleCalendarPoller,
    SyncCursor,
    decode_cursor,
    encode_cursor,
)
from tests.support.apibases import point_api
from tests.support.fakes import FakeHost, make_context
from tests.support.google_server import FakeGoogle

DELIVER = {"channel": "log", "to": "ops"}


@pytest.fixture
def google(monkeypatch):
    """The fake with the Calendar API pointed at it (the conftest's points Gmail's)."""
    with FakeGoogle() as fake:
        point_api(monkeypatch, "gcal", fake.url + "/calendar/v3")
        yield fake


def run(binding, cursor=None, **config):
    host = FakeHost(credentials={"google": binding})
    ack = GoogleCalendarPoller().tick(
        make_context({"deliver": DELIVER, **config}, host=host, cursor=cursor)
    )
    return ack, host


def test_minimal_config_accepted_and_unknown_field_rejected():
    cfg = GoogleCalendarPoller().parse_config({"deliver": DELIVER})
    assert cfg.calendar_id == "primary" and cfg.skip_cancelled is True
    assert cfg.message_template == "📅 {summary} — {start}\n{html_link}"
    with pytest.raises(ConfigError) as err:
        GoogleCalendarPoller().validate({"deliver": DELIVER, "calendar": "x"})
    assert err.value.path == "config.calendar"
    with pytest.raises(ConfigError):
        GoogleCalendarPoller().validate({"deliver": DELIVER, "message_template": "{oops"})


def test_cursor_round_trips():
    cur = SyncCursor(sync_token="s9", page_token="250", seen=["e@1:confirmed"])
    assert decode_cursor(encode_cursor(cur)) == cur
    assert json.loads(encode_cursor(cur))["v"] == 1
    for bad in (b"{", b'{"v": 7}', b'{"v": 1, "sync_token": 3}'):
        with pytest.raises(PermanentError):
            decode_cursor(bad)


def test_first_tick_is_a_baseline_then_changes_are_delivered_once(google, binding):
    google.put_event("standup", summary="Standup ☕ café")
    ack, host = run(binding)
    assert host.deliveries == [] and ack.items_dispatched == 0
    assert decode_cursor(ack.next_cursor).sync_token == "s1"
    google.put_event("review", summary="Revisión 🚀", start={"date": "2026-12-24"})
    google.put_event("standup", summary="Standup moved")
    ack2, host2 = run(binding, ack.next_cursor)
    assert host2.texts == [
        "📅 Revisión 🚀 — 2026-12-24\nhttps://calendar.example/review",
        "📅 Standup moved — 2026-12-01T10:00:00Z\nhttps://calendar.example/standup",
    ]
    assert [d.payload["change"] for d in host2.deliveries] == ["created", "updated"]
    assert google.calls("events")[-1]["query"]["syncToken"] == "s1"
    _, host3 = run(binding, ack2.next_cursor)
    assert host3.deliveries == []  # dedup: nothing changed since


def test_skip_cancelled_and_deliver_cancelled(google, binding):
    google.put_event("a")
    base, _ = run(binding)
    google.cancel_event("a")
    _, skipped = run(binding, base.next_cursor)
    assert skipped.deliveries == []
    _, shown = run(binding, base.next_cursor, skip_cancelled=False, message_template="{change}")
    assert shown.texts == ["cancelled"]


def test_paging_is_followed_for_the_baseline_and_for_changes(google, binding):
    for i in range(600):  # more than two pages of 250
        google.put_event(f"e{i}")
    ack, host = run(binding)
    assert len(google.calls("events")) == 3 and host.deliveries == []
    assert decode_cursor(ack.next_cursor).sync_token == "s600"
    for i in range(300):
        google.put_event(f"n{i}")
    ack2, host2 = run(binding, ack.next_cursor, max_per_tick=1000, message_template="{id}")
    assert host2.texts == [f"n{i}" for i in range(300)]
    assert [c["query"].get("pageToken") for c in google.calls("events")[3:]] == [None, "250"]
    assert decode_cursor(ack2.next_cursor).sync_token == "s900"


def test_max_per_tick_resumes_mid_page_without_loss_or_duplicates(google, binding):
    google.put_event("x")
    ack, _ = run(binding)
    for i in range(7):
        google.put_event(f"n{i}")
    got: list[str] = []
    cursor = ack.next_cursor
    for _ in range(4):
        ack, host = run(binding, cursor, max_per_tick=3, message_template="{id}")
        got += host.texts
        cursor = ack.next_cursor or cursor
    assert got == [f"n{i}" for i in range(7)]
    assert decode_cursor(cursor).sync_token == "s8" and decode_cursor(cursor).page_token is None


def test_a_big_baseline_resumes_across_ticks(google, binding):
    for i in range(600):
        google.put_event(f"e{i}")
    ack, _ = run(binding, max_pages=2)
    cur = decode_cursor(ack.next_cursor)
    assert cur.sync_token is None and cur.page_token == "500"
    ack2, host2 = run(binding, ack.next_cursor, max_pages=2)
    assert host2.deliveries == [] and decode_cursor(ack2.next_cursor).sync_token == "s600"


def test_410_gone_rebaselines_automatically_and_says_so(google, binding):
    google.put_event("a")
    ack, _ = run(binding)
    google.put_event("b")
    google.expire_sync_tokens()
    ack2, host2 = run(binding, ack.next_cursor)
    assert host2.deliveries == []
    cur = decode_cursor(ack2.next_cursor)
    assert cur.sync_token == "s2-1" and cur.rebaselined_at and "410" in cur.note
    assert [(lvl, msg) for lvl, msg, _ in host2.logs] == [
        ("warning", "google_calendar.rebaselined")
    ]
    google.put_event("c")
    _, host3 = run(binding, ack2.next_cursor, message_template="{id}")
    assert host3.texts == ["c"]


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (401, PermanentError),
        (404, PermanentError),
        (503, TransientError),
        (429, TransientError),
        ((403, {"error": {"errors": [{"reason": "userRateLimitExceeded"}]}}), TransientError),
    ],
)
def test_api_errors_are_classified(google, binding, reply, error):
    google.fail("events", reply, reply)
    with pytest.raises(error):
        run(binding)


def test_calendar_id_is_path_encoded(google, binding):
    run(binding, calendar_id="en.usa#holiday@group.v.calendar.google.com")
    raw = google.calls("events")[0]["path"]
    assert raw.endswith("/calendars/en.usa#holiday@group.v.calendar.google.com/events")


def test_gmail_and_calendar_share_the_accounts_auth_client(google, binding, monkeypatch):
    from pollers.gmail import GmailPoller

    point_api(monkeypatch, "gmail", google.url)
    run(binding)
    host = FakeHost(credentials={"google": binding})
    GmailPoller().tick(make_context({"deliver": DELIVER}, host=host))
    assert len(google.calls("token")) == 1
