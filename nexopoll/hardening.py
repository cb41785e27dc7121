"""Process hardening every nexopoll process applies at start (stdlib only, Linux).

``make_undumpable`` sets ``prctl(PR_SET_DUMPABLE, 0)``: ``/proc/<pid>/environ``,
``/proc/<pid>/mem``, ``/proc/<pid>/fd`` and ``ptrace`` become unavailable to other
processes of the same uid (a plugin that reads ``/proc/$PPID/environ`` for the
secret key, the API tokens and every ``${VAR}`` secret), and no core file is
written. A process with ``CAP_SYS_PTRACE`` (root) still reads it: that is why a
root worker starts its plugins without capabilities (``nexopoll.plugins.launcher``).

Called by the web process (``wsgi``), the CLI (``manage.py``, ``nexopoll``), the
worker (main and pool children) and beat (``nexopoll.celery``), and by every
process that loads the Django app (``NexopollConfig.ready``). Forked children
inherit the flag; ``execve`` of another program resets it.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("nexopoll.hardening")
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def _prctl(option: int, arg: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(
        option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
    )


def make_undumpable() -> bool:
    """Mark this process non-dumpable; False (and a warning) where the OS cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        if _prctl(PR_SET_DUMPABLE, 0) == 0:
            return True
        err = ctypes.get_errno()
    except (OSError, AttributeError) as exc:
        err = getattr(exc, "errno", None) or 0
    log.warning(
        "hardening.dumpable_not_cleared errno=%s: other processes of this uid "
        "may read this process's environment",
        err,
    )
    return False


def is_dumpable() -> bool:
    return bool(_prctl(PR_GET_DUMPABLE)) if sys.platform.startswith("linux") else True
