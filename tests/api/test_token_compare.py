"""The bearer token is compared in constant time (``hmac.compare_digest``), on every
operation ninja serves, and a wrong token of the right length is refused."""

from __future__ import annotations

import hmac

from .conftest import TOKEN


def test_bearer_token_goes_through_compare_digest(api, jobs, monkeypatch):
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert api.get("/api/pollers").status_code == 200
    assert calls == [(TOKEN.encode(), TOKEN.encode())]

    api.token = "x" * len(TOKEN)
    r = api.post("/api/pollers/alpha/pause")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r["WWW-Authenticate"] == 'Bearer realm="nexopoll"'
    assert calls[-1] == (b"x" * len(TOKEN), TOKEN.encode())
