"""What ``pollers plugins`` lists and ``pollers check`` validates: manifests and their kinds."""

from __future__ import annotations

from typing import Any

from .manifest import DuplicateKindError, check_kinds, load_manifests
from .semaphore import key as semaphore_key


def problems(plugins_dir: str, taken: dict[str, str]) -> list[str]:
    """Every invalid manifest and every kind claimed twice, one line each (``taken``: the
    kinds registered without plugins, ``runtime.registry.builtin_sources()``)."""
    manifests, bad = load_manifests(plugins_dir)
    out = [str(e) for e in bad]
    try:
        check_kinds(manifests, taken)
    except DuplicateKindError as exc:
        out += str(exc).split("; ")
    return out


def rows(plugins_dir: str, taken: dict[str, str], redis: Any = None) -> list[dict[str, Any]]:
    """One row per manifest: id, lifecycle, kinds, limits, path and state (``taken``: as
    for ``problems``)."""
    manifests, bad = load_manifests(plugins_dir)
    out: list[dict[str, Any]] = []
    for m in manifests:
        clash = [k for k in m.kinds if k in taken]
        state = "ok"
        try:
            check_kinds([m], taken)
        except DuplicateKindError as exc:
            state = f"error: {exc}"
        for k in m.kinds:
            taken.setdefault(k, m.source)
        busy = None
        if redis is not None:
            try:
                busy = int(redis.zcard(semaphore_key(m.plugin_id)))
            except Exception:
                busy = None
        out.append(
            {
                "id": m.plugin_id,
                "lifecycle": m.lifecycle,
                "kinds": list(m.kinds),
                "max_concurrent_ticks": m.max_concurrent_ticks,
                "tick_timeout_secs": m.tick_timeout_secs,
                "path": m.path,
                "state": state,
                "duplicate_kinds": clash,
                "ticks_running": busy,
            }
        )
    for e in bad:
        out.append(
            {
                "id": None,
                "lifecycle": None,
                "kinds": [],
                "path": e.path,
                "state": "invalid: " + "; ".join(e.problems),
            }
        )
    return out
