"""Redact every log record the process creates, whichever logger made it.

A log record factory (installed once, from ``NexopollConfig.ready``) masks the
secret values of every job and agent this process has loaded in the formatted
message, the traceback and the stack: Celery's "Task … raised unexpected" lines,
a library's traceback and our own lines all pass through it before any handler
(console, worker log file, pytest's caplog) sees them.

The set only grows (a secret dropped by a reload may still sit in a queued
error); it is fed by the definitions loader and by :func:`refresh_from_db`.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Iterable

from nexopoll.core.redact import redact, secret_values
from nexopoll.runtime.secretenv import secret_env

_secrets: frozenset[str] = frozenset()
_lock = threading.Lock()
_installed = False
_refreshed_at = float("-inf")
REFRESH_SECS = 60.0


# names a formatter may print beside the message (logger, module, file, function, …)
_NAME_ATTRS = ("name", "module", "filename", "funcName", "pathname", "processName", "threadName")
_names: dict[str, str] = {}  # a name → its redacted form, for the current secrets


def register(secrets: Iterable[str]) -> None:
    """Add ``secrets`` to the values masked in every log record of this process."""
    global _secrets
    new = frozenset(secrets)
    if new <= _secrets:
        return
    with _lock:
        _secrets = _secrets | new
        _names.clear()


def known() -> frozenset[str]:
    return _secrets


def reset() -> None:
    """Forget every registered secret (tests: one test's secrets must not mask the next's logs)."""
    global _secrets, _refreshed_at
    with _lock:
        _secrets = frozenset()
        _names.clear()
        _refreshed_at = float("-inf")


def refresh_from_db(*, force: bool = False) -> None:
    """Register the secrets of every stored job and agent (at most once a minute)."""
    global _refreshed_at
    if not force and time.monotonic() - _refreshed_at < REFRESH_SECS:
        return
    _refreshed_at = time.monotonic()
    from django.db.models import TextField
    from django.db.models.functions import Cast

    from nexopoll.models import Agent, PollJob

    refs = [list(Agent.objects.values_list("bindings", flat=True))]
    # only configs with a ${...} reference hold secrets: the DB picks them (100,000
    # jobs without one cost a table scan, not 100,000 rows through every worker)
    jobs = PollJob.objects.annotate(text=Cast("config", TextField())).order_by()
    refs.append(list(jobs.filter(text__contains="${").values_list("config", flat=True)))
    register(secret_values(refs, secret_env()))


def install() -> None:
    """Wrap the log record factory (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        inner = logging.getLogRecordFactory()

    def factory(*args, **kwargs) -> logging.LogRecord:
        record = inner(*args, **kwargs)
        if _secrets:
            scrub(record, _secrets)
        return record

    logging.setLogRecordFactory(factory)


def scrub(record: logging.LogRecord, secrets: frozenset[str]) -> None:
    """Mask ``secrets`` in the record's message, exception text and stack, in place."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: leave it to the handler to report
        return
    clean = redact(message, secrets)
    if clean != message:
        record.msg, record.args = clean, ()
    if record.exc_info and record.exc_info[0] is not None:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        clean = redact(text, secrets)
        if clean != text:  # the handler prints exc_text; the exception itself is dropped
            record.exc_info, record.exc_text = None, clean
    if record.stack_info:
        record.stack_info = redact(record.stack_info, secrets)
    for attr in _NAME_ATTRS:
        value = getattr(record, attr, None)
        if isinstance(value, str):
            clean = _names.get(value)
            if clean is None:
                if len(_names) > 10_000:  # thread names can be many
                    _names.clear()
                clean = _names[value] = redact(value, secrets)
            if clean != value:
                setattr(record, attr, clean)
