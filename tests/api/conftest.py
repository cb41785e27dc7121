from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.runtime.conftest import Config, scripted
from tests.support.worker import start_worker  # noqa: F401  (a fixture)

TOKEN = "api-test-token-7f3a9c"


@pytest.fixture
def cfg(tmp_path, redis_client, transactional_db, settings) -> Config:
    settings.NEXOPOLL_CONFIG = str(tmp_path / "pollers.yaml")
    return Config(tmp_path / "pollers.yaml")


@pytest.fixture
def jobs(cfg) -> Config:
    cfg.write([scripted("alpha"), scripted("beta"), scripted("gamma", paused_on_boot=True)])
    cfg.reload()
    return cfg


@pytest.fixture
def api(settings):
    settings.NEXOPOLL_API_TOKEN = TOKEN
    return Api(Client(), TOKEN)


class Api:
    """The test client with a bearer token and JSON bodies."""

    def __init__(self, client: Client, token: str | None) -> None:
        self.client = client
        self.token = token

    def _headers(self, extra: dict) -> dict:
        h = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if self.token else {}
        h.update(extra)
        return h

    def get(self, url: str, **extra):
        return self.client.get(url, **self._headers(extra))

    def post(self, url: str, body=None, **extra):
        data = "" if body is None else json.dumps(body)
        return self.post_raw(url, data, "application/json", **extra)

    def post_raw(self, url: str, data: str, content_type: str, **extra):
        """A body sent as given, under ``content_type`` (a malformed one, say)."""
        return self.client.post(url, data=data, content_type=content_type, **self._headers(extra))


def staff(username: str, *perms: str) -> User:
    user = User.objects.create_user(username, password="pw-" + username, is_staff=True)
    for perm in perms:
        app, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app, codename=codename)
        )
    return user


@pytest.fixture
def settings_(settings):
    """Settings for a live server run: the API token, no practical rate limit, and runs
    that answer 202 after a short wait (no worker is running)."""
    settings.NEXOPOLL_API_TOKEN = TOKEN
    settings.NEXOPOLL_API_RATE_PER_MIN = 100_000
    settings.NEXOPOLL_RUN_WAIT_SECS = 0.2
    return settings
