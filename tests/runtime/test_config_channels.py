"""The Django side passes the installed channels to the loader: failure_to is checked at load."""

from __future__ import annotations

import pytest

from nexopoll.models import PollJob

from .conftest import scripted


@pytest.mark.parametrize("channel", ["telegramm", "slak", "webhooks"])
def test_reload_rejects_failure_to_an_uninstalled_channel_and_keeps_the_last_good(cfg, channel):
    cfg.write([scripted("a", failure_to={"channel": "log", "to": "oncall"}), scripted("b")])
    assert cfg.reload().issues == []
    cfg.write([scripted("a", failure_to={"channel": channel, "to": "oncall"}), scripted("b")])
    res = cfg.reload()
    assert res.kept_invalid == ["a"] and res.keep == ["b"]
    [issue] = res.issues
    line = cfg.path.read_text().splitlines().index(f"      channel: {channel}") + 1
    assert issue.startswith(f"{cfg.path}:{line}: jobs[a].failure_to.channel: ")
    assert f"unknown channel {channel!r} for the alerts of agent 'ana'" in issue
    assert "installed channels: email, log, slack, stream, telegram, webhook, whatsapp" in issue
    assert PollJob.objects.get(job_id="a").failure_to == {"channel": "log", "to": "oncall"}


def test_reload_rejects_failure_to_webhook_when_the_agent_has_no_webhook_binding(cfg):
    cfg.write([scripted("a", failure_to={"channel": "webhook", "to": "oncall"})])
    res = cfg.reload()
    assert res.add == [] and not PollJob.objects.exists()
    [issue] = res.issues
    assert "jobs[a].failure_to.channel: channel 'webhook' needs a binding" in issue
    assert "agents.ana.webhook" in issue


def test_reload_rejects_a_quoted_boolean_in_a_binding(cfg):
    agents = {"ana": {"webhook": {"url": "https://h.example", "allow_private_networks": "false"}}}
    cfg.write([scripted("a")], agents=agents)
    res = cfg.reload()
    [agent_issue] = res.issues  # the agent's one issue names the jobs it rejects
    assert "agents.ana.webhook.allow_private_networks: Input should be a valid boolean" in (
        agent_issue
    )
    assert agent_issue.endswith("(agent 'ana' is rejected, and with it its jobs: a)")
    assert not PollJob.objects.exists()
