"""The ``nexopoll`` console script: ``nexopoll list`` is ``manage.py pollers list``."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")
    from django.core.management import execute_from_command_line

    from nexopoll.hardening import make_undumpable

    make_undumpable()  # plugins and other same-uid processes cannot read our environment

    args = list(sys.argv[1:] if argv is None else argv)
    execute_from_command_line(["nexopoll", "pollers", *args])


if __name__ == "__main__":
    main()
