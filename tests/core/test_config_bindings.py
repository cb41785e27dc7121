"""Strict, typed bindings per channel, and strict booleans and integers everywhere."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, ConfigDict

from nexopoll.core.bindings import LogBinding, WebhookBinding, requires_binding
from nexopoll.core.config import ConfigFileError, load_config

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENV = {
    "HOOK_SECRET": "hs-secret-9999",
    "FALSE": "false",
    "EMPTY": "",
    "BAD_URL": "ftp://files.example/tok-9f8e7d6c5b4a",
    "HOOK_URL": "https://hooks.example/T0K3N-abcdef",
}


def load(text: str, channels=None):
    return load_config(
        text,
        source="p.yaml",
        env=ENV,
        now=NOW,
        validators={"noop": lambda c: None},
        channels=channels,
    )


def agent_issue(binding: str, channel: str = "webhook", channels=None):
    cfg = load(f"agents:\n  ana:\n    {channel}: {binding}\npollers: {{}}\n", channels)
    assert "ana" not in cfg.agents, cfg.agents
    assert len(cfg.issues) == 1, [str(i) for i in cfg.issues]
    issue = cfg.issues[0]
    assert issue.line == 3
    for value in ENV.values():
        if len(value) >= 8:
            assert value not in str(issue)
    return issue


@pytest.mark.parametrize(
    "value",
    ['"false"', '"true"', "'no'", "'off'", "0", "1", '"0"', "''", "null", "[]", '"${FALSE}"'],
)
def test_allow_private_networks_takes_only_a_yaml_boolean(value):
    issue = agent_issue(f"{{url: 'https://h.example', allow_private_networks: {value}}}")
    assert issue.path == "agents.ana.webhook.allow_private_networks"
    assert "valid boolean" in issue.message


@pytest.mark.parametrize("value", ["true", "false", "True", "FALSE"])
def test_allow_private_networks_yaml_booleans_load(value):
    cfg = load(
        f"agents:\n  ana:\n    webhook: {{url: 'https://h.example', "
        f"allow_private_networks: {value}}}\npollers: {{}}\n"
    )
    assert cfg.issues == [] and "ana" in cfg.agents
    assert cfg.agents["ana"].bindings["webhook"]["allow_private_networks"] is (
        value.lower() == "true"
    )


@pytest.mark.parametrize(
    "binding, path, message",
    [
        ("{}", "agents.ana.webhook.url", "field required"),
        ("{url: ftp://h.example}", "agents.ana.webhook.url", "http:// or https://"),
        ("{url: '${BAD_URL}'}", "agents.ana.webhook.url", "http:// or https://"),
        ("{url: 'https://'}", "agents.ana.webhook.url", "with a host"),
        ('{url: "https://h.example/a b"}', "agents.ana.webhook.url", "no whitespace"),
        ('{url: "https://h.example/\\u2028"}', "agents.ana.webhook.url", "no whitespace"),
        ("{url: 5}", "agents.ana.webhook.url", "valid string"),
        ("{url: 'https://h.example', headers: {A: b}}", "agents.ana.webhook.headers", "unknown"),
        ("{url: 'https://h.example', allow_private_network: true}", None, "allowed: "),
        ("{url: 'https://h.example', secret: '${EMPTY}'}", "agents.ana.webhook.secret", "at least"),
        ("{url: 'https://h.example', secret: hunter2}", "agents.ana.webhook.secret", "${ENV_VAR}"),
        ("[url]", "agents.ana.webhook", "must be a mapping"),
    ],
)
def test_webhook_binding_schema(binding, path, message):
    issue = agent_issue(binding)
    if path is not None:
        assert issue.path == path
    assert message in issue.message
    assert "hunter2" not in str(issue)


def test_a_whole_url_secret_binding_is_validated_expanded_but_stored_as_a_reference():
    cfg = load(
        "agents:\n  ana:\n    webhook: {url: '${HOOK_URL}', secret: '${HOOK_SECRET}'}\n"
        "pollers: {}\n"
    )
    assert cfg.issues == []
    assert cfg.agents["ana"].bindings["webhook"] == {
        "url": "${HOOK_URL}",
        "secret": "${HOOK_SECRET}",
    }


@pytest.mark.parametrize("binding", ["{level: info}", "{enabled: true}", "[a]"])
def test_log_binding_takes_no_settings(binding):
    issue = agent_issue(binding, channel="log")
    assert issue.path.startswith("agents.ana.log")


@pytest.mark.parametrize(
    "binding, path, message",
    [
        ("{chat_id: 1194292426}", "agents.ana.pager.chat_id", "must be a string"),
        ("{silent: true}", "agents.ana.pager.silent", "must be a string"),
        ("{nested: {a: b}}", "agents.ana.pager.nested", "must be a string"),
        ("{list: [a]}", "agents.ana.pager.list", "must be a string"),
        ('{"chat\\n": x}', "agents.ana.pager['chat\\n']", "invalid binding key"),
        ('{"chat\\u2028": x}', "agents.ana.pager['chat\\u2028']", "invalid binding key"),
        ('{"\\tchat": x}', "agents.ana.pager['\\tchat']", "invalid binding key"),
        ('{"c h": x}', "agents.ana.pager['c h']", "invalid binding key"),
        ("{token: literal-token}", "agents.ana.pager.token", "${ENV_VAR}"),
    ],
)
def test_a_channel_without_a_schema_takes_a_mapping_of_strings(binding, path, message):
    issue = agent_issue(binding, channel="pager")
    assert issue.path == path
    assert message in issue.message


def test_generic_binding_of_strings_and_references_loads():
    cfg = load(
        "agents:\n  ana:\n    pager: {chat_id: '1194292426', token: '${HOOK_SECRET}'}\n"
        "pollers: {}\n"
    )
    assert cfg.issues == []


class SmsBinding(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    sender: str
    retries: int = 0
    flash: bool = False


@pytest.mark.parametrize(
    "binding, path",
    [
        ("{sender: a, retries: '3'}", "agents.ana.sms.retries"),
        ("{sender: a, retries: 3.0}", "agents.ana.sms.retries"),
        ("{sender: a, flash: 'yes'}", "agents.ana.sms.flash"),
        ("{sender: a, flash: 1}", "agents.ana.sms.flash"),
        ("{sender: 5}", "agents.ana.sms.sender"),
        ("{}", "agents.ana.sms.sender"),
    ],
)
def test_an_installed_channel_schema_is_applied_strictly(binding, path):
    channels = {"sms": SmsBinding, "log": LogBinding, "webhook": WebhookBinding}
    issue = agent_issue(binding, channel="sms", channels=channels)
    assert issue.path == path


def test_installed_channel_without_a_schema_is_a_mapping_of_strings():
    channels = {"chat": None, "log": LogBinding}
    issue = agent_issue("{port: 5}", channel="chat", channels=channels)
    assert issue.path == "agents.ana.chat.port"


def test_requires_binding():
    assert requires_binding(WebhookBinding) and not requires_binding(LogBinding)
    assert not requires_binding(None)


# --- strict booleans and integers in the job and settings blocks -------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("paused_on_boot", '"false"'),
        ("paused_on_boot", '"true"'),
        ("paused_on_boot", "0"),
        ("paused_on_boot", "'no'"),
    ],
)
def test_job_booleans_take_only_yaml_booleans(field, value):
    text = (
        "pollers:\n  jobs:\n    - id: j\n      kind: noop\n      agent: a\n"
        f"      schedule: {{every_secs: 60}}\n      {field}: {value}\n"
    )
    cfg = load(text)
    assert cfg.jobs == {}
    [issue] = cfg.issues
    assert (issue.path, issue.line) == (f"jobs[j].{field}", 7)


@pytest.mark.parametrize(
    "field, value",
    [
        ("enabled", '"false"'),
        ("enabled", "0"),
        ("default_jitter_ms", '"100"'),
        ("default_jitter_ms", "true"),
        ("default_jitter_ms", "1.5"),
        ("breaker_threshold", '"5"'),
        ("failure_alert_cooldown_secs", "true"),
        ("lease_ttl_factor", '"2"'),
    ],
)
def test_settings_take_only_their_yaml_type(field, value):
    with pytest.raises(ConfigFileError) as raised:
        load(f"pollers:\n  {field}: {value}\n")
    [issue] = raised.value.issues
    assert (issue.path, issue.line) == (f"pollers.{field}", 2)


@pytest.mark.parametrize("value", ['"10"', "true", "1.5", "-1"])
def test_stagger_jitter_takes_only_an_integer(value):
    text = (
        "pollers:\n  jobs:\n    - id: j\n      kind: noop\n      agent: a\n"
        f"      schedule: {{every_secs: 60, stagger_jitter_ms: {value}}}\n"
    )
    [issue] = load(text).issues
    assert issue.path == "jobs[j].schedule.stagger_jitter_ms" and issue.line == 6
