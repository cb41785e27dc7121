"""Values a job's config may not hold: plain-text credentials, values the DB cannot store."""

from __future__ import annotations

import pytest

from .test_config import load

SECRET = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"


def job(config: str) -> str:
    return (
        "pollers:\n  jobs:\n    - id: a\n      kind: webhook_poll\n      agent: ana\n"
        f"      schedule: {{every_secs: 60}}\n      config:\n        {config}\n"
    )


def issues(config: str) -> list:
    cfg = load(job(config), env={"TOK": "tok-from-env-123", "P": "pass-from-env"})
    return cfg.issues


@pytest.mark.parametrize(
    ("config", "path"),
    [
        (f"headers: {{Authorization: 'Bearer {SECRET}'}}", "jobs[a].config.headers.Authorization"),
        (f"headers: {{x-api-key: {SECRET}}}", "jobs[a].config.headers.x-api-key"),
        (f"headers: {{Cookie: 'sid={SECRET}'}}", "jobs[a].config.headers.Cookie"),
        (f"headers: {{X-Session-Secret: {SECRET}}}", "jobs[a].config.headers.X-Session-Secret"),
        (f"request: {{headers: {{X-Token: {SECRET}}}}}", "jobs[a].config.request.headers.X-Token"),
        (f"token: {SECRET}", "jobs[a].config.token"),
        (f"auth: {{client_secret: {SECRET}}}", "jobs[a].config.auth.client_secret"),
        (f"url: 'https://bot:{SECRET}@example.com/x'", "jobs[a].config.url"),
        (f"url: 'https://{SECRET}@api.example.com/x'", "jobs[a].config.url"),
        (f"url: 'https://example.com/x?page=2&api_key={SECRET}'", "jobs[a].config.url"),
        (f"url: 'https://example.com/x?access_token={SECRET}'", "jobs[a].config.url"),
        (f"urls: ['https://example.com/x?Token={SECRET}']", "jobs[a].config.urls[0]"),
    ],
)
def test_a_plain_text_credential_is_refused_without_echoing_it(config, path):
    if not config.startswith("url:"):
        config = f"url: https://example.com/x\n        {config}"
    found = [i for i in issues(config) if i.path == path]
    assert len(found) == 1, issues(config)
    assert found[0].line == len(job(config).splitlines())
    assert "${ENV_VAR}" in found[0].message
    assert SECRET not in str(found[0])


@pytest.mark.parametrize(
    "config",
    [
        "headers: {Authorization: 'Bearer ${TOK}', Accept: application/json}",
        "headers: {X-Api-Key: '${TOK}', Cookie: 'sid=${TOK}; theme=dark'}",
        "headers: {X-Request-Id: abc, User-Agent: nexopoll}",
        "token: '${TOK}'",
        "url: 'https://bot:${P}@example.com/x'",
        "url: 'https://${P}@example.com/x?page=2&sort=desc'",
        "url: 'https://example.com/x?token=${TOK}'",
        "headers: {Authorization: ''}",
    ],
)
def test_references_and_non_secrets_pass(config):
    if not config.startswith("url:"):
        config = f"url: https://example.com/x\n        {config}"
    assert issues(config) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"a\\0b"', "NUL character"),
        (".inf", "finite number"),
        (".nan", "finite number"),
        (str(2**63), "integer out of range"),
        (str(-(2**63) - 1), "integer out of range"),
    ],
)
def test_a_value_the_db_cannot_hold_is_refused(value, message):
    [issue] = issues(f"url: https://example.com/x\n        extra: {{v: {value}}}")
    assert issue.path == "jobs[a].config.extra.v" and issue.line == 9
    assert message in issue.message


def test_a_nul_in_an_agent_binding_rejects_the_agent():
    cfg = load('agents:\n  ana:\n    chat: {room: "a\\0b"}\npollers: {}\n')
    [issue] = cfg.issues
    assert issue.path == "agents.ana.chat.room" and "NUL" in issue.message
    assert "ana" not in cfg.agents


@pytest.mark.parametrize(
    "binding",
    [
        f"webhook: {{url: 'https://hook:{SECRET}@hooks.example/x'}}",
        f"webhook: {{url: 'https://hooks.example/x?token={SECRET}'}}",
    ],
)
def test_a_plain_text_credential_in_an_agent_binding_url_is_refused(binding):
    cfg = load(f"agents:\n  ana:\n    {binding}\npollers: {{}}\n")
    [issue] = cfg.issues
    assert issue.path == "agents.ana.webhook.url" and "${ENV_VAR}" in issue.message
    assert SECRET not in str(issue) and "ana" not in cfg.agents
