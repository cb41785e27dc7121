"""webhook_poll's config takes only YAML types: a quoted bool or number is an error at load."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nexopoll.core.config import load_config
from nexopoll.core.errors import ConfigError
from pollers.webhook_poll import WebhookPollPoller

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "field, value",
    [
        ("allow_private_networks", '"false"'),
        ("allow_private_networks", "0"),
        ("allow_private_networks", '"${FALSE}"'),
        ("max_per_tick", '"5"'),
        ("max_per_tick", "true"),
        ("seen_capacity", '"100"'),
        ("max_bytes", "1.0"),
        ("timeout_secs", '"5"'),
    ],
)
def test_quoted_values_are_not_coerced(field, value):
    text = (
        "pollers:\n  jobs:\n    - id: j\n      kind: webhook_poll\n      agent: a\n"
        "      schedule: {every_secs: 60}\n      config:\n"
        "        url: https://api.example/items\n"
        "        deliver: {channel: log, to: ops}\n"
        f"        {field}: {value}\n"
    )
    cfg = load_config(
        text,
        source="p.yaml",
        env={"FALSE": "false"},
        now=NOW,
        validators={"webhook_poll": WebhookPollPoller().validate},
    )
    assert cfg.jobs == {}
    [issue] = cfg.issues
    assert (issue.path, issue.line) == (f"jobs[j].config.{field}", 10)


@pytest.mark.parametrize(
    "patch",
    [
        {"deliver": {"channel": "log", "to": "x" * 501}},  # the outbox column holds 500
        {"deliver": {"channel": "log", "to": "ops\n"}},
        {"headers": {"X-Name\n": "v"}},
        {"items_path": "data.\uff11"},  # a fullwidth digit
        {"id_field": "a..b"},
    ],
)
def test_webhook_poll_rejects_what_the_runtime_could_not_store_or_send(patch):
    cfg = {"url": "https://api.example.com/x", "deliver": {"channel": "log", "to": "ops"}}
    with pytest.raises(ConfigError):
        WebhookPollPoller().validate({**cfg, **patch})
