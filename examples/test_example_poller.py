"""The docs' example poller (examples/example_poller.py) runs against a local HTTP
server, and docs/pollers.md shows exactly that file."""

from __future__ import annotations

import functools
import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from example_poller import IncidentPoller

from nexopoll.core.contract import CancelToken, PollContext
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.net import http
from tests.support.httpserver import TestHTTPServer, json_reply, reply

HERE = Path(__file__).resolve().parent
DELIVER = {"channel": "log", "to": "ops"}


class Host:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict]] = []

    def deliver(self, channel: str, recipient: str, payload: dict) -> None:
        self.sent.append((channel, recipient, payload))


def tick(poller, url: str, cursor: bytes | None, host: Host, **config):
    ctx = PollContext(
        job_id="status",
        agent_id="ana",
        kind="incidents",
        config={"url": url, "deliver": DELIVER, **config},
        cursor=cursor,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        interval_hint=timedelta(seconds=60),
        cancel=CancelToken(deadline=time.monotonic() + 10),
        host=host,
    )
    return poller.tick(ctx)


@pytest.fixture
def server():
    with TestHTTPServer() as srv:
        yield srv


@pytest.fixture
def poller(server):
    return IncidentPoller(functools.partial(http.fetch, allow_addresses=[server.address]))


def page(*ids: int) -> dict:
    return {"incidents": [{"id": i, "title": f"incident {i}"} for i in ids]}


def test_each_incident_goes_out_once_oldest_first(server, poller) -> None:
    host = Host()
    server.route("GET", "/incidents.json", json_reply(page(2, 1)))
    ack = tick(poller, server.url("/incidents.json"), None, host)
    assert [p["text"] for _, _, p in host.sent] == ["🚨 incident 1", "🚨 incident 2"]
    assert json.loads(ack.next_cursor) == {"v": 1, "seen": ["1", "2"]}
    assert (ack.items_seen, ack.items_dispatched) == (2, 2)
    server.route("GET", "/incidents.json", json_reply(page(3, 2, 1)))
    ack2 = tick(poller, server.url("/incidents.json"), ack.next_cursor, host)
    assert [p["item_id"] for _, _, p in host.sent] == ["1", "2", "3"]
    assert json.loads(ack2.next_cursor)["seen"] == ["1", "2", "3"]
    ack3 = tick(poller, server.url("/incidents.json"), ack2.next_cursor, host)
    assert ack3.next_cursor is None and len(host.sent) == 3  # nothing new: cursor kept


def test_the_ring_forgets_the_oldest_beyond_its_capacity(server, poller) -> None:
    server.route("GET", "/i", json_reply(page(3, 2, 1)))
    ack = tick(poller, server.url("/i"), None, Host(), seen_capacity=2)
    assert json.loads(ack.next_cursor)["seen"] == ["2", "3"]


def test_errors_are_classified(server, poller) -> None:
    server.route("GET", "/down", reply(503, b"busy"))
    server.route("GET", "/html", reply(200, b"<html>"))
    with pytest.raises(TransientError):
        tick(poller, server.url("/down"), None, Host())
    with pytest.raises(TransientError, match="not a status page"):
        tick(poller, server.url("/html"), None, Host())
    with pytest.raises(PermanentError, match="unsupported incidents cursor version 2"):
        tick(poller, server.url("/html"), b'{"v": 2, "seen": []}', Host())
    with pytest.raises(ConfigError) as info:
        tick(poller, "file:///etc/passwd", None, Host())
    assert info.value.path == "config.url"


def test_the_ssrf_guard_applies_without_the_test_allowance(server) -> None:
    server.route("GET", "/i", json_reply(page(1)))
    with pytest.raises(PermanentError):  # loopback is refused unless the job opts in
        tick(IncidentPoller(), server.url("/i"), None, Host())


def test_docs_pollers_md_shows_exactly_this_file() -> None:
    doc = (HERE.parent / "docs" / "pollers.md").read_text()
    section = doc[doc.index("## Writing a poller kind") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, "docs/pollers.md: no python block under 'Writing a poller kind'"
    assert block.group(1) == (HERE / "example_poller.py").read_text()
