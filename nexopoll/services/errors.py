"""One error family for every operator verb: each front-end (CLI, admin, API, MCP) has
one ``except ServiceError`` and reads ``code``, ``http_status``, ``message`` and
``details`` off it.

``str(exc)`` is the sentence the admin shows, ``text`` what the CLI prints, and
``message`` what the API returns (the same text, except where noted).
"""

from __future__ import annotations

from typing import Any

from nexopoll.core.config import ConfigFileError


class ServiceError(Exception):
    """A verb refused cleanly (never a bug): ``code`` and ``http_status`` say how."""

    code = "error"
    http_status = 500

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    @property
    def text(self) -> str:
        """The refusal as a terminal shows it."""
        return str(self)

    def as_dict(self) -> dict[str, Any]:
        """The API's error body: ``{"code", "message"}``, and ``details`` when there are."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        return body


class NotFound(ServiceError, LookupError):
    code, http_status = "not_found", 404


class Conflict(ServiceError):
    code, http_status = "conflict", 409


class Refused(ServiceError):
    """The request is understood but its content is refused (an invalid file)."""

    code, http_status = "invalid", 422


class BadRequest(ServiceError, ValueError):
    """Arguments that do not make a request (a bad status, limit or combination)."""

    code, http_status = "bad_request", 400


# --- the named cases (the names front-ends and tests used before the family) --------
class UnknownJob(NotFound):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"unknown job {job_id!r}")


class UnknownDelivery(NotFound):
    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        super().__init__(f"unknown delivery id(s): {', '.join(ids)}")


class JobPaused(Conflict):
    def __init__(self, job_id: str, reason: str) -> None:
        self.job_id, self.reason = job_id, reason
        super().__init__(
            f"job {job_id!r} is paused ({reason or 'no reason given'}): not ticked; "
            f"resume it, or tick it anyway with --force"
        )


class RedeliverRefused(Conflict):
    """A row may not be queued again as asked (sent without ``force``, or being sent)."""


class RewindRefused(NotFound):
    """The tick to rewind to is not in the kept history, or did not run."""


class ReloadRefused(Refused):
    """``reload --strict`` and the file has invalid jobs: nothing applied. ``str()`` lists
    the issues (the CLI's text); ``message`` is the API's, ``details`` the issues."""

    def __init__(self, issues: list[Any]) -> None:
        self.issues = issues
        super().__init__(
            "reload refused (strict): the file has invalid jobs",
            details=[str(i) for i in issues],
        )
        self.args = ("reload refused (--strict): " + "; ".join(str(i) for i in issues),)

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def text(self) -> str:
        return "\n".join(["reload refused (--strict):", *map(str, self.issues)])


class ConfigRejected(Refused, ConfigFileError):
    """pollers.yaml as a whole is unusable (unreadable, too big, not YAML): nothing was
    applied. Still a ``ConfigFileError`` (``issues``; ``str()`` lists them)."""

    def __init__(self, issues: list[Any]) -> None:
        ConfigFileError.__init__(self, issues)
        self.message, self.details = str(self), None

    @property
    def text(self) -> str:
        return f"pollers.yaml rejected, nothing applied:\n{self}"
