"""A real Celery worker subprocess for tests of what runs on workers (the API's run and
dry run, the admin's dry run): the test DB, the session's Redis, stopped by its PID."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.procs import CeleryProc, stack_env


@pytest.fixture
def start_worker(redis_server, transactional_db, settings) -> Iterator[Callable[..., CeleryProc]]:
    """``start_worker(**env)``: a worker with the current environment plus ``env`` (start
    it after setting the variables the job's ``${VAR}`` references need)."""
    from tests.integration.conftest import database_url

    procs: list[CeleryProc] = []

    def start(**env: str) -> CeleryProc:
        environ = stack_env(redis_server.url, database_url(), settings.NEXOPOLL_CONFIG, **env)
        proc = CeleryProc("worker", environ, f"w{len(procs) + 1}").start()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.stop(timeout=10)
