"""The ``nexopoll`` console script.

``nexopoll VERB …`` is ``manage.py pollers VERB …`` (``nexopoll list``, ``nexopoll run ID``);
``nexopoll pollers VERB …`` is the same. Any other Django management command runs as it
would under ``manage.py``: ``nexopoll migrate``, ``nexopoll createsuperuser``,
``nexopoll collectstatic``, ``nexopoll runserver``. A pollers verb wins over a Django
command of the same name (``nexopoll check`` is ``pollers check``). ``nexopoll`` and
``nexopoll --help`` show the pollers verbs.
"""

from __future__ import annotations

import os
import sys


def _pollers_verbs() -> set[str]:
    from nexopoll.management.commands.pollers import Command

    parser = Command().create_parser("nexopoll", "pollers")
    for action in parser._actions:  # the sub-parsers action holds the verbs
        if getattr(action, "choices", None) and isinstance(action.choices, dict):
            return set(action.choices)
    return set()


def command_line(args: list[str]) -> list[str]:
    """The ``manage.py`` argument list that ``nexopoll ARGS`` runs."""
    import django
    from django.core.management import get_commands

    django.setup()
    first = args[0] if args else ""
    if first in _pollers_verbs() or first not in get_commands():
        # a pollers verb, --help, nothing, or an unknown word (pollers names the verbs)
        return ["nexopoll", "pollers", *args]
    return ["nexopoll", *args]


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")
    from django.core.management import execute_from_command_line

    from nexopoll.hardening import make_undumpable

    make_undumpable()  # plugins and other same-uid processes cannot read our environment

    args = list(sys.argv[1:] if argv is None else argv)
    execute_from_command_line(command_line(args))


if __name__ == "__main__":
    main()
