"""A plugin's ``metric_inc`` goes through the same rules as an in-process poller's.

Real plugin processes (the SDK's, and one speaking the raw wire) against the real
``TickHost``: a call with an id gets the refusal as its reply (the SDK raises
HostError), a notification's refusal is logged; a good call is counted.
"""

from __future__ import annotations

import logging

import pytest

from nexopoll.runtime.host import TickHost
from tests.plugins.conftest import HERE, make_ctx, plugin  # noqa: F401 (fixture)

SDK_PLUGIN = [str(HERE / "sdk_plugin.py")]


@pytest.mark.parametrize("label", ["__name__", "le", "job", "a-b", "1abc"])
def test_sdk_metric_inc_with_a_bad_label_gets_a_config_error_reply(plugin, label):  # noqa: F811
    p = plugin(lifecycle="ephemeral", args=SDK_PLUGIN)
    host = TickHost("job1", "ana", {}, {})
    config = {"mode": "metric", "name": "items", "labels": {label: "x"}}
    ack = p.tick(make_ctx("misbehave", config, host=host))
    text = ack.next_cursor.decode()
    assert text.startswith("refused: ") and "(code -32602)" in text
    assert repr(label) in text and "job 'job1'" in text
    assert host.metric_counts == {}


def test_sdk_metric_inc_is_counted_with_masked_values(plugin, monkeypatch):  # noqa: F811
    p = plugin(lifecycle="ephemeral", args=SDK_PLUGIN)
    secret = "tok-9f8e7d6c5b4a"
    host = TickHost("job1", "ana", {"webhook": {"url": "${HOOK_TOKEN}"}}, {"HOOK_TOKEN": secret})
    config = {"mode": "metric", "name": "items", "labels": {"endpoint": f"/hook/{secret}"}}
    ack = p.tick(make_ctx("misbehave", config, host=host))
    assert ack.next_cursor == b"counted"
    assert host.metric_counts == {("items", (("endpoint", "/hook/***"),)): 1}


def test_a_refused_metric_inc_notification_is_logged_and_the_tick_goes_on(
    plugin,  # noqa: F811
    caplog,
):
    p = plugin(lifecycle="long_lived")
    host = TickHost("job1", "ana", {}, {})
    config = {"mode": "metric_notify", "name": "items", "labels": {"__name__": "x"}}
    with caplog.at_level(logging.WARNING, logger="nexopoll.plugins"):
        ack = p.tick(make_ctx("misbehave", config, host=host))
    assert ack.next_cursor == b"notified"
    refused = [r.getMessage() for r in caplog.records if "notification_refused" in r.getMessage()]
    assert len(refused) == 1 and "'__name__'" in refused[0] and "method=metric_inc" in refused[0]
    assert host.metric_counts == {}
