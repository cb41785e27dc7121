"""Two loopback servers, A and B: two origins (the redirect tests reach A as
``localhost`` and B as ``127.0.0.1`` on another port)."""

from __future__ import annotations

import pytest

from tests.support.httpserver import TestHTTPServer


@pytest.fixture
def a():
    with TestHTTPServer() as server:
        yield server


@pytest.fixture
def b():
    with TestHTTPServer() as server:
        yield server
