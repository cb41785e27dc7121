"""Shared fixtures: a private redis-server per test session, DB helpers, time helpers.

The suite never uses the machine's Redis on 6379: it starts its own
``redis-server`` on a free loopback port (``start_new_session=True``, stopped by
its PID), so it runs the same whether or not a Redis is already up.
"""

from __future__ import annotations

import pytest

from tests import bootstrap

REDIS_PORT = bootstrap.REDIS_PORT


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


@pytest.fixture(autouse=True)
def _forget_logged_secrets():
    """The log redactor's secrets are process-wide: each test starts without another's."""
    yield
    from nexopoll.runtime import logredact

    logredact.reset()
