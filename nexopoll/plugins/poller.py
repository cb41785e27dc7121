"""The Poller the registry holds for each kind a plugin manifest claims.

``ephemeral``: a fresh process per tick, stopped (its group killed) after the reply.
``long_lived``: one process per plugin per worker process, shared by every kind
and tick of the plugin (requests multiplexed by id), restarted with backoff when
it dies, stopped cleanly on worker shutdown, when its manifest changes and when a
reload adds, changes or removes one of its own jobs (never on an unrelated reload).
Both lifecycles hold a slot of the plugin's Redis semaphore for the whole tick,
so ``max_concurrent_ticks`` holds across all worker processes.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexopoll.core.contract import PollContext, Poller, TickAck
from nexopoll.core.errors import TransientError
from nexopoll.redisconf import kind_version_key

from .manifest import Manifest, ManifestError, parse_manifest
from .process import Limits, PluginProcess
from .semaphore import Semaphore
from .session import run_tick

log = logging.getLogger("nexopoll.plugins")


@dataclass(frozen=True)
class Options:
    limits: Limits = field(default_factory=Limits)
    restart_base_secs: float = 1.0
    restart_cap_secs: float = 60.0


class LongLivedPlugin:
    """The one process of a long-lived plugin in this worker process."""

    def __init__(self, manifest: Manifest, options: Options) -> None:
        self.manifest = manifest
        self.options = options
        self.proc: PluginProcess | None = None
        self.failures = 0
        self.not_before = 0.0
        self.restarts = 0
        self._lock = threading.Lock()
        self._stamp = _stamp(manifest.path)
        self._version: str | None = None  # the reload version the process started under

    @property
    def state(self) -> str:
        if self.proc is not None and self.proc.alive:
            return f"running pid={self.proc.pid}"
        if self.failures:
            return f"restarting (failures={self.failures})"
        return "not started"

    def process(self, version: str | None = None) -> PluginProcess:
        """The running process; (re)started when it died, after a reload or a manifest edit."""
        with self._lock:
            self._reload_if_changed()
            if version is not None and version != self._version and self.proc is not None:
                if self._version is not None:
                    log.info(
                        "plugin.reload id=%s: pollers reload, stopping the old process",
                        self.manifest.plugin_id,
                    )
                    self._stop_locked()
            if version is not None:
                self._version = version
            proc = self.proc
            if proc is not None and proc.alive:
                return proc
            if proc is not None:  # it died: restart, after a backoff
                self.failures += 1
                delay = min(
                    self.options.restart_cap_secs,
                    self.options.restart_base_secs * 2 ** (self.failures - 1),
                )
                self.not_before = (proc.died_at or time.monotonic()) + delay
                proc.stop(grace=0)
                self.proc = None
                log.warning(
                    "plugin.died id=%s failures=%s restart_in=%.1fs",
                    self.manifest.plugin_id,
                    self.failures,
                    delay,
                )
            wait = self.not_before - time.monotonic()
            if wait > 0:
                raise TransientError(
                    f"plugin {self.manifest.plugin_id} died; restarting in {wait:.1f}s (backoff)"
                )
            self.proc = PluginProcess(self.manifest, self.options.limits, os.environ)
            self.restarts += 1 if self.failures else 0
            _track(self)
            return self.proc

    def succeeded(self) -> None:
        self.failures = 0

    def _reload_if_changed(self) -> None:
        stamp = _stamp(self.manifest.path)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            new = parse_manifest(Path(self.manifest.path).read_text("utf-8"), self.manifest.path)
        except (ManifestError, OSError) as exc:
            self._stop_locked()
            raise TransientError(f"plugin {self.manifest.plugin_id}: manifest changed: {exc}")
        if new.kinds != self.manifest.kinds or new.plugin_id != self.manifest.plugin_id:
            self._stop_locked()
            raise TransientError(
                f"plugin {self.manifest.plugin_id}: its kinds or id changed; restart the workers"
            )
        log.info(
            "plugin.reload id=%s: manifest changed, stopping the old process",
            self.manifest.plugin_id,
        )
        self._stop_locked()
        self.manifest, self.failures, self.not_before = new, 0, 0.0

    def _stop_locked(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()


class PluginPoller(Poller):
    """One kind of a subprocess plugin, as the runtime's registry sees it."""

    def __init__(
        self,
        kind: str,
        manifest: Manifest,
        options: Options,
        redis_factory: Callable[[], Any],
        long_lived: LongLivedPlugin | None = None,
    ) -> None:
        self.kind = kind
        self.manifest = manifest
        self.description = f"subprocess plugin {manifest.plugin_id} ({manifest.lifecycle})"
        self.options = options
        self._redis = redis_factory
        self.long_lived = long_lived

    def validate(self, config: dict[str, Any]) -> None:
        """The plugin validates its config at tick time (error -32602 pauses the job)."""

    def tick(self, ctx: PollContext) -> TickAck:
        m = self.long_lived.manifest if self.long_lived else self.manifest
        timeout = float(m.tick_timeout_secs)
        remaining = ctx.cancel.remaining()
        if remaining is not None:
            timeout = min(timeout, remaining)
        deadline = time.monotonic() + timeout
        sem = Semaphore(
            self._redis(),
            m.plugin_id,
            m.max_concurrent_ticks,
            int((m.tick_timeout_secs + 10) * 1000),
            _version_keys(m),
        )
        token = sem.acquire(deadline, ctx.cancel)
        if token is None:
            raise TransientError(
                f"plugin {m.plugin_id}: max_concurrent_ticks={m.max_concurrent_ticks} "
                f"all busy for {timeout:g}s"
            )
        try:
            left = max(0.0, deadline - time.monotonic())
            if self.long_lived is not None:
                ack = run_tick(self.long_lived.process(sem.version), ctx, left)
                self.long_lived.succeeded()
                return ack
            proc = PluginProcess(m, self.options.limits, os.environ)
            try:
                return run_tick(proc, ctx, left)
            finally:
                proc.stop(grace=min(1.0, self.options.limits.stop_grace_secs))
        finally:
            try:
                sem.release(token)
            except Exception:  # the slot expires on its own
                log.warning("plugin.semaphore_release_failed id=%s", m.plugin_id, exc_info=True)


def pollers_for(manifest: Manifest, options: Options, redis_factory) -> list[PluginPoller]:
    shared = LongLivedPlugin(manifest, options) if manifest.lifecycle == "long_lived" else None
    return [PluginPoller(k, manifest, options, redis_factory, shared) for k in manifest.kinds]


# -- the long-lived processes of this worker process ---------------------------------
_live: list[LongLivedPlugin] = []
_hooked = False
_guard = threading.Lock()


def _track(plugin: LongLivedPlugin) -> None:
    global _hooked
    with _guard:
        if plugin not in _live:
            _live.append(plugin)
        if not _hooked:
            _hooked = True
            atexit.register(stop_all)
            try:
                from celery import signals

                signals.worker_process_shutdown.connect(_on_shutdown, weak=False)
                signals.worker_shutdown.connect(_on_shutdown, weak=False)
            except ImportError:  # pragma: no cover - celery is a dependency
                pass


def _on_shutdown(**_: Any) -> None:
    stop_all()


def stop_all() -> None:
    """Stop every long-lived plugin process of this worker process (clean, then kill)."""
    with _guard:
        plugins = list(_live)
        _live.clear()
    for p in plugins:
        try:
            p.stop()
        except Exception:
            log.warning("plugin.stop_failed id=%s", p.manifest.plugin_id, exc_info=True)


def _version_keys(m: Manifest) -> list[str]:
    """The reload versions of the plugin's own kinds: a reload that changes only other
    jobs leaves them, and the plugin's process with its in-flight ticks, alone."""
    return [kind_version_key(kind) for kind in sorted(m.kinds)]


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)
