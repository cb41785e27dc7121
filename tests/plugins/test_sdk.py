"""nexopoll.plugin_sdk: errors map to their classes; ticks are multiplexed on one process."""

from __future__ import annotations

import threading
import time

import pytest

from nexopoll.core.errors import ConfigError, PermanentError, TransientError

from .conftest import HERE, make_ctx

SDK_PLUGIN = [str(HERE / "sdk_plugin.py")]


@pytest.mark.parametrize(
    ("mode", "cls", "text"),
    [
        ("transient", TransientError, "sdk says transient"),
        ("permanent", PermanentError, "sdk says permanent"),
        ("config", ConfigError, "sdk says config"),
        ("crash", TransientError, "unexpected bug in the plugin"),
        ("creds", PermanentError, "no telegram"),
    ],
)
def test_sdk_errors_map_to_runtime_classes(plugin, mode, cls, text):
    p = plugin(lifecycle="ephemeral", args=SDK_PLUGIN)
    with pytest.raises(cls, match=text) as info:
        p.tick(make_ctx("misbehave", {"mode": mode}))
    if cls is TransientError:
        assert not isinstance(info.value, PermanentError | ConfigError)


def test_sdk_cursor_round_trip(plugin):
    p = plugin(lifecycle="long_lived", args=SDK_PLUGIN)
    ack = p.tick(make_ctx("misbehave", {}, cursor=b"\x00\xff"))
    assert ack.next_cursor == b"\x00\xff+"


def test_concurrent_ticks_are_multiplexed_on_one_long_lived_process(plugin):
    p = plugin(lifecycle="long_lived", args=SDK_PLUGIN, max_concurrent=4)
    p.tick(make_ctx("misbehave", {}))  # started
    pid = p.long_lived.proc.pid
    results: dict[str, bytes] = {}

    def one(job: str) -> None:
        ctx = make_ctx("misbehave", {"mode": "sleep", "secs": 1.0})
        ctx = type(ctx)(**{**ctx.__dict__, "job_id": job})
        results[job] = p.tick(ctx).next_cursor

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(f"j{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    # each reply reached the tick that asked for it, all from the one process, at once
    assert results == {f"j{i}": f"j{i}".encode() for i in range(4)}
    assert p.long_lived.proc.pid == pid
    assert elapsed < 3.0, elapsed
