"""agent_turn + host.llm_invoke against a local server speaking chat completions."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from nexopoll.core.contract import CancelToken, PollContext
from nexopoll.core.errors import (
    ConfigError,
    CredentialsMissingError,
    PermanentError,
    TransientError,
)
from nexopoll.runtime.host import TickHost
from pollers.agent_turn import AgentTurnPoller
from tests.plugins.llmserver import KEY, PATH, chat, llm_yaml, requests_to
from tests.support.httpserver import TestHTTPServer, drip, json_reply, reply, sequence

CONFIG = {
    "llm": {"provider": "local", "model": "tiny-1"},
    "system_prompt": "You are terse.",
    "user_prompt": "Today is {date}. One tip for {agent_id}.",
    "language": "es",
    "max_tokens": 50,
    "deliver": {"channel": "webhook", "to": "ops"},
}


@pytest.fixture
def server():
    with TestHTTPServer() as srv:
        yield srv


@pytest.fixture
def llm_config(server, tmp_path, settings):
    path = tmp_path / "pollers.yaml"

    def write(**kw):
        path.write_text(yaml.safe_dump({"llm": llm_yaml(server, **kw), "pollers": {"jobs": []}}))
        settings.NEXOPOLL_CONFIG = str(path)

    write()
    return write


def host(key: str = KEY) -> TickHost:
    return TickHost("turn", "ana", {}, {"TEST_LLM_KEY": key})


def ctx(h: TickHost, cursor: bytes | None = None, **over) -> PollContext:
    return PollContext(
        job_id="turn",
        agent_id="ana",
        kind="agent_turn",
        config={**CONFIG, **over},
        cursor=cursor,
        now=datetime(2026, 3, 1, 8, tzinfo=UTC),
        interval_hint=timedelta(hours=1),
        cancel=CancelToken(deadline=time.monotonic() + 30),
        host=h,
    )


def test_a_turn_asks_the_model_and_delivers_its_answer(server, llm_config):
    server.route("POST", PATH, chat("Bebe agua."))
    h = host()
    ack = AgentTurnPoller().tick(ctx(h))
    (sent,) = requests_to(server)
    assert sent["model"] == "tiny-1" and sent["max_tokens"] == 50
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse.\n\nAnswer in language: es."},
        {"role": "user", "content": "Today is 2026-03-01. One tip for ana."},
    ]
    assert server.requests[0].header("Authorization") == f"Bearer {KEY}"
    (d,) = h.deliveries
    assert (d.channel, d.recipient, d.payload["text"]) == ("webhook", "ops", "Bebe agua.")
    assert d.payload["usage"] == {"prompt_tokens": 14, "completion_tokens": 2, "total_tokens": 16}
    assert (ack.items_seen, ack.items_dispatched) == (1, 1)
    # token usage is counted in the job's state (the cursor), across turns
    ack2 = AgentTurnPoller().tick(ctx(host(), cursor=ack.next_cursor))
    assert json.loads(ack2.next_cursor) == {
        "v": 1,
        "turns": 2,
        "prompt_tokens": 28,
        "completion_tokens": 4,
        "total_tokens": 32,
    }


@pytest.mark.parametrize("content", ["", "   ", None])
def test_an_empty_answer_delivers_nothing(server, llm_config, content):
    server.route("POST", PATH, chat(content))
    h = host()
    ack = AgentTurnPoller().tick(ctx(h))
    assert h.deliveries == [] and ack.items_dispatched == 0
    assert json.loads(ack.next_cursor)["turns"] == 1


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_are_permanent_and_never_show_the_key(server, llm_config, status):
    handler = chat(key="another-key") if status == 401 else reply(403, KEY.encode())
    server.route("POST", PATH, handler)
    with pytest.raises(PermanentError) as info:
        AgentTurnPoller().tick(ctx(host()))
    assert f"HTTP {status}" in str(info.value) and KEY not in str(info.value)
    assert "***" in str(info.value)


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_rate_limits_and_server_errors_are_transient(server, llm_config, status):
    server.route("POST", PATH, reply(status, b"busy", {"Retry-After": "7"}))
    with pytest.raises(TransientError) as info:
        AgentTurnPoller().tick(ctx(host()))
    assert not isinstance(info.value, PermanentError | ConfigError)
    assert info.value.retry_after == timedelta(seconds=7)


def test_a_timeout_is_transient(server, llm_config):
    llm_config(timeout=1)
    server.route("POST", PATH, drip(b'{"choices": []}' * 10, interval=0.5))
    started = time.monotonic()
    with pytest.raises(TransientError, match="timed out after 1s"):
        AgentTurnPoller().tick(ctx(host()))
    assert time.monotonic() - started < 10


def test_a_malformed_reply_is_transient(server, llm_config):
    server.route("POST", PATH, sequence(reply(200, b"not json"), json_reply({"choices": "x"})))
    for _ in range(2):
        with pytest.raises(TransientError, match="malformed reply"):
            AgentTurnPoller().tick(ctx(host()))


def test_max_tokens_is_required_and_capped(server, llm_config):
    server.route("POST", PATH, chat())
    with pytest.raises(ConfigError, match="max_tokens"):
        AgentTurnPoller().validate({**CONFIG, "max_tokens": None})
    llm_config(cap=40)
    with pytest.raises(ConfigError, match="over the cap 40"):
        AgentTurnPoller().tick(ctx(host()))
    assert server.hits(PATH) == 0  # refused before any call


def test_unknown_provider_or_model_and_missing_key(server, llm_config):
    server.route("POST", PATH, chat())
    with pytest.raises(ConfigError, match="unknown llm provider 'cloud'"):
        AgentTurnPoller().tick(ctx(host(), llm={"provider": "cloud", "model": "tiny-1"}))
    with pytest.raises(ConfigError, match="model 'big' is not configured"):
        AgentTurnPoller().tick(ctx(host(), llm={"provider": "local", "model": "big"}))
    with pytest.raises(CredentialsMissingError, match="TEST_LLM_KEY"):
        AgentTurnPoller().tick(ctx(TickHost("turn", "ana", {}, {})))
    assert server.hits(PATH) == 0


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"llm": {"provider": "local"}}, "provider, model"),
        ({"user_prompt": ""}, "non-empty string"),
        ({"user_prompt": "Hi {secret}"}, "unknown placeholder"),
        ({"user_prompt": "Hi {"}, "user_prompt"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 5}, "0..2"),
        ({"deliver": {"channel": "webhook"}}, "channel, to"),
        ({"surprise": 1}, "unknown key"),
    ],
)
def test_config_errors(over, message):
    with pytest.raises(ConfigError, match=message):
        AgentTurnPoller().validate({**CONFIG, **over})
