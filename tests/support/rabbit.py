"""A private RabbitMQ node for tests and the chaos run (never the machine's node).

Its own node name (``np-<random>@localhost``), AMQP and distribution ports, data, log,
config and plugins files under a temp dir, and its own Erlang cookie (``HOME`` is that
dir). It starts in its own session so a test can SIGKILL it (``kill``) and start it
again on the same ports and data (``start``): durable queues and persistent messages
survive. Readiness is the AMQP port answering a connection (polled, bounded).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.procs import free_port

SBIN = "/usr/lib/rabbitmq/bin"  # the scripts themselves (/usr/sbin's wrappers su and cd)
START_TIMEOUT = 60.0


def rabbitmq_server() -> str | None:
    """The ``rabbitmq-server`` script to run, or None when RabbitMQ is not installed."""
    own = Path(SBIN) / "rabbitmq-server"
    return str(own) if own.exists() else shutil.which("rabbitmq-server")


class RabbitNode:
    """``start()``, ``kill()`` (SIGKILL the node's process group), ``stop()``; ``url``."""

    def __init__(self, base: str | None = None) -> None:
        self.dir = Path(base or tempfile.mkdtemp(prefix="nexopoll-rabbit-"))
        self.name = f"np-{secrets.token_hex(4)}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "server.out"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        env.update(
            HOME=str(self.dir),  # the Erlang cookie file lives here
            RABBITMQ_NODENAME=self.name,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.dir / "log"),
            RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq"),  # .conf is appended
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(self.dir / "rabbit.pid"),
        )
        return env

    def _write_config(self) -> None:
        cookie = self.dir / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16))
            cookie.chmod(0o400)
        (self.dir / "enabled_plugins").write_text("[].\n")
        # a lone test node: no disk alarm on a nearly full CI disk, and the default
        # guest user may connect (it is bound to 127.0.0.1 anyway)
        (self.dir / "rabbitmq.conf").write_text(
            "disk_free_limit.absolute = 1MB\nloopback_users = none\n"
            "vm_memory_high_watermark.relative = 0.6\n"
        )

    def start(self, timeout: float = START_TIMEOUT) -> RabbitNode:
        server = rabbitmq_server()
        if server is None:
            raise RuntimeError("rabbitmq-server is not installed")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [server],
            env=self.env(),
            cwd=self.dir,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        fh.close()
        deadline = time.monotonic() + timeout
        while not self._amqp_ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited:\n{self.text()[-2000:]}")
            if time.monotonic() > deadline:
                self.kill()
                tail = self.text()[-2000:]
                raise RuntimeError(f"rabbitmq-server not ready in {timeout}s:\n{tail}")
            time.sleep(0.1)
        return self

    def _amqp_ready(self) -> bool:
        """The port accepts a connection and answers the AMQP header with its own."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"AMQP\x00\x00\x09\x01")
                return s.recv(1) == b"\x01"  # connection.start frame: the broker is up
        except OSError:
            return False

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the node (the beam and its helpers: the whole process group)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        self.proc = None
        # the port must be free again before a restart binds it
        deadline = time.monotonic() + 10
        while self._amqp_ready() and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self.kill()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RabbitNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
