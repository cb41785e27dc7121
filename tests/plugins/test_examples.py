"""The shipped example plugins (examples/plugins/): Python (long-lived, SDK) and Node (ephemeral).

They are loaded the product way: NEXOPOLL_PLUGINS_DIR pointing at examples/plugins.
"""

from __future__ import annotations

import shutil

import pytest

from nexopoll.core.errors import ConfigError
from nexopoll.plugins import poller as plugin_poller
from nexopoll.runtime.registry import build_registry
from tests.support.procs import ROOT

from .conftest import RecordingHost, make_ctx

EXAMPLES = ROOT / "examples" / "plugins"
DELIVER = {"deliver": {"channel": "log", "to": "ops"}}


@pytest.fixture
def registry(redis_client):
    reg = build_registry(plugins_dir=str(EXAMPLES))
    yield reg
    plugin_poller.stop_all()


def test_examples_register_their_kinds(registry):
    assert registry.get("py_counter").manifest.lifecycle == "long_lived"
    assert registry.get("node_counter").manifest.lifecycle == "ephemeral"


def test_python_example_counts_delivers_and_keeps_its_cursor(registry):
    poller = registry.get("py_counter")
    host = RecordingHost()
    ack = poller.tick(make_ctx("py_counter", {**DELIVER, "batch": 3, "label": "n"}, host=host))
    assert ack.next_cursor == b"3" and ack.items_dispatched == 3
    ack = poller.tick(make_ctx("py_counter", {**DELIVER, "label": "n"}, cursor=b"3", host=host))
    assert ack.next_cursor == b"4"
    assert [p["text"] for _, _, p in host.deliveries] == ["n #1", "n #2", "n #3", "n #4"]
    assert host.metrics == [("counter_py_items", {})] * 2
    assert ("info", "counted", {"upto": "3"}) in host.logs


def test_python_example_reports_bad_config_as_config_error(registry):
    with pytest.raises(ConfigError, match="batch must be an integer"):
        registry.get("py_counter").tick(make_ctx("py_counter", {**DELIVER, "batch": 0}))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_example_speaks_the_same_wire(registry):
    poller = registry.get("node_counter")
    host = RecordingHost()
    ack = poller.tick(make_ctx("node_counter", {**DELIVER, "label": "js"}, host=host))
    assert ack.next_cursor == b"1"
    ack = poller.tick(make_ctx("node_counter", {**DELIVER, "label": "js"}, cursor=b"41", host=host))
    assert ack.next_cursor == b"42" and ack.items_dispatched == 1
    assert [p["text"] for _, _, p in host.deliveries] == ["js #1", "js #42"]
    with pytest.raises(ConfigError, match="deliver"):
        poller.tick(make_ctx("node_counter", {}))
