"""Start Flower the safe way: ``python -m nexopoll.flower [extra flower options]``.

- Authentication is on: basic auth from ``NEXOPOLL_FLOWER_BASIC_AUTH``
  (``user:password``, comma-separated for several users). Without it Flower does
  not start, unless ``NEXOPOLL_FLOWER_INSECURE=1`` says so explicitly.
- It listens on ``NEXOPOLL_FLOWER_ADDRESS`` (default 127.0.0.1), port
  ``NEXOPOLL_FLOWER_PORT`` (default 5555).
- The credentials reach Flower through its environment (``FLOWER_BASIC_AUTH``),
  never the command line, where ``ps`` would show them.
"""

from __future__ import annotations

import os
import re
import sys

from nexopoll.core.extras import MissingExtra, require

_PAIR = re.compile(r"[^:,\s]+:[^,\s]+")
# ``celery`` in a non-dumpable process: a plugin cannot read Flower's environment
_CELERY = (
    "from nexopoll.hardening import make_undumpable; make_undumpable(); "
    "from celery.__main__ import main; main()"
)


def flower_command(env: dict[str, str], extra: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that start Flower, or SystemExit with the reason."""
    auth = env.get("NEXOPOLL_FLOWER_BASIC_AUTH", "")
    child = dict(env)
    if auth:
        if not all(_PAIR.fullmatch(p) for p in auth.split(",")):
            raise SystemExit("NEXOPOLL_FLOWER_BASIC_AUTH must be user:password[,user:password…]")
        child["FLOWER_BASIC_AUTH"] = auth
    elif env.get("NEXOPOLL_FLOWER_INSECURE") != "1":
        raise SystemExit(
            "Flower not started: set NEXOPOLL_FLOWER_BASIC_AUTH=user:password "
            "(or NEXOPOLL_FLOWER_INSECURE=1 to run it without authentication)"
        )
    cmd = [
        sys.executable, "-c", _CELERY, "-A", "nexopoll", "flower",
        f"--address={env.get('NEXOPOLL_FLOWER_ADDRESS', '127.0.0.1')}",
        f"--port={env.get('NEXOPOLL_FLOWER_PORT', '5555')}",
        "--max_tasks=10000", "--purge_offline_workers=60", *extra,
    ]  # fmt: skip
    return cmd, child


def main() -> None:
    try:
        require("flower", "flower", "python -m nexopoll.flower")
    except MissingExtra as exc:
        raise SystemExit(str(exc)) from None
    cmd, env = flower_command(dict(os.environ), sys.argv[1:])
    os.execve(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
