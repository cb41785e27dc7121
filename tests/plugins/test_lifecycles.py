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
    [
        (-32001, TransientError),
        (-32002, PermanentError),
        (-32602, ConfigError),
        (-32601, ConfigError),
        (-32603, TransientError),
    ],
)
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


def test_long_lived_plugin_is_stopped_cleanly_when_its_manifest_changes(plugin):
    p = plugin(lifecycle="long_lived")
    p.tick(make_ctx("misbehave", {}))
    old = p.long_lived.proc
    path = p.manifest.path
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:  # a reload: same kinds, new settings
        f.write(text.replace("tick_timeout_secs = 10", "tick_timeout_secs = 20"))
    ack = p.tick(make_ctx("misbehave", {}))
    assert ack.next_cursor == b"1"
    assert p.long_lived.proc.pid != old.pid and p.long_lived.manifest.tick_timeout_secs == 20
    assert old.proc.returncode == 0  # it saw EOF on stdin and exited by itself


def test_long_lived_manifest_change_of_kinds_asks_for_a_worker_restart(plugin):
    p = plugin(lifecycle="long_lived")
    p.tick(make_ctx("misbehave", {}))
    with open(p.manifest.path) as f:
        text = f.read()
    with open(p.manifest.path, "w") as f:
        f.write(text.replace('kinds = ["misbehave"]', 'kinds = ["other_kind"]'))
    with pytest.raises(TransientError, match="restart the workers"):
        p.tick(make_ctx("misbehave", {}))


def test_stop_all_stops_long_lived_processes_cleanly(plugin):
    from nexopoll.plugins.poller import stop_all

    p = plugin(lifecycle="long_lived")
    p.tick(make_ctx("misbehave", {}))
    proc = p.long_lived.proc
    stop_all()
    assert proc.proc.returncode == 0 and not proc.alive


def test_a_failed_tick_leaves_its_deliveries_with_the_host_only(plugin):
    """The proxy hands deliveries to the host and raises: the runtime discards them."""
    p = plugin(lifecycle="ephemeral")
    host = RecordingHost()
    with pytest.raises(TransientError, match="after deliver"):
        p.tick(make_ctx("misbehave", {"mode": "deliver_fail"}, host=host))
    assert len(host.deliveries) == 1  # recorded, but the tick failed: tick.py drops them


def test_long_lived_plugin_is_stopped_cleanly_when_a_reload_changes_its_jobs(plugin, redis_client):
    from nexopoll.runtime.keys import kind_version_key, version_key

    p = plugin(lifecycle="long_lived")
    p.tick(make_ctx("misbehave", {}))
    p.tick(make_ctx("misbehave", {}))
    old = p.long_lived.proc
    assert old.alive  # no reload yet: the same process serves
    redis_client.incr(version_key())  # a reload that changed other kinds' jobs only
    redis_client.incr(kind_version_key("other_kind"))
    p.tick(make_ctx("misbehave", {}))
    assert p.long_lived.proc is old and old.alive
    redis_client.incr(kind_version_key("misbehave"))  # a reload that changed one of its jobs
    assert p.tick(make_ctx("misbehave", {})).next_cursor == b"1"
    assert p.long_lived.proc.pid != old.pid
    assert old.proc.returncode == 0  # stopped by closing its stdin, not killed
