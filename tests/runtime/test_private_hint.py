"""A feed on a loopback or private address: `pollers check` warns (naming the job, the
field and `allow_private_networks: true`), and the tick's error says the same."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from nexopoll.models import PollState
from nexopoll.privatecheck import local_addresses
from nexopoll.runtime.tick import tick_job

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def rss(job_id: str, url: str, **extra) -> dict:
    config = {"feed_url": url, "deliver": {"channel": "log", "to": "ops"}, **extra}
    return {
        "id": job_id,
        "kind": "rss",
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": config,
    }


def check(cfg, settings) -> str:
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    out = StringIO()
    call_command("pollers", "check", stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8001/blog.xml",
        "http://localhost/blog.xml",
        "http://[::1]:81/x",
        "http://10.1.2.3/feed",
        "http://2130706433/feed",
        "http://api.localhost/feed",
        "${FEED_BASE}/blog.xml",
    ],
)
def test_check_warns_about_a_private_feed_and_names_the_fix(cfg, settings, monkeypatch, url):
    monkeypatch.setenv("FEED_BASE", "http://192.168.1.20:8080")
    cfg.write(
        [
            rss("blog", url),
            rss("public", "https://example.com/feed.xml"),
            rss("allowed", url, allow_private_networks=True),
        ]
    )
    out = check(cfg, settings)
    warned = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1, out
    assert "jobs[blog].config.feed_url" in warned[0]
    assert "`allow_private_networks: true` in jobs[blog].config" in warned[0]
    assert f"{cfg.path}:" in warned[0]


def test_check_does_not_look_public_names_up(cfg, settings):
    assert local_addresses("example.invalid") == []
    cfg.write([rss("blog", "https://feeds.example.invalid/x.xml")])
    assert "warning:" not in check(cfg, settings)


def test_the_tick_error_names_the_job_and_the_field(cfg, monkeypatch):
    cfg.write([rss("blog", "http://127.0.0.1:1/blog.xml")])
    cfg.reload()
    report = tick_job("blog", now=NOW)
    assert report.status == "permanent"
    hint = "set `allow_private_networks: true` in jobs[blog].config"
    assert "loopback" in report.error and hint in report.error
    state = PollState.objects.get(job_id="blog")
    assert hint in state.last_error and hint in state.paused_reason


def test_reload_warns_about_the_jobs_it_adds(cfg, settings):
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    cfg.write([rss("blog", "http://localhost:8001/blog.xml"), rss("ok", "https://example.com/")])
    err = StringIO()
    call_command("pollers", "reload", stdout=StringIO(), stderr=err)
    warned = [line for line in err.getvalue().splitlines() if "warning:" in line]
    assert len(warned) == 1 and "jobs[blog].config.feed_url" in warned[0]
    assert "`allow_private_networks: true` in jobs[blog].config" in warned[0]


def test_a_webhook_binding_on_loopback_names_the_binding_and_the_fix():
    from nexopoll.channels import OutboundMessage
    from nexopoll.channels.webhook import WebhookChannel
    from nexopoll.core.errors import ConfigError

    message = OutboundMessage("d1", "blog", "ana", "webhook", "ops", {"text": "x"}, 1)
    with pytest.raises(ConfigError) as raised:
        WebhookChannel().send(message, {"url": "http://127.0.0.1:1/hook"}, deadline_secs=5)
    assert "set `allow_private_networks: true` in agents.ana.webhook" in str(raised.value)
