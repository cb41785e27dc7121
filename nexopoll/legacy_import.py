"""Merge a legacy ``gmail-poller.yaml`` into ``pollers.yaml`` (``pollers import-legacy``).

The translation (the legacy schema, and how each job and account maps onto a
``gmail`` job and a ``google`` binding) is :mod:`nexopoll.legacy_translate`.
Explicit entries already in ``pollers.yaml`` win: a job id or an agent's
``google`` binding that exists is never replaced, and each collision is
reported. The merge edits the file with ruamel.yaml's round-trip mode, so
comments and key order survive.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from .legacy_translate import LegacyImportError, Translation, sanitize, translate

__all__ = [
    "ImportReport",
    "LegacyImportError",
    "MergeResult",
    "Translation",
    "existing_ids",
    "import_legacy",
    "import_legacy_command",
    "merge",
    "render_additions",
    "sanitize",
    "translate",
]


@dataclass
class MergeResult:
    text: str
    added: list[str]
    collisions: list[str]
    agents_added: list[str]
    agents_kept: list[str]


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 100
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def render_additions(
    tr: Translation, *, skip_ids: set[str] = frozenset(), skip_agents: set[str] = frozenset()
) -> str:
    """The YAML that would be added (jobs under ``pollers.jobs``, bindings under ``agents``)."""
    doc: dict[str, Any] = {"pollers": {"jobs": [j for j in tr.jobs if j["id"] not in skip_ids]}}
    agents = {a: {"google": b} for a, b in tr.agents.items() if a not in skip_agents}
    if agents:
        doc["agents"] = agents
    buf = io.StringIO()
    _yaml().dump(doc, buf)
    return buf.getvalue()


def existing_ids(config_text: str) -> tuple[set[str], set[str]]:
    """Job ids and agents with a ``google`` binding already in a pollers.yaml text."""
    doc = _load_rt(config_text)
    pollers = doc.get("pollers") if isinstance(doc, dict) else None
    jobs = pollers.get("jobs") if isinstance(pollers, dict) else None
    ids = {str(j["id"]) for j in jobs or [] if isinstance(j, dict) and "id" in j}
    agents = doc.get("agents") if isinstance(doc, dict) else None
    with_google = {
        str(a) for a, b in (agents or {}).items() if isinstance(b, dict) and "google" in b
    }
    return ids, with_google


def _load_rt(text: str) -> Any:
    try:
        return _yaml().load(text) if text.strip() else CommentedMap()
    except YAMLError as exc:
        raise LegacyImportError(f"pollers.yaml is not valid YAML: {str(exc).splitlines()[0]}")


def merge(config_text: str, tr: Translation) -> MergeResult:
    """Add the translated jobs and bindings to ``config_text``, keeping its comments.

    Raises:
        LegacyImportError: pollers.yaml is not YAML or has an unexpected shape.
    """
    doc = _load_rt(config_text)
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, dict):
        raise LegacyImportError("pollers.yaml must be a mapping at the top level")
    if doc.get("pollers") is None:
        doc["pollers"] = CommentedMap()
    pollers = doc["pollers"]
    if not isinstance(pollers, dict):
        raise LegacyImportError("pollers: must be a mapping")
    if pollers.get("jobs") is None:
        pollers["jobs"] = CommentedSeq()
    jobs = pollers["jobs"]
    if not isinstance(jobs, list):
        raise LegacyImportError("pollers.jobs must be a list")
    ids = {str(j.get("id")) for j in jobs if isinstance(j, dict)}
    added, collisions = [], []
    for job in tr.jobs:
        if job["id"] in ids:
            collisions.append(job["id"])
            continue
        jobs.append(_commented(job))
        added.append(job["id"])
    agents_added, agents_kept = [], []
    if tr.agents:
        if doc.get("agents") is None:
            doc["agents"] = CommentedMap()
        agents = doc["agents"]
        if not isinstance(agents, dict):
            raise LegacyImportError("agents: must be a mapping")
        for agent, binding in tr.agents.items():
            current = agents.get(agent)
            if current is None:
                agents[agent] = CommentedMap()
                current = agents[agent]
            if not isinstance(current, dict) or "google" in current:
                agents_kept.append(agent)
                continue
            current["google"] = _commented(binding)
            agents_added.append(agent)
    buf = io.StringIO()
    _yaml().dump(doc, buf)
    return MergeResult(buf.getvalue(), added, collisions, agents_added, agents_kept)


def _commented(value: Any) -> Any:
    if isinstance(value, dict):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _commented(v)
        return out
    if isinstance(value, list):
        return CommentedSeq(_commented(v) for v in value)
    return value


@dataclass
class ImportReport:
    additions: str  # the YAML that would be (or was) added
    translation: Translation
    merge: MergeResult | None = None
    collisions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # issues reload will report
    written: bool = False


def import_legacy(
    legacy_path: str,
    config_path: str,
    *,
    write: bool,
    check: Callable[[str], list[str]],
    validate: Callable[[dict[str, Any]], None] | None = None,
) -> ImportReport:
    """Translate ``legacy_path``; with ``write``, merge into ``config_path`` atomically.

    Args:
        check: validates a whole pollers.yaml text (raises if the file would be
            unusable, returns the per-job issues); the merge is never written
            when it raises.

    Raises:
        LegacyImportError: unreadable legacy file or pollers.yaml.
    """
    import os
    from pathlib import Path

    try:
        legacy_text = Path(legacy_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LegacyImportError(f"cannot read {legacy_path}: {exc}") from None
    tr = translate(legacy_text, validate=validate)
    target = Path(config_path)
    current = target.read_text(encoding="utf-8") if target.exists() else ""
    ids, with_google = existing_ids(current)
    collisions = [j["id"] for j in tr.jobs if j["id"] in ids]
    report = ImportReport(
        additions=render_additions(tr, skip_ids=ids, skip_agents=with_google),
        translation=tr,
        collisions=collisions,
    )
    if not write:
        return report
    report.merge = merge(current, tr)
    report.problems = check(report.merge.text)
    tmp = target.with_name(target.name + ".import-tmp")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(report.merge.text, encoding="utf-8")
    os.replace(tmp, target)
    report.written = True
    return report


def import_legacy_command(cmd: Any, path: str, *, write: bool) -> None:
    """``manage.py pollers import-legacy PATH [--write]`` (output through ``cmd``)."""

    from django.core.management.base import CommandError
    from django.utils import timezone

    from nexopoll import services
    from nexopoll.channels import get_channel
    from nexopoll.core.config import ConfigFileError, load_config
    from nexopoll.runtime.registry import get_registry
    from nexopoll.runtime.secretenv import secret_env

    target = services.config_path()
    registry = get_registry()

    def check(text: str) -> list[str]:
        loaded = load_config(
            text,
            source=str(target),
            env=secret_env(),
            now=timezone.now(),
            validators=registry.validators(),
        )
        return [str(issue) for issue in loaded.issues]

    try:
        report = import_legacy(
            path, str(target), write=write, check=check, validate=registry.get("gmail").validate
        )
    except LegacyImportError as exc:
        raise CommandError(f"import-legacy: {exc}") from None
    except ConfigFileError as exc:
        raise CommandError(f"import-legacy: the merged file would be unusable, not written:\n{exc}")
    tr = report.translation
    for job in tr.jobs:
        try:
            get_channel(job["config"]["deliver"]["channel"])
        except Exception:
            tr.warnings.append(
                f"{job['id']}: channel {job['config']['deliver']['channel']!r} is not available "
                "in this build; change deliver.channel"
            )
    for job_id in report.collisions:
        cmd.stderr.write(f"collision: {job_id} is already in {target}; the explicit entry wins")
    for warning in tr.warnings:
        cmd.stderr.write(f"warning: {warning}")
    if not write:
        cmd.stdout.write(f"# translated from {path}; to add to {target} (use --write to merge):")
        cmd.stdout.write(report.additions.rstrip("\n"))
        return
    merged = report.merge
    assert merged is not None
    for problem in report.problems:
        cmd.stderr.write(f"reload will reject: {problem}")
    agents = ", ".join(merged.agents_added)
    cmd.stdout.write(
        f"merged into {target}: {len(merged.added)} job(s) added"
        + (f" ({', '.join(merged.added)})" if merged.added else "")
        + f", {len(merged.collisions)} collision(s) kept as they were"
        + (f"; google binding added for {agents}" if agents else "")
    )
    cmd.stdout.write("next: review the file, delete the legacy file, run `pollers reload`")
