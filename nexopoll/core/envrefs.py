"""``${VAR}`` and ``${file:PATH}`` references in pollers.yaml: find, expand, spot secrets.

Pure: the environment is a parameter. A ``${file:/abs/path}`` reference is looked up
in it under the name ``file:/abs/path``; the runtime's environment mapping
(:class:`nexopoll.runtime.secretenv.SecretEnv`) answers such names by reading the
file at that moment, so a file's content is read when it is used and never stored.
Messages name variables and files, never their values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

Path = tuple[str | int, ...]

# a file reference names an absolute path: no whitespace, braces, "$" or control characters
_FILE_REF = r"file:/[^\s{}$\x00-\x1f\x7f]{1,1000}"
_ENV_TOKEN_RE = re.compile(
    r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*|" + _FILE_REF + r")\}|\$\{", re.ASCII
)
SINGLE_REF_RE = re.compile(r"\$\{(?:[A-Za-z_][A-Za-z0-9_]*|" + _FILE_REF + r")\}", re.ASCII)
FILE_PREFIX = "file:"
_SECRET_KEYS = frozenset({"token", "secret", "password", "api_key", "apikey", "client_secret"})
_SECRET_SUFFIXES = ("_token", "_secret", "_password", "_api_key", "_apikey")


def env_refs(value: Any) -> set[str]:
    """Names of the ``${VAR}`` references anywhere in ``value`` (escapes excluded);
    a ``${file:/p}`` reference is named ``file:/p``."""
    names: set[str] = set()
    for _, text in ref_strings(value, (), []):
        names.update(m.group(1) for m in _ENV_TOKEN_RE.finditer(text) if m.group(1))
    return names


def expand_env(value: Any, env: Mapping[str, str], *, path: str = "") -> Any:
    """Return a copy of ``value`` with ``${NAME}`` replaced in every string.

    ``$${`` is an escape for a literal ``${``. Mapping keys are not expanded.
    ``${file:/p}`` is replaced by ``env["file:/p"]``.
    Examples: ``"Bearer ${TOK}"`` -> ``"Bearer s3cr3t"``; ``"$${TOK}"`` -> ``"${TOK}"``.

    Raises:
        ConfigError: A variable is not set, or a ``${`` does not start a valid
            reference. The message names the variable and never contains a value.
    """
    if isinstance(value, str):
        return expand_text(value, env, path) if "${" in value else value
    if isinstance(value, dict):
        return {k: expand_env(v, env, path=_join(path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env, path=f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def expand_text(text: str, env: Mapping[str, str], path: str) -> str:
    out: list[str] = []
    pos = 0
    for match in _ENV_TOKEN_RE.finditer(text):
        out.append(text[pos : match.start()])
        name = match.group(1)
        if match.group(0) == "$${":
            out.append("${")
        elif name is None:
            raise ConfigError(
                "malformed ${...} reference (names match [A-Za-z_][A-Za-z0-9_]*, files are "
                "${file:/absolute/path}; write $${ for a literal ${)",
                path=path or None,
            )
        elif name not in env:
            raise ConfigError(missing_ref(name), path=path or None)
        else:
            out.append(env[name])
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)


def missing_ref(name: str) -> str:
    """Why the reference ``name`` (a variable, or ``file:/path``) cannot be resolved."""
    if name.startswith(FILE_PREFIX):
        return f"secret file {name[len(FILE_PREFIX) :]} cannot be read"
    return f"environment variable {name} is not set"


def is_secret_key(key: str) -> bool:
    """True for binding keys that hold secrets: ``token``, ``api_key``, ``*_secret``…"""
    norm = key.lower().replace("-", "_")
    return norm in _SECRET_KEYS or norm.endswith(_SECRET_SUFFIXES)


def ref_strings(value: Any, rel: Path, out: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """Append ``(path, string)`` for every string under ``value`` that contains ``${``."""
    if isinstance(value, str):
        if "${" in value:
            out.append((rel, value))
    elif isinstance(value, dict):
        for key, item in value.items():
            ref_strings(item, (*rel, key), out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            ref_strings(item, (*rel, index), out)
    return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
