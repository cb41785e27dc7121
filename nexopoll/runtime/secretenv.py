"""The environment ``${...}`` references resolve against: ``os.environ`` plus secret files.

``${file:/run/secrets/ana_token}`` is looked up as the name ``file:/run/secrets/ana_token``
(see :mod:`nexopoll.core.envrefs`). :class:`SecretEnv` answers such names by reading
the file at that moment (its content, surrounding whitespace stripped, at most
64 KiB), so a rotated secret file is picked up by the next use and the content is
never stored: not in the DB, not in a cache. An unreadable file is a missing name
(``KeyError``): the loader rejects the binding, a delivery is held.

A few variables have defaults (``settings.NEXOPOLL_ENV_DEFAULTS``: the demo jobs'
``NEXOPOLL_DEMO_BASE``), so a plain shell resolves them like ``make run`` does;
``NEXOPOLL_PUBLIC_VARS`` also lists the settings' public variables.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from django.conf import settings

from nexopoll.core.envrefs import FILE_PREFIX
from nexopoll.core.redact import PUBLIC_VARS

MAX_SECRET_FILE_BYTES = 64 * 1024


class SecretEnv(Mapping[str, str]):
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def __getitem__(self, name: str) -> str:
        if name.startswith(FILE_PREFIX):
            return read_secret_file(name[len(FILE_PREFIX) :])
        if name == PUBLIC_VARS:  # the process's list and the settings' (a string or names)
            listed = settings.NEXOPOLL_PUBLIC_VARS
            listed = listed if isinstance(listed, str) else ",".join(listed or ())
            return ",".join(v for v in (self._environ.get(name, ""), listed) if v)
        try:
            return self._environ[name]
        except KeyError:
            return _defaults()[name]

    def __iter__(self) -> Iterator[str]:  # the variables set: files, defaults are not listed
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)


def _defaults() -> dict[str, str]:
    return settings.NEXOPOLL_ENV_DEFAULTS


def read_secret_file(path: str) -> str:
    """The secret in ``path``; KeyError (naming the path only) when it cannot be read."""
    if not os.path.isabs(path):
        raise KeyError(FILE_PREFIX + path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError:
        raise KeyError(FILE_PREFIX + path) from None
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise KeyError(FILE_PREFIX + path)
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise KeyError(FILE_PREFIX + path) from None


def secret_env() -> SecretEnv:
    """The process environment with secret files: pass it wherever ``os.environ`` went."""
    return SecretEnv()
