"""Values a job's ``config:`` or an agent's binding may not hold (pure).

Two families, each checked on the raw YAML (before ``${VAR}`` expansion):

- **Values the DB cannot hold.** A config is stored as JSON (``jsonb`` on
  PostgreSQL): a string or key containing U+0000, a non-finite float (``.inf``,
  ``.nan``) or an integer outside the signed 64-bit range is refused at load
  rather than failing the reload's transaction (or every tick) later.
- **Credentials written in plain text.** Secrets are given only as ``${ENV_VAR}``
  (or ``${file:/path}``) references, so they never reach the DB, ``pollers show``
  or the API. A value that holds a reference, whole or in part
  (``"Bearer ${API_TOKEN}"``), is fine. The places that carry credentials:

  * an HTTP header whose name says so, in any mapping named ``headers``:
    ``Authorization``, ``Proxy-Authorization``, ``Cookie``, and any name containing
    ``token``, ``secret``, ``key``, ``password``, ``passwd``, ``credential``,
    ``session`` or ``signature`` (``X-Api-Key``, ``X-Auth-Token``);
  * a key whose name says so (:func:`~nexopoll.core.envrefs.is_secret_key`:
    ``token``, ``api_key``, ``*_secret``…) anywhere in the config;
  * a URL's userinfo: its password (``https://user:pass@host/``), or its user name
    when there is no password (``https://sk_live_…@host/``, a token as the user);
  * a URL query parameter named like a secret (``?token=…``, ``api_key``,
    ``access_token``, ``key``, ``password``, ``secret``, ``signature``, ``sig``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..envrefs import is_secret_key
from ..yamlsrc import Path

INT_MIN, INT_MAX = -(2**63), 2**63 - 1

_SECRET_HEADER_WORDS = (
    "authorization",
    "cookie",
    "token",
    "secret",
    "key",
    "password",
    "passwd",
    "credential",
    "session",
    "signature",
)
_SECRET_PARAMS = frozenset(
    {
        "key",
        "apikey",
        "api_key",
        "access_token",
        "token",
        "auth",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "signature",
        "sig",
        "session",
        "private_token",
    }
)
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://", re.ASCII)
_REF = "${"

PLAIN_SECRET = (
    "a credential written in plain text: give it as an ${ENV_VAR} reference "
    '(e.g. "Bearer ${API_TOKEN}") and set the variable in the environment'
)


def stored_value_problems(value: Any, rel: Path) -> Iterator[tuple[Path, str]]:
    """Values under ``value`` that the DB's JSON column cannot hold, with their paths."""
    if isinstance(value, str):
        if "\x00" in value:
            yield rel, "contains the NUL character (U+0000), which cannot be stored"
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            yield rel, f"integer out of range (must be within {INT_MIN}..{INT_MAX})"
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield rel, "must be a finite number (not .inf or .nan)"
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                yield (*rel, key), "key contains the NUL character (U+0000)"
            yield from stored_value_problems(item, (*rel, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from stored_value_problems(item, (*rel, index))


def is_secret_header(name: str) -> bool:
    """True for header names that carry credentials (``Authorization``, ``X-Api-Key``…)."""
    norm = name.lower()
    return any(word in norm for word in _SECRET_HEADER_WORDS)


def plain_secret_problems(value: Any, rel: Path) -> Iterator[tuple[Path, str]]:
    """Credentials written in plain text anywhere under ``value`` (see the module doc)."""
    if isinstance(value, str):
        yield from _url_problems(value, rel)
    elif isinstance(value, dict):
        for key, item in value.items():
            path = (*rel, key)
            if _is_plain(item) and (
                is_secret_key(key) or (_is_headers(rel) and is_secret_header(key))
            ):
                yield path, PLAIN_SECRET
            else:
                yield from plain_secret_problems(item, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from plain_secret_problems(item, (*rel, index))


def _is_plain(value: Any) -> bool:
    return isinstance(value, str) and value != "" and _REF not in value


def _is_headers(rel: Path) -> bool:
    return bool(rel) and isinstance(rel[-1], str) and rel[-1].lower().endswith("headers")


def _url_problems(text: str, rel: Path) -> Iterator[tuple[Path, str]]:
    if _URL_RE.match(text) is None:
        return
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:
        return  # not a URL the kind accepts: its own validator says so
    if password and _REF not in password:
        yield rel, "a password in the URL (user:password@): " + PLAIN_SECRET
        return
    if not password and parts.username and _REF not in parts.username:
        # https://sk_live_…@api.example.com: a token passed as the user name
        yield rel, "credentials in the URL (user@): " + PLAIN_SECRET
        return
    for name, item in parse_qsl(parts.query, keep_blank_values=False):
        if name.lower().replace("-", "_") in _SECRET_PARAMS and _is_plain(item):
            yield rel, f"URL query parameter {name!r} is " + PLAIN_SECRET
            return


def mask_plain_secrets(value: Any, rel: Path = ()) -> Any:
    """A copy of ``value`` with each plain-text credential (as :func:`plain_secret_problems`
    finds them) replaced by ``***``: for showing a definition stored before such values
    were refused at load. References are left as written."""
    if isinstance(value, str):
        return _mask_url(value) if any(_url_problems(value, rel)) else value
    if isinstance(value, dict):
        return {
            key: MASK
            if _is_plain(item)
            and (is_secret_key(key) or (_is_headers(rel) and is_secret_header(key)))
            else mask_plain_secrets(item, (*rel, key))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [mask_plain_secrets(item, (*rel, i)) for i, item in enumerate(value)]
    return value


MASK = "***"


def _mask_url(text: str) -> str:
    parts = urlsplit(text)
    netloc = parts.netloc
    if parts.password and _REF not in parts.password:
        netloc = f"{parts.username or ''}:{MASK}@{netloc.rsplit('@', 1)[1]}"
    elif not parts.password and parts.username and _REF not in parts.username:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = [
        (
            name,
            MASK if name.lower().replace("-", "_") in _SECRET_PARAMS and _is_plain(item) else item,
        )
        for name, item in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return parts._replace(netloc=netloc, query=urlencode(query, safe="*${}")).geturl()
