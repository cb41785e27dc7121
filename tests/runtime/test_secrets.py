"""Secrets held in whole-URL ``${VAR}``s never reach the DB, the logs or an alert,
whatever form the error text gives them (the tick's errors, delivery errors, log lines,
Celery's own tracebacks)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from nexopoll.models import Delivery, PollState
from nexopoll.runtime import logredact
from nexopoll.runtime.delivery import deliver_rows
from nexopoll.runtime.tick import tick_job
from tests.support.jobs import webhook_poll_job
from tests.support.procs import free_port
from tests.support.secrets import assert_no_secret

from .conftest import scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
ALERT = {"channel": "log", "to": "oncall"}


def feed_job(job_id: str = "w", **extra) -> dict:
    return webhook_poll_job(job_id, "${FEED_URL}", failure_to=ALERT, **extra)


def everything_stored() -> str:
    """Every text column a tick or a delivery writes, as one string."""
    rows = [f"{s.last_error}\n{s.paused_reason}" for s in PollState.objects.all()] + [
        f"{d.last_error}\n{d.payload}\n{d.recipient}" for d in Delivery.objects.all()
    ]
    return "\n".join(rows)


@pytest.mark.parametrize(
    "url",
    [
        # token in the path and in the query (dropped from the error), upper-case host
        "http://LOCALHOST:{port}/feeds/T0kenInPath9f8e7d/items?api_key=Qu3rySecretV4lue",
        # the whole URL is the secret; the path has escapes that an error may decode
        "http://127.0.0.1:{port}/hook/a%2Fb%20S3cretP4thPart/items",
    ],
)
def test_a_failing_feed_url_leaks_no_secret_to_state_alert_or_logs(cfg, monkeypatch, caplog, url):
    secret = url.format(port=free_port())
    monkeypatch.setenv("FEED_URL", secret)
    cfg.write([feed_job()], breaker_threshold=1)
    cfg.reload()
    with caplog.at_level(logging.DEBUG):
        report = tick_job("w", now=NOW)
    assert report.status == "transient" and "request failed" in report.error
    s = PollState.objects.get(job_id="w")
    assert s.last_error.startswith("***") and "request failed" in s.last_error
    alert = Delivery.objects.get(job_id="w", purpose="alert")
    assert "failing" in alert.payload["text"]
    assert_no_secret(everything_stored(), secret)
    assert_no_secret(report.error, secret)
    deliver_rows([str(alert.id)], clock=lambda: NOW)  # the log channel prints the alert
    assert "delivery.log" in caplog.text and "tick.done" in caplog.text
    assert_no_secret(caplog.text, secret)
    # what an operator sees: list, show, and a manual run that fails the same way
    out = StringIO()
    call_command("pollers", "list", "--json", stdout=out)
    call_command("pollers", "show", "w", "--json", stdout=out)
    with pytest.raises(CommandError) as failed:
        call_command("pollers", "run", "w", "--json", stdout=out, stderr=out)
    assert "request failed" in str(failed.value) and "request failed" in out.getvalue()
    assert_no_secret(out.getvalue() + str(failed.value), secret)


def test_a_blocked_feed_url_pauses_with_a_reason_that_names_no_secret(cfg, monkeypatch, caplog):
    secret = f"http://127.0.0.1:{free_port()}/v2/Pr1vateT0ken-abcdef/items"
    monkeypatch.setenv("FEED_URL", secret)
    cfg.write([feed_job(allow_private_networks=False)])
    cfg.reload()
    report = tick_job("w", now=NOW)
    s = PollState.objects.get(job_id="w")
    assert report.status == "permanent" and s.paused and "refused" in s.paused_reason
    assert_no_secret(everything_stored() + caplog.text, secret)


@pytest.mark.parametrize(
    "text",
    [
        # urllib3's format: host and path apart, the query dropped
        "HTTPSConnectionPool(host='hooks.example.com', port=443): Max retries exceeded with "
        "url: /services/T0AAAA111/B0BBBB222/XyZ9w3bh00kT0ken (Caused by ConnectTimeoutError)",
        # the host upper-cased, the path percent-decoded, no scheme
        "POST HOOKS.EXAMPLE.COM/services/T0AAAA111/B0BBBB222/XyZ9w3bh00kT0ken failed",
        # the path percent-encoded
        "url: /services%2FT0AAAA111%2FB0BBBB222%2FXyZ9w3bh00kT0ken",
    ],
)
@pytest.mark.parametrize("mode", ["raise", "raise-permanent", "raise-bug"])
def test_poller_errors_quoting_a_binding_url_are_redacted_everywhere(
    cfg, redis_client, monkeypatch, caplog, text, mode
):
    """A binding holding a whole webhook URL; the poller's error quotes it in some form."""
    secret = "https://Hooks.Example.com/services/T0AAAA111/B0BBBB222/XyZ9w3bh00kT0ken?v=2"
    monkeypatch.setenv("HOOK_URL", secret)
    agents = {"ana": {"log": {}, "webhook": {"url": "${HOOK_URL}"}}}
    cfg.write([scripted("a", failure_to=ALERT)], agents=agents, breaker_threshold=1)
    cfg.reload()
    redis_client.set("test:mode:a", mode)
    redis_client.set("test:raise:a", text)
    with caplog.at_level(logging.DEBUG):
        report = tick_job("a", now=NOW)
    assert report.status in ("transient", "permanent")
    assert Delivery.objects.filter(purpose="alert").count() == 1
    if mode == "raise-bug":  # an unexpected exception's traceback is logged, redacted
        assert "tick.unexpected_error" in caplog.text and "RuntimeError" in caplog.text
    assert_no_secret(everything_stored() + caplog.text + report.error, secret)


def test_delivery_errors_for_a_webhook_url_binding_are_redacted(
    cfg, redis_client, monkeypatch, caplog
):
    """runtime/delivery.py passes the binding's secrets to redact(): the stronger redact()
    masks the shortened URL that the HTTP layer puts in the error."""
    secret = f"http://LOCALHOST:{free_port()}/services/T0X1/B0Y2/Sl4ckT0kenZZ99?x=1"
    monkeypatch.setenv("HOOK_URL", secret)
    agents = {"ana": {"webhook": {"url": "${HOOK_URL}", "allow_private_networks": True}}}
    job = scripted("a", config={"deliver": {"channel": "webhook", "to": "ops"}})
    cfg.write([job], agents=agents)
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    assert tick_job("a", now=NOW).items_dispatched == 1
    row = Delivery.objects.get(job_id="a")
    with caplog.at_level(logging.DEBUG):
        assert deliver_rows([str(row.id)], clock=lambda: NOW) == {str(row.id): "retry"}
    row.refresh_from_db()
    assert "request failed" in row.last_error
    assert "delivery.retry" in caplog.text
    assert_no_secret(row.last_error + caplog.text, secret)


def test_every_log_record_is_redacted_whichever_logger_makes_it(caplog):
    secret = "https://hooks.example.net/T9/B9/FactoryCanary1234"
    logredact.register({secret})
    lib = logging.getLogger("celery.app.trace")
    with caplog.at_level(logging.INFO):
        try:
            raise ConnectionError(f"Max retries exceeded with url: {secret[8:].upper()}")
        except ConnectionError:
            lib.exception("Task %s raised unexpected: %r", "nexopoll.tick[1]", secret)
        logging.getLogger("urllib3").warning("Retrying %s", secret.replace("/", "%2F"))
    assert "raised unexpected" in caplog.text and "Traceback" in caplog.text
    assert "Retrying" in caplog.text
    assert_no_secret(caplog.text, secret)
