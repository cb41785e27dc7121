"""pollers/_http.py: conditional GET headers, validators, freshness hints, status table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nexopoll.core.errors import PermanentError, TransientError
from nexopoll.net import http
from pollers import _http

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def test_conditional_headers_only_carry_what_is_stored() -> None:
    assert _http.conditional_headers('"e1"', "Wed, 14 Jan 2026 09:00:00 GMT") == {
        "If-None-Match": '"e1"',
        "If-Modified-Since": "Wed, 14 Jan 2026 09:00:00 GMT",
    }
    assert _http.conditional_headers(None, "x") == {"If-Modified-Since": "x"}
    assert _http.conditional_headers("", None) == {}


def test_response_validators_drop_unsafe_values() -> None:
    assert _http.response_validators({"etag": ' W/"a" ', "LAST-MODIFIED": "Mon"}) == (
        'W/"a"',
        "Mon",
    )
    assert _http.response_validators({"ETag": '"a"\r\nX-Evil: 1'}) == (None, None)
    assert _http.response_validators({"ETag": '"' + "a" * 2000 + '"'}) == (None, None)
    assert _http.response_validators({}) == (None, None)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Cache-Control": "public, max-age=600"}, 600),
        ({"cache-control": 'max-age="600", must-revalidate', "Age": "100"}, 500),
        ({"Cache-Control": "max-age=60", "Age": "600"}, None),
        ({"Cache-Control": "no-cache, max-age=600"}, None),
        ({"Cache-Control": "no-store"}, None),
        ({"Cache-Control": "s-maxage=600"}, None),
        ({}, None),
    ],
)
def test_cache_max_age(headers, expected) -> None:
    got = _http.cache_max_age(headers)
    assert got == (timedelta(seconds=expected) if expected is not None else None)


def test_response_hint_is_the_longest_of_retry_after_and_max_age() -> None:
    later = "Thu, 15 Jan 2026 12:20:00 GMT"
    assert _http.response_hint({"Retry-After": later, "Cache-Control": "max-age=60"}, now=NOW) == (
        timedelta(minutes=20)
    )
    assert _http.response_hint({"Retry-After": "30", "Cache-Control": "max-age=90"}, now=NOW) == (
        timedelta(seconds=90)
    )
    assert _http.response_hint({"Retry-After": "soon"}, now=NOW) is None
    assert _http.longest(None, timedelta(0), timedelta(seconds=5)) == timedelta(seconds=5)


@pytest.mark.parametrize(
    ("status", "cls", "text"),
    [
        (401, PermanentError, "feed needs credentials (401)"),
        (403, PermanentError, "feed access forbidden (403)"),
        (404, PermanentError, "feed not found (404): fix the URL"),
        (410, PermanentError, "feed gone (410): remove or fix the URL"),
        (418, PermanentError, "feed answered HTTP 418"),
        (302, PermanentError, "feed answered HTTP 302 Found"),
        (408, TransientError, "(408): will retry"),
        (429, TransientError, "rate limiting (429)"),
        (500, TransientError, "feed server error (500)"),
        (599, TransientError, "feed server error (599)"),
    ],
)
def test_check_status_table(status, cls, text) -> None:
    with pytest.raises(cls) as err:
        _http.check_status(status, {"Retry-After": "7"}, now=NOW)
    assert text in str(err.value) and err.value.status == status
    # still the shared layer's classes, so callers matching those keep working
    assert isinstance(err.value, http.PermanentHTTPError | http.TransientHTTPError)
    if status == 429:
        assert err.value.retry_after == timedelta(seconds=7)


def test_check_status_passes_2xx_and_304_and_names_the_resource() -> None:
    for status in (200, 203, 304):
        _http.check_status(status, {}, now=NOW)
    with pytest.raises(PermanentError, match="endpoint gone \\(410\\)"):
        _http.check_status(410, {}, now=NOW, what="endpoint")
