"""A Redis Sentinel group on loopback for tests: a primary, one replica, three sentinels.

Every process listens on a random port and runs in its own session (stopped by PID).
``SentinelGroup`` quacks like ``RedisServer`` where the ``Stack`` needs it (``url``,
``client()``): ``url`` names a port nobody listens on (only its db number may be used:
every nexopoll client must find the master through the sentinels), and ``client()``
follows the current master as nexopoll's clients do.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

import redis
import redis.sentinel
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from .procs import free_port, wait_for

MASTER = "m"


class _Proc:
    def __init__(self, port: int, cmd: list[str], password: str = "") -> None:
        self.port = port
        self.password = password or None
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )

    def client(self, timeout: float = 2) -> redis.Redis:
        return redis.Redis(
            port=self.port, password=self.password, decode_responses=True, socket_timeout=timeout
        )

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.exceptions.ConnectionError:
            return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class SentinelGroup:
    def __init__(self, password: str = "", sentinel_password: str = "") -> None:
        self.password = password  # the primary's and replica's (requirepass / masterauth)
        self.sentinel_password = sentinel_password  # the sentinels' own (requirepass)
        self.dir = Path(tempfile.mkdtemp(prefix="nexopoll-sentinel-"))
        self.primary: _Proc | None = None
        self.replica: _Proc | None = None
        self.sentinels: list[_Proc] = []
        auth = f":{quote(password, safe='')}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{free_port()}/0"  # nobody listens there

    # --- lifecycle ------------------------------------------------------------
    def _server(self, name: str, *extra: str) -> _Proc:
        port = free_port()
        (self.dir / name).mkdir()
        cmd = [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir / name),
            *extra,
        ]
        if self.password:
            cmd += ["--requirepass", self.password, "--masterauth", self.password]
        proc = _Proc(port, cmd, self.password)
        wait_for(proc.answers, 10, what=f"redis-server {name} on {port}")
        return proc

    def start(self) -> SentinelGroup:
        self.primary = self._server("primary")
        self.replica = self._server("replica", "--replicaof", "127.0.0.1", str(self.primary.port))
        for i in range(3):
            port = free_port()
            conf = self.dir / f"sentinel{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 5000\n"
                + (f"sentinel auth-pass {MASTER} {self.password}\n" if self.password else "")
                + (
                    f"requirepass {self.sentinel_password}\n"
                    f"sentinel sentinel-pass {self.sentinel_password}\n"
                    if self.sentinel_password
                    else ""
                )
            )
            proc = _Proc(port, ["redis-server", str(conf), "--sentinel"], self.sentinel_password)
            wait_for(proc.answers, 10, what=f"sentinel {i} on {port}")
            self.sentinels.append(proc)
        wait_for(self._ready, 30, interval=0.1, what="replica in sync, sentinels know each other")
        return self

    def _ready(self) -> bool:
        assert self.replica is not None
        if self.replica.client().info("replication").get("master_link_status") != "up":
            return False
        for s in self.sentinels:
            c = s.client()
            if len(c.sentinel_sentinels(MASTER)) < 2 or not c.sentinel_slaves(MASTER):
                return False
        return True

    def stop(self) -> None:
        for p in [*self.sentinels, self.replica, self.primary]:
            if p is not None:
                p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- what tests use -------------------------------------------------------
    @property
    def addresses(self) -> str:
        """``NEXOPOLL_REDIS_SENTINELS``."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    def master_port(self) -> int | None:
        """The master's port as the sentinels name it (None when none answers)."""
        for s in self.sentinels:
            try:
                addr = s.client().sentinel_get_master_addr_by_name(MASTER)
            except redis.exceptions.ConnectionError:
                continue
            if addr:
                return int(addr[1])
        return None

    def client(self, timeout: float = 5) -> redis.Redis:
        sentinel = redis.sentinel.Sentinel(
            [("127.0.0.1", s.port) for s in self.sentinels],
            sentinel_kwargs={"socket_timeout": 2, "password": self.sentinel_password or None},
        )
        retry = Retry(ExponentialBackoff(cap=1, base=0.1), 10, (redis.exceptions.ConnectionError,))
        return sentinel.master_for(
            MASTER,
            decode_responses=True,
            socket_timeout=timeout,
            retry=retry,
            password=self.password or None,
        )

    def promoted(self, old_port: int) -> int | None:
        """The new master's port once every sentinel names one other than ``old_port``
        and it answers as a master (None before)."""
        ports = set()
        for s in self.sentinels:
            try:
                addr = s.client().sentinel_get_master_addr_by_name(MASTER)
            except redis.exceptions.ConnectionError:
                return None
            ports.add(int(addr[1]) if addr else None)
        if len(ports) != 1 or old_port in ports or None in ports:
            return None
        (port,) = ports
        try:
            role = redis.Redis(port=port, password=self.password or None, socket_timeout=2)
            role = role.execute_command("ROLE")[0]
        except redis.exceptions.ConnectionError:
            return None
        return port if role in (b"master", "master") else None

    def kill_primary(self) -> int:
        """SIGKILL the primary; return its port."""
        assert self.primary is not None
        self.primary.kill()
        return self.primary.port
