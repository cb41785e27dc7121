"""One ``poll_tick`` over a plugin process, reverse calls answered through the tick's host.

Deliveries a plugin makes with ``deliver`` go to ``ctx.host.deliver``: they join the
tick's outbox and commit with it, so a tick that fails sends none of them.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from typing import Any

from nexopoll.core.contract import PollContext, TickAck
from nexopoll.core.errors import ConfigError
from nexopoll.core.hostcheck import check_log
from nexopoll.core.redact import MIN_SECRET_CHARS

from . import jsonrpc
from .jsonrpc import Message
from .process import PluginExited, PluginProcess

log = logging.getLogger("nexopoll.plugins")
EXIT_GRACE_SECS = 0.5  # a reply may still sit in the pipe when the leader exits


class PluginTimeout(PluginExited):
    pass


def run_tick(proc: PluginProcess, ctx: PollContext, timeout: float) -> TickAck:
    """Send ``poll_tick``, serve reverse calls until the reply, return its TickAck.

    Raises the runtime error the reply's code maps to, a ProtocolError for a
    malformed reply, PluginExited if the process died, PluginTimeout (after killing
    the process group) when ``timeout`` or the tick's deadline passes.
    """
    plugin = proc.manifest.plugin_id
    tick_id = proc.next_id()
    inbox = proc.register(tick_id)
    try:
        params = jsonrpc.tick_params(
            tick_id=str(tick_id),
            kind=ctx.kind,
            job_id=ctx.job_id,
            agent_id=ctx.agent_id,
            cursor=ctx.cursor,
            config=ctx.config,
            now=ctx.now.isoformat(),
            interval_hint_secs=int(ctx.interval_hint.total_seconds()),
        )
        proc.send(jsonrpc.request(tick_id, "poll_tick", params))
        deadline = time.monotonic() + timeout
        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if now >= deadline or ctx.cancel.cancelled:
                why = (
                    ctx.cancel.reason if ctx.cancel.cancelled else f"timed out after {timeout:.1f}s"
                )
                proc.fail(PluginTimeout(f"plugin {plugin}: tick {why}"))
                raise PluginTimeout(
                    f"plugin {plugin}: tick {why}; its process group was killed"
                    + (f"; stderr tail: {t}" if (t := proc.stderr_tail()) else "")
                )
            try:
                item = inbox.get(timeout=min(deadline - now, 0.1))
            except queue.Empty:
                if proc.proc.poll() is not None:  # leader gone; a grandchild may hold the pipe
                    exited_at = exited_at or now
                    if now - exited_at > EXIT_GRACE_SECS:
                        proc.fail(PluginExited(proc.describe_exit("exited during the tick")))
                continue
            if isinstance(item, BaseException):
                raise item
            if item.is_request:
                answer(proc, item, ctx)
                continue
            if item.error is not None:  # never a success; its text may echo a secret
                message = proc.redact(str(item.error.get("message") or ""))
                raise jsonrpc.error_for({**item.error, "message": message}, plugin)
            try:
                return jsonrpc.ack_from_result(item.result, plugin)
            except jsonrpc.ProtocolError as exc:
                proc.fail(exc)  # a plugin that breaks the protocol is restarted
                raise
    finally:
        proc.unregister(tick_id)


def answer(proc: PluginProcess, msg: Message, ctx: PollContext) -> None:
    """Serve one reverse call in the tick's thread; reply unless it was a notification
    (then a refusal is logged: ``metric_inc`` with a bad label name, say)."""
    params = msg.params if isinstance(msg.params, dict) else {}
    host = ctx.host
    try:
        value = _call(proc, msg.method or "", params, host)
    except _NoMethod:
        reply = jsonrpc.error(msg.id, jsonrpc.METHOD_NOT_FOUND, f"no method {msg.method!r}")
    except (KeyError, TypeError) as exc:
        reply = jsonrpc.error(msg.id, jsonrpc.INVALID_PARAMS, f"bad params for {msg.method}: {exc}")
    except Exception as exc:
        text = proc.redact(str(exc) or type(exc).__name__)
        reply = jsonrpc.error(msg.id, jsonrpc.error_code(exc), text)
    else:
        reply = jsonrpc.result(msg.id, value)
    if msg.id is not None:
        proc.send(reply)
    elif error := json.loads(reply).get("error"):  # a notification: no reply carries it
        log.warning(
            "plugin.notification_refused plugin=%s job=%s method=%s: %s",
            proc.manifest.plugin_id,
            ctx.job_id,
            msg.method,
            error["message"],
        )


class _NoMethod(Exception):
    pass


def _call(proc: PluginProcess, method: str, p: dict[str, Any], host: Any) -> Any:
    if method == "deliver":  # the host checks channel, recipient, payload and the cap
        host.deliver(p["channel"], p["to"], p["payload"])
        return {"ok": True}
    if method == "credentials_get":
        creds = host.credentials_get(str(p["channel"]))
        proc.secrets.update(_strings(creds))  # never echoed back into logs
        return creds
    if method == "log":  # refused (-32602) unless one clean line within the limits
        try:
            level, message, fields = check_log(
                p.get("level", "info"), p["message"], p.get("fields") or {}
            )
        except ConfigError as exc:  # its text names the field, with the character escaped
            log.warning("plugin.log_refused id=%s: %s", proc.manifest.plugin_id, exc)
            raise
        host.log(level, proc.redact(message), **{k: proc.redact(v) for k, v in fields.items()})
        return {"ok": True}
    if method == "metric_inc":
        labels = p.get("labels") or {}
        if not isinstance(labels, dict):
            raise TypeError("labels must be an object")
        host.metric_inc(str(p["name"]), **{str(k): str(v) for k, v in labels.items()})
        return {"ok": True}
    if method == "llm_invoke":
        request = p.get("request", p)
        if not isinstance(request, dict):
            raise TypeError("request must be an object")
        return host.llm_invoke({k: v for k, v in request.items() if k != "tick_id"})
    raise _NoMethod(method)


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value} if len(value) >= MIN_SECRET_CHARS else set()
    if isinstance(value, dict):
        return set().union(*(_strings(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value)) if value else set()
    return set()
