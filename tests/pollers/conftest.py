"""Shared by the poller tests: a loopback server, reached by a public-looking host name
through the real SSRF guard (the name resolves to loopback, which is allowed by address)."""

from __future__ import annotations

import functools

import pytest

from nexopoll.net import http
from tests.support.fakes import FakeResolver
from tests.support.httpserver import TestHTTPServer


@pytest.fixture
def srv():
    with TestHTTPServer() as server:
        yield server


def guarded_fetch(srv: TestHTTPServer, host: str):
    """``http.fetch`` that resolves ``host`` to the server and lets its address through."""
    return functools.partial(
        http.fetch, resolver=FakeResolver({host: ["127.0.0.1"]}), allow_addresses=[srv.address]
    )
