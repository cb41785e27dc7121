"""The JSON-RPC 2.0 envelope (pure): an error reply is never a success; strict decoding."""

from __future__ import annotations

import json

import pytest

from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.plugins import jsonrpc
from nexopoll.plugins.jsonrpc import ProtocolError, ack_from_result, decode, error_for


def line(obj) -> bytes:
    return json.dumps(obj).encode()


def test_cursor_is_url_safe_base64_without_padding():
    assert jsonrpc.encode_cursor(b"hello") == "aGVsbG8"
    assert jsonrpc.encode_cursor(b"\xfb\xff") == "-_8"
    assert jsonrpc.decode_cursor("-_8") == b"\xfb\xff"
    for bad in ("aGVsbG8=", "+/8", "a", "not base64!"):
        with pytest.raises(ProtocolError):
            jsonrpc.decode_cursor(bad)


def test_tick_request_envelope():
    params = jsonrpc.tick_params(
        tick_id="7",
        kind="rss",
        job_id="j",
        agent_id="ana",
        cursor=b"hello",
        config={"k": 1},
        now="2026-05-17T10:00:00+00:00",
        interval_hint_secs=300,
    )
    msg = json.loads(jsonrpc.request(7, "poll_tick", params))
    assert msg == {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "poll_tick",
        "params": {
            "tick_id": "7",
            "kind": "rss",
            "job_id": "j",
            "agent_id": "ana",
            "cursor": "aGVsbG8",
            "config": {"k": 1},
            "now": "2026-05-17T10:00:00+00:00",
            "interval_hint_secs": 300,
        },
    }
    assert jsonrpc.request(7, "poll_tick", params).endswith(b"\n")


def test_success_reply_decodes_to_an_ack():
    msg = decode(
        line(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "result": {
                    "next_cursor": "d29ybGQ",
                    "next_interval_secs": 120,
                    "metrics": {"items_seen": 5, "items_dispatched": 2},
                },
            }
        )
    )
    ack = ack_from_result(msg.result, "p")
    assert ack.next_cursor == b"world" and ack.next_interval_hint.total_seconds() == 120
    assert (ack.items_seen, ack.items_dispatched) == (5, 2)
    assert ack_from_result({}, "p").next_cursor is None
    assert ack_from_result({"notice": "re-baselined"}, "p").notice == "re-baselined"


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (-32001, TransientError),
        (-32002, PermanentError),
        (-32602, ConfigError),
        (-32601, ConfigError),
        (-32603, TransientError),
        (-32700, TransientError),
        (1, TransientError),
    ],
)
def test_error_reply_is_never_taken_for_a_success(code, cls):
    msg = decode(line({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": "nope"}}))
    assert msg.result is None and msg.error == {"code": code, "message": "nope"}
    exc = error_for(msg.error, "p")
    assert type(exc) is cls and "nope" in str(exc)


def test_method_not_found_is_a_config_error_not_a_transient_one():
    exc = error_for({"code": -32601, "message": "poll_tick?"}, "p")
    assert isinstance(exc, ConfigError) and "does not implement" in str(exc)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"jsonrpc":"2.0","id":1,"result":{"next_interval_secs":NaN}}', "NaN"),
        (b'{"jsonrpc":"2.0","id":1,"result":Infinity}', "Infinity"),
        (b"[" * 10000 + b"]" * 10000, "nested too deeply"),
        (b"[1]", "not a JSON-RPC object"),
        (b'{"result":{"next_cursor":"aGVsbG8"}}', '"jsonrpc": "2.0"'),
        (b'{"next_cursor":"aGVsbG8"}', '"jsonrpc": "2.0"'),
        (b'{"jsonrpc":"1.0","id":1,"result":{}}', '"jsonrpc": "2.0"'),
        (b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}', "both"),
        (b'{"jsonrpc":"2.0","id":1}', "neither"),
        (b'{"jsonrpc":"2.0","result":{}}', "no id"),
        (b'{"jsonrpc":"2.0","id":true,"result":{}}', "id must be"),
        (b'{"jsonrpc":"2.0","id":1,"error":"bad"}', "code: int"),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}', "code: int"),
        (b'{"jsonrpc":"2.0","id":1,"method":"log","result":{}}', "malformed"),
    ],
)
def test_malformed_lines_are_protocol_errors(raw, why):
    with pytest.raises(ProtocolError, match=why.replace("(", r"\(")) as info:
        decode(raw)
    assert isinstance(info.value, TransientError)


@pytest.mark.parametrize(
    "result",
    [
        [],
        {"next_cursor": "aGVsbG8="},
        {"next_interval_secs": -1},
        {"next_interval_secs": True},
        {"metrics": {"items_seen": -1}},
        {"metrics": []},
        {"surprise": 1},
        {"notice": 3},
    ],
)
def test_malformed_results_are_protocol_errors(result):
    with pytest.raises(ProtocolError):
        ack_from_result(result, "p")


def test_reverse_call_request_decodes():
    msg = decode(b'{"jsonrpc":"2.0","id":"r1","method":"deliver","params":{"tick_id":"3"}}')
    assert msg.is_request and msg.method == "deliver" and msg.params == {"tick_id": "3"}
    note = decode(b'{"jsonrpc":"2.0","method":"log","params":{}}')
    assert note.is_request and note.id is None


def test_encode_refuses_nan():
    with pytest.raises(ValueError):
        jsonrpc.result(1, float("nan"))
