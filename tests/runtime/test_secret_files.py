"""``${file:/path}`` secrets: read when used (a rotated file is picked up by the next
send), never stored in the DB, masked in errors; and ``credentials_get`` without secrets."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from nexopoll.core.errors import CredentialsMissingError
from nexopoll.models import Agent, Delivery
from nexopoll.runtime.delivery import deliver_rows
from nexopoll.runtime.host import TickHost
from nexopoll.runtime.secretenv import SecretEnv, read_secret_file
from nexopoll.runtime.tick import tick_job
from tests.support.apibases import point_api
from tests.support.httpserver import TestHTTPServer, json_reply

from .conftest import scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def test_secret_env_reads_files_at_use_time(tmp_path):
    secret = tmp_path / "tok"
    secret.write_text("first-value\n")
    env = SecretEnv({"A": "1"})
    assert env[f"file:{secret}"] == "first-value"
    secret.write_text("second-value")
    assert env[f"file:{secret}"] == "second-value"
    assert f"file:{tmp_path}/missing" not in env and "A" in env and list(env) == ["A"]
    with pytest.raises(KeyError):
        read_secret_file("relative/path")


def test_a_telegram_token_from_a_file_is_read_per_send_and_never_stored(
    tmp_path, cfg, redis_client, monkeypatch, caplog
):
    token_file = tmp_path / "bot_token"
    token_file.write_text("111:FILE-CANARY-one\n")
    with TestHTTPServer() as server:
        point_api(monkeypatch, "telegram", server.base_url)
        for token in ("111:FILE-CANARY-one", "222:FILE-CANARY-two"):
            server.route("POST", f"/bot{token}/sendMessage", json_reply({"ok": True}))
        binding = {
            "account": "ana_bot",
            "token": f"${{file:{token_file}}}",
            "max_per_chat_per_second": 1000,
            "max_per_second": 1000,
        }
        cfg.write(
            [scripted("a", config={"deliver": {"channel": "telegram", "to": "42"}})],
            agents={"ana": {"telegram": binding}},
        )
        assert cfg.reload().issues == []
        redis_client.rpush("test:src:a", 1)
        (first,) = tick_job("a", now=NOW).delivery_ids
        assert deliver_rows([first], clock=lambda: NOW) == {first: "sent"}
        token_file.write_text("222:FILE-CANARY-two")  # rotated: no reload needed
        redis_client.rpush("test:src:a", 2)
        (second,) = tick_job("a", now=NOW).delivery_ids
        assert deliver_rows([second], clock=lambda: NOW) == {second: "sent"}
        assert [r.path for r in server.requests] == [
            "/bot111:FILE-CANARY-one/sendMessage",
            "/bot222:FILE-CANARY-two/sendMessage",
        ]

        # a failure quoting the token: masked in the row and the logs
        def quote_the_path(req):
            return json_reply({"ok": False, "description": req.path}, 400)(req)

        server.route("POST", "/bot222:FILE-CANARY-two/sendMessage", quote_the_path)
        redis_client.rpush("test:src:a", 3)
        (third,) = tick_job("a", now=NOW).delivery_ids
        assert deliver_rows([third], clock=lambda: NOW) == {third: "dead"}
        assert "/bot***/sendMessage" in Delivery.objects.get(id=third).last_error
    assert (
        Agent.objects.get(agent_id="ana").bindings["telegram"]["token"] == f"${{file:{token_file}}}"
    )
    dump = StringIO()
    call_command("dumpdata", "nexopoll", stdout=dump)
    assert "FILE-CANARY" not in dump.getvalue() and "FILE-CANARY" not in caplog.text


def test_a_missing_secret_file_rejects_the_agent_at_load(tmp_path, cfg):
    binding = {"account": "a", "token": f"${{file:{tmp_path}/nope}}"}
    cfg.write([scripted("a")], agents={"ana": {"log": {}, "telegram": binding}})
    issues = cfg.reload().issues
    assert any(f"secret file {tmp_path}/nope cannot be read" in i for i in issues)


def test_credentials_get_leaves_channel_secrets_out(monkeypatch):
    monkeypatch.setenv("TG", "123:CRED-CANARY")
    bindings = {
        "telegram": {"account": "ana_bot", "token": "${TG}", "parse_mode": "HTML"},
        "slack": {"webhook_url": "${TG}"},
        "google": {"token_path": "/secrets/t.json", "client_secret": "${TG}"},
    }
    host = TickHost("j", "ana", bindings, SecretEnv())
    assert host.credentials_get("telegram") == {"account": "ana_bot", "parse_mode": "HTML"}
    assert host.credentials_get("slack") == {}
    # not a channel: a poller's own source credentials, given whole
    assert host.credentials_get("google")["client_secret"] == "123:CRED-CANARY"
    with pytest.raises(CredentialsMissingError):
        host.credentials_get("whatsapp")


def test_public_variables_are_not_secrets(settings):
    from nexopoll.core.redact import secret_values

    refs = {"a": "${FEED_BASE}/x", "b": "${TOKEN}", "c": "${OTHER}", "d": "${NEXOPOLL_DEMO_BASE}"}
    env = SecretEnv(
        {
            "FEED_BASE": "https://feeds.example.com",
            "TOKEN": "s3cr3t-t0ken",
            "OTHER": "https://other.example.com",
            "NEXOPOLL_PUBLIC_VARS": "FEED_BASE",
            "NEXOPOLL_DEMO_BASE": "http://127.0.0.1:8000",
        }
    )
    assert secret_values(refs, env) == {"s3cr3t-t0ken", "https://other.example.com"}
    settings.NEXOPOLL_PUBLIC_VARS = ["OTHER"]
    assert secret_values(refs, env) == {"s3cr3t-t0ken"}
    settings.NEXOPOLL_PUBLIC_VARS = "OTHER TOKEN"
    assert secret_values(refs, env) == frozenset()
