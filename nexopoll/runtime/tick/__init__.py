"""One tick, end to end: ``run`` (prepare, execute, stage, commit), ``write`` (what a
tick writes), ``failures`` (a tick that cannot commit), ``batch`` and ``batchcommit``
(many ticks in one task, committed in waves)."""

from .run import TickReport, default_lease_ttl_ms, history_entry, tick_job

__all__ = ["TickReport", "default_lease_ttl_ms", "history_entry", "tick_job"]
