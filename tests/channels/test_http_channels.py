"""The HTTP channels against local servers speaking each provider's protocol.

Each channel is called directly (no DB): payload shape, auth, the delivery-id
header, and how each provider answer maps to an error class.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from nexopoll.channels import OutboundMessage, get_channel
from nexopoll.core.config import expand_env
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from tests.support.httpserver import TestHTTPServer, json_reply, redirect, reply
from tests.support.providers import (
    CANARY,
    HTTP_PROVIDERS,
    SLACK_BOT,
    SLACK_WEBHOOK,
    TELEGRAM,
    WHATSAPP,
    point_all,
    sent_doc,
)


def message(provider, text="Hello\nsecond line", **kw) -> OutboundMessage:
    return OutboundMessage(
        delivery_id="d-0001",
        job_id="job1",
        agent="ana",
        channel=provider.channel,
        recipient=kw.pop("recipient", provider.recipient),
        payload={"text": text, **kw},
        attempt=1,
    )


def send(provider, server, *, binding_extra=None, msg=None) -> None:
    import os

    binding = expand_env({**provider.binding(server), **(binding_extra or {})}, os.environ)
    get_channel(provider.channel).send(msg or message(provider), binding, deadline_secs=5)


@pytest.fixture
def server(monkeypatch):
    with TestHTTPServer() as srv:
        point_all(monkeypatch, srv)
        yield srv


@pytest.mark.parametrize("provider", HTTP_PROVIDERS, ids=lambda p: p.id)
def test_success_posts_the_text_with_the_delivery_id(provider, server):
    server.route("POST", provider.path, provider.ok)
    send(provider, server)
    [req] = server.requests
    assert req.path == provider.path and req.method == "POST"
    assert req.header("X-Nexopoll-Delivery-Id") == "d-0001"
    assert req.header("Content-Type") == "application/json"
    assert provider.text_of(sent_doc(server)) == "Hello\nsecond line"


@pytest.mark.parametrize(
    "provider, answer, error",
    [(p, "server_error", TransientError) for p in HTTP_PROVIDERS]
    + [(p, "too_many", TransientError) for p in HTTP_PROVIDERS]
    + [(p, "bad_recipient", PermanentError) for p in HTTP_PROVIDERS],
    ids=lambda v: getattr(v, "id", getattr(v, "__name__", str(v))),
)
def test_each_provider_answer_has_its_error_class(provider, answer, error, server):
    server.route("POST", provider.path, getattr(provider, answer))
    with pytest.raises(error) as info:
        send(provider, server)
    assert not isinstance(info.value, ConfigError)
    if answer == "too_many":
        assert info.value.retry_after == timedelta(seconds=5)
    assert CANARY not in str(info.value) or provider is TELEGRAM  # telegram: redacted later


@pytest.mark.parametrize("provider", HTTP_PROVIDERS, ids=lambda p: p.id)
def test_a_redirect_is_refused_and_never_followed(provider, server):
    with TestHTTPServer() as elsewhere:
        elsewhere.route("POST", "/x", reply(200, b"ok"))
        server.route("POST", provider.path, redirect(elsewhere.url("/x"), 307))
        with pytest.raises(PermanentError, match="redirect refused"):
            send(provider, server)
        assert elsewhere.hits() == 0


def test_telegram_sends_chat_id_parse_mode_and_preview_flag(server):
    server.route("POST", TELEGRAM.path, TELEGRAM.ok)
    send(TELEGRAM, server, binding_extra={"parse_mode": "HTML", "disable_web_page_preview": True})
    assert sent_doc(server) == {
        "chat_id": "42",
        "text": "Hello\nsecond line",
        "parse_mode": "HTML",
        "disable_web_page_preview": True,
    }


@pytest.mark.parametrize(
    "status, description",
    [(400, "Bad Request: chat not found"), (403, "Forbidden: bot was blocked by the user")],
)
def test_telegram_chat_not_found_and_blocked_bot_are_permanent(server, status, description):
    doc = {"ok": False, "error_code": status, "description": description}
    server.route("POST", TELEGRAM.path, json_reply(doc, status=status))
    with pytest.raises(PermanentError, match=description.split(": ")[1]):
        send(TELEGRAM, server)


@pytest.mark.parametrize("status", [401, 404])
def test_telegram_a_wrong_token_is_a_config_problem(server, status):
    doc = {"ok": False, "error_code": status, "description": "Unauthorized"}
    server.route("POST", TELEGRAM.path, json_reply(doc, status=status))
    with pytest.raises(ConfigError, match="bot token"):
        send(TELEGRAM, server)


def test_telegram_long_text_is_capped_at_4096(server):
    server.route("POST", TELEGRAM.path, TELEGRAM.ok)
    send(TELEGRAM, server, msg=message(TELEGRAM, text="x" * 5000))
    assert len(sent_doc(server)["text"]) == 4096


def test_whatsapp_sends_a_cloud_api_text_message_with_the_bearer_token(server):
    server.route("POST", WHATSAPP.path, WHATSAPP.ok)
    send(WHATSAPP, server)
    [req] = server.requests
    assert req.header("Authorization") == f"Bearer {CANARY}"
    assert sent_doc(server) == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "573001112233",
        "type": "text",
        "text": {"preview_url": False, "body": "Hello\nsecond line"},
    }


def test_whatsapp_an_expired_token_is_a_config_problem(server):
    doc = {"error": {"message": "Error validating access token", "code": 190}}
    server.route("POST", WHATSAPP.path, json_reply(doc, status=401))
    with pytest.raises(ConfigError, match="access token"):
        send(WHATSAPP, server)


def test_slack_bot_posts_channel_and_text_with_the_bearer_token(server):
    server.route("POST", SLACK_BOT.path, SLACK_BOT.ok)
    send(SLACK_BOT, server)
    [req] = server.requests
    assert req.header("Authorization") == f"Bearer {CANARY}"
    assert sent_doc(server) == {"channel": "C0123", "text": "Hello\nsecond line"}


@pytest.mark.parametrize(
    "error, expected",
    [
        ("ratelimited", TransientError),
        ("service_unavailable", TransientError),
        ("invalid_auth", ConfigError),
        ("token_revoked", ConfigError),
        ("channel_not_found", PermanentError),
        ("is_archived", PermanentError),
        ("msg_too_long", PermanentError),
    ],
)
def test_slack_ok_false_errors_map_to_classes(server, error, expected):
    server.route("POST", SLACK_BOT.path, json_reply({"ok": False, "error": error}))
    with pytest.raises(expected, match=error) as info:
        send(SLACK_BOT, server)
    if expected is PermanentError:
        assert not isinstance(info.value, ConfigError)


def test_slack_webhook_posts_the_text_and_never_shows_the_url(server):
    server.route("POST", SLACK_WEBHOOK.path, SLACK_WEBHOOK.ok)
    send(SLACK_WEBHOOK, server)
    assert sent_doc(server) == {"text": "Hello\nsecond line"}
    assert server.requests[0].header("Authorization") is None


def test_slack_webhook_revoked_is_a_config_problem(server):
    server.route("POST", SLACK_WEBHOOK.path, reply(404, b"no_service"))
    with pytest.raises(ConfigError, match="no_service"):
        send(SLACK_WEBHOOK, server)


def test_slack_webhook_to_a_private_address_needs_the_opt_in(server):
    server.route("POST", SLACK_WEBHOOK.path, SLACK_WEBHOOK.ok)
    with pytest.raises(ConfigError):
        send(SLACK_WEBHOOK, server, binding_extra={"allow_private_networks": False})
    assert server.hits() == 0


def test_rate_limit_scopes_per_provider():
    from nexopoll.core.bindings import SlackBinding

    tg = get_channel("telegram").rate_limits(
        message(TELEGRAM), {"account": "ana_bot", "token": "t"}
    )
    assert tg == [("bot:ana_bot", 30.0), ("chat:ana_bot:42", 1.0)]
    wa = get_channel("whatsapp").rate_limits(
        message(WHATSAPP), {"phone_number_id": "1", "token": "t", "max_per_second": 5}
    )
    assert wa == [("phone:1", 5)]
    hook = {"webhook_url": f"https://hooks.slack.com/services/{CANARY}"}
    [(scope, rate)] = get_channel("slack").rate_limits(message(SLACK_WEBHOOK), hook)
    assert CANARY not in scope and rate == 1.0  # the URL is a secret: a digest keys it
    assert SlackBinding.model_validate(hook).webhook_url
    bot = get_channel("slack").rate_limits(message(SLACK_BOT), {"token": "t", "account": "w"})
    assert bot == [("channel:w:C0123", 1.0)]
