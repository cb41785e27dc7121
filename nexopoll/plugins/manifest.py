"""``nexopoll-plugin.toml`` manifests: parse, validate, find duplicate kinds.

Pure (no Django, Redis or clock): a manifest is a file's text plus its path.
Every problem is reported with the file it came from, and a kind claimed twice
names both claimants.

    [plugin]
    id = "echo"

    [plugin.entrypoint]
    command = "node"            # or "{python}": the worker's own interpreter
    args = ["plugin.js"]        # run with the manifest's directory as cwd
    env = { ECHO_TOKEN = "${ECHO_TOKEN}" }   # the only variables passed on

    [plugin.poller]
    kinds = ["echo"]            # non-empty, unique, each ^[a-z][a-z0-9_]+$
    lifecycle = "long_lived"    # or "ephemeral"
    max_concurrent_ticks = 1    # 1..=64
    tick_timeout_secs = 60      # 1..=3600
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAME = "nexopoll-plugin.toml"
KIND_RE = re.compile(r"[a-z][a-z0-9_]+")
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LIFECYCLES = ("long_lived", "ephemeral")
MAX_CONCURRENT_RANGE = (1, 64)
TICK_TIMEOUT_RANGE = (1, 3600)
PYTHON_COMMAND = "{python}"

_SECTIONS = {
    "plugin": {"id", "entrypoint", "poller", "name", "version", "description"},
    "entrypoint": {"command", "args", "env"},
    "poller": {
        "kinds",
        "lifecycle",
        "max_concurrent_ticks",
        "tick_timeout_secs",
        "broker_topic_prefix",
    },
}


class ManifestError(ValueError):
    """One or more problems in one manifest; ``problems`` lists them all."""

    def __init__(self, path: str, problems: list[str], text: str = "") -> None:
        self.path = path
        self.problems = problems
        lines = [_line_of(text, p) for p in problems]
        super().__init__(
            "; ".join(
                f"{path}:{line}: {p}" if line else f"{path}: {p}"
                for p, line in zip(problems, lines, strict=True)
            )
        )


_PROBLEM_KEY = re.compile(r"(?:\[plugin(?:\.\w+)?\] |unknown key (?:plugin\.)?(?:\w+\.)?)(\w+)")


def _line_of(text: str, problem: str) -> int | None:
    """The line of the key a problem names (``[plugin.poller] tick_timeout_secs …``)."""
    match = _PROBLEM_KEY.match(problem)
    if not text or match is None:
        return None
    key = re.compile(rf"\s*{re.escape(match.group(1))}\s*=")
    for number, line in enumerate(text.splitlines(), 1):
        if key.match(line):
            return number
    return None


class DuplicateKindError(ValueError):
    """A kind is claimed twice (two plugins, or a plugin and a built-in)."""


@dataclass(frozen=True)
class Manifest:
    plugin_id: str
    path: str  # the manifest file
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    kinds: tuple[str, ...]
    lifecycle: str = "long_lived"
    max_concurrent_ticks: int = 1
    tick_timeout_secs: int = 60
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def directory(self) -> str:
        return str(Path(self.path).parent)

    @property
    def source(self) -> str:
        return f"plugin {self.plugin_id!r} ({self.path})"


def parse_manifest(text: str, path: str) -> Manifest:
    """Parse and validate one manifest; raise :class:`ManifestError` listing every problem."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(path, [f"not valid TOML: {exc}"]) from None
    problems: list[str] = []
    plugin = _table(doc, "plugin", "[plugin]", problems)
    _unknown(doc, {"plugin"}, "", problems)
    _unknown(plugin, _SECTIONS["plugin"], "plugin.", problems)
    entry = _table(plugin, "entrypoint", "[plugin.entrypoint]", problems)
    poller = _table(plugin, "poller", "[plugin.poller]", problems)
    _unknown(entry, _SECTIONS["entrypoint"], "plugin.entrypoint.", problems)
    _unknown(poller, _SECTIONS["poller"], "plugin.poller.", problems)

    plugin_id = plugin.get("id")
    if not isinstance(plugin_id, str) or not ID_RE.fullmatch(plugin_id):
        problems.append(f"[plugin] id must be a non-empty name matching {ID_RE.pattern}")
        plugin_id = ""
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        problems.append("[plugin.entrypoint] command must be a non-empty string")
        command = ""
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        problems.append("[plugin.entrypoint] args must be a list of strings")
        args = []
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        problems.append("[plugin.entrypoint] env must be a table of strings")
        env = {}
    for name in env:
        if not ENV_NAME_RE.fullmatch(name):
            problems.append(f"[plugin.entrypoint] env: {name!r} is not a variable name")

    kinds = _kinds(poller.get("kinds"), problems)
    lifecycle = poller.get("lifecycle", "long_lived")
    if lifecycle not in LIFECYCLES:
        problems.append(f"[plugin.poller] lifecycle must be one of {', '.join(LIFECYCLES)}")
    max_concurrent = _bounded(poller, "max_concurrent_ticks", 1, MAX_CONCURRENT_RANGE, problems)
    timeout = _bounded(poller, "tick_timeout_secs", 60, TICK_TIMEOUT_RANGE, problems)
    prefix = poller.get("broker_topic_prefix")
    if prefix is not None and (
        not isinstance(prefix, str) or not prefix or prefix.endswith(".") or " " in prefix
    ):
        problems.append(
            "[plugin.poller] broker_topic_prefix must be non-empty, "
            "without a trailing dot or spaces"
        )
    if problems:
        raise ManifestError(path, problems, text)
    return Manifest(
        plugin_id=plugin_id,
        path=path,
        command=command,
        args=tuple(args),
        env=dict(env),
        kinds=kinds,
        lifecycle=lifecycle,
        max_concurrent_ticks=max_concurrent,
        tick_timeout_secs=timeout,
    )


def _table(doc: Mapping[str, Any], key: str, label: str, problems: list[str]) -> dict:
    value = doc.get(key)
    if value is None:
        problems.append(f"{label} is missing")
        return {}
    if not isinstance(value, dict):
        problems.append(f"{label} must be a table")
        return {}
    return value


def _unknown(table: Mapping[str, Any], allowed: set[str], prefix: str, problems: list[str]):
    for key in sorted(set(table) - allowed):
        problems.append(f"unknown key {prefix}{key}")


def _kinds(value: Any, problems: list[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        problems.append("[plugin.poller] kinds must be a non-empty list")
        return ()
    seen: list[str] = []
    for kind in value:
        if not isinstance(kind, str) or not KIND_RE.fullmatch(kind):
            problems.append(f"[plugin.poller] kind {kind!r} must match ^{KIND_RE.pattern}$")
        elif kind in seen:
            problems.append(f"[plugin.poller] kind {kind!r} is listed twice")
        else:
            seen.append(kind)
    return tuple(seen)


def _bounded(
    table: Mapping[str, Any], key: str, default: int, bounds: tuple[int, int], problems: list[str]
) -> int:
    value = table.get(key, default)
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        problems.append(f"[plugin.poller] {key} must be an integer in {lo}..={hi}, got {value!r}")
        return default
    return value


def check_kinds(manifests: Iterable[Manifest], taken: Mapping[str, str]) -> None:
    """Raise :class:`DuplicateKindError` naming both claimants of any kind claimed twice.

    ``taken`` maps kinds already registered (built-ins, entry points) to their source.
    """
    owners = dict(taken)
    problems = []
    for m in manifests:
        for kind in m.kinds:
            if kind in owners:
                problems.append(
                    f"poller kind {kind!r} is claimed by {owners[kind]} and by {m.source}"
                )
            else:
                owners[kind] = m.source
    if problems:
        raise DuplicateKindError("; ".join(problems))


def manifest_paths(directory: str) -> list[Path]:
    """``<dir>/nexopoll-plugin.toml`` and ``<dir>/*/nexopoll-plugin.toml``, sorted."""
    root = Path(directory)
    if not root.is_dir():
        return []
    found = [root / MANIFEST_NAME] if (root / MANIFEST_NAME).is_file() else []
    found += sorted(p for p in root.glob(f"*/{MANIFEST_NAME}") if p.is_file())
    return found


def load_manifests(directory: str) -> tuple[list[Manifest], list[ManifestError]]:
    """Every manifest under ``directory``, with the ones that failed validation apart.

    Two manifests with the same plugin id are an error on the second one.
    """
    good: list[Manifest] = []
    bad: list[ManifestError] = []
    ids: dict[str, str] = {}
    for path in manifest_paths(directory):
        try:
            m = parse_manifest(path.read_text(encoding="utf-8"), str(path))
        except ManifestError as exc:
            bad.append(exc)
            continue
        except (OSError, UnicodeDecodeError) as exc:
            bad.append(ManifestError(str(path), [f"cannot read: {exc}"]))
            continue
        if m.plugin_id in ids:
            bad.append(
                ManifestError(
                    m.path, [f"plugin id {m.plugin_id!r} is also used by {ids[m.plugin_id]}"]
                )
            )
            continue
        ids[m.plugin_id] = m.path
        good.append(m)
    return good, bad
