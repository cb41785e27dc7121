#!/usr/bin/env python
"""Django's command-line utility for nexopoll."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")
    from django.core.management import execute_from_command_line

    from nexopoll.hardening import make_undumpable

    make_undumpable()  # plugins and other same-uid processes cannot read our environment

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
