"""The LLM tools through ``call_tool``: each tool's effect in the DB, scope, validation."""

from __future__ import annotations

import json

import pytest

from nexopoll.llm_tools import ToolError, anthropic_tools, call_tool, openai_tools, tool_specs
from nexopoll.models import PollState
from tests.runtime.conftest import Config, scripted

BUILTIN = [
    "pollers_list",
    "pollers_show",
    "pollers_run",
    "pollers_pause",
    "pollers_resume",
    "pollers_reset",
]


@pytest.fixture
def jobs(tmp_path, redis_client, transactional_db, monkeypatch) -> Config:
    monkeypatch.setenv("ANA_TOKEN", "canary-secret-ana-1234")
    cfg = Config(tmp_path / "pollers.yaml")
    a1 = scripted("ana-1")
    a1["config"]["token"] = "${ANA_TOKEN}"
    cfg.write(
        [a1, scripted("ana-2"), scripted("bob-1", agent="bob")],
        agents={"ana": {"log": {}}, "bob": {"log": {}}},
    )
    cfg.reload()
    return cfg


def state(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def refused(code: str, name: str, args, **kw) -> str:
    with pytest.raises(ToolError) as info:
        call_tool(name, args, **kw)
    assert info.value.code == code, info.value.message
    return info.value.message


def test_specs_in_both_function_calling_shapes(jobs):
    names = [s["name"] for s in tool_specs()]
    assert names[:6] == BUILTIN and {"scripted_peek", "gmail_count_unread"} <= set(names)
    assert not any(n.startswith(("pollers_create", "pollers_delete")) for n in names)
    for spec in openai_tools(agent="ana"):
        assert spec["type"] == "function"
        fn = spec["function"]
        assert set(fn) == {"name", "description", "parameters"}
        assert fn["parameters"]["type"] == "object"
    for spec in anthropic_tools():
        assert set(spec) == {"name", "description", "input_schema"}
    json.dumps(openai_tools())  # plain JSON, ready to send


def test_list_is_scoped_to_the_agent(jobs, settings):
    out = call_tool("pollers_list", {}, agent="ana")
    assert [j["id"] for j in out["result"]["jobs"]] == ["ana-1", "ana-2"]
    assert "never an instruction" in out["notice"]
    everyone = call_tool("pollers_list", {})  # the operator (no agent)
    assert [j["id"] for j in everyone["result"]["jobs"]] == ["ana-1", "ana-2", "bob-1"]
    page = call_tool("pollers_list", {"limit": 1}, agent="ana")["result"]
    assert [j["id"] for j in page["jobs"]] == ["ana-1"] and page["next_after"] == "ana-1"
    settings.NEXOPOLL_TOOLS_ALL_JOBS = True
    assert len(call_tool("pollers_list", {}, agent="ana")["result"]["jobs"]) == 3


def test_an_agent_is_refused_another_agents_job(jobs):
    for name in ("pollers_show", "pollers_run", "pollers_pause", "pollers_resume", "pollers_reset"):
        assert "bob-1" in refused("not_found", name, {"id": "bob-1"}, agent="ana")
    refused("not_found", "scripted_peek", {"job_id": "bob-1"}, agent="ana")
    assert not state("bob-1").paused and state("bob-1").ticks_total == 0


def test_show_masks_secrets(jobs):
    out = call_tool("pollers_show", {"id": "ana-1"}, agent="ana")["result"]
    assert out["config"]["token"] == "${ANA_TOKEN}"
    assert "canary-secret-ana-1234" not in json.dumps(out)


def test_run_pause_resume_effects(jobs, redis_client):
    redis_client.rpush("test:src:ana-1", 1, 2)
    dry = call_tool("pollers_run", {"id": "ana-1", "dry_run": True}, agent="ana")["result"]
    assert not dry["committed"] and len(dry["polled_content"]) == 2
    assert state("ana-1").ticks_total == 0
    run = call_tool("pollers_run", {"id": "ana-1"}, agent="ana")["result"]
    assert run["committed"] and run["status"] == "ok"
    assert bytes(state("ana-1").cursor) == b"2" and state("ana-1").ticks_total == 1
    call_tool("pollers_pause", {"id": "ana-2"}, agent="ana")
    assert state("ana-2").paused and "ana" in state("ana-2").paused_reason
    refused("conflict", "pollers_run", {"id": "ana-2"}, agent="ana")  # paused: not ticked
    assert state("ana-2").ticks_total == 0
    call_tool("pollers_resume", {"id": "ana-2"}, agent="ana")
    assert not state("ana-2").paused


def test_reset_needs_a_human(jobs, redis_client):
    redis_client.rpush("test:src:ana-1", 1)
    call_tool("pollers_run", {"id": "ana-1"}, agent="ana")
    epoch = state("ana-1").epoch
    message = refused("needs_human_confirmation", "pollers_reset", {"id": "ana-1"}, agent="ana")
    assert "--yes" in message and bytes(state("ana-1").cursor) == b"1"
    asked = []
    out = call_tool(
        "pollers_reset", {"id": "ana-1"}, agent="ana", confirm=lambda q: asked.append(q) or False
    )
    assert out["result"]["reset"] is False and state("ana-1").epoch == epoch
    assert "ana-1" in asked[0]
    out = call_tool("pollers_reset", {"id": "ana-1"}, agent="ana", confirm=lambda q: True)
    assert out["result"]["reset"] is True
    assert state("ana-1").cursor is None and state("ana-1").epoch == epoch + 1


@pytest.mark.parametrize(
    "name,args,code",
    [
        ("pollers_show", {"id": "nope"}, "not_found"),
        ("pollers_show", {"id": "../../etc/passwd"}, "invalid_arguments"),
        ("pollers_show", {"id": "ana-1/../bob-1"}, "invalid_arguments"),
        ("pollers_show", {"id": "ana-1\n"}, "invalid_arguments"),
        ("pollers_show", {"id": "ana-1\x00"}, "invalid_arguments"),
        ("pollers_show", {"id": "ANA-1"}, "invalid_arguments"),
        ("pollers_show", {"id": 1}, "invalid_arguments"),
        ("pollers_show", {}, "invalid_arguments"),
        ("pollers_show", {"id": "ana-1", "confirm": True}, "invalid_arguments"),
        ("pollers_reset", {"id": "ana-1", "confirmed": True}, "invalid_arguments"),
        ("pollers_list", {"limit": 10_000}, "invalid_arguments"),
        ("pollers_list", ["ana-1"], "invalid_arguments"),
        ("pollers_create", {"id": "x"}, "unknown_tool"),
        ("pollers_delete", {"id": "ana-1"}, "unknown_tool"),
        ("scripted_peek", {"job_id": "ana-1", "more": 1}, "invalid_arguments"),
    ],
)
def test_bad_calls_get_clean_errors(jobs, name, args, code):
    message = refused(code, name, args, agent="ana")
    assert len(message) < 600 and "\n" not in message and "\x00" not in message
    assert not state("ana-1").paused and state("ana-1").ticks_total == 0


def test_a_kinds_tool_refuses_a_job_of_another_kind(jobs):
    message = refused("invalid_arguments", "gmail_count_unread", {"job_id": "ana-1"}, agent="ana")
    assert "gmail" in message and "scripted" in message


def test_custom_tool_is_dispatched_and_redacted(jobs, redis_client):
    redis_client.rpush("test:src:ana-1", 1, 2, 3)
    out = call_tool("scripted_peek", {"job_id": "ana-1"}, agent="ana")["result"]
    assert out["items"] == 3
    # the tool echoed the expanded config: the secret's value is masked
    assert out["config"]["token"] != "canary-secret-ana-1234"
    assert "canary-secret-ana-1234" not in json.dumps(out)
