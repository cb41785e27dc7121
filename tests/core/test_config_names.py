"""Ids and names are matched whole: a trailing newline or any control character is refused.

Every value is written as a JSON string (a valid YAML double-quoted scalar), so the
control characters reach the loader exactly.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from nexopoll.core.config import ConfigIssue, LoadedConfig, load_config
from nexopoll.core.contract import check_kind
from nexopoll.core.errors import ConfigError

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENV = {"TOK": "tok-secret-value"}
CONTROLS = ["\n", "\r", "\t", "\x00", "\x7f", "\u2028", "\u0085", "\u2029", "\u202e", "\u200b"]
POSITIONS = ["{c}", "evil{c}", "{c}evil", "ev{c}il"]


def variants() -> list[str]:
    return [p.format(c=c) for c in CONTROLS for p in POSITIONS]


def q(value: str) -> str:
    return json.dumps(value)


def load(text: str) -> LoadedConfig:
    return load_config(text, source="p.yaml", env=ENV, now=NOW, validators={"noop": _noop})


def _noop(config: dict) -> None:
    return None


def job(job_id: str = '"ok"', agent: str = "x", kind: str = "noop", extra: str = "") -> str:
    return (
        f"    - id: {job_id}\n      kind: {kind}\n      agent: {agent}\n"
        f"      schedule: {{every_secs: 60}}\n{extra}"
    )


def assert_one_line(issues: list[ConfigIssue]) -> None:
    for issue in issues:
        text = str(issue)
        assert text.isprintable(), text


@pytest.mark.parametrize("bad", variants(), ids=repr)
def test_job_id_with_control_characters_is_rejected(bad):
    text = "pollers:\n  jobs:\n" + job('"evil"') + job(q(bad))
    cfg = load(text)
    assert list(cfg.jobs) == ["evil"]
    [issue] = cfg.issues
    assert issue.path == "jobs[1].id" and issue.line == 7
    assert "invalid job id" in issue.message
    assert_one_line(cfg.issues)


@pytest.mark.parametrize("bad", variants(), ids=repr)
def test_agent_id_with_control_characters_is_rejected_in_agents_and_jobs(bad):
    text = f"agents:\n  {q(bad)}:\n    log: {{}}\npollers:\n  jobs:\n" + job(agent=q(bad))
    cfg = load(text)
    assert cfg.agents == {} and cfg.jobs == {}
    paths = sorted(i.path for i in cfg.issues)
    assert paths == [f"agents[{bad!a}]", "jobs[ok].agent"]
    assert {i.line for i in cfg.issues} == {2, 8}
    assert_one_line(cfg.issues)


@pytest.mark.parametrize("bad", ["noop" + c for c in CONTROLS] + [c + "noop" for c in CONTROLS])
def test_kind_with_control_characters_is_unknown_and_cannot_be_registered(bad):
    cfg = load("pollers:\n  jobs:\n" + job(kind=q(bad)))
    [issue] = cfg.issues
    assert issue.path == "jobs[ok].kind" and issue.line == 4
    assert_one_line(cfg.issues)
    with pytest.raises(ConfigError, match="invalid poller kind"):
        check_kind(bad)


@pytest.mark.parametrize("bad", ["log" + c for c in CONTROLS] + [c + "log" for c in CONTROLS])
def test_channel_names_with_control_characters_are_rejected(bad):
    extra = f"      failure_to: {{channel: {q(bad)}, to: ops}}\n"
    text = f"agents:\n  ana:\n    {q(bad)}: {{}}\npollers:\n  jobs:\n" + job(extra=extra)
    cfg = load(text)
    assert cfg.agents == {} and cfg.jobs == {}
    by_path = {i.path: i for i in cfg.issues}
    assert by_path[f"agents.ana[{bad!a}]"].line == 3
    assert by_path["jobs[ok].failure_to.channel"].line == 10
    assert "invalid channel name" in by_path["jobs[ok].failure_to.channel"].message
    assert_one_line(cfg.issues)


@pytest.mark.parametrize("bad", variants(), ids=repr)
def test_recipient_with_control_characters_is_rejected(bad):
    extra = f"      failure_to: {{channel: log, to: {q(bad)}}}\n"
    cfg = load("pollers:\n  jobs:\n" + job(extra=extra))
    assert cfg.jobs == {}
    [issue] = cfg.issues
    assert issue.path == "jobs[ok].failure_to.to" and issue.line == 7
    assert "control or format character" in issue.message
    assert_one_line(cfg.issues)


@pytest.mark.parametrize("tail", CONTROLS)
def test_secret_reference_must_be_the_whole_value(tail):
    cfg = load(f"agents:\n  ana:\n    chat: {{token: {q('${TOK}' + tail)}}}\npollers: {{}}\n")
    assert "ana" not in cfg.agents
    [issue] = cfg.issues
    assert issue.path == "agents.ana.chat.token"
    assert "secrets must be given as ${ENV_VAR} or ${file:/path} references" in issue.message


def test_a_trailing_newline_does_not_make_a_second_job():
    text = "pollers:\n  jobs:\n" + job('"evil"') + job(q("evil\n"))
    cfg = load(text)
    assert list(cfg.jobs) == ["evil"]
    assert len(cfg.issues) == 1


@pytest.mark.parametrize("good", ["a", "0", "a" * 100, "ana_jira.v2-x"])
def test_valid_ids_still_load(good):
    cfg = load(f"agents:\n  {q(good)}: {{}}\npollers:\n  jobs:\n" + job(q(good), agent=q(good)))
    assert cfg.issues == [] and list(cfg.jobs) == [good] and list(cfg.agents) == [good]
