"""Start Flower the safe way: ``python -m nexopoll.flower [extra flower options]``.

- Authentication is on: basic auth from ``NEXOPOLL_FLOWER_BASIC_AUTH``
  (``user:password``, comma-separated for several users). Without it Flower does
  not start, unless ``NEXOPOLL_FLOWER_INSECURE=1`` says so explicitly.
- It listens on ``NEXOPOLL_FLOWER_ADDRESS`` (default 127.0.0.1), port
  ``NEXOPOLL_FLOWER_PORT`` (default 5555).
- The credentials reach Flower through its environment (``FLOWER_BASIC_AUTH``),
  never the command line, where ``ps`` would show them.

The four variables are read by ``nexopoll/settings/tunables.py`` (``NEXOPOLL_FLOWER_*``);
this launcher takes their values from the settings and copies its own
environment only to hand it to Flower's process.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from nexopoll.core.extras import MissingExtra, require

_PAIR = re.compile(r"[^:,\s]+:[^,\s]+")
# ``celery`` in a non-dumpable process: a plugin cannot read Flower's environment
_CELERY = (
    "from nexopoll.hardening import make_undumpable; make_undumpable(); "
    "from celery.__main__ import main; main()"
)


@dataclass(frozen=True)
class FlowerSettings:
    """``NEXOPOLL_FLOWER_BASIC_AUTH``, ``_INSECURE``, ``_ADDRESS`` and ``_PORT``."""

    basic_auth: str = ""
    insecure: bool = False
    address: str = "127.0.0.1"
    port: int = 5555

    @classmethod
    def from_django(cls) -> FlowerSettings:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")
        return cls(  # read lazily: the launcher needs no django.setup()
            settings.NEXOPOLL_FLOWER_BASIC_AUTH,
            settings.NEXOPOLL_FLOWER_INSECURE,
            settings.NEXOPOLL_FLOWER_ADDRESS,
            settings.NEXOPOLL_FLOWER_PORT,
        )


def flower_command(
    conf: FlowerSettings, env: Mapping[str, str], extra: list[str]
) -> tuple[list[str], dict[str, str]]:
    """The command and environment (``env`` plus the credentials) that start Flower,
    or SystemExit with the reason."""
    auth = conf.basic_auth
    child = dict(env)
    if auth:
        if not all(_PAIR.fullmatch(p) for p in auth.split(",")):
            raise SystemExit("NEXOPOLL_FLOWER_BASIC_AUTH must be user:password[,user:password…]")
        child["FLOWER_BASIC_AUTH"] = auth
    elif not conf.insecure:
        raise SystemExit(
            "Flower not started: set NEXOPOLL_FLOWER_BASIC_AUTH=user:password "
            "(or NEXOPOLL_FLOWER_INSECURE=1 to run it without authentication)"
        )
    cmd = [
        sys.executable,
        "-c",
        _CELERY,
        "-A",
        "nexopoll",
        "flower",
        f"--address={conf.address}",
        f"--port={conf.port}",
        "--max_tasks=10000",
        "--purge_offline_workers=60",
        *extra,
    ]
    return cmd, child


def main() -> None:
    try:
        require("flower", "flower", "python -m nexopoll.flower")
    except MissingExtra as exc:
        raise SystemExit(str(exc)) from None
    # the child process's environment is this one's (Celery reads its settings there)
    cmd, env = flower_command(FlowerSettings.from_django(), os.environ, sys.argv[1:])
    os.execve(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
