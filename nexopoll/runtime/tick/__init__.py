"""One tick, end to end: ``report`` (what a tick is: ``TickRun``, ``TickReport``),
``run`` (prepare, execute), ``commit`` (stage, commit, what follows a commit), ``write``
(what a tick writes), ``failures`` (a tick that cannot commit), ``batch`` and
``batchcommit`` (many ticks in one task, committed in waves). Whether a tick runs at all
is decided in ``core.decide.should_run``."""

from .record import history_entry
from .report import TickReport, TickRun
from .run import default_lease_ttl_ms, tick_job

__all__ = ["TickReport", "TickRun", "default_lease_ttl_ms", "history_entry", "tick_job"]
