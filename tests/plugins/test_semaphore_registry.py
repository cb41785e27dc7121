"""The Redis semaphore and the registry's plugin kinds."""

from __future__ import annotations

import time

import pytest

from nexopoll.plugins.poller import PluginPoller
from nexopoll.plugins.semaphore import Semaphore
from nexopoll.runtime.registry import (
    DuplicateKindError,
    InvalidPluginError,
    build_registry,
)

from .conftest import write_plugin


def test_semaphore_admits_limit_holders_and_releases_only_its_token(redis_client):
    a = Semaphore(redis_client, "p", 2, ttl_ms=10_000)
    t1, t2 = a.try_acquire(), a.try_acquire()
    assert t1 and t2 and a.try_acquire() is None
    assert a.holders() == 2
    a.release("someone-else")
    assert a.try_acquire() is None
    a.release(t1)
    assert a.try_acquire() is not None


def test_semaphore_slot_of_a_dead_holder_expires(redis_client):
    sem = Semaphore(redis_client, "p", 1, ttl_ms=200)
    assert sem.try_acquire()  # never released: its holder "died"
    assert sem.try_acquire() is None
    token = sem.acquire(time.monotonic() + 5)
    assert token is not None


def test_semaphore_acquire_gives_up_at_the_deadline(redis_client):
    sem = Semaphore(redis_client, "p", 1, ttl_ms=10_000)
    sem.try_acquire()
    started = time.monotonic()
    assert sem.acquire(started + 0.3) is None
    assert 0.25 < time.monotonic() - started < 2


def test_registry_registers_every_kind_of_every_plugin(tmp_path):
    write_plugin(tmp_path, "alpha", ["alpha_one", "alpha_two"], lifecycle="long_lived")
    write_plugin(tmp_path, "beta", ["beta_one"], lifecycle="ephemeral")
    reg = build_registry(plugins_dir=str(tmp_path))
    one, two, beta = reg.get("alpha_one"), reg.get("alpha_two"), reg.get("beta_one")
    assert isinstance(one, PluginPoller) and one.long_lived is two.long_lived  # one process
    assert beta.long_lived is None
    assert "plugin 'alpha'" in reg.sources()["alpha_one"]
    assert "webhook_poll" in reg.kinds()


def test_registry_fails_loudly_on_a_kind_claimed_by_a_plugin_and_a_builtin(tmp_path):
    write_plugin(tmp_path, "alpha", ["webhook_poll"])
    with pytest.raises(DuplicateKindError) as info:
        build_registry(plugins_dir=str(tmp_path))
    text = str(info.value)
    assert "built-in pollers.webhook_poll" in text and "plugin 'alpha'" in text


def test_registry_fails_loudly_on_a_kind_claimed_by_two_plugins(tmp_path):
    write_plugin(tmp_path, "alpha", ["same_kind"])
    write_plugin(tmp_path, "beta", ["same_kind"])
    with pytest.raises(DuplicateKindError, match=r"plugin 'alpha'.*and by plugin 'beta'"):
        build_registry(plugins_dir=str(tmp_path))


def test_registry_fails_loudly_on_an_invalid_manifest(tmp_path):
    write_plugin(tmp_path, "alpha", ["aa"], timeout=0)
    with pytest.raises(InvalidPluginError, match="tick_timeout_secs must be an integer"):
        build_registry(plugins_dir=str(tmp_path))
