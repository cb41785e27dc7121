"""The llm: section (pure): providers, ${ENV} keys, requests checked against them, replies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nexopoll.core.config import ConfigFileError, load_config
from nexopoll.core.errors import ConfigError
from nexopoll.core.llmconfig import check_request, parse_llm, reply_from_json

ENV = {"KEY": "sk-secret-1"}
GOOD = {
    "max_tokens_cap": 500,
    "providers": {
        "local": {
            "base_url": "http://127.0.0.1:8080/v1",
            "api_key": "${KEY}",
            "models": ["m1", "m2"],
            "timeout_secs": 30,
        }
    },
}


def test_a_valid_section_parses():
    settings, problems = parse_llm(GOOD, ENV)
    assert problems == []
    p = settings.providers["local"]
    assert p.chat_url == "http://127.0.0.1:8080/v1/chat/completions"
    assert (p.models, p.timeout_secs, p.api_key_var) == (("m1", "m2"), 30.0, "KEY")
    assert settings.max_tokens_cap == 500
    assert parse_llm(None, ENV) == (None, [])


def provider(**over):
    spec = {**GOOD["providers"]["local"], **over}
    return {"providers": {"local": {k: v for k, v in spec.items() if v is not None}}}


@pytest.mark.parametrize(
    ("section", "where", "message"),
    [
        ("x", (), "must be a mapping"),
        ({"providers": {}}, ("providers",), "non-empty mapping"),
        ({**GOOD, "extra": 1}, ("extra",), "unknown key"),
        ({**GOOD, "max_tokens_cap": 0}, ("max_tokens_cap",), "integer in 1..="),
        (provider(base_url="ftp://x"), ("providers", "local", "base_url"), "http(s) URL"),
        (provider(base_url="http://u:p@h/v1"), ("providers", "local", "base_url"), "credentials"),
        (provider(api_key="sk-literal"), ("providers", "local", "api_key"), "never a literal"),
        (provider(api_key="${NOPE}"), ("providers", "local", "api_key"), "NOPE is not set"),
        (provider(models=[]), ("providers", "local", "models"), "non-empty list"),
        (provider(models=[""]), ("providers", "local", "models"), "non-empty list"),
        (provider(timeout_secs=0), ("providers", "local", "timeout_secs"), "1..=600"),
        (provider(region="eu"), ("providers", "local", "region"), "unknown key"),
    ],
)
def test_every_section_error_names_its_path(section, where, message):
    settings, problems = parse_llm(section, ENV)
    assert settings is None
    assert any(p == where and message in m for p, m in problems), problems


def request(**over):
    base = {
        "provider": "local",
        "model": "m1",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return {k: v for k, v in {**base, **over}.items() if v is not None}


def test_a_request_becomes_a_chat_completions_body():
    settings, _ = parse_llm(GOOD, ENV)
    p, body = check_request(request(temperature=0.5), settings)
    assert p.name == "local"
    assert body == {
        "model": "m1",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 100,
        "temperature": 0.5,
    }


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (request(provider="cloud"), "unknown llm provider 'cloud'"),
        (request(model="m9"), "model 'm9' is not configured"),
        (request(max_tokens=None), "max_tokens is required"),
        (request(max_tokens=0), "max_tokens is required"),
        (request(max_tokens=True), "max_tokens is required"),
        (request(max_tokens=501), "over the cap 500"),
        (request(messages=[]), "messages must be"),
        (request(messages=[{"role": "tool", "content": "x"}]), "messages must be"),
        (request(temperature="hot"), "temperature must be a number"),
    ],
)
def test_bad_requests_are_config_errors(req, message):
    settings, _ = parse_llm(GOOD, ENV)
    with pytest.raises(ConfigError, match=message):
        check_request(req, settings)


def test_without_an_llm_section_requests_are_refused():
    with pytest.raises(ConfigError, match="no llm: section"):
        check_request(request(), None)


def test_replies_are_parsed_and_usage_counted():
    doc = {
        "model": "m1",
        "choices": [{"message": {"content": "yo"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    assert reply_from_json(doc, "local") == {
        "content": "yo",
        "model_id": "m1",
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    empty = reply_from_json({"choices": [{"message": {"content": None}}]}, "local")
    assert empty["content"] == "" and empty["usage"]["total_tokens"] == 0
    for bad in (
        {},
        {"choices": "x"},
        {"choices": [{"message": "x"}]},
        {"choices": [{"message": {"content": 3}}]},
    ):
        with pytest.raises(ValueError):
            reply_from_json(bad, "local")


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_pollers_yaml_accepts_an_llm_section_and_rejects_a_bad_one_with_its_line():
    text = (
        "llm:\n  providers:\n    local:\n      base_url: http://127.0.0.1:1/v1\n"
        "      api_key: ${KEY}\n      models: [m1]\n"
        "pollers:\n  jobs: []\n"
    )
    loaded = load_config(text, source="p.yaml", env=ENV, now=NOW, validators={})
    assert loaded.issues == []
    with pytest.raises(ConfigFileError) as info:
        load_config(
            text.replace("${KEY}", "sk-literal"), source="p.yaml", env=ENV, now=NOW, validators={}
        )
    assert "p.yaml:5: llm.providers.local.api_key: must be one ${ENV_VAR} reference" in str(
        info.value
    )
