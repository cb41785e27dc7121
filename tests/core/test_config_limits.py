"""Every stored string is validated against the length of the column that stores it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from nexopoll.core import limits
from nexopoll.core.config import DeliverTargetModel, load_config
from nexopoll.core.contract import check_kind
from nexopoll.core.errors import ConfigError

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def load(text: str):
    return load_config(text, source="p.yaml", env={}, now=NOW, validators={"noop": lambda c: None})


def doc(job_id="j", agent="a", channel="log", to="ops", binding_channel="log") -> str:
    return (
        f"agents:\n  {json.dumps(agent)}:\n    {binding_channel}: {{}}\n"
        "pollers:\n  jobs:\n"
        f"    - id: {json.dumps(job_id)}\n"
        "      kind: noop\n"
        f"      agent: {json.dumps(agent)}\n"
        "      schedule: {every_secs: 60}\n"
        f"      failure_to: {{channel: {json.dumps(channel)}, to: {json.dumps(to)}}}\n"
    )


def test_every_field_at_its_maximum_length_loads():
    text = doc(
        job_id="j" * limits.MAX_JOB_ID,
        agent="a" * limits.MAX_AGENT_ID,
        to="r" * limits.MAX_RECIPIENT,
    )
    cfg = load(text)
    assert cfg.issues == []
    [spec] = cfg.jobs.values()
    assert len(spec.id) == 100 and len(spec.agent) == 100 and len(spec.failure_to.to) == 500


@pytest.mark.parametrize(
    "kwargs, path, line, message",
    [
        ({"to": "r" * 501}, "jobs[j].failure_to.to", 10, "at most 500 characters"),
        ({"to": "é" * 501}, "jobs[j].failure_to.to", 10, "at most 500 characters"),
        ({"to": "r" * 5000}, "jobs[j].failure_to.to", 10, "at most 500 characters"),
        ({"job_id": "j" * 101}, "jobs[0].id", 6, "invalid job id"),
        ({"channel": "c" * 65}, "jobs[j].failure_to.channel", 10, "invalid channel name"),
    ],
)
def test_one_past_the_column_is_rejected_naming_field_and_line(kwargs, path, line, message):
    cfg = load(doc(**kwargs))
    assert cfg.jobs == {}
    [issue] = cfg.issues
    assert (issue.path, issue.line) == (path, line)
    assert message in issue.message
    assert str(issue).startswith(f"p.yaml:{line}: {path}: ")


def test_agent_id_and_binding_channel_one_past_the_column_are_rejected():
    cfg = load(doc(agent="a" * 101, binding_channel="c" * 65))
    paths = {(i.path, i.line) for i in cfg.issues}
    assert ("agents." + "a" * 101, 2) in paths
    assert (f"agents.{'a' * 101}.{'c' * 65}", 3) in paths
    assert ("jobs[j].agent", 8) in paths
    assert cfg.jobs == {}


def test_kind_names_fit_their_column():
    assert check_kind("k" * limits.MAX_KIND) == "k" * 64
    with pytest.raises(ConfigError, match="invalid poller kind"):
        check_kind("k" * (limits.MAX_KIND + 1))


def test_the_shared_deliver_target_model_holds_the_same_limits():
    assert DeliverTargetModel(channel="log", to="r" * 500).to == "r" * 500
    chat = DeliverTargetModel.model_validate({"channel": "log", "to": 1194292426})
    assert chat.to == "1194292426"
    for bad in ({"channel": "log", "to": "r" * 501}, {"channel": "c" * 65, "to": "x"}):
        with pytest.raises(ValueError):
            DeliverTargetModel.model_validate(bad)
