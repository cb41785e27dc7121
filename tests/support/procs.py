"""Real processes for integration tests: redis-server, Celery workers and beat.

Every process starts in its own session (``start_new_session=True``) so a test can
SIGKILL/SIGSTOP it as a group without touching pytest, and is stopped by its own
PID/PGID. Waits are event-driven: poll a condition, never a fixed sleep.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import requests

ROOT = Path(__file__).resolve().parents[2]


def wait_for(
    cond: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll ``cond`` until it returns a truthy value; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or cond}")
        time.sleep(interval)


def answers_200(url: str, headers: dict | None = None) -> bool:
    """Whether ``url`` answers a GET with 200 now (a refused connection is a no): for
    ``wait_for`` while a web process starts."""
    try:
        return requests.get(url, headers=headers, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def fault_scale() -> float:
    """``NEXOPOLL_FAULT_SCALE`` stretches fault-test deadlines on a slow machine (default 1)."""
    return float(os.environ.get("NEXOPOLL_FAULT_SCALE") or 1.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A private redis-server; ``aof=True`` persists with ``appendfsync everysec``.

    ``kill``/``pause``/``resume``/``restart`` inject the faults of RELIABILITY.md rows
    8-12 on this process only (same port and directory across restarts).
    """

    def __init__(self, port: int | None = None, *, aof: bool = False) -> None:
        self.port = port or free_port()
        self.aof = aof
        self.proc: subprocess.Popen | None = None
        self.dir = tempfile.mkdtemp(prefix="nexopoll-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def client(self, timeout: float = 5) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=timeout)

    def start(self) -> None:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "everysec"]
            if self.aof
            else ["--appendonly", "no"]
        )
        cmd = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            *persistence,
            "--dir",
            self.dir,
            "--enable-debug-command",
            "local",
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        wait_for(self._ping, 10, what=f"redis-server on {self.port}")

    def _ping(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.exceptions.ConnectionError:
            return False

    def kill(self) -> None:
        """``kill -9``: whatever AOF had not fsynced yet is gone."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class CeleryProc:
    """A ``celery worker`` or ``celery beat`` subprocess with a log file to watch."""

    def __init__(
        self,
        role: str,
        env: dict[str, str],
        name: str = "w1",
        extra: tuple[str, ...] = (),
        prefix: list[str] | None = None,
    ) -> None:
        self.prefix = prefix or []  # e.g. ["faketime", "-f", "+300s"]
        self.role = role
        self.extra = extra
        self.name = name
        self.env = env
        self.log = Path(tempfile.mkstemp(prefix=f"nexopoll-{role}-{name}-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> CeleryProc:
        base = [*self.prefix, sys.executable, "-m", "celery", "-A", "nexopoll"]
        if self.role == "worker":
            cmd = base + [
                "worker",
                "-P",
                "prefork",
                "-c",
                "1",
                "-n",
                f"{self.name}@%h",  # queue: settings
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "info",
            ]
            ready = "ready."
        else:
            cmd = base + [
                "beat",
                "-l",
                "info",
                "-S",
                "nexopoll.runtime.beat:NexopollScheduler",
                "--pidfile=",
                "-s",
                str(self.log) + ".schedule",
            ]
            ready = "beat.resync"
        cmd += list(self.extra)
        fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
        fh.close()
        if wait:
            wait_for(lambda: ready in self.text() or self._died(), 60, what=f"{self.role} ready")
            assert self.proc.poll() is None, f"{self.role} exited:\n{self.text()[-3000:]}"
        return self

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def signal_group(self, sig: int) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole process group (main process and pool children)."""
        if self.proc and self.proc.poll() is None:
            self.signal_group(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20) -> int | None:
        if self.proc is None:
            return None
        rc = self.proc.returncode if self.proc.poll() is not None else None
        if rc is None:
            if self.prefix:  # a wrapper (faketime) forks: the worker is its child, in the group
                self.signal_group(signal.SIGTERM)
            else:
                self.proc.terminate()
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reap_group(timeout)
        return rc

    def _reap_group(self, timeout: float) -> None:
        """Nothing of ours outlives the test: wait for the rest of the process group
        (a wrapped worker, pool children), then SIGKILL what is left."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_in_root(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python *args`` in the repository root under ``env``; its output kept, as text."""
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_manage(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python manage.py *args``, as :func:`run_in_root` runs it."""
    return run_in_root(env, "manage.py", *args, timeout=timeout)


def start_gunicorn(env: dict[str, str], port: int, out: Any, *options: str) -> subprocess.Popen:
    """``gunicorn nexopoll.wsgi`` with one worker on 127.0.0.1:``port`` and ``options``,
    from the repository root in its own session, its output (stderr too) to ``out``."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "nexopoll.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            *options,
        ],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stack_env(redis_url: str, database_url: str, config_path: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_SETTINGS"))}
    env.update(
        DJANGO_SETTINGS_MODULE="nexopoll.settings",
        REDIS_URL=redis_url,
        DATABASE_URL=database_url,
        NEXOPOLL_CONFIG=config_path,
        PYTHONPATH=str(ROOT),
        NEXOPOLL_LEASE_MIN_SECS="3",
        NEXOPOLL_VISIBILITY_TIMEOUT="4",
        NEXOPOLL_UNACKED_RESTORE_THROTTLE="0",
        NEXOPOLL_RESYNC_SECS="2",
        NEXOPOLL_BEAT_LOCK_TIMEOUT="6",
        NEXOPOLL_BEAT_MAX_LOOP="0.5",
        NEXOPOLL_SWEEP_SECS="1",
        NEXOPOLL_DELIVERY_BASE_SECS="0.2",
    )
    env.update(extra)
    return env
