"""Both lifecycles in-process: cursor round-trip, error codes, reverse calls, restart."""

from __future__ import annotations

import json

import pytest

from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.plugins.jsonrpc import ProtocolError

from .conftest import SECRET, RecordingHost, make_ctx

LIFECYCLES = ["ephemeral", "long_lived"]


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_cursor_round_trips_and_delivery_reaches_the_host(plugin, lifecycle):
    p = plugin(lifecycle=lifecycle)
    host = RecordingHost()
    ack = p.tick(make_ctx("misbehave", {"deliver": True}, cursor=b"41", host=host))
    assert ack.next_cursor == b"42"
    assert (ack.items_seen, ack.items_dispatched) == (1, 1)
    assert host.deliveries == [("log", "ops", {"text": "item 42", "item_id": 42})]
    ack = p.tick(make_ctx("misbehave", {}, cursor=ack.next_cursor))
    assert ack.next_cursor == b"43"


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
@pytest.mark.parametrize(
    ("code", "cls"),
    [(-32001, TransientError), (-32002, PermanentError), (-32602, ConfigError),
     (-32601, ConfigError), (-32603, TransientError)],
)  # fmt: skip
def test_error_codes_map_to_error_classes(plugin, lifecycle, code, cls):
    p = plugin(lifecycle=lifecycle)
    with pytest.raises(cls) as info:
        p.tick(make_ctx("misbehave", {"mode": "error", "code": code}))
    assert "boom" in str(info.value)
    if cls is TransientError:
        assert not isinstance(info.value, PermanentError | ConfigError)


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_bare_reply_without_envelope_is_never_a_success(plugin, lifecycle):
    p = plugin(lifecycle=lifecycle)
    with pytest.raises(ProtocolError, match="jsonrpc"):
        p.tick(make_ctx("misbehave", {"mode": "bare"}))


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_reverse_calls_are_answered(plugin, lifecycle):
    p = plugin(lifecycle=lifecycle)
    host = RecordingHost()
    ack = p.tick(make_ctx("misbehave", {"mode": "reverse"}, host=host))
    seen = json.loads(ack.next_cursor)
    assert seen["creds"]["result"]["token"] == SECRET
    assert seen["llm"]["result"]["content"] == "hello"
    assert seen["bad"]["error"]["code"] == -32601
    assert seen["deliver"]["result"] == {"ok": True}
    assert host.deliveries == [("log", "ops", {"n": 1})]
    assert host.llm == [{"prompt": "hi"}]
    assert host.metrics == [("m", {"a": "b"})]
    # the plugin logged the credential it was handed: the log line has it masked
    assert host.logs == [("info", "token is ***", {})]


def test_long_lived_plugin_serves_many_ticks_from_one_process(plugin):
    p = plugin(lifecycle="long_lived")
    p.tick(make_ctx("misbehave", {}))
    pid = p.long_lived.proc.pid
    for _ in range(5):
        p.tick(make_ctx("misbehave", {}))
    assert p.long_lived.proc.pid == pid
