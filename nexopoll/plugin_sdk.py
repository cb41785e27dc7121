"""Write a nexopoll subprocess poller in Python: ``run(handler)`` speaks the wire for you.

Standard library only. The plugin reads JSON-RPC 2.0 requests, one per line, on
stdin and writes replies on stdout (stderr goes to nexopoll's log)::

    from nexopoll.plugin_sdk import Result, TransientError, run

    def handle(tick):
        last = int(tick.cursor or b"0")
        for item in fetch_after(last):                       # your API call
            tick.deliver("webhook", "ops", {"text": item.title})
            last = item.id
        return Result(next_cursor=str(last).encode(), items_seen=n, items_dispatched=n)

    if __name__ == "__main__":
        run(handle)

Raise :class:`TransientError` (retried with backoff), :class:`PermanentError`
(the job is paused and an alert sent) or :class:`ConfigError` (the job's config
is wrong). Reverse calls on the ``tick``: ``deliver``, ``credentials``, ``log``,
``metric_inc``, ``llm_invoke``; deliveries commit only if the tick succeeds.
"""

from __future__ import annotations

import base64
import itertools
import json
import queue
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, BinaryIO


class PluginError(Exception):
    code = -32001


class TransientError(PluginError):
    code = -32001


class PermanentError(PluginError):
    code = -32002


class ConfigError(PluginError):
    code = -32602


class HostError(Exception):
    """A reverse call the host answered with an error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code


@dataclass
class Result:
    next_cursor: bytes | None = None
    next_interval_secs: int | None = None
    items_seen: int = 0
    items_dispatched: int = 0
    notice: str | None = None  # shown on the job's status (TickAck.notice)

    def wire(self) -> dict[str, Any]:
        cursor = None
        if self.next_cursor is not None:
            cursor = base64.urlsafe_b64encode(self.next_cursor).rstrip(b"=").decode()
        out: dict[str, Any] = {
            "next_cursor": cursor,
            "next_interval_secs": self.next_interval_secs,
            "metrics": {"items_seen": self.items_seen, "items_dispatched": self.items_dispatched},
        }
        if self.notice:
            out["notice"] = self.notice
        return out


class _Conn:
    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.waiters: dict[str, queue.Queue] = {}

    def send(self, msg: dict[str, Any]) -> None:
        data = json.dumps({"jsonrpc": "2.0", **msg}, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            self.out.write(data)
            self.out.flush()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        msg_id = f"r{next(self.ids)}"
        q: queue.Queue = queue.Queue()
        self.waiters[msg_id] = q
        try:
            self.send({"id": msg_id, "method": method, "params": params})
            reply = q.get()
        finally:
            self.waiters.pop(msg_id, None)
        if reply is None:
            raise TransientError("nexopoll closed the connection")
        if "error" in reply:
            raise HostError(reply["error"].get("code", -32603), reply["error"].get("message", ""))
        return reply.get("result")

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})


class Tick:
    """One ``poll_tick`` request, with the reverse calls bound to it."""

    def __init__(self, params: dict[str, Any], conn: _Conn) -> None:
        self.tick_id = str(params["tick_id"])
        self.kind: str = params["kind"]
        self.job_id: str = params["job_id"]
        self.agent_id: str = params["agent_id"]
        raw = params.get("cursor")
        self.cursor: bytes | None = (
            base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)) if raw is not None else None
        )
        self.config: dict[str, Any] = params.get("config") or {}
        self.now: str = params["now"]
        self.interval_hint_secs: int = params.get("interval_hint_secs", 0)
        self._conn = conn

    def deliver(self, channel: str, to: str, payload: dict[str, Any]) -> None:
        """Raises ConfigError naming the first value that is not JSON
        (``payload.when: datetime is not JSON``), HostError if nexopoll refuses it."""
        from nexopoll.core.errors import ConfigError as CoreConfigError
        from nexopoll.core.hostcheck import check_json

        try:
            check_json(payload)
        except CoreConfigError as exc:
            raise ConfigError(str(exc)) from None
        self._conn.call(
            "deliver", {"tick_id": self.tick_id, "channel": channel, "to": to, "payload": payload}
        )

    def credentials(self, channel: str) -> dict[str, Any]:
        return self._conn.call("credentials_get", {"tick_id": self.tick_id, "channel": channel})

    def log(self, level: str, message: str, **fields: Any) -> None:
        params = {"tick_id": self.tick_id, "level": level, "message": message, "fields": fields}
        self._conn.notify("log", params)

    def metric_inc(self, name: str, /, **labels: str) -> None:
        """Count ``name``; a bad metric or label name (``__name__``, ``job``, ``a-b``…)
        raises HostError (code -32602), which fails the tick as a config error if uncaught."""
        self._conn.call("metric_inc", {"tick_id": self.tick_id, "name": name, "labels": labels})

    def llm_invoke(self, request: dict[str, Any]) -> dict[str, Any]:
        return self._conn.call("llm_invoke", {"tick_id": self.tick_id, "request": request})


def _serve(handler, conn: _Conn, msg: dict[str, Any]) -> None:
    msg_id = msg.get("id")
    try:
        result = handler(Tick(msg.get("params") or {}, conn))
        if result is None:
            result = Result()
        value = result.wire() if isinstance(result, Result) else result
        conn.send({"id": msg_id, "result": value})
    except PluginError as exc:
        conn.send({"id": msg_id, "error": {"code": exc.code, "message": str(exc)}})
    except HostError as exc:
        code = exc.code if exc.code in (-32001, -32002, -32602) else -32001
        conn.send({"id": msg_id, "error": {"code": code, "message": str(exc)}})
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        conn.send({"id": msg_id, "error": {"code": -32001, "message": repr(exc)[:500]}})


def run(
    handler, *, concurrency: int = 1, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
) -> None:
    """Serve ``poll_tick`` requests until stdin closes; ``concurrency`` ticks at once."""
    inp = stdin or sys.stdin.buffer
    conn = _Conn(stdout or sys.stdout.buffer)
    work: queue.Queue = queue.Queue()

    def worker() -> None:
        while (msg := work.get()) is not None:
            _serve(handler, conn, msg)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, concurrency))]
    for t in threads:
        t.start()
    for line in inp:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "method" in msg:
            if msg["method"] == "poll_tick":
                work.put(msg)
            elif msg.get("id") is not None:
                conn.send({"id": msg["id"], "error": {"code": -32601, "message": "no such method"}})
        elif (q := conn.waiters.get(str(msg.get("id")))) is not None:
            q.put(msg)
    for q in list(conn.waiters.values()):
        q.put(None)
    for _ in threads:
        work.put(None)
    for t in threads:
        t.join()
