from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from tests.runtime.conftest import Config, scripted  # noqa: F401  (shared helpers)
from tests.support.worker import start_worker  # noqa: F401  (a fixture)


@pytest.fixture
def cfg(tmp_path, redis_client, transactional_db, settings) -> Config:
    settings.NEXOPOLL_CONFIG = str(tmp_path / "pollers.yaml")
    return Config(tmp_path / "pollers.yaml")


def staff(username: str, *perms: str) -> User:
    """A staff user with ``perms``: codenames of the admin's (``admin_ext``) permissions,
    or ``app_label.codename`` (``nexopoll.operate_job``)."""
    user = User.objects.create_user(username, password="pw-" + username, is_staff=True)
    for perm in perms:
        app, _, codename = perm.rpartition(".")
        app = app or "admin_ext"
        found = Permission.objects.get(codename=codename, content_type__app_label=app)
        user.user_permissions.add(found)
    return user


@pytest.fixture
def operator(cfg) -> User:
    return staff("op", "view_job", "operate_job", "reload_config", "view_outboxrow", "redeliver")


@pytest.fixture
def viewer(cfg) -> User:
    return staff("viewer", "view_job", "view_outboxrow")
