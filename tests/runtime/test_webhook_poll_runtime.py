"""webhook_poll through the whole tick: dedup across ticks, 401 pauses, 503 retries,
a webhook delivery signed and carrying its delivery id."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import pytest

from nexopoll.channels.webhook import sign
from nexopoll.models import Delivery, PollState
from nexopoll.runtime.delivery import deliver_rows
from nexopoll.runtime.tick import tick_job
from tests.support.httpserver import TestHTTPServer, json_reply, redirect, sequence
from tests.support.jobs import webhook_poll_job
from tests.support.procs import free_port
from tests.support.sink import Sink

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
ONCALL = {"channel": "log", "to": "oncall"}


@pytest.fixture
def cfg(cfg):
    """The jobs deliver to ``webhook``: agent ana needs a binding for it (checked at load)."""
    write = cfg.write

    def write_with_webhook(jobs, agents=None, **globals_):
        bound = {"ana": {"log": {}, "webhook": {"url": "https://hooks.example/ana"}}}
        write(jobs, agents or bound, **globals_)

    cfg.write = write_with_webhook
    return cfg


def send(ids: list[str], at: datetime) -> dict[str, str]:
    return deliver_rows(ids, clock=lambda: at)


def poll_job(url: str, **config) -> dict:
    return webhook_poll_job("w", url, channel="webhook", failure_to=ONCALL, **config)


def test_items_are_delivered_once_across_ticks_with_signed_webhooks(cfg, monkeypatch):
    monkeypatch.setenv("ANA_HOOK_SECRET", "s3cret-canary")
    items = [{"id": 1, "title": "one"}, {"id": 2, "title": "two"}]
    with TestHTTPServer() as api, Sink() as sink:
        api.route("GET", "/items", lambda req: json_reply({"items": items})(req))
        cfg.write(
            [poll_job(api.url("/items"))],
            agents={
                "ana": {
                    "webhook": {
                        "url": sink.url,
                        "secret": "${ANA_HOOK_SECRET}",
                        "allow_private_networks": True,
                    }
                }
            },
        )
        cfg.reload()
        assert tick_job("w", now=NOW).items_dispatched == 2
        items.append({"id": 3, "title": "three"})
        assert tick_job("w", now=NOW).items_dispatched == 1  # 1 and 2 were seen
        assert tick_job("w", now=NOW).items_dispatched == 0
        rows = list(Delivery.objects.filter(job_id="w", purpose="item"))
        assert sorted(r.payload["text"] for r in rows) == ["one", "three", "two"]
        send([str(r.id) for r in rows], NOW)
        assert {h["delivery_id"] for h in sink.hits} == {str(r.id) for r in rows}
        for h in sink.hits:  # HMAC over "<timestamp>.<body>" with the binding's secret
            assert h["signature"] == sign("s3cret-canary", h["timestamp"], h["raw"])
            mac = hmac.new(
                b"s3cret-canary", h["timestamp"].encode() + b"." + h["raw"], hashlib.sha256
            )
            assert h["signature"] == "sha256=" + mac.hexdigest()
        # the secret never reaches the DB
        assert "s3cret-canary" not in repr(list(Delivery.objects.values()))
        assert "s3cret-canary" not in repr(list(PollState.objects.values()))


def test_401_pauses_the_job_with_the_reason(cfg):
    with TestHTTPServer() as api:
        api.route("GET", "/items", lambda req: (401, {}, b"no"))
        cfg.write([poll_job(api.url("/items"))])
        cfg.reload()
        report = tick_job("w", now=NOW)
        s = PollState.objects.get(job_id="w")
        assert report.status == "permanent" and s.paused and "401" in s.paused_reason
        assert Delivery.objects.filter(purpose="alert").count() == 1


def test_503_is_transient_and_retried_then_succeeds(cfg):
    with TestHTTPServer() as api:
        api.route("GET", "/items", sequence(503, json_reply({"items": [{"id": 9}]})))
        cfg.write([poll_job(api.url("/items"))])
        cfg.reload()
        first = tick_job("w", now=NOW)
        assert first.status == "transient" and first.retry_at is not None
        assert PollState.objects.get(job_id="w").consecutive_errors == 1
        second = tick_job("w", now=NOW)
        assert second.status == "ok" and second.items_dispatched == 1
        assert PollState.objects.get(job_id="w").consecutive_errors == 0


def test_private_address_refused_without_opt_in(cfg):
    with TestHTTPServer() as api:
        api.route("GET", "/items", json_reply({"items": [{"id": 1}]}))
        cfg.write([poll_job(api.url("/items"), allow_private_networks=False)])
        cfg.reload()
        report = tick_job("w", now=NOW)
        assert report.status == "permanent" and api.hits() == 0
        assert (
            "127.0.0.1" in PollState.objects.get(job_id="w").paused_reason
            or "loopback" in PollState.objects.get(job_id="w").paused_reason
        )


def test_a_secret_in_the_polled_url_is_masked_in_state_and_alerts(cfg, monkeypatch):

    port = free_port()  # nobody listens: the connection error names the URL
    monkeypatch.setenv("BOT_TOKEN", "12345:CANARYsecret")
    cfg.write(
        [poll_job(f"http://127.0.0.1:{port}/bot${{BOT_TOKEN}}/getUpdates")], breaker_threshold=1
    )
    cfg.reload()
    report = tick_job("w", now=NOW)
    assert report.status == "transient" and "/bot***/getUpdates" in report.error
    s = PollState.objects.get(job_id="w")
    alert = Delivery.objects.get(purpose="alert")
    for text in (s.last_error, alert.payload["text"], repr(list(PollState.objects.values()))):
        assert "CANARYsecret" not in text


def test_conflicting_content_length_is_retried_not_paused(cfg):
    from tests.support.rawserver import RawServer

    raw = b'HTTP/1.1 200 OK\r\nContent-Length: 12\r\nContent-Length: 2\r\n\r\n{"items":[]}'
    server = RawServer(raw)
    try:
        cfg.write([poll_job(server.url + "items")])
        cfg.reload()
        report = tick_job("w", now=NOW)
        s = PollState.objects.get(job_id="w")
        assert report.status == "transient" and report.retry_at is not None
        assert not s.paused and s.consecutive_errors == 1
        assert "Content-Length" in s.last_error
        assert Delivery.objects.filter(purpose="alert").count() == 0
    finally:
        server.close()


def test_a_post_redirected_to_another_origin_pauses_and_never_reaches_it(cfg, monkeypatch):
    """Issue 5, break 3, through the tick: the body's ${VAR} secret stays at home."""
    monkeypatch.setenv("JQL_TOKEN", "body-CANARY-s3cret")
    with TestHTTPServer() as api, TestHTTPServer() as other:
        other.route("POST", "/steal", json_reply({"items": []}))
        api.route("POST", "/items", redirect(other.url("/steal"), status=307))
        job = poll_job(api.url("/items"), method="POST", body={"token": "${JQL_TOKEN}"})
        cfg.write([job])
        cfg.reload()
        report = tick_job("w", now=NOW)
        s = PollState.objects.get(job_id="w")
        assert report.status == "permanent" and s.paused
        assert "307 redirect of a POST request with a body to another" in s.paused_reason
        assert other.hits() == 0
        assert api.requests[0].body == b'{"token":"body-CANARY-s3cret"}'
        assert "CANARY" not in repr(list(PollState.objects.values()))


def test_a_redirect_spelled_for_two_parsers_pauses_and_never_reaches_b(cfg, monkeypatch):
    """Issue 5, break 1, through the tick: A's Authorization never reaches B."""
    monkeypatch.setenv("API_TOKEN", "hdr-CANARY-s3cret")
    with TestHTTPServer() as api, TestHTTPServer() as other:
        other.route("GET", "/items", json_reply({"items": [{"id": 1, "title": "x"}]}))
        location = f"http://127.0.0.1:{other.port}\\@localhost:{api.port}/items"
        api.route("GET", "/items", redirect(location))
        job = poll_job(
            f"http://localhost:{api.port}/items",
            headers={"Authorization": "Bearer ${API_TOKEN}"},
        )
        cfg.write([job])
        cfg.reload()
        report = tick_job("w", now=NOW)
        s = PollState.objects.get(job_id="w")
        assert report.status == "permanent" and s.paused
        assert "redirect target refused" in s.paused_reason and "backslash" in s.paused_reason
        assert other.hits() == 0
        assert api.requests[0].header("Authorization") == "Bearer hdr-CANARY-s3cret"
        assert Delivery.objects.filter(purpose="item").count() == 0
