"""The operator verbs and views every front-end calls (CLI, admin, JSON API, LLM tools),
so they behave, refuse and mask identically:

- :mod:`.jobs`: read, pause, resume, reset, run now, preview (``query_jobs``);
- :mod:`.outbox`: outbox rows and redelivery (``query_deliveries``);
- :mod:`.reload`: re-read pollers.yaml and apply it;
- :mod:`.history`: tick history and rewind;
- :mod:`.kinds`: the poller kinds' own tools, the plugins' state;
- :mod:`.runs`: run now and dry run on a worker, with a bounded wait;
- :mod:`.views`: one view each (a job, a tick, a cursor, the breaker) and the redaction;
- :mod:`.errors`: ``ServiceError`` (``NotFound``, ``Conflict``, ``Refused``,
  ``BadRequest``), the one exception a front-end catches.

``from nexopoll import services; services.pause_job(...)`` works for every public name.
"""

from __future__ import annotations

import nexopoll.services.kinds as kinds

from .errors import (
    BadRequest,
    ConfigRejected,
    Conflict,
    JobPaused,
    NotFound,
    RedeliverRefused,
    Refused,
    ReloadRefused,
    RewindRefused,
    ServiceError,
    UnknownDelivery,
    UnknownJob,
)
from .history import Rewound, host_wait, rewind_job, tick_history
from .jobs import (
    Page,
    job_pending,
    list_jobs,
    pause_job,
    preview_job,
    query_jobs,
    require_job,
    reset_job,
    resume_job,
    run_job,
    run_view,
    show_job,
    write_state,
)
from .outbox import (
    DELIVERY_STATUSES,
    delivery_view,
    list_deliveries,
    query_deliveries,
    redeliver,
)
from .reload import PROGRESS_JOBS, ReloadResult, config_path, load_file, reload_config
from .runs import RUN_NOW_TASK, QueueUnavailable, run_now_async, run_now_results
from .views import (
    CursorView,
    breaker_label,
    cursor_pretty,
    cursor_text,
    cursor_view,
    definition_source,
    definition_yaml,
    job_view,
    next_run,
    redact,
    summary,
    tick_view,
)

__all__ = [
    "DELIVERY_STATUSES",
    "PROGRESS_JOBS",
    "RUN_NOW_TASK",
    "BadRequest",
    "ConfigRejected",
    "Conflict",
    "CursorView",
    "JobPaused",
    "NotFound",
    "Page",
    "QueueUnavailable",
    "RedeliverRefused",
    "Refused",
    "ReloadRefused",
    "ReloadResult",
    "RewindRefused",
    "Rewound",
    "ServiceError",
    "UnknownDelivery",
    "UnknownJob",
    "breaker_label",
    "config_path",
    "cursor_pretty",
    "cursor_text",
    "cursor_view",
    "definition_source",
    "definition_yaml",
    "delivery_view",
    "host_wait",
    "job_pending",
    "job_view",
    "kinds",
    "list_deliveries",
    "list_jobs",
    "load_file",
    "next_run",
    "pause_job",
    "preview_job",
    "query_deliveries",
    "query_jobs",
    "redact",
    "redeliver",
    "reload_config",
    "require_job",
    "reset_job",
    "resume_job",
    "rewind_job",
    "run_job",
    "run_now_async",
    "run_now_results",
    "run_view",
    "show_job",
    "summary",
    "tick_history",
    "tick_view",
    "write_state",
]
