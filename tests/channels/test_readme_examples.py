"""The channel examples of docs/channels.md work: each YAML binding loads, the stream
consumer reads what the stream channel wrote."""

from __future__ import annotations

import contextlib
import io
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from nexopoll.channels import OutboundMessage, binding_schemas, get_channel
from nexopoll.core.config import load_config

DOC = (Path(__file__).resolve().parents[2] / "docs" / "channels.md").read_text()
ENV = {
    "ANA_TELEGRAM_TOKEN": "1:x",
    "ANA_WA_TOKEN": "w",
    "ANA_SLACK_WEBHOOK": "https://h.example/x",
    "BOB_SLACK_BOT_TOKEN": "xoxb",
    "file:/run/secrets/ana_bot_token": "1:y",
}


def section(title: str) -> str:
    start = DOC.index(f"\n## {title}\n")
    end = DOC.find("\n## ", start + 4)
    return DOC[start:end]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


@pytest.mark.parametrize("channel", ["telegram", "whatsapp", "slack", "email"])
def test_each_channel_section_has_a_binding_that_loads(channel):
    [doc] = blocks(section(channel), "yaml")
    parsed = yaml.safe_load(doc)
    text = yaml.safe_dump({"agents": parsed["agents"], "pollers": parsed.get("pollers", {})})
    cfg = load_config(
        text,
        source="channels.md",
        env=ENV,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        validators={"rss": lambda c: None},
        channels=binding_schemas(),
    )
    assert cfg.issues == [] and cfg.agents


def test_the_stream_consumer_example_reads_the_channels_entries(redis_client):
    for i in (1, 2):
        get_channel("stream").send(
            OutboundMessage(f"id-{i}", "blog", "ana", "stream", "42", {"text": f"item {i}"}, 1),
            {"account": "ana_bot", "channel": "telegram"},
            deadline_secs=5,
        )
    [code] = blocks(section("stream"), "python")
    where = redis_client.connection_pool.connection_kwargs
    code = code.replace("redis://127.0.0.1:6379/0", f"redis://{where['host']}:{where['port']}/0")
    code = code.replace("while True:", "for _ in range(1):").replace("block=5000", "block=100")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/channels.md", "exec"), {})
    assert out.getvalue().splitlines() == ["id-1 42 item 1", "id-2 42 item 2"]
    assert redis_client.xpending("plugin.outbound.telegram.ana_bot", "bridge")["pending"] == 0
