"""The ``stream`` channel: ``XADD`` to a Redis Stream that external consumers read.

A delivery goes to ``plugin.outbound.<channel>.<account>`` (the binding's
``account``, and its ``channel``, default ``stream``), the original runtime's
broker topic. ``PollerHost.publish(topic, data)`` goes to ``topic`` itself (it must
start with ``plugin.``). Streams are capped with ``MAXLEN ~`` at
``NEXOPOLL_STREAM_MAXLEN`` entries (default 100,000): consumers that fall further
behind lose the oldest entries.

Entry fields (all strings): ``delivery_id`` (the outbox row id), ``job``,
``agent``, ``recipient`` (the delivery's ``to``; the topic for a publish),
``purpose`` (``item``, ``alert``, ``recovery`` or ``publish``) and ``payload``
(the payload as JSON; for a publish, the published bytes as given).

Exactly once into the stream: the XADD and a marker ``nexopoll:stream:sent:<id>``
(kept a week) are one Lua script, so a retry after a lost answer finds the marker
and adds nothing. Consumers still see an entry twice only if they fail to ACK.
``pollers redeliver --force`` drops the marker first (:meth:`StreamChannel.forget_sent`),
so a forced re-send adds the entry again for a consumer that lost it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

from nexopoll.core.bindings import StreamBinding
from nexopoll.core.errors import ConfigError, TransientError
from nexopoll.redisconf import ns

from .message import OutboundMessage

TOPIC_RE = re.compile(r"^plugin\.[A-Za-z0-9_.:-]{1,200}$", re.ASCII)
SENT_TTL_SECS = 7 * 24 * 3600
DEFAULT_MAXLEN = 100_000
SHARED_SOCKET_TIMEOUT = 10.0  # nexopoll.runtime.redis's client

_XADD_ONCE = """
local done = redis.call('GET', KEYS[2])
if done then return done end
local args = {'XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*'}
for i = 3, #ARGV do args[#args + 1] = ARGV[i] end
local id = redis.call(unpack(args))
redis.call('SET', KEYS[2], id, 'EX', ARGV[2])
return id
"""


# the process's shared Redis client, given by the runtime at start (``use_redis``: the
# channel layer sits below the runtime and imports none of it)
_shared_redis: Callable[[], Any] | None = None


def use_redis(factory: Callable[[], Any]) -> None:
    """Give the channel the process's shared Redis client (``runtime.redis.get_redis``)."""
    global _shared_redis
    _shared_redis = factory


def _shared_client() -> Any:
    if _shared_redis is None:
        raise TransientError("the stream channel was given no Redis client (apps.ready gives it)")
    return _shared_redis()


def sent_marker(delivery_id: str) -> str:
    return ns(f"stream:sent:{delivery_id}")  # NEXOPOLL_REDIS_PREFIX


def _bounded_client(deadline_secs: float) -> Any:
    """A client of its own when the attempt's deadline is shorter than the shared
    client's socket timeout (a short delivery claim), so the XADD ends within it;
    else None (the shared client)."""
    import redis
    from django.conf import settings

    if deadline_secs >= SHARED_SOCKET_TIMEOUT:
        return None
    return redis.Redis.from_url(
        settings.REDIS_URL,
        decode_responses=True,
        socket_timeout=deadline_secs,
        socket_connect_timeout=deadline_secs,
    )


def topic_for(binding: StreamBinding) -> str:
    return f"plugin.outbound.{binding.channel}.{binding.account}"


def check_topic(topic: str) -> str:
    """``topic`` if a poller may publish to it (``plugin.`` and a safe name), else ConfigError."""
    if not isinstance(topic, str) or not TOPIC_RE.fullmatch(topic):
        raise ConfigError(f"publish topic must match {TOPIC_RE.pattern}")
    return topic


def publish_payload(data: bytes) -> dict[str, Any]:
    """How a published byte string is kept in the outbox (JSON): base64."""
    if not isinstance(data, bytes | bytearray):
        raise ConfigError(f"publish payload must be bytes, got {type(data).__name__}")
    return {"data_b64": base64.b64encode(bytes(data)).decode("ascii")}


def entry_fields(message: OutboundMessage) -> dict[str, Any]:
    if message.purpose == "publish":
        payload: Any = base64.b64decode(message.payload.get("data_b64", ""))
    else:
        payload = json.dumps(message.payload, ensure_ascii=False, sort_keys=True)
    return {
        "delivery_id": message.delivery_id,
        "job": message.job_id,
        "agent": message.agent,
        "recipient": message.recipient,
        "purpose": message.purpose,
        "payload": payload,
    }


def maxlen() -> int:
    from django.conf import settings

    return int(getattr(settings, "NEXOPOLL_STREAM_MAXLEN", DEFAULT_MAXLEN))


class StreamChannel:
    name = "stream"
    binding_schema = StreamBinding

    def send(
        self, message: OutboundMessage, binding: dict[str, Any], *, deadline_secs: float
    ) -> None:
        from redis.exceptions import RedisError

        b = StreamBinding.model_validate(binding)
        key = check_topic(message.recipient) if message.purpose == "publish" else topic_for(b)
        argv: list[Any] = [maxlen(), SENT_TTL_SECS]
        for name, value in entry_fields(message).items():
            argv += [name, value]
        shared = _shared_client()
        client = _bounded_client(deadline_secs) or shared
        try:
            client.eval(_XADD_ONCE, 2, key, sent_marker(message.delivery_id), *argv)
        except RedisError as exc:
            raise TransientError(f"stream XADD to {key} failed: {type(exc).__name__}") from exc
        finally:
            if client is not shared:
                client.close()

    def forget_sent(self, delivery_ids: list[str]) -> None:
        """Drop the rows' "already added" markers: their next send adds an entry again."""
        if delivery_ids:
            _shared_client().delete(*[sent_marker(i) for i in delivery_ids])
