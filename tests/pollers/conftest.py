"""Shared by the poller tests: a loopback server, reached by a public-looking host name
through the real SSRF guard (the name resolves to loopback, which is allowed by address);
the local Google fake with the Gmail API pointed at it, and a credentials binding for it."""

from __future__ import annotations

import functools

import pytest

from nexopoll.net import http
from tests.support.apibases import point_api
from tests.support.fakes import FakeResolver
from tests.support.google_server import FakeGoogle, write_credentials
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


@pytest.fixture
def google(monkeypatch):
    """The local Google fake, the Gmail API pointed at it (test_google_calendar points
    the Calendar API instead)."""
    with FakeGoogle() as fake:
        point_api(monkeypatch, "gmail", fake.url)
        yield fake


@pytest.fixture
def binding(google, tmp_path):
    """The ``google`` credentials binding of an agent, for the fake."""
    return write_credentials(tmp_path, google)
