"""Polled text through the whole pipeline reaches Slack and Telegram as literal text.

A real rss tick (DB outbox, Redis) reads a local feed whose entry title is a Slack
mention and a spoofed link; the real delivery runtime sends the committed rows to
local servers speaking the Slack and Telegram protocols.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime

import pytest

from nexopoll.models import Delivery
from nexopoll.runtime.delivery import deliver_rows
from nexopoll.runtime.tick import tick_job
from tests.support.httpserver import TestHTTPServer, reply
from tests.support.providers import SLACK_BOT, TELEGRAM, point_all, sent_doc

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
TITLE = "<!channel> <https://evil|bank> <@U123> *x_y* &amp; <b>"


@pytest.fixture
def server(monkeypatch):
    with TestHTTPServer() as srv:
        point_all(monkeypatch, srv)
        yield srv


def feed() -> bytes:
    return (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
        f"<item><guid>g1</guid><title>{html.escape(TITLE, quote=False)}</title>"
        "<link>https://blog.example.com/1</link></item></channel></rss>"
    ).encode()


@pytest.mark.parametrize(
    "provider, extra, template, expected",
    [
        (
            SLACK_BOT,
            {},
            "*New:* {title}",
            "*New:* &lt;!channel&gt; &lt;https://evil|bank&gt; &lt;@U123&gt; *x_y* &amp;amp; "
            "&lt;b&gt;",
        ),
        (
            TELEGRAM,
            {"parse_mode": "MarkdownV2"},
            "*New:* {title}",
            "*New:* <\\!channel\\> <https://evil\\|bank\\> <@U123\\> \\*x\\_y\\* &amp; <b\\>",
        ),
        (
            TELEGRAM,
            {"parse_mode": "HTML"},
            "<b>New:</b> {title}",
            "<b>New:</b> &lt;!channel&gt; &lt;https://evil|bank&gt; &lt;@U123&gt; *x_y* "
            "&amp;amp; &lt;b&gt;",
        ),
    ],
    ids=["slack", "telegram-markdownv2", "telegram-html"],
)
def test_a_polled_title_arrives_as_literal_text(server, cfg, provider, extra, template, expected):
    server.route("GET", "/feed.xml", reply(200, feed(), {"Content-Type": "application/rss+xml"}))
    server.route("POST", provider.path, provider.ok)
    binding = {**provider.binding(server), **provider.fast, **extra}
    job = {
        "id": "blog",
        "kind": "rss",
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": {
            "feed_url": server.url("/feed.xml"),
            "allow_private_networks": True,
            "message_template": template,
            "deliver": {"channel": provider.channel, "to": provider.recipient},
        },
    }
    cfg.write([job], agents={"ana": {"log": {}, provider.channel: binding}})
    assert cfg.reload().issues == []
    (row_id,) = tick_job("blog", now=NOW).delivery_ids
    assert Delivery.objects.get(id=row_id).payload["text"] == template.split("{")[0] + TITLE
    assert deliver_rows([row_id], clock=lambda: NOW) == {row_id: "sent"}
    assert sent_doc(server)["text"] == expected
