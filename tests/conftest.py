"""Shared fixtures: a private redis-server per test session, DB helpers, time helpers.

The suite never uses the machine's Redis on 6379: it starts its own
``redis-server`` on a free loopback port (``start_new_session=True``, stopped by
its PID), so it runs the same whether or not a Redis is already up.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Decided before Django reads its settings (pytest-django sets Django up after
# the root conftest is imported).
REDIS_PORT = _free_port()
os.environ["REDIS_URL"] = f"redis://127.0.0.1:{REDIS_PORT}/0"
os.environ.setdefault("NEXOPOLL_DATA_DIR", tempfile.mkdtemp(prefix="nexopoll-test-"))
os.environ["NEXOPOLL_EXTRA_POLLERS"] = "tests.support.testpollers:ScriptedPoller"
os.environ["NEXOPOLL_CONFIG"] = str(Path(os.environ["NEXOPOLL_DATA_DIR"]) / "pollers.yaml")
os.environ.setdefault("NEXOPOLL_LEASE_MIN_SECS", "3")
os.environ.setdefault("NEXOPOLL_BREAKER_BASE_SECS", "30")


@pytest.fixture(scope="session")
def redis_server():
    from tests.support.procs import RedisServer

    server = RedisServer(REDIS_PORT)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server):
    from nexopoll.runtime import redis as rmod

    client = rmod.get_redis()
    client.flushall()
    yield client
    client.flushall()
