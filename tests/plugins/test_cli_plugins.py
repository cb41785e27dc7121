"""``pollers plugins`` lists manifests with kinds and state; ``pollers check`` validates them."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from nexopoll.runtime.registry import reset_registry

from .conftest import write_plugin


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("pollers", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def plugins_dir(tmp_path, settings, redis_client):
    d = tmp_path / "plugins"
    d.mkdir()
    settings.NEXOPOLL_PLUGINS_DIR = str(d)
    settings.NEXOPOLL_CONFIG = str(tmp_path / "missing.yaml")
    reset_registry()
    yield d
    reset_registry()


def test_plugins_lists_each_manifest_with_kinds_and_state(plugins_dir, redis_client):
    write_plugin(plugins_dir, "alpha", ["alpha_one", "alpha_two"], max_concurrent=3)
    write_plugin(plugins_dir, "beta", ["beta_one"], lifecycle="ephemeral")
    redis_client.zadd("nexopoll:plugin:sem:alpha", {"holder": 9e15})
    rows = json.loads(run("plugins", "--json")[0])
    assert [(r["id"], r["lifecycle"], r["kinds"], r["state"]) for r in rows] == [
        ("alpha", "long_lived", ["alpha_one", "alpha_two"], "ok"),
        ("beta", "ephemeral", ["beta_one"], "ok"),
    ]
    assert rows[0]["ticks_running"] == 1 and rows[0]["max_concurrent_ticks"] == 3
    text = run("plugins")[0]
    assert "alpha  long_lived  kinds=alpha_one,alpha_two  running=1/3  ok" in text


def test_plugins_and_check_fail_on_invalid_manifests_and_duplicate_kinds(plugins_dir):
    write_plugin(plugins_dir, "alpha", ["webhook_poll"])
    write_plugin(plugins_dir, "beta", ["x_kind"], timeout=0)
    with pytest.raises(CommandError, match="invalid"):
        run("plugins")
    err = StringIO()
    with pytest.raises(CommandError, match="problem"):
        call_command("pollers", "check", stdout=StringIO(), stderr=err)
    text = err.getvalue()
    assert "tick_timeout_secs must be an integer in 1..=3600, got 0" in text
    assert "'webhook_poll' is claimed by built-in" in text and "plugin 'alpha'" in text


def test_check_passes_with_valid_manifests(plugins_dir):
    write_plugin(plugins_dir, "alpha", ["alpha_one"])
    out, err = run("check")
    assert "ok:" in out and "plugin" not in err
    assert run("plugins")[0].count("\n") == 2
