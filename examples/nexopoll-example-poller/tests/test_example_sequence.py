"""The example entry-point package: its poller, and its registration through the entry point."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import entry_points

import pytest
from nexopoll_example_poller import SequencePoller

from nexopoll.core.contract import CancelToken, PollContext
from nexopoll.core.errors import ConfigError
from nexopoll.runtime.registry import ENTRY_POINT_GROUP, build_registry


class Host:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict]] = []

    def deliver(self, channel: str, recipient: str, payload: dict) -> None:
        self.sent.append((channel, recipient, payload))


def ctx(cursor: bytes | None, host: Host, **config) -> PollContext:
    return PollContext(
        job_id="numbers",
        agent_id="ana",
        kind="example_sequence",
        config={"deliver": {"channel": "log", "to": "ops"}, **config},
        cursor=cursor,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        interval_hint=timedelta(seconds=60),
        cancel=CancelToken(deadline=time.monotonic() + 10),
        host=host,
    )


def test_each_tick_delivers_the_next_number_and_keeps_it_as_cursor():
    host, poller = Host(), SequencePoller()
    ack = poller.tick(ctx(None, host, start=10, step=5))
    assert ack.next_cursor == b"10"
    ack = poller.tick(ctx(ack.next_cursor, host, start=10, step=5))
    assert ack.next_cursor == b"15"
    assert [p["n"] for _, _, p in host.sent] == [10, 15]


def test_bad_config_is_a_config_error():
    with pytest.raises(ConfigError, match="deliver"):
        SequencePoller().validate({})
    with pytest.raises(ConfigError, match="step must be an integer"):
        SequencePoller().validate({"deliver": {"channel": "log", "to": "x"}, "step": "2"})


def test_installed_package_registers_its_kind_through_the_entry_point():
    names = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert "example_sequence" in names, "run `make test` (it installs examples/ into the venv)"
    reg = build_registry()
    assert isinstance(reg.get("example_sequence"), SequencePoller)
    assert reg.sources()["example_sequence"].startswith("entry point nexopoll_example_poller")
