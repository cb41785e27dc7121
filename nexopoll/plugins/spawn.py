"""How a plugin subprocess is started: the launcher's command line (``launcher.py``,
with the privileges ``NEXOPOLL_PLUGIN_USER`` asks for) and the child's scrubbed
environment (an allowlist, then the manifest's own ``env``). ``process.py`` starts it.
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Mapping
from pathlib import Path

from nexopoll.core.envrefs import expand_env
from nexopoll.core.errors import TransientError
from nexopoll.plugins.manifest import PYTHON_COMMAND, Manifest

SDK_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding ``nexopoll``
LAUNCHER = str(Path(__file__).resolve().with_name("launcher.py"))


def child_argv(m: Manifest) -> list[str]:
    command = m.command
    if command == PYTHON_COMMAND:
        command = sys.executable
    elif "/" in command and not os.path.isabs(command):
        command = os.path.join(m.directory, command)
    return [command, *m.args]


def privilege_args(user: str, euid: int | None = None) -> list[str]:
    """The launcher's options for ``NEXOPOLL_PLUGIN_USER`` (``user``) and this process.

    Unset (or the worker's own user): a root worker starts plugins as root without
    any capability; another worker starts them as itself. A user name or uid: a
    root worker starts them as that user and its primary group, no other groups.

    >>> privilege_args("", euid=0), privilege_args("", euid=1000)
    (['--no-caps'], [])
    >>> privilege_args("nobody", euid=0)[:2]
    ['--uid', '65534']
    """
    euid = os.geteuid() if euid is None else euid
    if not user:
        return ["--no-caps"] if euid == 0 else []
    try:
        pw = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, ValueError, OverflowError):
        raise TransientError(f"NEXOPOLL_PLUGIN_USER={user!r}: no such user") from None
    if pw.pw_uid == euid:
        return ["--no-caps"] if euid == 0 else []
    if euid != 0:
        raise TransientError(
            f"NEXOPOLL_PLUGIN_USER={user!r}: the worker runs as uid {euid}, not root, "
            "so it cannot start plugins as another user (unset it, or start the worker as root)"
        )
    return ["--uid", str(pw.pw_uid), "--gid", str(pw.pw_gid)]


def launcher_argv(m: Manifest, user: str) -> list[str]:
    """The launcher's command line: ``-I -S`` (stdlib only, no site, no PYTHON* vars)."""
    return [sys.executable, "-I", "-S", LAUNCHER, *privilege_args(user), "--", *child_argv(m)]


def child_env(m: Manifest, environ: Mapping[str, str], allow: tuple[str, ...]) -> dict[str, str]:
    """Only the allowlisted variables, then the manifest's own ``env`` (``${VAR}`` expanded)."""
    env = {k: environ[k] for k in allow if k in environ}
    env.update(expand_env(dict(m.env), environ, path=f"plugin {m.plugin_id} env"))
    if m.command == PYTHON_COMMAND and "PYTHONPATH" not in m.env:
        env["PYTHONPATH"] = SDK_ROOT
    env["NEXOPOLL_PLUGIN_ID"] = m.plugin_id
    env["NEXOPOLL_PLUGIN_LIFECYCLE"] = m.lifecycle
    return env
