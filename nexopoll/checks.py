"""Configuration checks: ``manage.py pollers check`` and Django's system check.

An invalid ``pollers.yaml`` never blocks a management command: the system check only
warns (``migrate``, ``pollers pause``, ``make run`` keep working and the last good
definitions keep running), while ``pollers check`` and ``pollers reload`` report the
problems and exit non-zero.
"""

from __future__ import annotations

import re
from datetime import datetime

from django.core import checks

from nexopoll.core.config import ConfigFileError


def run_checks(*, now: datetime) -> tuple[list[str], list[str]]:
    """Return (errors, warnings) about pollers.yaml and Redis."""
    from nexopoll import services

    errors: list[str] = []
    warnings: list[str] = []
    path = services.config_path()
    if not path.exists():
        warnings.append(f"{path} does not exist: the poller subsystem is off")
    try:
        loaded = services.load_file(now=now)
        errors += [str(i) for i in loaded.issues]
        warnings += _private_urls(loaded)
    except ConfigFileError as exc:
        errors += [str(i) for i in exc.issues]
    errors += _redis_problems()
    return errors, warnings


def _private_urls(loaded) -> list[str]:
    from nexopoll import services
    from nexopoll.privatecheck import private_url_warnings
    from nexopoll.runtime.registry import get_registry
    from nexopoll.runtime.secretenv import secret_env

    return private_url_warnings(loaded, secret_env(), get_registry(), str(services.config_path()))


def _redis_problems() -> list[str]:
    from nexopoll.runtime.redis import get_redis

    try:
        info = get_redis().config_get("maxmemory*")
    except Exception as exc:
        return [f"Redis is not reachable: {exc}"]
    if int(info.get("maxmemory", 0) or 0) > 0 and info.get("maxmemory-policy") != "noeviction":
        return [
            f"Redis maxmemory-policy is {info.get('maxmemory-policy')!r} with a memory limit: "
            "it may evict schedule entries, leases and queued ticks; set it to 'noeviction'"
        ]
    return []


_HINT = (
    "pollers.yaml is not applied: the last good definitions keep running. "
    "Fix it, then run `python manage.py pollers reload` "
    "(`python manage.py pollers check` lists the problems)."
)
_UNSET = re.compile(r"environment variable ([A-Za-z_][A-Za-z0-9_]*) is not set")


def hint_for(issue: str) -> str:
    """The hint of a warning about ``issue``: what to do so that following it works."""
    unset = _UNSET.search(issue)
    if unset is None:
        return _HINT
    name = unset.group(1)
    return (
        f"pollers.yaml is not applied: the last good definitions keep running. Set {name} "
        f"in the environment of the worker and beat and in this shell (`export {name}=...`), "
        "or replace the reference in pollers.yaml; then run `python manage.py pollers reload`."
    )


@checks.register("nexopoll")
def pollers_yaml_check(app_configs, **kwargs):
    """Warnings only: an Error here would stop every management command."""
    from django.utils import timezone

    from nexopoll import services

    try:
        loaded = services.load_file(now=timezone.now())
    except ConfigFileError as exc:
        return [_warning(str(i), "nexopoll.W002") for i in exc.issues]
    except Exception:  # registry or DB not ready: the dedicated command reports it
        return []
    return [_warning(str(i), "nexopoll.W001") for i in loaded.issues]


def _warning(issue: str, id_: str) -> checks.Warning:
    return checks.Warning(issue, hint=hint_for(issue), id=id_)
