"""The permissions the front-ends check, declared on nexopoll's own models
(:mod:`nexopoll.models`), so the API and the LLM tools need no ``admin_ext``.

Migration 0005 granted them to every user and group that held the admin's older
ones (``admin_ext.operate_job`` …); :func:`allowed` still honours those, so a grant
made on the admin's proxy models later keeps working too.
"""

from __future__ import annotations

from typing import Any

VIEW_JOB = "nexopoll.view_polljob"
OPERATE = "nexopoll.operate_job"
RELOAD = "nexopoll.reload_config"
VIEW_OUTBOX = "nexopoll.view_delivery"
REDELIVER = "nexopoll.redeliver"

#: the same permission on the admin's proxy models (admin_ext.Job, admin_ext.OutboxRow)
ADMIN_EXT = {
    VIEW_JOB: "admin_ext.view_job",
    OPERATE: "admin_ext.operate_job",
    RELOAD: "admin_ext.reload_config",
    VIEW_OUTBOX: "admin_ext.view_outboxrow",
    REDELIVER: "admin_ext.redeliver",
}


def allowed(user: Any, perm: str) -> bool:
    """Whether ``user`` holds ``perm`` (one of the names above), or the admin's same one."""
    if user is None:
        return False
    return bool(user.has_perm(perm) or (perm in ADMIN_EXT and user.has_perm(ADMIN_EXT[perm])))
