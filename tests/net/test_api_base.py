"""One ``nexopoll.net.api_base``: the operator's base from the settings, validated the
same way for the channels (telegram, whatsapp, slack) and the Google pollers."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from nexopoll.apps import net_options_from_settings
from nexopoll.channels import OutboundMessage, get_channel, slack, telegram, whatsapp
from nexopoll.core.contract import CancelToken, PollContext
from nexopoll.core.errors import PermanentError
from nexopoll.net import ApiBase, api_base, options
from nexopoll.net.transport import Guard, new_session
from pollers import _google
from pollers.gmail import GmailPoller
from tests.support.apibases import point_api


def test_the_default_is_used_untrusted_and_without_a_trailing_slash() -> None:
    assert api_base("telegram", "https://api.telegram.org/") == ApiBase(
        "https://api.telegram.org", False
    )


def test_an_operator_base_comes_from_the_settings_at_use_time_and_is_trusted(monkeypatch):
    point_api(monkeypatch, "telegram", " http://127.0.0.1:9/bot/ ")
    assert api_base("telegram", "https://api.telegram.org") == ("http://127.0.0.1:9/bot", True)
    # the channels' and the Google pollers' callers read the same function
    assert telegram.api_base is slack.api_base is whatsapp.api_base is api_base
    point_api(monkeypatch, "gmail", "http://10.0.0.5:8080/")
    assert _google.api_base(_google.GMAIL_API, _google.GMAIL_BASE_DEFAULT) == (
        "http://10.0.0.5:8080"
    )
    assert _google.api_base(_google.GCAL_API, _google.GCAL_BASE_DEFAULT) == (
        _google.GCAL_BASE_DEFAULT
    )


@pytest.mark.parametrize("value", ["ftp://x/", "api.telegram.org", "http://", "https:///p"])
@pytest.mark.parametrize("provider", ["telegram", "slack", "gmail", "gcal"])
def test_a_base_that_is_not_an_http_url_is_permanent_naming_the_variable(
    monkeypatch, provider, value
):
    point_api(monkeypatch, provider, value)
    with pytest.raises(PermanentError) as info:
        api_base(provider, "https://example.com")
    assert str(info.value) == f"NEXOPOLL_{provider.upper()}_API_BASE must be an http(s) URL"
    assert value not in str(info.value)


def test_the_settings_hold_the_environment_variables_once() -> None:
    assert set(settings.NEXOPOLL_API_BASES) <= {"telegram", "whatsapp", "slack", "gmail", "gcal"}
    opts = net_options_from_settings()
    assert (opts.pool_hosts, opts.pool_per_host) == (
        settings.NEXOPOLL_HTTP_POOL_HOSTS,
        settings.NEXOPOLL_HTTP_POOL_PER_HOST,
    )
    assert options.current() == opts  # the app registered the source at start


def test_pool_sizes_are_read_when_a_session_is_made(monkeypatch) -> None:
    monkeypatch.setattr(settings, "NEXOPOLL_HTTP_POOL_HOSTS", 7)
    monkeypatch.setattr(settings, "NEXOPOLL_HTTP_POOL_PER_HOST", 3)
    session = new_session(Guard())
    adapter = session.get_adapter("https://example.com/")
    assert (adapter._pool_connections, adapter._pool_maxsize) == (7, 3)
    session.close()


def test_without_a_registered_source_the_defaults_apply(monkeypatch) -> None:
    monkeypatch.setattr(options, "_source", options._source)
    options.use_options(None)
    assert options.current() == options.NetOptions()
    assert api_base("slack", "https://slack.com/api") == ("https://slack.com/api", False)


def test_a_channel_send_with_a_bad_base_fails_permanently_without_a_request(monkeypatch):
    point_api(monkeypatch, "telegram", "telegram.internal:8080")  # no scheme
    message = OutboundMessage(
        delivery_id="d-1",
        job_id="j",
        agent="ana",
        channel="telegram",
        recipient="42",
        payload={"text": "hi"},
        attempt=1,
    )
    binding = {"account": "bot", "token": "111:AAAA-token"}
    with pytest.raises(PermanentError, match="NEXOPOLL_TELEGRAM_API_BASE must be an http"):
        get_channel("telegram").send(message, binding, deadline_secs=5)


def test_a_gmail_tick_with_a_bad_base_fails_permanently(monkeypatch, tmp_path):
    point_api(monkeypatch, "gmail", "ftp://mail.internal/")
    token = tmp_path / "token.json"
    token.write_text('{"refresh_token": "r", "client_id": "c", "client_secret": "s"}')

    class Host:
        def credentials_get(self, name):
            return {"token_path": str(token)}

    ctx = PollContext(
        job_id="g",
        agent_id="ana",
        kind="gmail",
        config={"deliver": {"channel": "log", "to": "ops"}},
        cursor=None,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        interval_hint=timedelta(seconds=60),
        cancel=CancelToken(deadline=time.monotonic() + 10),
        host=Host(),
    )
    with pytest.raises(PermanentError, match="NEXOPOLL_GMAIL_API_BASE must be an http"):
        GmailPoller().tick(ctx)
