"""schemathesis against the live app (a real HTTP server on loopback, the test DB).

Every operation of /api/openapi.json is called with generated requests (bounded:
a few examples each, well under a minute in all); each response must be
documented (status, content type, body schema) and never a server error.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings

from .conftest import TOKEN

EXAMPLES = 10


def test_api_conforms_to_its_openapi_document(live_server, jobs, redis_client, settings_):
    redis_client.rpush("test:src:alpha", 1, 2)
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 11
    calls: dict[str, set[int]] = {}

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case):
            response = case.call_and_validate(
                headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20
            )
            calls.setdefault(case.operation.label, set()).add(response.status_code)

        check()
    assert len(calls) == 11
    assert {200} <= calls["GET /api/pollers"]
