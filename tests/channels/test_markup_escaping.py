"""Polled text reaches Slack and Telegram as literal text, not as their markup.

A feed served by a local server is polled by the real rss poller; its delivery
payload goes through the real channel to a local server speaking the provider's
protocol. Each test reads the sent text back the way the provider would parse it
(a small reader per markup below) and checks that the untrusted value came out
as the same literal characters, with no mention, link, tag or entity in it, while
the template's own text and ``{path|raw}`` values keep their markup.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest

from nexopoll.channels import OutboundMessage, get_channel
from nexopoll.core.config import expand_env
from nexopoll.core.markup import compose, escape_slack, trusted_spans
from nexopoll.core.templates import check_template, message_payload, render
from pollers.rss import RssPoller
from tests.pollers.conftest import guarded_fetch
from tests.support.fakes import FakeHost, make_context
from tests.support.httpserver import TestHTTPServer, reply
from tests.support.providers import SLACK_BOT, SLACK_WEBHOOK, TELEGRAM, point_all, sent_doc

HOST = "feeds.example.test"
SPOOF = "<!channel> <https://evil|bank>"
HOSTILE = [
    SPOOF,
    "<!here> ping",
    "<@U123> and <#C1> and <!subteam^S1>",
    "Tom &amp; Jerry &lt;b&gt; & <",
    "<https://evil.example/login|Your bank> <mailto:x@y|x>",
    "*bold* _it_ ~s~ `code` ```pre``` [a](https://evil) > quote",
    "1.5! #tag +1 -1 =x |pipe| {brace} (paren) \\back\\slash",
    '<b>bold</b> <a href="https://evil">bank</a> &lt;i&gt; "q"',
    "ünïcödé 🚀 <!everyone>",
]


# --- how each provider reads the text it is sent --------------------------------------
def slack_literal(text: str) -> str:
    """Slack's reading of mrkdwn text: any ``<…>`` is a control sequence (refused here)."""
    assert "<" not in text and ">" not in text, f"a Slack control sequence in {text!r}"
    assert not re.search(r"&(?!amp;|lt;|gt;)", text), f"a bare & in {text!r}"
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


MDV2 = set("_*[]()~`>#+-=|{}.!")


def markdown_v2_literal(text: str) -> str:
    """Telegram's MarkdownV2 reading: an unescaped special character is markup (refused)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            assert i + 1 < len(text) and 1 <= ord(text[i + 1]) <= 126, text
            out.append(text[i + 1])
            i += 2
            continue
        assert c not in MDV2, f"unescaped {c!r} is MarkdownV2 markup in {text!r}"
        out.append(c)
        i += 1
    return "".join(out)


def markdown_literal(text: str) -> str:
    """Telegram's legacy Markdown reading: ``_ * ` [`` open entities unless escaped."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in "_*`[":
            out.append(text[i + 1])
            i += 2
            continue
        assert c not in "_*`[", f"unescaped {c!r} is Markdown markup in {text!r}"
        out.append(c)
        i += 1
    return "".join(out)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        self.tags.append("/" + tag)

    def handle_data(self, data):
        self.text.append(data)


def html_literal(text: str) -> str:
    """Telegram's HTML reading: tags are markup (refused here); entities are decoded."""
    parser = _Tags()
    parser.feed(text)
    parser.close()
    assert parser.tags == [], f"tags {parser.tags} in {text!r}"
    return "".join(parser.text)


READERS = {"MarkdownV2": markdown_v2_literal, "Markdown": markdown_literal, "HTML": html_literal}


# --- fixtures ---------------------------------------------------------------------------
@pytest.fixture
def server(monkeypatch):
    with TestHTTPServer() as srv:
        point_all(monkeypatch, srv)
        for p in (SLACK_BOT, SLACK_WEBHOOK, TELEGRAM):
            srv.route("POST", p.path, p.ok)
        yield srv


def feed(title: str, link: str = "https://blog.example.com/p?a=1&b=2") -> bytes:
    return (
        '<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel><title>t</title>'
        "<link>https://blog.example.com/</link><item><guid>g1</guid>"
        f"<title>{html.escape(title, quote=False)}</title>"
        f"<link>{html.escape(link, quote=False)}</link></item></channel></rss>"
    ).encode()


def polled_payload(server: TestHTTPServer, title: str, template: str, **kw) -> dict:
    """The rss poller's delivery payload for a feed whose one entry has ``title``."""
    rss_type = {"Content-Type": "application/rss+xml"}
    server.route("GET", "/feed.xml", reply(200, feed(title, **kw), rss_type))
    cfg = {
        "feed_url": server.url("/feed.xml", host=HOST),
        "deliver": {"channel": "slack", "to": "C0123"},
        "message_template": template,
    }
    host = FakeHost()
    RssPoller(fetch=guarded_fetch(server, HOST)).tick(make_context(cfg, host=host))
    [delivered] = host.deliveries
    return delivered.payload


def send(server, provider, payload: dict, **binding_extra) -> str:
    import os

    binding = expand_env({**provider.binding(server), **binding_extra}, os.environ)
    msg = OutboundMessage(
        delivery_id="d-1",
        job_id="blog",
        agent="ana",
        channel=provider.channel,
        recipient=provider.recipient,
        payload=payload,
        attempt=1,
    )
    get_channel(provider.channel).send(msg, binding, deadline_secs=5)
    return sent_doc(server)["text"]


# --- slack --------------------------------------------------------------------------------
@pytest.mark.parametrize("provider", [SLACK_BOT, SLACK_WEBHOOK], ids=lambda p: p.id)
@pytest.mark.parametrize("title", HOSTILE)
def test_a_polled_title_reaches_slack_as_literal_text(server, provider, title):
    payload = polled_payload(server, title, "New post: {title}")
    sent = send(server, provider, payload)
    assert sent.startswith("New post: ")
    assert slack_literal(sent[len("New post: ") :]) == title


def test_the_spoofed_channel_ping_is_escaped_exactly(server):
    sent = send(server, SLACK_BOT, polled_payload(server, SPOOF, "{title}"))
    assert sent == "&lt;!channel&gt; &lt;https://evil|bank&gt;"


def test_slack_keeps_the_templates_own_markup_and_raw_values(server):
    title = "a <b> & <!here>"
    payload = polled_payload(server, title, "<!here> *{title}* <{link|raw}|read>")
    sent = send(server, SLACK_BOT, payload)
    # the template's <!here> and *…* are the operator's; the link was marked raw
    assert (
        sent
        == "<!here> *a &lt;b&gt; &amp; &lt;!here&gt;* <https://blog.example.com/p?a=1&b=2|read>"
    )


def test_a_hostile_link_inside_the_templates_own_link_markup_stays_inside(server):
    link = "https://evil.example/x> <!channel> <https://bank.example"
    payload = polled_payload(server, "t", "<{link}|read more>", link=link)
    sent = send(server, SLACK_BOT, payload)
    assert sent == "<" + escape_slack(link) + "|read more>"
    assert sent.count("<") == 1 and sent.count(">") == 1  # one link, no mention


def test_a_hostile_link_cannot_leave_an_html_attribute(server):
    link = 'https://evil.example/"><b>x</b><a href="https://bank.example'
    payload = polled_payload(server, "t", '<a href="{link}">{title}</a>', link=link)
    sent = send(server, TELEGRAM, payload, parse_mode="HTML")
    parser = _Tags()
    parser.feed(sent)
    assert parser.tags == ["a", "/a"] and "".join(parser.text) == "t"


def test_a_plain_text_payload_without_spans_is_untrusted_as_a_whole(server):
    sent = send(server, SLACK_WEBHOOK, {"text": SPOOF})
    assert slack_literal(sent) == SPOOF


# --- telegram -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["MarkdownV2", "HTML", "Markdown"])
@pytest.mark.parametrize("title", HOSTILE)
def test_a_polled_title_reaches_telegram_as_literal_text(server, mode, title):
    payload = polled_payload(server, title, "New {title}")
    sent = send(server, TELEGRAM, payload, parse_mode=mode)
    assert sent.startswith("New ")
    assert READERS[mode](sent[len("New ") :]) == title
    assert sent_doc(server)["parse_mode"] == mode


@pytest.mark.parametrize(
    "mode, template, expected",
    [
        ("MarkdownV2", "*New:* {title}", "*New:* a\\_b \\*c\\* \\[x\\]\\(y\\)\\."),
        ("HTML", "<b>New:</b> {title}", "<b>New:</b> a_b *c* [x](y)."),
        ("Markdown", "*New:* {title}", "*New:* a\\_b \\*c\\* \\[x](y)."),
        ("MarkdownV2", "{title|raw}", "a_b *c* [x](y)."),
    ],
)
def test_telegram_keeps_the_templates_markup(server, mode, template, expected):
    payload = polled_payload(server, "a_b *c* [x](y).", template)
    assert send(server, TELEGRAM, payload, parse_mode=mode) == expected


def test_telegram_without_parse_mode_sends_the_text_as_is(server):
    payload = polled_payload(server, SPOOF + " *x*", "{title}")
    assert send(server, TELEGRAM, payload) == SPOOF + " *x*"


def test_html_quotes_and_entities_in_a_title_stay_literal(server):
    title = 'x" onclick="y &amp; <a href="https://evil">'
    sent = send(
        server,
        TELEGRAM,
        polled_payload(server, title, '<a href="{link|raw}">{title}</a>'),
        parse_mode="HTML",
    )
    assert sent == (
        '<a href="https://blog.example.com/p?a=1&b=2">x&quot; onclick=&quot;y &amp;amp; '
        "&lt;a href=&quot;https://evil&quot;&gt;</a>"
    )


def test_a_long_text_is_cut_before_escaping_never_inside_an_escape(server):
    payload = {"text": "&" * 5000}
    sent = send(server, TELEGRAM, payload, parse_mode="HTML")
    assert sent == "&amp;" * 4095 + "…"
    assert html_literal(sent) == "&" * 4095 + "…"


# --- the pure parts -----------------------------------------------------------------------
def test_render_message_marks_literal_text_and_raw_values_trusted():
    text, spans = message_payload("{a} - {b|raw}{c}!", {"a": "<x>", "b": "<y>", "c": "z"}).values()
    assert text == "<x> - <y>z!" and spans == [[3, 9], [10, 11]]
    assert render("{b|raw}", {"b": 1}) == "1"
    assert check_template("{title|raw} {a.b}") == ["title", "a.b"]


@pytest.mark.parametrize(
    "bad", [None, "x", [[0]], [[2, 1]], [[0, 99]], [[3, 4], [0, 1]], [[True, 1]], [["0", "1"]]]
)
def test_malformed_trusted_spans_make_the_whole_text_untrusted(bad):
    assert trusted_spans(bad, 10) == []
    assert compose("<x>", trusted_spans(bad, 3), escape_slack, 100) == "&lt;x&gt;"
