"""The admin's one ``except ServiceError``: a verb's refusal becomes an error message."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.contrib import messages

from nexopoll.services import ServiceError


@dataclass
class Outcome:
    refused: ServiceError | None = None


@contextmanager
def shown(model_admin, request, prefix: str = "") -> Iterator[Outcome]:
    """Run the block; a ``ServiceError`` it raises is shown to the user (``prefix`` first)
    and kept on the outcome (``refused``) instead of propagating."""
    outcome = Outcome()
    try:
        yield outcome
    except ServiceError as exc:
        model_admin.message_user(request, f"{prefix}{exc}", messages.ERROR)
        outcome.refused = exc
