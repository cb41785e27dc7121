"""The channel bindings' typed schemas, ``${file:/path}`` secrets, and jobs whose
delivery channel their agent has no binding for (rejected at load, naming the
agent, the channel and the line)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nexopoll.core.bindings import BUILTIN_BINDING_SCHEMAS, public_view
from nexopoll.core.config import load_config

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENV = {
    "TG_TOKEN": "123456:tg-secret-token",
    "SLACK_HOOK": "https://hooks.slack.com/services/T0/B0/slack-secret-path",
    "file:/run/secrets/wa": "wa-secret-from-a-file",
}


def load(agents: str, jobs: str = "", env=ENV):
    return load_config(
        f"agents:\n  ana:\n{agents}pollers:\n  jobs:\n{jobs or '    []'}\n",
        source="p.yaml",
        env=env,
        now=NOW,
        validators={"noop": lambda c: None},
        channels=BUILTIN_BINDING_SCHEMAS,
    )


@pytest.mark.parametrize(
    "binding",
    [
        "telegram: {account: ana_bot, token: '${TG_TOKEN}', parse_mode: HTML,"
        " disable_web_page_preview: true, max_per_chat_per_second: 0.5}",
        "whatsapp: {phone_number_id: '1234567890', token: '${file:/run/secrets/wa}',"
        " max_per_second: 10}",
        "slack: {webhook_url: '${SLACK_HOOK}'}",
        "slack: {account: team, token: '${TG_TOKEN}'}",
        "email: {sender: 'Ana Bot <ana@example.com>', subject: '[{job_id}] {title}'}",
        "stream: {account: ana_bot, channel: telegram}",
    ],
)
def test_each_channel_binding_loads(binding):
    cfg = load(f"    {binding}\n")
    assert cfg.issues == [] and "ana" in cfg.agents


@pytest.mark.parametrize(
    "binding, path, message",
    [
        (
            "telegram: {account: a, token: '${TG_TOKEN}', disable_web_page_preview: 'true'}",
            "agents.ana.telegram.disable_web_page_preview",
            "valid boolean",
        ),
        (
            "telegram: {account: a, token: '123456:literal'}",
            "agents.ana.telegram.token",
            "${ENV_VAR} or ${file:/path}",
        ),
        (
            "telegram: {account: a, token: '${TG_TOKEN}', parse_mode: markdown}",
            "agents.ana.telegram.parse_mode",
            "MarkdownV2",
        ),
        ("telegram: {token: '${TG_TOKEN}'}", "agents.ana.telegram.account", "field required"),
        (
            "whatsapp: {phone_number_id: '+57 300', token: '${TG_TOKEN}'}",
            "agents.ana.whatsapp.phone_number_id",
            "pattern",
        ),
        (
            "whatsapp: {phone_number_id: '1', token: '${TG_TOKEN}', max_per_second: '5'}",
            "agents.ana.whatsapp.max_per_second",
            "valid number",
        ),
        (
            "slack: {webhook_url: 'https://hooks.slack.com/services/literal'}",
            "agents.ana.slack.webhook_url",
            "${ENV_VAR} or ${file:/path}",
        ),
        (
            "slack: {webhook_url: '${SLACK_HOOK}', token: '${TG_TOKEN}'}",
            "agents.ana.slack",
            "exactly one of webhook_url and token",
        ),
        ("email: {sender: 'not an address'}", "agents.ana.email.sender", "e-mail address"),
        ("email: {sender: a@b.c, subject: '{unclosed'}", "agents.ana.email.subject", "unclosed"),
        ("stream: {account: 'two words'}", "agents.ana.stream.account", "invalid account"),
        (
            "telegram: {account: a, token: '${file:/run/secrets/none}'}",
            "agents.ana.telegram.token",
            "secret file /run/secrets/none cannot be read",
        ),
        (
            "telegram: {account: a, token: '${file:relative/path}'}",
            "agents.ana.telegram.token",
            "malformed",
        ),
    ],
)
def test_a_bad_binding_is_rejected_naming_the_field_and_never_a_secret(binding, path, message):
    cfg = load(f"    {binding}\n")
    assert "ana" not in cfg.agents
    issues = [i for i in cfg.issues if i.path == path]
    assert issues, [str(i) for i in cfg.issues]
    assert any(message in i.message for i in issues), [str(i) for i in cfg.issues]
    issue = issues[0]
    assert issue.line == 3
    for value in ENV.values():
        assert value not in str(issue)


JOB = (
    "    - id: bad\n      kind: noop\n      agent: ana\n      schedule: {{every_secs: 60}}\n"
    "      config:\n        deliver: {{channel: {channel}, to: '42'}}\n"
)


@pytest.mark.parametrize("channel", ["telegram", "whatsapp", "slack", "email", "stream"])
def test_a_job_delivering_to_a_channel_its_agent_has_no_binding_for_is_rejected(channel):
    cfg = load("    log: {}\n", JOB.format(channel=channel))
    assert cfg.jobs == {}
    [issue] = cfg.issues
    assert (issue.path, issue.line, issue.job_id) == ("jobs[bad].config.deliver.channel", 11, "bad")
    assert f"channel {channel!r} needs a binding, and agent 'ana' has none" in issue.message
    assert f"agents.ana.{channel}" in issue.message
    assert str(issue).startswith("p.yaml:11: ")


def test_a_job_delivering_to_an_unknown_channel_is_rejected():
    cfg = load("    log: {}\n", JOB.format(channel="telegrm"))
    [issue] = cfg.issues
    assert "unknown channel 'telegrm' for the deliveries of agent 'ana'" in issue.message


@pytest.mark.parametrize("channel", ["log", "telegram"])
def test_a_job_whose_agent_has_the_binding_loads(channel):
    cfg = load(
        "    log: {}\n    telegram: {account: a, token: '${TG_TOKEN}'}\n",
        JOB.format(channel=channel),
    )
    assert cfg.issues == [] and list(cfg.jobs) == ["bad"]


def test_the_public_view_drops_secret_keys_and_secret_fields():
    schema = BUILTIN_BINDING_SCHEMAS["slack"]
    view = public_view({"account": "t", "webhook_url": "${H}", "token": "${T}"}, schema)
    assert view == {"account": "t"}
    telegram = {"account": "a", "token": "${T}", "parse_mode": "HTML"}
    view = public_view(telegram, BUILTIN_BINDING_SCHEMAS["telegram"])
    assert view == {"account": "a", "parse_mode": "HTML"}
