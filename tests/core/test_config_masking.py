"""The loader masks secrets with core.redact's rule, in job and agent issues alike."""

from __future__ import annotations

from datetime import UTC, datetime

from nexopoll.core.config import load_config
from nexopoll.core.errors import ConfigError
from nexopoll.core.redact import redact, secret_values

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENV = {"TOK": "tok-secret-value-123", "SHORT": "abc", "URL": "https://hooks.example/T0K3N"}


def echo(config: dict) -> None:
    raise ConfigError(f"bad config {config!r}", path="url")


def load(text: str):
    return load_config(text, source="p.yaml", env=ENV, now=NOW, validators={"echo": echo})


def test_job_issue_is_masked_exactly_as_core_redact_masks():
    text = (
        "pollers:\n  jobs:\n"
        "    - id: a\n      kind: echo\n      agent: x\n      schedule: {every_secs: 60}\n"
        "      config: {url: '${URL}', auth: 'Bearer ${TOK}', s: '${SHORT}'}\n"
    )
    cfg = load(text)
    [issue] = cfg.issues
    raw = {"url": "${URL}", "auth": "Bearer ${TOK}", "s": "${SHORT}"}
    expanded = {"url": ENV["URL"], "auth": "Bearer " + ENV["TOK"], "s": ENV["SHORT"]}
    assert issue.message == redact(f"bad config {expanded!r}", secret_values(raw, ENV))
    assert ENV["TOK"] not in str(issue) and ENV["URL"] not in str(issue)
    assert (issue.line, issue.path) == (7, "jobs[a].config.url")


def test_agent_issues_pass_through_the_same_masking():
    text = "agents:\n  ana:\n    chat:\n      token: 'x-${TOK}'\npollers: {}\n"
    cfg = load(text)
    [issue] = cfg.issues
    assert issue.path == "agents.ana.chat.token" and issue.line == 4
    assert ENV["TOK"] not in str(issue)
