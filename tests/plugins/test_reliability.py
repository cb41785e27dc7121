"""RELIABILITY.md rows 40-45: hang, crash, garbage, huge output, env, stderr flood."""

from __future__ import annotations

import json
import os

import psutil
import pytest

from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.plugins.jsonrpc import ProtocolError
from nexopoll.plugins.process import PluginExited
from nexopoll.plugins.session import PluginTimeout
from tests.support.procs import wait_for

from .conftest import make_ctx

LIFECYCLES = ["ephemeral", "long_lived"]
CANARY = "canary-SECRET-9f3b7c"


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def transient_only(exc: BaseException) -> bool:
    return isinstance(exc, TransientError) and not isinstance(exc, PermanentError | ConfigError)


# -- row 40 -----------------------------------------------------------------------------
@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_40_hang_with_grandchild_is_killed_as_a_group_at_its_timeout(plugin, lifecycle, tmp_path):
    p = plugin(lifecycle=lifecycle, timeout=1)
    pidfile = tmp_path / "pids"
    with pytest.raises(PluginTimeout, match=r"timed out after 1\.0s") as info:
        p.tick(make_ctx("misbehave", {"mode": "hang", "pidfile": str(pidfile)}))
    assert transient_only(info.value)
    leader, grandchild = map(int, pidfile.read_text().split())
    wait_for(lambda: gone(leader) and gone(grandchild), 5, what="plugin group gone")


def test_40_long_lived_restarts_with_backoff_after_a_hang(plugin, tmp_path):
    p = plugin(lifecycle="long_lived", timeout=1)
    with pytest.raises(PluginTimeout):
        p.tick(make_ctx("misbehave", {"mode": "hang", "pidfile": str(tmp_path / "p")}))
    first = p.long_lived.proc.pid
    with pytest.raises(TransientError, match="restarting in"):
        p.tick(make_ctx("misbehave", {}))  # inside the backoff: not restarted yet
    ack = wait_for(lambda: _try_tick(p), 5, what="restart after backoff")
    assert ack.next_cursor == b"1"
    assert p.long_lived.proc.pid != first and p.long_lived.failures == 0


def _try_tick(p):
    try:
        return p.tick(make_ctx("misbehave", {}))
    except TransientError:
        return None


# -- row 41 -----------------------------------------------------------------------------
@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_41_crash_exit_1_gives_a_bounded_redacted_stderr_tail(plugin, lifecycle, monkeypatch):
    monkeypatch.setenv("NEXOPOLL_TEST_PLUGIN_TOKEN", CANARY)
    p = plugin(lifecycle=lifecycle, env={"PLUGIN_TOKEN": "${NEXOPOLL_TEST_PLUGIN_TOKEN}"})
    with pytest.raises(PluginExited) as info:
        p.tick(make_ctx("misbehave", {"mode": "exit", "leak": True}))
    text = str(info.value)
    assert transient_only(info.value)
    assert "(code 1)" in text and "fatal: giving up" in text
    assert CANARY not in text and "token=***" in text
    assert len(text) < 1000


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_41_sigsegv_mid_call_is_an_error_naming_the_signal(plugin, lifecycle):
    p = plugin(lifecycle=lifecycle)
    with pytest.raises(PluginExited, match="SIGSEGV") as info:
        p.tick(make_ctx("misbehave", {"mode": "segv"}))
    assert "about to crash" in str(info.value)


def test_41_stderr_tail_buffer_is_capped_at_64_kib(plugin):
    p = plugin(lifecycle="long_lived")
    with pytest.raises(PluginExited):
        p.tick(make_ctx("misbehave", {"mode": "exit"}))  # writes ~170 KB of stderr
    assert 0 < len(p.long_lived.proc._tail) <= 64 * 1024


# -- row 42 -----------------------------------------------------------------------------
GARBAGE = {
    "non_json": "not JSON",
    "wrong_id": "unknown id",
    "both": "both result and error",
    "nan": "NaN is not valid JSON",
    "deep": "nested too deeply",
}


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
@pytest.mark.parametrize("mode", sorted(GARBAGE))
def test_42_garbage_is_a_protocol_error_and_the_plugin_is_restarted(plugin, lifecycle, mode):
    p = plugin(lifecycle=lifecycle)
    if lifecycle == "long_lived":
        p.tick(make_ctx("misbehave", {}))
        first = p.long_lived.proc
    with pytest.raises(ProtocolError, match=GARBAGE[mode]) as info:
        p.tick(make_ctx("misbehave", {"mode": mode}))
    assert transient_only(info.value)
    if lifecycle == "long_lived":
        assert not first.alive
        wait_for(lambda: gone(first.pid), 5, what="old plugin process gone")
        ack = wait_for(lambda: _try_tick(p), 5, what="restarted plugin answers")
        assert p.long_lived.proc.pid != first.pid and ack.next_cursor == b"1"


def test_42_host_rss_stays_stable_under_repeated_garbage(plugin):
    p = plugin(lifecycle="ephemeral")
    me = psutil.Process()
    for mode in GARBAGE:  # warm-up
        with pytest.raises(ProtocolError):
            p.tick(make_ctx("misbehave", {"mode": mode}))
    before = me.memory_info().rss
    for _ in range(3):
        for mode in GARBAGE:
            with pytest.raises(ProtocolError):
                p.tick(make_ctx("misbehave", {"mode": mode}))
    assert me.memory_info().rss - before < 20 * 1024 * 1024


# -- row 43 -----------------------------------------------------------------------------
@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_43_a_10_mb_line_without_newline_is_cut_at_the_cap_and_killed(plugin, lifecycle):
    p = plugin(lifecycle=lifecycle)
    me = psutil.Process()
    before = me.memory_info().rss
    with pytest.raises(ProtocolError, match="line over 1048576 bytes") as info:
        p.tick(make_ctx("misbehave", {"mode": "huge", "mb": 10}))
    assert transient_only(info.value)
    # the reader stopped at the cap: the host never held the 10 MB
    assert me.memory_info().rss - before < 8 * 1024 * 1024
    if lifecycle == "long_lived":
        wait_for(lambda: gone(p.long_lived.proc.pid), 5, what="killed")


# -- row 44 -----------------------------------------------------------------------------
@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_44_plugin_sees_only_allowlisted_and_manifest_env(plugin, lifecycle, monkeypatch):
    monkeypatch.setenv("NEXOPOLL_API_TOKEN_CANARY", CANARY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY)
    monkeypatch.setenv("PLUGIN_ONLY_VALUE", "given")
    p = plugin(lifecycle=lifecycle, env={"MY_SETTING": "${PLUGIN_ONLY_VALUE}"})
    ack = p.tick(make_ctx("misbehave", {"mode": "env"}))
    assert CANARY not in ack.next_cursor.decode()
    env = json.loads(ack.next_cursor)
    assert env["MY_SETTING"] == "given"
    assert env["NEXOPOLL_PLUGIN_ID"] == "mis"
    allowed = {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "MY_SETTING",
        "NEXOPOLL_PLUGIN_ID",
        "NEXOPOLL_PLUGIN_LIFECYCLE",
    }
    # the interpreter itself may add LC_CTYPE; nothing else from the worker leaks
    assert set(env) <= allowed, set(env) - allowed
    assert "REDIS_URL" not in env and "DATABASE_URL" not in env


def test_44_manifest_env_naming_an_unset_variable_is_a_config_error(plugin, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    p = plugin(lifecycle="ephemeral", env={"X": "${NOT_SET_ANYWHERE}"})
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        p.tick(make_ctx("misbehave", {}))


# -- row 45 -----------------------------------------------------------------------------
@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_45_stderr_flood_while_replying_does_not_deadlock(plugin, lifecycle, caplog):
    p = plugin(lifecycle=lifecycle, timeout=60)
    ack = p.tick(make_ctx("misbehave", {"mode": "flood", "mb": 100}, deadline=60))
    assert ack.next_cursor == b"flooded"
    if lifecycle == "long_lived":
        assert len(p.long_lived.proc._tail) <= 64 * 1024
    # the log got a rate-limited trickle, not 100k lines
    assert len([r for r in caplog.records if "plugin.stderr" in r.getMessage()]) < 200
    assert os.getpid()  # the host is alive and well


def test_41_a_secret_echoed_in_an_error_reply_is_masked(plugin, monkeypatch):
    monkeypatch.setenv("NEXOPOLL_TEST_PLUGIN_TOKEN", CANARY)
    p = plugin(lifecycle="ephemeral", env={"PLUGIN_TOKEN": "${NEXOPOLL_TEST_PLUGIN_TOKEN}"})
    with pytest.raises(PermanentError) as info:
        p.tick(make_ctx("misbehave", {"mode": "error", "code": -32002, "leak": True}))
    assert CANARY not in str(info.value) and "boom ***" in str(info.value)
