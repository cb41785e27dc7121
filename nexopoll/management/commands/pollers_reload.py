"""``manage.py pollers_reload`` — the same as ``manage.py pollers reload``."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Re-read pollers.yaml and apply {add, replace, remove, keep}."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true")
        parser.add_argument("--strict", action="store_true")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        argv = ["reload"] + [
            f"--{k.replace('_', '-')}" for k in ("dry_run", "strict", "json") if opts[k]
        ]
        call_command("pollers", *argv, stdout=self.stdout, stderr=self.stderr)
