"""One plugin subprocess: spawned in its own process group with a scrubbed environment.

Its stdout is read in a thread as bounded lines and routed to the tick waiting for
each message (replies by id, reverse calls by ``params.tick_id``); its stderr is
drained concurrently into a bounded tail and the log (rate-limited, redacted). A
protocol error or an oversized line kills the whole group; so does a timeout.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexopoll.core.envrefs import env_refs, expand_env
from nexopoll.core.errors import TransientError
from nexopoll.core.redact import MIN_SECRET_CHARS, redact

from . import jsonrpc
from .jsonrpc import Message, ProtocolError
from .manifest import PYTHON_COMMAND, Manifest

log = logging.getLogger("nexopoll.plugins")
SDK_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding ``nexopoll``


@dataclass(frozen=True)
class Limits:
    max_line_bytes: int = 1 << 20
    stderr_tail_bytes: int = 64 * 1024
    stderr_lines_per_sec: int = 20
    stderr_line_chars: int = 1000
    stop_grace_secs: float = 3.0
    env_allow: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


class PluginExited(TransientError):
    """The plugin process ended (or was killed) while a tick waited on it."""


def child_argv(m: Manifest) -> list[str]:
    command = m.command
    if command == PYTHON_COMMAND:
        command = sys.executable
    elif "/" in command and not os.path.isabs(command):
        command = os.path.join(m.directory, command)
    return [command, *m.args]


def child_env(m: Manifest, environ: Mapping[str, str], allow: tuple[str, ...]) -> dict[str, str]:
    """Only the allowlisted variables, then the manifest's own ``env`` (``${VAR}`` expanded)."""
    env = {k: environ[k] for k in allow if k in environ}
    env.update(expand_env(dict(m.env), environ, path=f"plugin {m.plugin_id} env"))
    if m.command == PYTHON_COMMAND and "PYTHONPATH" not in m.env:
        env["PYTHONPATH"] = SDK_ROOT
    env["NEXOPOLL_PLUGIN_ID"] = m.plugin_id
    env["NEXOPOLL_PLUGIN_LIFECYCLE"] = m.lifecycle
    return env


class PluginProcess:
    """A running plugin: send lines, wait for routed messages, stop or kill the group."""

    def __init__(self, manifest: Manifest, limits: Limits, environ: Mapping[str, str]) -> None:
        self.manifest = manifest
        self.limits = limits
        self.secrets: set[str] = {
            environ[n] for n in env_refs(dict(manifest.env))
            if len(environ.get(n, "")) >= MIN_SECRET_CHARS
        }  # fmt: skip
        env = child_env(manifest, environ, limits.env_allow)
        self._ids = itertools.count(1)
        self._pending: dict[Any, queue.Queue] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._tail = bytearray()
        self.failure: BaseException | None = None
        self.died_at: float | None = None
        try:
            self.proc = subprocess.Popen(
                child_argv(manifest), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, cwd=manifest.directory, env=env, bufsize=0,
                start_new_session=True, close_fds=True,
            )  # fmt: skip
        except OSError as exc:
            raise TransientError(f"plugin {manifest.plugin_id}: cannot start: {exc}") from None
        self.pid = self.proc.pid
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True, name=f"plugin-out-{self.pid}"),
            threading.Thread(target=self._drain_stderr, daemon=True, name=f"plugin-err-{self.pid}"),
        ]
        for t in self._threads:
            t.start()
        log.info("plugin.started id=%s pid=%s", manifest.plugin_id, self.pid)

    # -- routing -------------------------------------------------------------
    def next_id(self) -> int:
        return next(self._ids)

    def register(self, msg_id: Any) -> queue.Queue:
        q: queue.Queue = queue.Queue()
        with self._lock:
            if self.failure is not None:
                raise self.failure
            self._pending[msg_id] = q
        return q

    def unregister(self, msg_id: Any) -> None:
        with self._lock:
            self._pending.pop(msg_id, None)

    def _route(self, msg: Message) -> None:
        if msg.is_request:
            params = msg.params if isinstance(msg.params, dict) else {}
            tick = params.get("tick_id")
            with self._lock:
                q = self._pending.get(_as_id(tick))
            if q is not None:
                q.put(msg)
            elif msg.id is not None:
                self.send(jsonrpc.error(msg.id, jsonrpc.INVALID_PARAMS, "no such tick_id"))
            return
        with self._lock:
            q = self._pending.get(msg.id)
        if q is None:
            raise ProtocolError(f"plugin replied with an unknown id {msg.id!r}")
        q.put(msg)

    def fail(self, exc: BaseException, *, kill: bool = True) -> None:
        """Fail every waiting tick with ``exc`` and (by default) kill the group."""
        with self._lock:
            if self.failure is None:
                self.failure = exc
                self.died_at = time.monotonic()
            pending = list(self._pending.values())
        for q in pending:
            q.put(exc)
        if kill:
            self.kill()

    # -- I/O -----------------------------------------------------------------
    def send(self, data: bytes) -> None:
        try:
            with self._write_lock:
                assert self.proc.stdin is not None
                self.proc.stdin.write(data)
        except (OSError, ValueError):
            raise PluginExited(self.describe_exit("closed its stdin")) from None

    def _read_stdout(self) -> None:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        buf = bytearray()
        cap = self.limits.max_line_bytes
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
                while (nl := buf.find(b"\n")) >= 0:
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    self._handle_line(line, cap)
                if len(buf) > cap:
                    raise ProtocolError(f"plugin wrote a line over {cap} bytes; killed")
        except ProtocolError as exc:
            log.warning("plugin.protocol_error id=%s: %s", self.manifest.plugin_id, exc)
            self.fail(exc)
            return
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._threads[1].join(timeout=1)  # the stderr tail, for the message
        self.fail(PluginExited(self.describe_exit("exited")), kill=True)

    def _handle_line(self, line: bytes, cap: int) -> None:
        if len(line) > cap:
            raise ProtocolError(f"plugin wrote a line over {cap} bytes; killed")
        if line.strip():
            self._route(jsonrpc.decode(line))

    def _drain_stderr(self) -> None:
        fd = self.proc.stderr.fileno()  # type: ignore[union-attr]
        budget, window, dropped, partial = self.limits.stderr_lines_per_sec, 0.0, 0, b""
        tail_cap = self.limits.stderr_tail_bytes
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self._tail += chunk
            if len(self._tail) > tail_cap:
                del self._tail[: len(self._tail) - tail_cap]
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()[-self.limits.stderr_line_chars :]
            now = time.monotonic()
            if now - window >= 1.0:
                if dropped:
                    log.warning("plugin.stderr id=%s: %s lines not logged (rate limit)",
                                self.manifest.plugin_id, dropped)  # fmt: skip
                window, budget, dropped = now, self.limits.stderr_lines_per_sec, 0
            for raw in lines:
                if budget <= 0:
                    dropped += 1
                    continue
                budget -= 1
                text = raw[: self.limits.stderr_line_chars].decode("utf-8", "replace")
                log.info("plugin.stderr id=%s %s", self.manifest.plugin_id, self.redact(text))

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def stderr_tail(self, chars: int = 500) -> str:
        """The last ``chars`` characters of stderr (redacted), from a ≤64 KiB buffer."""
        text = bytes(self._tail).decode("utf-8", "replace")
        return self.redact(text)[-chars:].strip()

    def describe_exit(self, what: str) -> str:
        code = self.proc.poll()
        how = ""
        if code is not None:
            how = f" (signal {signal.Signals(-code).name})" if code < 0 else f" (code {code})"
        tail = self.stderr_tail()
        return f"plugin {self.manifest.plugin_id} {what}{how}" + (
            f"; stderr tail: {tail}" if tail else ""
        )

    # -- lifecycle -----------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.failure is None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (grandchildren included) and reap the leader."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("plugin.unkillable id=%s pid=%s", self.manifest.plugin_id, self.pid)
        for stream in (self.proc.stdin,):
            try:
                stream and stream.close()
            except OSError:
                pass

    def stop(self, grace: float | None = None) -> None:
        """Clean stop: close stdin (EOF asks the plugin to exit), wait, then kill the group."""
        grace = self.limits.stop_grace_secs if grace is None else grace
        try:
            with self._write_lock:
                self.proc.stdin and self.proc.stdin.close()  # type: ignore[func-returns-value]
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.pid, signal.SIGTERM)
                self.proc.wait(timeout=1)
            except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
                pass
        self.fail(PluginExited(f"plugin {self.manifest.plugin_id} stopped"), kill=True)
        for t in self._threads:
            t.join(timeout=2)
        log.info("plugin.stopped id=%s pid=%s", self.manifest.plugin_id, self.pid)


def _as_id(value: Any) -> Any:
    """``tick_id`` travels as a string; the host's ids are ints."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value
