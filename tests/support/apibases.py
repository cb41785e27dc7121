"""Point a provider API (``nexopoll.net.api_base``) at a local server for one test."""

from __future__ import annotations

from django.conf import settings

from nexopoll.net.options import env_name


def point_api(monkeypatch, provider: str, url: str) -> None:
    """As ``NEXOPOLL_<PROVIDER>_API_BASE=url`` would, both restored after the test: this
    process's setting, and the variable for the workers a test starts (their settings)."""
    monkeypatch.setitem(settings.NEXOPOLL_API_BASES, provider, url)
    monkeypatch.setenv(env_name(provider), url)
