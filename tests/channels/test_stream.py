"""The stream channel: XADD to ``plugin.outbound.<channel>.<account>``, read back
through a consumer group, exactly once per delivery id, bounded by MAXLEN ~."""

from __future__ import annotations

import json

import pytest
import redis

from nexopoll.channels import OutboundMessage, get_channel
from nexopoll.core.errors import ConfigError
from nexopoll.runtime.host import TickHost


def message(i: int = 1, **kw) -> OutboundMessage:
    fields = dict(
        delivery_id=f"00000000-0000-4000-8000-{i:012d}",
        job_id="rss1",
        agent="ana",
        channel="stream",
        recipient="1194292426",
        payload={"text": f"item {i}", "n": i},
        attempt=1,
    )
    fields.update(kw)
    return OutboundMessage(**fields)


def send(msg, binding=None) -> None:
    get_channel("stream").send(msg, binding or {"account": "ana_bot"}, deadline_secs=5)


def test_entries_are_read_back_through_a_consumer_group(redis_client):
    key = "plugin.outbound.stream.ana_bot"
    redis_client.xgroup_create(key, "bridge", id="0", mkstream=True)
    for i in (1, 2, 3):
        send(message(i))
    got = redis_client.xreadgroup("bridge", "c1", {key: ">"}, count=10)
    [(stream, entries)] = got
    assert stream == key and len(entries) == 3
    first = entries[0][1]
    assert first == {
        "delivery_id": "00000000-0000-4000-8000-000000000001",
        "job": "rss1",
        "agent": "ana",
        "recipient": "1194292426",
        "purpose": "item",
        "payload": json.dumps({"n": 1, "text": "item 1"}),
    }
    assert redis_client.xack(key, "bridge", *[eid for eid, _ in entries]) == 3
    assert redis_client.xpending(key, "bridge")["pending"] == 0


def test_the_binding_channel_names_the_topic(redis_client):
    send(message(), {"account": "ana_bot", "channel": "telegram"})
    assert redis_client.xlen("plugin.outbound.telegram.ana_bot") == 1


def test_a_retry_after_a_lost_answer_adds_nothing(redis_client):
    send(message(7))
    send(message(7, attempt=2))  # the first XADD landed; its answer was "lost"
    assert redis_client.xlen("plugin.outbound.stream.ana_bot") == 1
    send(message(8))
    assert redis_client.xlen("plugin.outbound.stream.ana_bot") == 2


def test_streams_are_capped_with_maxlen(redis_client, settings):
    settings.NEXOPOLL_STREAM_MAXLEN = 10
    for i in range(400):
        send(message(i))
    length = redis_client.xlen("plugin.outbound.stream.ana_bot")
    assert 10 <= length < 400  # MAXLEN ~ trims whole nodes: about the cap, never unbounded


def test_publish_records_a_row_for_its_topic_and_sends_the_raw_bytes(redis_client):
    host = TickHost("rss1", "ana", {"stream": {"account": "ana_bot"}}, {})
    host.publish("plugin.outbound.whatsapp.ana", b"\x00raw\xffbytes")
    [pending] = host.deliveries
    assert (pending.channel, pending.recipient, pending.purpose) == (
        "stream",
        "plugin.outbound.whatsapp.ana",
        "publish",
    )
    msg = message(3, recipient=pending.recipient, payload=pending.payload, purpose="publish")
    send(msg)
    where = redis_client.connection_pool.connection_kwargs
    binary = redis.Redis(host=where["host"], port=where["port"])  # bytes, not decoded
    [(_, fields)] = binary.xrange("plugin.outbound.whatsapp.ana")
    assert fields[b"payload"] == b"\x00raw\xffbytes" and fields[b"purpose"] == b"publish"


@pytest.mark.parametrize("topic", ["celery", "nexopoll:schedule", "plugin.", "plugin.a b"])
def test_publish_refuses_topics_outside_plugin(topic):
    host = TickHost("rss1", "ana", {"stream": {"account": "ana_bot"}}, {})
    with pytest.raises(ConfigError, match="topic"):
        host.publish(topic, b"x")
    assert host.deliveries == []


def test_publish_needs_a_stream_binding():
    host = TickHost("rss1", "ana", {"log": {}}, {})
    with pytest.raises(ConfigError, match="stream binding"):
        host.publish("plugin.outbound.x.y", b"x")
