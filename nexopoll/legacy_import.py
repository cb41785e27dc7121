"""Translate a legacy ``gmail-poller.yaml`` into ``pollers.yaml`` jobs (``pollers import-legacy``).

The legacy file (the ``nexo-plugin-gmail-poller`` schema)::

    gmail_poller:
      enabled: true
      interval_secs: 60                 # default for jobs without their own
      token_path: ./secrets/token.json  # single-account shorthand (account "default")
      client_id_path: ./secrets/client_id.txt
      client_secret_path: ./secrets/client_secret.txt
      accounts:                         # or one entry per account
        - {id: ana, agent_id: ana, token_path: ..., client_id_path: ..., client_secret_path: ...}
      jobs:
        - name: Lead Alert
          account: ana                  # default "default"
          query: "is:unread subject:lead"
          interval_secs: 60
          forward_to_subject: plugin.outbound.whatsapp.ana   # -> deliver.channel
          forward_to: "57300...@s.whatsapp.net"              # -> deliver.to
          extract: {name: "Nombre:\\s*(.+)"}
          require_fields: [name]
          message_template: "New lead {name}"
          mark_read_on_dispatch: true
          newer_than: 1d
          dispatch_delay_ms: 1000
          max_per_tick: 20
          sender_allowlist: ["@mycompany.com"]

Each job becomes ``id: gmail_legacy_<name>`` (lower-cased; characters outside
``[a-z0-9_-]`` become ``_``), ``kind: gmail``, the account's ``agent_id`` (else
its id) as ``agent``, ``schedule: {every_secs: ...}``; each account becomes the
agent's ``google`` binding. Explicit entries already in ``pollers.yaml`` win: a
job id or an agent's ``google`` binding that exists is never replaced, and each
collision is reported. The merge edits the file with ruamel.yaml's round-trip
mode, so comments and key order survive.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from nexopoll.core.config import AGENT_ID_RE, JOB_ID_RE

_JOB_KEYS = {
    "name", "account", "query", "interval_secs", "forward_to_subject", "forward_to", "extract",
    "require_fields", "message_template", "mark_read_on_dispatch", "newer_than",
    "dispatch_delay_ms", "max_per_tick", "sender_allowlist",
}  # fmt: skip
_CARRIED = ("newer_than", "max_per_tick", "dispatch_delay_ms", "sender_allowlist", "extract",
            "require_fields", "message_template", "mark_read_on_dispatch")  # fmt: skip
_DEFAULTS = {"max_per_tick": 20, "dispatch_delay_ms": 1000, "mark_read_on_dispatch": True}


class LegacyImportError(Exception):
    """The legacy file cannot be read at all; nothing was translated."""


@dataclass
class Translation:
    jobs: list[dict[str, Any]] = field(default_factory=list)
    agents: dict[str, dict[str, str]] = field(default_factory=dict)  # agent -> google binding
    warnings: list[str] = field(default_factory=list)


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


def sanitize(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "_", name.strip().lower())


def translate(
    text: str, *, validate: Callable[[dict[str, Any]], None] | None = None
) -> Translation:
    """Translate the legacy YAML ``text``; per-job problems become warnings, not errors.

    Args:
        validate: the gmail kind's ``validate``; a translated config it rejects is
            still emitted (nothing is lost) with a warning naming the problem.

    Raises:
        LegacyImportError: the text is not YAML or has no ``jobs`` list.
    """
    try:
        doc = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise LegacyImportError(f"not valid YAML: {str(exc).splitlines()[0]}") from None
    root = doc.get("gmail_poller", doc) if isinstance(doc, dict) else None
    if not isinstance(root, dict) or not isinstance(root.get("jobs"), list):
        raise LegacyImportError("expected a gmail_poller: mapping with a jobs: list")
    out = Translation()
    if root.get("enabled") is False:
        out.warnings.append("the legacy file has enabled: false; nothing to import")
        return out
    accounts = _accounts(root, out)
    default_every = _positive_int(root.get("interval_secs"), 60)
    ids: set[str] = set()
    for index, job in enumerate(root["jobs"]):
        translated = _job(index, job, accounts, default_every, out)
        if translated is None:
            continue
        if translated["id"] in ids:
            out.warnings.append(f"jobs[{index}]: id {translated['id']} repeats; skipped")
            continue
        ids.add(translated["id"])
        if validate is not None:
            try:
                validate(translated["config"])
            except Exception as exc:
                out.warnings.append(
                    f"{translated['id']}: {exc}; imported as is, fix it before reloading"
                )
        out.jobs.append(translated)
    return out


def _accounts(root: dict[str, Any], out: Translation) -> dict[str, str]:
    """Account id -> agent id; fills ``out.agents`` with each agent's google binding."""
    raw = root.get("accounts") or []
    if not raw and root.get("token_path"):
        raw = [{"id": "default", **{k: root.get(k) for k in (
            "token_path", "client_id_path", "client_secret_path")}}]  # fmt: skip
    accounts: dict[str, str] = {}
    for index, acc in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(acc, dict) or not isinstance(acc.get("id"), str):
            out.warnings.append(f"accounts[{index}]: needs an id; skipped")
            continue
        agent = sanitize(str(acc.get("agent_id") or acc["id"]))
        if not AGENT_ID_RE.match(agent):
            out.warnings.append(f"accounts[{index}]: {agent!r} is not a valid agent id; skipped")
            continue
        if not acc.get("agent_id"):
            out.warnings.append(
                f"account {acc['id']!r}: no agent_id, agent {agent!r} inferred; adjust if needed"
            )
        binding = {k: str(acc[k]) for k in ("client_id_path", "token_path", "client_secret_path")
                   if acc.get(k)}  # fmt: skip
        if "token_path" not in binding:
            out.warnings.append(f"account {acc['id']!r}: no token_path; its google binding is "
                                "incomplete")  # fmt: skip
        accounts[acc["id"]] = agent
        out.agents.setdefault(agent, binding)
    return accounts


def _job(
    index: int, job: Any, accounts: dict[str, str], default_every: int, out: Translation
) -> dict[str, Any] | None:
    where = f"jobs[{index}]"
    if not isinstance(job, dict) or not isinstance(job.get("name"), str) or not job["name"]:
        out.warnings.append(f"{where}: needs a name; skipped")
        return None
    job_id = ("gmail_legacy_" + sanitize(job["name"]))[:100]
    if not JOB_ID_RE.match(job_id):
        out.warnings.append(f"{where}: cannot make a job id from {job['name']!r}; skipped")
        return None
    account = str(job.get("account") or "default")
    agent = accounts.get(account)
    if agent is None:
        out.warnings.append(f"{job_id}: unknown account {account!r}; skipped")
        return None
    for key in sorted(set(job) - _JOB_KEYS):
        out.warnings.append(f"{job_id}: legacy key {key!r} has no equivalent; dropped")
    config: dict[str, Any] = {"query": job.get("query") or "is:unread"}
    for key in _CARRIED:
        value = job.get(key, _DEFAULTS.get(key))
        if value is not None and value != [] and value != {}:
            config[key] = value
    config["deliver"] = {"channel": _channel(job.get("forward_to_subject"), job_id, out),
                         "to": str(job.get("forward_to") or "")}  # fmt: skip
    return {
        "id": job_id,
        "kind": "gmail",
        "agent": agent,
        "schedule": {"every_secs": _positive_int(job.get("interval_secs"), default_every)},
        "config": config,
    }


def _channel(subject: Any, job_id: str, out: Translation) -> str:
    parts = str(subject or "").split(".")
    if len(parts) >= 3 and parts[:2] == ["plugin", "outbound"] and parts[2]:
        return parts[2]
    out.warnings.append(
        f"{job_id}: forward_to_subject {subject!r} names no channel; using whatsapp"
    )
    return "whatsapp"


def _positive_int(value: Any, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )


def render_additions(tr: Translation, *, skip_ids: set[str] = frozenset(),
                     skip_agents: set[str] = frozenset()) -> str:  # fmt: skip
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
            text, source=str(target), env=secret_env(), now=timezone.now(),
            validators=registry.validators(),
        )  # fmt: skip
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
