"""The plugin wire: JSON-RPC 2.0, one JSON object per line, both lifecycles.

Pure framing and classification (no processes, no I/O). The envelope is explicit
and the same for ``ephemeral`` and ``long_lived`` plugins::

    host → plugin   {"jsonrpc":"2.0","id":7,"method":"poll_tick","params":{
                      "tick_id":"7","kind":"echo","job_id":"j","agent_id":"ana",
                      "cursor":"aGVsbG8","config":{…},"now":"2026-01-01T00:00:00+00:00",
                      "interval_hint_secs":60}}
    plugin → host   {"jsonrpc":"2.0","id":7,"result":{"next_cursor":"d29ybGQ",
                      "next_interval_secs":null,"metrics":{"items_seen":1,"items_dispatched":1}}}
                 or {"jsonrpc":"2.0","id":7,"error":{"code":-32001,"message":"…"}}

A reply carries exactly one of ``result`` and ``error``; anything else (both,
neither, a bare ``TickReply`` without the envelope, a wrong id, NaN, non-JSON) is
a protocol error, never a success. Cursors are URL-safe base64 without padding.

Reverse calls go the other way on the same pipe, with ``params.tick_id`` naming
the tick they belong to: ``credentials_get``, ``log``, ``metric_inc``,
``llm_invoke``, ``deliver``. The host answers each with the same envelope.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from nexopoll.core.contract import TickAck
from nexopoll.core.errors import ConfigError, PermanentError, PollerError, TransientError

TRANSIENT = -32001
PERMANENT = -32002
INVALID_PARAMS = -32602  # the job's config is wrong
METHOD_NOT_FOUND = -32601
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INTERNAL = -32603

REVERSE_METHODS = ("credentials_get", "log", "metric_inc", "llm_invoke", "deliver")
MAX_MESSAGE_CHARS = 500
_CURSOR_RE = re.compile(r"[A-Za-z0-9_-]*")


class ProtocolError(TransientError):
    """The plugin broke the wire protocol: the reply is discarded, the plugin restarted."""


@dataclass(frozen=True)
class Message:
    """One decoded line: a request (``method`` set) or a reply (``result`` or ``error``)."""

    id: int | str | None
    method: str | None = None
    params: Any = None
    result: Any = None
    error: dict[str, Any] | None = None

    @property
    def is_request(self) -> bool:
        return self.method is not None


def encode_cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(text: str) -> bytes:
    if not isinstance(text, str) or not _CURSOR_RE.fullmatch(text) or len(text) % 4 == 1:
        raise ProtocolError("next_cursor is not URL-safe base64 without padding")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ProtocolError("next_cursor is not URL-safe base64 without padding") from None


def encode(message: dict[str, Any]) -> bytes:
    """One line: compact JSON, no NaN, newline-terminated."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def request(msg_id: int | str, method: str, params: Any) -> bytes:
    return encode({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})


def result(msg_id: int | str, value: Any) -> bytes:
    return encode({"jsonrpc": "2.0", "id": msg_id, "result": value})


def error(msg_id: int | str | None, code: int, message: str) -> bytes:
    return encode(
        {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message[:2000]}}
    )


def tick_params(
    *,
    tick_id: str,
    kind: str,
    job_id: str,
    agent_id: str,
    cursor: bytes | None,
    config: Any,
    now: str,
    interval_hint_secs: int,
) -> dict[str, Any]:
    return {
        "tick_id": tick_id,
        "kind": kind,
        "job_id": job_id,
        "agent_id": agent_id,
        "cursor": encode_cursor(cursor) if cursor is not None else None,
        "config": config,
        "now": now,
        "interval_hint_secs": interval_hint_secs,
    }


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode(line: bytes) -> Message:
    """Decode one line, strictly; raise :class:`ProtocolError` saying what is wrong."""
    try:
        doc = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
    except RecursionError:
        raise ProtocolError("plugin sent JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"plugin sent a line that is not JSON ({_short(str(exc))})") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"plugin sent JSON {type(doc).__name__}, not a JSON-RPC object")
    if doc.get("jsonrpc") != "2.0":
        raise ProtocolError('plugin message lacks "jsonrpc": "2.0" (a bare reply is not accepted)')
    msg_id = doc.get("id")
    if msg_id is not None and (isinstance(msg_id, bool) or not isinstance(msg_id, int | str)):
        raise ProtocolError("plugin message id must be a number or a string")
    if "method" in doc:
        if not isinstance(doc["method"], str) or "result" in doc or "error" in doc:
            raise ProtocolError("plugin request is malformed")
        return Message(msg_id, method=doc["method"], params=doc.get("params"))
    has_result, has_error = "result" in doc, "error" in doc
    if has_result == has_error:
        raise ProtocolError(
            "plugin reply has both result and error"
            if has_result
            else "plugin reply has neither result nor error"
        )
    if msg_id is None:
        raise ProtocolError("plugin reply has no id")
    if has_error:
        err = doc["error"]
        if (
            not isinstance(err, dict)
            or isinstance(err.get("code"), bool)
            or not isinstance(err.get("code"), int)
            or not isinstance(err.get("message", ""), str)
        ):
            raise ProtocolError("plugin error reply needs {code: int, message: str}")
        return Message(msg_id, error=err)
    return Message(msg_id, result=doc["result"])


def error_for(err: dict[str, Any], plugin: str) -> PollerError:
    """The runtime error for a plugin's error reply (never a success)."""
    code = err["code"]
    text = _short(str(err.get("message") or "no message"))
    if code == PERMANENT:
        return PermanentError(f"plugin {plugin}: {text}")
    if code == INVALID_PARAMS:
        return ConfigError(f"plugin {plugin}: {text}")
    if code == METHOD_NOT_FOUND:
        return ConfigError(f"plugin {plugin} does not implement the method (-32601): {text}")
    return TransientError(f"plugin {plugin} error {code}: {text}")


def ack_from_result(value: Any, plugin: str) -> TickAck:
    """A ``poll_tick`` result object → :class:`TickAck`; a wrong shape is a protocol error."""
    if not isinstance(value, dict):
        raise ProtocolError(f"plugin {plugin}: poll_tick result must be an object")
    unknown = set(value) - {"next_cursor", "next_interval_secs", "metrics", "notice"}
    if unknown:
        raise ProtocolError(f"plugin {plugin}: unknown result keys {sorted(unknown)}")
    cursor = value.get("next_cursor")
    interval = value.get("next_interval_secs")
    metrics = value.get("metrics")
    metrics = {} if metrics is None else metrics
    notice = value.get("notice")
    if notice is not None and not isinstance(notice, str):
        raise ProtocolError(f"plugin {plugin}: notice must be a string")
    if interval is not None and not _count(interval):
        raise ProtocolError(f"plugin {plugin}: next_interval_secs must be a non-negative integer")
    if not isinstance(metrics, dict) or not all(
        _count(metrics.get(k, 0)) for k in ("items_seen", "items_dispatched")
    ):
        raise ProtocolError(f"plugin {plugin}: metrics must hold non-negative integers")
    return TickAck(
        next_cursor=decode_cursor(cursor) if cursor is not None else None,
        next_interval_hint=timedelta(seconds=interval) if interval is not None else None,
        items_seen=metrics.get("items_seen", 0),
        items_dispatched=metrics.get("items_dispatched", 0),
        notice=notice or None,
    )


def error_code(exc: BaseException) -> int:
    """The code a reverse-call failure is answered with."""
    if isinstance(exc, ConfigError):
        return INVALID_PARAMS
    if isinstance(exc, PermanentError):
        return PERMANENT
    return TRANSIENT


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _short(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "…"
