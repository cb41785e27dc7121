"""agent_turn and a plugin's llm_invoke through the real tick (DB, Redis, outbox)."""

from __future__ import annotations

import json

import pytest
import yaml
from django.utils import timezone

from nexopoll.models import Delivery, PollState
from nexopoll.runtime.registry import reset_registry
from nexopoll.runtime.tick import tick_job
from tests.plugins.conftest import write_plugin
from tests.plugins.llmserver import KEY, PATH, chat, llm_yaml
from tests.support.httpserver import TestHTTPServer, reply


@pytest.fixture
def server():
    with TestHTTPServer() as srv:
        yield srv


@pytest.fixture
def turn(cfg, server, settings, monkeypatch, tmp_path):
    monkeypatch.setenv("TEST_LLM_KEY", KEY)
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    settings.NEXOPOLL_PLUGINS_DIR = str(tmp_path / "plugins")
    write_plugin(tmp_path / "plugins", "asker", ["asker"], lifecycle="ephemeral")
    reset_registry()

    def write(*jobs: dict) -> None:
        doc = {
            "llm": llm_yaml(server),
            "pollers": {"default_jitter_ms": 0, "jobs": list(jobs)},
            "agents": {"ana": {"webhook": {"url": "http://127.0.0.1:9/hook"}}},
        }
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert not cfg.reload().issues

    yield write
    reset_registry()


def job(job_id: str, kind: str, config: dict) -> dict:
    config = json.loads(json.dumps(config))  # no shared dicts: YAML anchors are refused
    return {
        "id": job_id,
        "kind": kind,
        "agent": "ana",
        "schedule": {"every_secs": 3600},
        "config": config,
    }


TURN = {
    "llm": {"provider": "local", "model": "tiny-2"},
    "user_prompt": "Status for {date}?",
    "max_tokens": 20,
    "deliver": {"channel": "webhook", "to": "ops"},
}


def state(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def test_agent_turn_tick_commits_the_answer_and_counts_tokens(turn, server, redis_client):
    server.route("POST", PATH, chat("All green."))
    turn(job("t", "agent_turn", TURN))
    for _ in range(2):
        report = tick_job("t", now=timezone.now())
        assert report.status == "ok", report.error
    rows = Delivery.objects.filter(job_id="t", purpose="item").order_by("created_at")
    assert [r.payload["text"] for r in rows] == ["All green.", "All green."]
    usage = json.loads(bytes(state("t").cursor))
    assert usage["turns"] == 2 and usage["total_tokens"] == 2 * (3 + 2)


def test_agent_turn_auth_failure_pauses_and_delivers_nothing(turn, server, redis_client):
    server.route("POST", PATH, reply(401, b'{"error": "bad key"}'))
    turn(job("t", "agent_turn", TURN))
    report = tick_job("t", now=timezone.now())
    assert report.status == "permanent" and "HTTP 401" in report.error
    assert state("t").paused and KEY not in state("t").last_error
    assert not Delivery.objects.filter(job_id="t", purpose="item").exists()


def test_agent_turn_server_error_is_transient_and_keeps_the_cursor(turn, server, redis_client):
    server.route("POST", PATH, reply(503, b"overloaded"))
    turn(job("t", "agent_turn", TURN))
    report = tick_job("t", now=timezone.now())
    assert report.status == "transient" and not state("t").paused
    assert state("t").cursor is None


def test_a_plugin_reaches_the_llm_through_its_reverse_call(turn, server, redis_client):
    server.route("POST", PATH, chat("from the model"))
    request = {
        "provider": "local",
        "model": "tiny-1",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    }
    too_many = {**request, "max_tokens": 5000}
    turn(
        job("p", "asker", {"mode": "llm", "request": request}),
        job("q", "asker", {"mode": "llm", "request": too_many}),
    )
    assert tick_job("p", now=timezone.now()).status == "ok"
    assert bytes(state("p").cursor) == b"from the model"
    # the host answers a bad request with -32602, which the plugin passes on: a config error
    report = tick_job("q", now=timezone.now())
    assert report.status == "permanent" and "over the cap" in report.error
    assert state("q").paused
