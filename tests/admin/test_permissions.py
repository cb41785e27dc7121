"""The front-ends' permissions are nexopoll's own (``nexopoll.operate_job`` …): a user
granted them acts without the admin's; one granted the admin's older ones still acts,
and migration 0005 copied those grants onto nexopoll's."""

from __future__ import annotations

import importlib

from django.apps import apps
from django.contrib.auth.models import User

from nexopoll.models import PollState
from nexopoll.services import permissions

from .conftest import scripted, staff
from .test_admin import act, login

copy_grants = importlib.import_module(
    "nexopoll.migrations.0005_state_job_relation_permissions"
).copy_grants


def test_nexopolls_own_permission_lets_a_user_act_in_the_admin(cfg):
    cfg.write([scripted("a")])
    cfg.reload()
    user = staff("own", "view_job", "nexopoll.operate_job")
    assert user.has_perm(permissions.OPERATE) and not user.has_perm("admin_ext.operate_job")
    assert "Paused a." in act(login(user), "pause", "a").content.decode()
    assert PollState.objects.get(job_id="a").paused


def test_the_admins_older_grant_still_counts_and_the_migration_copied_it(cfg):
    old = staff("old", "view_job", "operate_job", "redeliver")
    assert permissions.allowed(old, permissions.OPERATE)
    assert not permissions.allowed(old, permissions.RELOAD)
    assert not old.has_perm(permissions.OPERATE)
    copy_grants(apps, None)
    old = User.objects.get(pk=old.pk)  # a fresh user: no cached permissions
    assert old.has_perm(permissions.OPERATE) and old.has_perm(permissions.REDELIVER)
    assert old.has_perm(permissions.VIEW_JOB) and not old.has_perm(permissions.RELOAD)
