"""One plugin subprocess: started through the launcher with a scrubbed environment.

The launcher (``launcher.py``) runs the plugin without the privileges to read any
nexopoll process (no capabilities when the worker is root, or as
``NEXOPOLL_PLUGIN_USER``) and, as a child subreaper, reaps the plugin's whole
process tree when it exits or is killed: a daemon that double-forks and calls
``setsid`` included. Its stdout is read as bounded lines and routed to the tick
waiting for each message (replies by id, reverse calls by ``params.tick_id``); its
stderr is drained into a bounded tail and the log (rate-limited, redacted). One
thread pumps both, and stops when the process is stopped or killed, whoever still
holds the pipes. A protocol error or an oversized line kills the whole tree; so
does a timeout. Its command line and environment are built in ``spawn.py``.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nexopoll.plugins.jsonrpc as jsonrpc
from nexopoll.core.envrefs import env_refs
from nexopoll.core.errors import TransientError
from nexopoll.core.redact import MIN_SECRET_CHARS, redact
from nexopoll.plugins.jsonrpc import Message, ProtocolError
from nexopoll.plugins.manifest import Manifest
from nexopoll.plugins.spawn import child_env, launcher_argv

log = logging.getLogger("nexopoll.plugins")
KILL_WAIT_SECS = 2.0  # for the launcher to reap the tree before the group gets SIGKILL


@dataclass(frozen=True)
class Limits:
    max_line_bytes: int = 1 << 20
    stderr_tail_bytes: int = 64 * 1024
    stderr_lines_per_sec: int = 20
    stderr_line_chars: int = 1000
    stop_grace_secs: float = 3.0
    env_allow: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
    user: str = ""  # NEXOPOLL_PLUGIN_USER: run plugins as this user (the worker must be root)


class PluginExited(TransientError):
    """The plugin process ended (or was killed) while a tick waited on it."""


class PluginProcess:
    """A running plugin: send lines, wait for routed messages, stop or kill the group."""

    def __init__(self, manifest: Manifest, limits: Limits, environ: Mapping[str, str]) -> None:
        self.manifest = manifest
        self.limits = limits
        self.secrets: set[str] = {
            environ[n]
            for n in env_refs(dict(manifest.env))
            if len(environ.get(n, "")) >= MIN_SECRET_CHARS
        }
        env = child_env(manifest, environ, limits.env_allow)
        self._ids = itertools.count(1)
        self._pending: dict[Any, queue.Queue] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._tail = bytearray()
        self.failure: BaseException | None = None
        self.died_at: float | None = None
        argv = launcher_argv(manifest, limits.user)
        command = argv[argv.index("--") + 1]
        if shutil.which(command, path=env.get("PATH", os.defpath)) is None and not (
            os.path.isabs(command) and os.path.exists(command)
        ):
            raise TransientError(
                f"plugin {manifest.plugin_id}: cannot start: {command!r} not found"
            )
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=manifest.directory,
                env=env,
                bufsize=0,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise TransientError(f"plugin {manifest.plugin_id}: cannot start: {exc}") from None
        self.pid = self.proc.pid  # the launcher's: the leader of the plugin's process group
        self._stop_reading = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._threads = [
            threading.Thread(target=self._pump, daemon=True, name=f"plugin-io-{self.pid}"),
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

    def _pump(self) -> None:
        """Read stdout lines and drain stderr until both reach EOF or the process is
        stopped (``_wake``): never blocked on a pipe that a stray process still holds."""
        out, err = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        sel = selectors.DefaultSelector()
        for fd in (out, err, self._wake_r):
            sel.register(fd, selectors.EVENT_READ)
        buf, cap = bytearray(), self.limits.max_line_bytes
        drain = _StderrDrain(self)
        open_fds = {out, err}
        try:
            while open_fds and not self._stop_reading.is_set():
                for key, _ in sel.select():
                    fd = key.fd
                    if fd == self._wake_r:
                        return
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        sel.unregister(fd)
                        open_fds.discard(fd)
                    elif fd == err:
                        drain.feed(chunk)
                    else:
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
        finally:
            sel.close()  # the wake pipe stays open: stop() closes it after joining
            for stream in (self.proc.stdout, self.proc.stderr):
                try:
                    stream and stream.close()
                except OSError:
                    pass
        if self._stop_reading.is_set():
            return
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.fail(PluginExited(self.describe_exit("exited")), kill=True)

    def _handle_line(self, line: bytes, cap: int) -> None:
        if len(line) > cap:
            raise ProtocolError(f"plugin wrote a line over {cap} bytes; killed")
        if line.strip():
            self._route(jsonrpc.decode(line))

    def _wake(self) -> None:
        """Stop the pump thread now (it owns and closes the pipes)."""
        self._stop_reading.set()
        with self._lock:
            if self._wake_w >= 0:
                try:
                    os.write(self._wake_w, b"x")
                except OSError:
                    pass

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
        """Kill the plugin's whole tree: the launcher SIGKILLs and reaps every process
        below it (``SIGUSR1``); the group gets SIGKILL too, then the pump stops."""
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGUSR1)
                self.proc.wait(timeout=KILL_WAIT_SECS)
            except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("plugin.unkillable id=%s pid=%s", self.manifest.plugin_id, self.pid)
        self._wake()
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
                self.proc.stdin and self.proc.stdin.close()
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
        with self._lock:
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._wake_r = self._wake_w = -1
        log.info("plugin.stopped id=%s pid=%s", self.manifest.plugin_id, self.pid)


def _as_id(value: Any) -> Any:
    """``tick_id`` travels as a string; the host's ids are ints."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


class _StderrDrain:
    """stderr → a bounded tail (error messages quote it) and the log, rate-limited."""

    def __init__(self, proc: PluginProcess) -> None:
        self.proc, self.limits = proc, proc.limits
        self.budget, self.window = self.limits.stderr_lines_per_sec, 0.0
        self.dropped, self.partial = 0, b""

    def feed(self, chunk: bytes) -> None:
        proc, limits = self.proc, self.limits
        proc._tail += chunk
        if len(proc._tail) > limits.stderr_tail_bytes:
            del proc._tail[: len(proc._tail) - limits.stderr_tail_bytes]
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()[-limits.stderr_line_chars :]
        now = time.monotonic()
        if now - self.window >= 1.0:
            if self.dropped:
                log.warning(
                    "plugin.stderr id=%s: %s lines not logged (rate limit)",
                    proc.manifest.plugin_id,
                    self.dropped,
                )
            self.window, self.budget, self.dropped = now, limits.stderr_lines_per_sec, 0
        for raw in lines:
            if self.budget <= 0:
                self.dropped += 1
                continue
            self.budget -= 1
            text = raw[: limits.stderr_line_chars].decode("utf-8", "replace")
            log.info("plugin.stderr id=%s %s", proc.manifest.plugin_id, proc.redact(text))
