"""Celery signal handlers every worker process runs (connected from ``NexopollConfig.ready``).

Before each task:

- honour the task's own ``ignore_result`` over the message's default;
- drop DB connections that are unusable (a backend killed by a PostgreSQL restart,
  an error on the last task) or past ``CONN_MAX_AGE``, and re-arm Django's health
  check (``CONN_HEALTH_CHECKS``). Celery's own Django fixup keeps a connection for
  ``CELERY_DB_REUSE_MAX`` tasks and never asks whether it still works;
- register the secrets of every stored job and agent with the log redactor (at
  most once a minute), so Celery's and the libraries' log lines are masked too.

When a process that runs tasks starts (a prefork child; the worker itself for the
threads and solo pools), its job definitions start loading in a background thread:
the first ticks load their own job meanwhile instead of waiting for every job's.
"""

from __future__ import annotations

import logging

from celery.signals import task_failure, task_prerun, worker_process_init, worker_ready
from django.db import close_old_connections

from . import definitions, logredact

log = logging.getLogger("nexopoll.worker")


@task_prerun.connect(weak=False)
def _before_task(task=None, **_: object) -> None:
    if task is not None and task.ignore_result:
        # Messages published by name (beat, send_task) carry ignore_result=False, which
        # would store every tick's and delivery's outcome in the DB result backend: one
        # write per task, and one that fails (and is retried for seconds, outside the
        # task, stalling the worker) while the DB is down or locked. The task says no.
        task.request.ignore_result = True
    close_old_connections()
    try:
        logredact.refresh_from_db()
    except Exception as exc:  # the DB may be down: the task will find out and retry
        log.warning("worker.secrets_not_refreshed: %s", type(exc).__name__)
        close_old_connections()


@task_failure.connect(weak=False)
def _after_failure(**_: object) -> None:
    close_old_connections()  # a DB error left the connection broken: drop it now


@worker_process_init.connect(weak=False)
def _child_started(**_: object) -> None:
    definitions.warm_in_background()


@worker_ready.connect(weak=False)
def _worker_ready(sender=None, **_: object) -> None:
    from celery.concurrency.prefork import TaskPool

    if not isinstance(getattr(sender, "pool", None), TaskPool):  # prefork: each child does
        definitions.warm_in_background()
