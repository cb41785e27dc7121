"""One error family: each ``ServiceError`` carries the status, code, message and details
the API answers with today, so a front-end that maps it generically (one ``except
ServiceError``) keeps every payload identical."""

from __future__ import annotations

import pytest

from nexopoll import services
from nexopoll.api.errors import from_service
from nexopoll.core.config.model import ConfigIssue

ISSUE = ConfigIssue("pollers.yaml", 3, "a", "config.url", "not a URL")

CASES = {
    "unknown job": (services.UnknownJob("a"), 404),
    "unknown delivery": (services.UnknownDelivery(["x", "y"]), 404),
    "paused": (services.JobPaused("a", "maintenance"), 409),
    "redeliver refused": (services.RedeliverRefused("already sent: x"), 409),
    "bad request": (services.BadRequest("limit must be between 1 and 10000, not 0"), 400),
    "strict reload": (services.ReloadRefused([ISSUE]), 422),
    "bad file": (services.ConfigRejected([ISSUE]), 422),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_refusal_carries_the_apis_answer(name):
    exc, status = CASES[name]
    api = from_service(exc)
    assert isinstance(exc, services.ServiceError)
    assert (exc.http_status, exc.code, exc.message, exc.details) == (
        api.status,
        api.code,
        api.message,
        api.details,
    ) and api.status == status
    assert exc.as_dict() == {
        "code": api.code,
        "message": api.message,
        **({"details": api.details} if api.details is not None else {}),
    }


def test_the_old_names_still_catch_as_before():
    assert isinstance(services.UnknownJob("a"), LookupError)
    assert isinstance(services.RewindRefused("gone"), LookupError)
    assert isinstance(services.BadRequest("no"), ValueError)
    from nexopoll.core.config import ConfigFileError

    rejected = services.ConfigRejected([ISSUE])
    assert isinstance(rejected, ConfigFileError) and rejected.issues == [ISSUE]
    assert rejected.text.startswith("pollers.yaml rejected, nothing applied:\n")
    strict = services.ReloadRefused([ISSUE])
    assert str(strict) == f"reload refused (--strict): {ISSUE}"
    assert strict.text == f"reload refused (--strict):\n{ISSUE}"
