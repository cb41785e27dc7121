"""failure_to channels are checked at load against the installed channels."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nexopoll.core.bindings import BUILTIN_BINDING_SCHEMAS
from nexopoll.core.config import load_config

NOW = datetime(2026, 1, 1, tzinfo=UTC)
AGENTS = "agents:\n  ana:\n    webhook: {url: 'https://h.example'}\n  bob:\n    log: {}\n"


def load(jobs: str, channels=BUILTIN_BINDING_SCHEMAS):
    text = (
        AGENTS
        + "pollers:\n  jobs:\n    - {id: ok, kind: noop, agent: ana, schedule: {every_secs: 60}}\n"
    )
    return load_config(
        text + jobs,
        source="p.yaml",
        env={},
        now=NOW,
        validators={"noop": lambda c: None},
        channels=channels,
    )


def job(agent: str, channel: str) -> str:
    return (
        f"    - id: bad\n      kind: noop\n      agent: {agent}\n"
        f"      schedule: {{every_secs: 60}}\n"
        f"      failure_to: {{channel: {channel}, to: oncall}}\n"
    )


@pytest.mark.parametrize("channel", ["telegramm", "slak", "webhooks", "logs", "sms"])
@pytest.mark.parametrize("agent", ["ana", "bob", "zed"])
def test_failure_to_naming_no_installed_channel_rejects_that_job_alone(agent, channel):
    cfg = load(job(agent, channel))
    assert list(cfg.jobs) == ["ok"]
    [issue] = cfg.issues
    assert (issue.path, issue.line, issue.job_id) == ("jobs[bad].failure_to.channel", 13, "bad")
    assert f"unknown channel {channel!r}" in issue.message
    assert f"agent {agent!r}" in issue.message
    assert (
        "installed channels: email, log, slack, stream, telegram, webhook, whatsapp"
        in issue.message
    )
    assert str(issue).startswith("p.yaml:13: jobs[bad].failure_to.channel: ")


@pytest.mark.parametrize("agent", ["bob", "zed"])
def test_failure_to_a_channel_that_needs_a_binding_the_agent_lacks_is_rejected(agent):
    cfg = load(job(agent, "webhook"))
    assert list(cfg.jobs) == ["ok"]
    [issue] = cfg.issues
    assert (issue.path, issue.line) == ("jobs[bad].failure_to.channel", 13)
    assert f"agent {agent!r} has none" in issue.message
    assert f"agents.{agent}.webhook" in issue.message


@pytest.mark.parametrize("agent, channel", [("ana", "webhook"), ("ana", "log"), ("zed", "log")])
def test_failure_to_an_installed_channel_loads(agent, channel):
    cfg = load(job(agent, channel))
    assert cfg.issues == [] and set(cfg.jobs) == {"ok", "bad"}


def test_a_third_party_channel_without_a_schema_needs_no_binding():
    cfg = load(job("zed", "telegram"), channels={**BUILTIN_BINDING_SCHEMAS, "telegram": None})
    assert cfg.issues == []


def test_without_the_installed_channels_only_the_spelling_is_checked():
    cfg = load(job("zed", "sms"), channels=None)
    assert cfg.issues == []
